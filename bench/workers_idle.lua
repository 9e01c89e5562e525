-- bench/workers_idle.lua: what task.workers costs the machine when it has
-- little or nothing to do (docs/workers.md section 8). Run in real time:
--   scripts/run bench/workers_idle.lua       (or build/release/lunaloop run ...)
-- Prints the process's CPU time (os.clock: every thread) over 1 s of wall
-- time while the loop runs its frames at 60 Hz: without a pool, with a pool
-- of 2 that has not run a job, after one call and after 1,000 calls (a
-- worker polls for its next job after each one, then sleeps), and with one
-- empty call a frame (a frame-paced host: each poll finds nothing).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path

local function cpu_over_1s(what, m)
  local c0 = os.clock()
  if m then
    local t_end = task.time() + 1
    while task.time() < t_end do
      task.await(m:call("empty"))
      task.yield()
    end
  else
    task.delay(1)
  end
  print(string.format("%-40s %5.1f ms of CPU in 1 s", what, (os.clock() - c0) * 1e3))
end

cpu_over_1s("no pool")
local pool = task.workers{threads = 2}
cpu_over_1s("pool of 2, no job yet")
local m = pool:open("w7_jobs")
task.await(m:call("empty"))
cpu_over_1s("after one call")
for _ = 1, 1000 do task.await(m:call("empty")) end
cpu_over_1s("after 1,000 calls, one at a time")
cpu_over_1s("one call a frame", m)
pool:close()
