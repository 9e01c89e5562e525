-- bench/lunaloop.lua: the workloads through lunaloop's real Lua API
-- (task.spawn, task.yield, task.delay, task.on), run by `luna_bench lua
-- lunaloop ...`. The host attached a loop with the counting allocator to
-- this state; bench.frames(k, dt) and bench.run_until_idle(dt, max) drive it
-- from C with luna_loop_frame; the program times them in process CPU time.
-- Frames are 1/60 s of virtual time. Each function returns ns_per_op,
-- bytes_per_task, allocs_per_op (nil: not measured) and the op count
-- (bench/common.lua). impl "lunaloop_defer" (W3) starts its tasks with
-- task.defer instead of task.spawn.
local C = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local task = require "lunaloop"
local bench = bench

local DT = C.DT
local W = {}

local function frames(k) return C.timed(bench.frames, k, DT) end

-- The spawn of the W3 workloads.
local start = bench.impl == "lunaloop_defer" and task.defer or task.spawn

-- W1: n tasks each yield to the next frame; after one warm frame, R frames
-- are measured: ns and allocations per resume (a yield round trip).
function W.W1_yield(n)
  local R = C.rounds(n)
  local yield = task.yield
  local function body(r) for _ = 1, r do yield() end end
  for _ = 1, n do task.spawn(body, R + 2) end
  bench.frames(1, DT)
  local a0 = bench.allocs()
  local ns = frames(R)
  local allocs = bench.allocs() - a0
  bench.run_until_idle(DT, 10)
  assert(bench.tasks() == 0, "W1: tasks left")
  return ns / (n * R), nil, allocs / (n * R), n * R
end

-- W2: n tasks each sleep a seeded random time in [0, 0.5] s, then finish;
-- the spawning and every frame until the last one finished, per task.
-- With LUNA_BENCH_PHASES set, the two phases are also timed apart (on
-- stderr); set to "nogc", the collector is stopped for the run.
function W.W2_sleepers(n)
  local d = bench.sleep_times(n)
  local spawn, delay = task.spawn, task.delay
  local function body(s) delay(s) end
  local phases = os.getenv("LUNA_BENCH_PHASES")
  if phases == "nogc" then collectgarbage("stop") end
  local t0 = bench.cpu()
  for i = 1, n do spawn(body, d[i]) end
  local t1 = bench.cpu()
  bench.run_until_idle(DT, 100000)
  local t2 = bench.cpu()
  collectgarbage("restart")
  assert(bench.tasks() == 0, "W2: tasks left")
  if phases then
    io.stderr:write(string.format(
      "W2_sleepers lunaloop phases: spawn %.1f wake and finish %.1f ns a task\n",
      (t1 - t0) / n, (t2 - t1) / n))
  end
  return (t2 - t0) / n, nil, nil, n
end

-- W2_steady: n tasks each sleep again and again (a fixed random time in
-- [0, 0.1] s each); after 20 warm frames, 100 frames are measured (or
-- C.rounds): ns and allocations per delay round trip.
function W.W2_steady(n)
  math.randomseed(7)
  local delay = task.delay
  local ops = 0
  local function body(s)
    while true do
      delay(s)
      ops = ops + 1
    end
  end
  for _ = 1, n do task.spawn(body, math.random() * 0.1) end
  bench.frames(20, DT)
  local ops0, a0 = ops, bench.allocs()
  local ns = frames(C.rounds(n, 100))
  local allocs = bench.allocs() - a0
  local done = ops - ops0
  return ns / done, nil, allocs / done, done
end

-- W2_frame: the cost of one frame while n tasks sleep and none is due.
function W.W2_frame(n)
  local delay = task.delay
  local function body() delay(1e6) end
  for _ = 1, n do task.spawn(body) end
  bench.frames(10, DT)
  local k = C.rounds(n, bench.quick and 100 or 20000)
  local a0 = bench.allocs()
  local ns = frames(k)
  return ns / k, nil, (bench.allocs() - a0) / k, k
end

-- W3_churn: n tasks spawned (10,000 a frame by a spawner task) that finish
-- after one yield; everything until the last one finished, per task.
function W.W3_churn(n)
  local yield = task.yield
  local function one() yield() end
  local ns = C.timed(function()
    task.spawn(C.churn_spawner(n, start, yield, one))
    bench.run_until_idle(DT, n + 10)
  end)
  assert(bench.tasks() == 0, "W3: tasks left")
  return ns / n, nil, nil, n
end

-- W3_tick: n tasks that finish when first run, 1,000 a frame, started
-- from outside any task (task.spawn runs each at once, task.defer at the
-- next frame's Update).
function W.W3_tick(n)
  local frame, tasks = bench.frames, bench.tasks
  local ns = C.tick(n, start, function() frame(1, DT) end, function() return tasks() == 0 end)
  return ns, nil, nil, n
end

-- W4: live bytes per task with n tasks asleep (after full collections):
-- everything the task costs, Lua side and loop side.
function W.W4_memory(n)
  local delay = task.delay
  local function body(s) delay(s) end
  C.collect()
  local m0 = bench.mem()
  for _ = 1, n do task.spawn(body, 1e6) end
  C.collect()
  return nil, (bench.mem() - m0) / n
end

-- W6: the update layer. impl "lunaloop": n task.on("Update") callbacks;
-- impl "lunaloop_tasks": n tasks that each yield every frame. After one warm
-- frame, R frames are measured: ns and allocations per call (or resume).
function W.W6_update(n)
  local R = C.rounds(n)
  if bench.impl == "lunaloop_tasks" then
    local yield = task.yield
    local function body()
      local x = 0
      while true do
        x = x + 1
        yield()
      end
    end
    for _ = 1, n do task.spawn(body) end
  else
    for _ = 1, n do
      local x = 0
      task.on("Update", function(dt) x = x + dt end)
    end
  end
  bench.frames(1, DT)
  local a0 = bench.allocs()
  local ns = frames(R)
  return ns / (n * R), nil, (bench.allocs() - a0) / (n * R), n * R
end

-- W8_frames: frame stability (C.W8) through task.yield, task.delay and
-- task.wait_until. impl "lunaloop_paced" turns on the collector's pacing
-- after the warm frames (task.gc: incremental steps under a 10 ms budget,
-- or LUNA_W8_BUDGET seconds, at LastTimeUpdate, the automatic collector
-- stopped, a ceiling of 4x the live bytes then, and `frame` = the median
-- warm frame plus the budget, or LUNA_W8_FRAME seconds, 0 for none: the
-- frames run back to back, so the pacer fills each up to a typical
-- frame); without task.gc it prints "pacing: not available" and measures
-- nothing.
function W.W8_frames(n)
  local paced = bench.impl == "lunaloop_paced"
  if paced and type(task.gc) ~= "function" then
    io.write("frames impl=lunaloop_paced pacing: not available\n")
    return nil
  end
  local function pace(warm_ns)
    C.collect()
    local ceiling = 4 * bench.mem()
    local budget = tonumber(os.getenv("LUNA_W8_BUDGET")) or 0.010
    local frame = tonumber(os.getenv("LUNA_W8_FRAME")) or warm_ns / 1e9 + budget
    task.gc{budget = budget, frame = frame, timing = "LastTimeUpdate", stop_auto = true,
            ceiling = ceiling}
    return string.format(" ceiling_bytes=%d budget_s=%g frame_s=%.4f", ceiling, budget, frame)
  end
  local mean = C.W8(n, {spawn = task.spawn, yield = task.yield, delay = task.delay,
    wait_until = task.wait_until, frame = function() bench.frames(1, DT) end,
    after_warm = paced and pace or nil})
  return mean, nil, nil, C.W8_FRAMES
end

-- W9_group_cancel: n tasks asleep on a group's clock, each holding a
-- to-be-closed variable. impl "lunaloop": one g:cancel() ends them all;
-- impl "lunaloop_each": t:cancel() on each, in creation order (what a
-- script without groups writes, keeping its own list). ns per task
-- cancelled (the cancellation alone); bytes: live bytes per member asleep
-- (impl "lunaloop", which keeps no list of its own; compare W4_memory).
function W.W9_group_cancel(n)
  local each = bench.impl == "lunaloop_each"
  local g = task.group()
  local closed = 0
  local guard = setmetatable({}, {__close = function() closed = closed + 1 end})
  local delay = g.delay
  local function body() local c <close> = guard; delay(g, 1e6) end
  local ts = each and {} or nil
  C.collect()
  local m0 = bench.mem()
  for i = 1, n do
    local t = g:spawn(body)
    if ts then ts[i] = t end
  end
  C.collect()
  local bytes = not each and (bench.mem() - m0) / n or nil
  local ns
  if each then
    ns = C.timed(function() for i = 1, n do ts[i]:cancel() end end)
  else
    ns = C.timed(function() g:cancel() end)
  end
  assert(closed == n and bench.tasks() == 0, "W9: tasks left")
  g:cancel()
  return ns / n, bytes, nil, n
end

-- W10_signal: firing a signal to n handlers against n task.on callbacks
-- (both the W6 callback, fn(dt) adding dt to an upvalue). impl "lunaloop":
-- one task.on callback fires a task.signal with n handlers each frame;
-- impl "lunaloop_on": the n functions are task.on("Update") callbacks.
-- After one warm frame, R frames are measured: ns and allocations per
-- handler call (or callback call).
function W.W10_signal(n)
  local R = C.rounds(n)
  if bench.impl == "lunaloop_on" then
    for _ = 1, n do
      local x = 0
      task.on("Update", function(dt) x = x + dt end)
    end
  else
    local s = task.signal()
    for _ = 1, n do
      local x = 0
      s:connect(function(dt) x = x + dt end)
    end
    task.on("Update", function(dt) s:fire(dt) end)
  end
  bench.frames(1, DT)
  local a0 = bench.allocs()
  local ns = frames(R)
  return ns / (n * R), nil, (bench.allocs() - a0) / (n * R), n * R
end

return C.workloads(W)
