-- bench/common.lua: what the Lua programs of the suite (lunaloop.lua,
-- purelua.lua, luv.lua, cqueues.lua) share, loaded by each with
-- `dofile` from its own folder. It reads the suite's knobs from the
-- environment itself (bench/bench.h lists them) and times with the host's
-- bench.cpu(), so the programs measure the same way under any luna_bench,
-- also one built from another tree (scripts/bench --compare):
-- - the collector mode, set here before any workload runs
--   (LUNA_BENCH_GC, generational unless told otherwise);
-- - the measured rounds of the per-frame workloads (LUNA_BENCH_ROUNDS);
-- - the op count of the measured window, written to LUNA_BENCH_OPS.
local bench = bench
local cpu = bench.cpu

local C = {}

C.DT = 1 / 60

local gc = os.getenv("LUNA_BENCH_GC") or "generational"
if gc ~= "generational" and gc ~= "incremental" then
  error("LUNA_BENCH_GC: expected generational or incremental, got '" .. gc .. "'", 0)
end
collectgarbage(gc)

-- rounds_set: LUNA_BENCH_ROUNDS, or nil. rounds(n, default) -> the
-- measured rounds of a per-frame workload: rounds_set, else `default`,
-- else the suite's rule for n tasks (bench.rounds).
local rounds_env = os.getenv("LUNA_BENCH_ROUNDS")
C.rounds_set = rounds_env and math.tointeger(tonumber(rounds_env))
if rounds_env and not (C.rounds_set and C.rounds_set > 0) then
  error("LUNA_BENCH_ROUNDS: expected a positive count, got '" .. rounds_env .. "'", 0)
end
function C.rounds(n, default)
  return C.rounds_set or default or bench.rounds(n)
end

-- timed(fn, ...) -> ns of process CPU time that fn(...) took.
function C.timed(fn, ...)
  local t0 = cpu()
  fn(...)
  return cpu() - t0
end

-- collect(): two full collections, so that live bytes are what is reachable.
function C.collect()
  collectgarbage()
  collectgarbage()
end

-- in_batches(n, size, spawn, one, after): spawns n tasks running `one`,
-- `size` at a time, calling after() behind each batch.
local function in_batches(n, size, spawn, one, after)
  local done = 0
  while done < n do
    local k = math.min(size, n - done)
    for _ = 1, k do spawn(one) end
    done = done + k
    after()
  end
end

-- churn_spawner(n, spawn, yield, one) -> the W3_churn spawner: a task body
-- that spawns n tasks running `one`, 10,000 between two of its yields.
function C.churn_spawner(n, spawn, yield, one)
  return function() in_batches(n, 10000, spawn, one, yield) end
end

-- tick(n, spawn, frame, idle) -> ns per task of W3_tick: n tasks that
-- finish when first run, 1,000 spawned (or deferred) a tick, each tick
-- followed by frame(); then frames until idle() says none is left.
function C.tick(n, spawn, frame, idle)
  local t0 = cpu()
  in_batches(n, 1000, spawn, function() end, frame)
  while not idle() do frame() end
  return (cpu() - t0) / n
end

-- W8(n, S) -> mean ns per frame: the frame-stability workload on the
-- scheduler S = {spawn, yield, delay, wait_until, frame, after_warm}. n
-- tasks in three kinds of await (a third each: yield, delay of a seeded
-- random time up to 0.1 s, wait_until of a predicate true every other
-- frame), each allocating two small tables a resume (one kept until its
-- next resume); after 20 warm frames S.after_warm() (may be nil) runs and
-- returns text for the report line; then W8_FRAMES frames (100 with
-- bench.quick) are timed one by one in process CPU time, the live bytes
-- read after each. Prints one "frames" line on stdout: p50, p99, p99.9
-- (nearest rank: the 2nd slowest of 2,000) and max, the mean, resumes per
-- CPU second and the peak of live bytes.
local W8_FRAMES = bench.quick and 100 or 2000
C.W8_FRAMES = W8_FRAMES
function C.W8(n, S)
  math.randomseed(8)
  local yield, delay, wait_until = S.yield, S.delay, S.wait_until
  local resumes, frame = 0, 0
  local function even() return frame % 2 == 0 end
  local function body(kind, s)
    local keep
    while true do
      keep = {resumes, {kind}} -- the old one becomes garbage
      resumes = resumes + 1
      if kind == 0 then yield() elseif kind == 1 then delay(s) else wait_until(even) end
    end
  end
  for i = 1, n do S.spawn(body, i % 3, math.random() * 0.1) end
  local warm = {}
  for w = 1, 20 do
    frame = frame + 1
    local t0 = cpu()
    S.frame()
    warm[w] = cpu() - t0
  end
  table.sort(warm)
  -- after_warm(median warm frame, ns): the warm frames run with the stock
  -- collector, so their median is the workload's typical frame.
  local extra = S.after_warm and S.after_warm(warm[10]) or ""
  local costs, sorted, peak, total, r0 = {}, {}, 0, 0, resumes
  for f = 1, W8_FRAMES do
    frame = frame + 1
    local t0 = cpu()
    S.frame()
    costs[f] = cpu() - t0
    local m = bench.mem()
    if m > peak then peak = m end
  end
  for i = 1, #costs do sorted[i] = costs[i]; total = total + costs[i] end
  table.sort(sorted)
  local function rank(p) return sorted[math.max(1, math.ceil(#sorted * p))] end
  local mean = total / #costs
  io.write(string.format(
    "frames impl=%s n=%d frames=%d p50_ns=%.0f p99_ns=%.0f p999_ns=%.0f max_ns=%.0f " ..
    "mean_ns=%.0f resumes_per_s=%.0f peak_bytes=%d%s\n",
    bench.impl, n, #costs, rank(0.5), rank(0.99), rank(0.999), sorted[#sorted], mean,
    (resumes - r0) / (total / 1e9), peak, extra))
  io.flush()
  return mean
end

-- workloads(W) -> W: each workload returns ns_per_op, bytes_per_task,
-- allocs_per_op, ops; the host gets the first three and the op count goes
-- to the LUNA_BENCH_OPS file when that is set.
local ops_file = os.getenv("LUNA_BENCH_OPS")
function C.workloads(W)
  local out = {}
  for name, fn in pairs(W) do
    out[name] = function(n)
      local ns, bytes, allocs, ops = fn(n)
      if ops_file and ops then
        local f = assert(io.open(ops_file, "w"))
        f:write(string.format("%d\n", ops))
        f:close()
      end
      return ns, bytes, allocs
    end
  end
  return out
end

return C
