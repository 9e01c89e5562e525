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

-- W8: the frame-stability workload's measured frames (the full count, or
-- a small one for bench.quick) and its report. frame_stats(n, costs,
-- resumes, peak, extra)
-- prints one "frames" line on stdout from the frame CPU times `costs` (ns):
-- p50, p99, p99.9 (nearest rank: the 2nd slowest of 2,000) and max, the
-- mean, resumes per CPU second and the peak of live bytes; extra is text
-- added to the line. Returns the mean, for the measurement line.
C.W8_FRAMES = bench.quick and 100 or 2000
function C.frame_stats(n, costs, resumes, peak, extra)
  local sorted, total = {}, 0
  for i = 1, #costs do sorted[i] = costs[i]; total = total + costs[i] end
  table.sort(sorted)
  local function rank(p) return sorted[math.max(1, math.ceil(#sorted * p))] end
  local mean = total / #costs
  io.write(string.format(
    "frames impl=%s n=%d frames=%d p50_ns=%.0f p99_ns=%.0f p999_ns=%.0f max_ns=%.0f " ..
    "mean_ns=%.0f resumes_per_s=%.0f peak_bytes=%d%s\n",
    bench.impl, n, #costs, rank(0.5), rank(0.99), rank(0.999), sorted[#sorted], mean,
    resumes / (total / 1e9), peak, extra or ""))
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
