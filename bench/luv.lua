-- bench/luv.lua: the workloads on luv (Debian's lua-luv, libuv for Lua 5.4),
-- written the way luv is used: a task is a coroutine; "wait for the next
-- frame" is an idle handle that resumes it on every loop iteration (a frame
-- is uv.run("nowait")); "sleep" is a one-shot uv timer whose callback
-- resumes it. libuv has no virtual clock: sleepers run in real time and
-- their cost is the process's CPU time (the waiting in epoll is not
-- counted). Memory counts what luv allocates through Lua (coroutines, handle
-- userdata, closures); luv's own malloc'ed per-handle context (about 40
-- bytes) is not seen by the counting allocator. W3_tick's deferred tasks
-- come in three idioms: impl "luv" an idle handle per task, "luv_timer" a
-- 0 ms timer per task, "luv_wrap" a plain coroutine.wrap(fn)() run at once.
-- Each workload returns ns_per_op, bytes_per_task, allocs_per_op and the op
-- count (bench/common.lua).
local C = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local uv = require "luv"
local bench = bench
local create, resume, status, cyield, running = coroutine.create, coroutine.resume,
  coroutine.status, coroutine.yield, coroutine.running

local W = {}

local function check(ok, err)
  if not ok then error(err, 0) end
end

-- A task that waits frames: its own idle handle resumes it every iteration
-- until it ends (`live` counts such tasks). spawn_framed runs fn now until
-- its first yield; defer_idle (W3_tick) leaves its first run to the idle
-- handle, the next loop iteration.
local live = 0
local function resume_by_idle(co)
  local idle = uv.new_idle()
  idle:start(function()
    check(resume(co))
    if status(co) == "dead" then
      live = live - 1
      idle:stop()
      idle:close()
    end
  end)
end

local function spawn_framed(fn, ...)
  local co = create(fn)
  live = live + 1
  check(resume(co, ...))
  if status(co) == "dead" then
    live = live - 1
    return
  end
  resume_by_idle(co)
end

local function defer_idle(fn)
  live = live + 1
  resume_by_idle(create(fn))
end

-- Sleeping: a one-shot timer per sleep, closed when it fires.
local function sleep(ms)
  local co = running()
  local t = uv.new_timer()
  t:start(ms, 0, function()
    t:close()
    check(resume(co))
  end)
  cyield()
end

-- A task that sleeps: started now; its timers resume it.
local function spawn(fn, ...)
  local co = create(fn)
  check(resume(co, ...))
  return co
end

local function frames(k)
  local run = uv.run
  return C.timed(function() for _ = 1, k do run("nowait") end end)
end

-- W3_tick's other starts: a task run by the next loop iteration through a
-- 0 ms timer, or at once through coroutine.wrap.
local function defer_timer(fn)
  local co = create(fn)
  local t = uv.new_timer()
  live = live + 1
  t:start(0, 0, function()
    t:close()
    check(resume(co))
    if status(co) == "dead" then live = live - 1 end
  end)
end

local function spawn_wrap(fn) coroutine.wrap(fn)() end

function W.W1_yield(n)
  local R = C.rounds(n)
  local yield = cyield
  local function body(r) for _ = 1, r do yield() end end
  for _ = 1, n do spawn_framed(body, R + 2) end
  frames(1)
  local a0 = bench.allocs()
  local ns = frames(R)
  local allocs = bench.allocs() - a0
  while live > 0 do uv.run("nowait") end
  uv.run("nowait")
  return ns / (n * R), nil, allocs / (n * R), n * R
end

function W.W2_sleepers(n)
  local d = bench.sleep_times(n) -- seconds; luv's timers take whole ms
  for i = 1, n do d[i] = math.floor(d[i] * 1000) end
  local done = 0
  local function body(ms)
    sleep(ms)
    done = done + 1
  end
  local c0 = bench.cpu()
  for i = 1, n do spawn(body, d[i]) end
  uv.run("default")
  assert(done == n, "W2: tasks left")
  return (bench.cpu() - c0) / n, nil, nil, n
end

-- Sleep again and again for half a second of real time: CPU per sleep.
-- Sleeps are whole milliseconds in [1, 100]: libuv runs a 0 ms timer that
-- a timer callback starts in the same pass, so a task sleeping 0 ms in a
-- loop would never let uv.run return.
function W.W2_steady(n)
  math.randomseed(7)
  local ops, stop = 0, false
  local function body(ms)
    while not stop do
      sleep(ms)
      ops = ops + 1
    end
  end
  for _ = 1, n do spawn(body, math.random(1, 100)) end
  local function window(ms)
    local t = uv.new_timer()
    t:start(ms, 0, function() t:close(); uv.stop() end)
    uv.run("default")
  end
  window(200)
  local ops0, a0, c0 = ops, bench.allocs(), bench.cpu()
  window(500)
  local cpu, allocs, done = bench.cpu() - c0, bench.allocs() - a0, ops - ops0
  stop = true
  uv.run("default")
  return cpu / done, nil, allocs / done, done
end

function W.W2_frame(n)
  local timers = {}
  for i = 1, n do
    local t = uv.new_timer()
    t:start(1000000000, 0, function() end)
    timers[i] = t
  end
  frames(10)
  local k = C.rounds(n, bench.quick and 100 or 20000)
  local a0 = bench.allocs()
  local ns = frames(k)
  local allocs = bench.allocs() - a0
  for i = 1, n do timers[i]:close() end
  uv.run("nowait")
  return ns / k, nil, allocs / k, k
end

function W.W3_churn(n)
  local function one() cyield() end
  local ns = C.timed(function()
    spawn_framed(C.churn_spawner(n, spawn_framed, cyield, one))
    while live > 0 do uv.run("nowait") end
    uv.run("nowait")
  end)
  return ns / n, nil, nil, n
end

function W.W3_tick(n)
  local start = ({luv = defer_idle, luv_timer = defer_timer, luv_wrap = spawn_wrap})[bench.impl]
  local run = uv.run
  local ns = C.tick(n, start, function() run("nowait") end, function() return live == 0 end)
  run("nowait")
  return ns, nil, nil, n
end

function W.W4_memory(n)
  C.collect()
  local m0 = bench.mem()
  local function body(ms) sleep(ms) end
  local cos = {}
  for i = 1, n do cos[i] = spawn(body, 1000000000) end
  cos = nil
  C.collect()
  return nil, (bench.mem() - m0) / n
end

-- The update layer: an idle handle per callback, called every iteration.
function W.W6_update(n)
  local R = C.rounds(n)
  local dt = 1 / 60
  local idles = {}
  for i = 1, n do
    local x = 0
    local idle = uv.new_idle()
    idle:start(function() x = x + dt end)
    idles[i] = idle
  end
  frames(1)
  local a0 = bench.allocs()
  local ns = frames(R)
  local allocs = bench.allocs() - a0
  for i = 1, n do idles[i]:stop(); idles[i]:close() end
  uv.run("nowait")
  return ns / (n * R), nil, allocs / (n * R), n * R
end

return C.workloads(W)
