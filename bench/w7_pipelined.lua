-- bench/w7_pipelined.lua N: N batches of 256 empty worker jobs in flight
-- (W7's pipelined round trip) on a pool of 2, after 100 warm-up calls; for
-- callgrind, which counts the loop thread's instructions a job when two
-- sizes are differenced (docs/performance.md, W7 run 9):
--   N=10 valgrind --tool=callgrind --separate-threads=yes build/release/lunaloop run bench/w7_pipelined.lua
--   N=30 valgrind ... (the same); (thread 1's cost at 30 - at 10) / 5120
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path
local n = tonumber(os.getenv("N")) or 10
local pool = task.workers{threads = 2}
local m = pool:open("w7_jobs")
task.spawn(function()
  for _ = 1, 100 do task.await(m:call("empty")) end
  for _ = 1, n do
    local ps = {}
    for i = 1, 256 do ps[i] = m:call("empty") end
    for i = 1, 256 do task.await(ps[i]) end
  end
  pool:close()
end)
