-- bench/purelua.lua: what a modder writes without a library: a table of
-- coroutines with their wake-up times, scanned every frame by a Lua loop,
-- on a virtual clock. Written with care (locals, parallel arrays, in-place
-- compaction), so it is a fair peer, not a straw man. The same workloads as
-- bench/lunaloop.lua; each returns ns_per_op, bytes_per_task, allocs_per_op
-- and the op count (bench/common.lua). impl "purelua_defer" (W3_tick)
-- starts its tasks at the next frame instead of at once.
local C = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local bench = bench
local create, resume, status, cyield = coroutine.create, coroutine.resume,
  coroutine.status, coroutine.yield

local DT = C.DT
local W = {}

-- The scheduler. A task yields its wake-up time; yield() means "next
-- frame" (wake at the current time, so the next frame's scan finds it due).
local function scheduler()
  local now = 0
  local cos, wake, n = {}, {}, 0
  local S = {}

  function S.spawn(fn, ...)
    local co = create(fn)
    local ok, w = resume(co, ...)
    if not ok then error(w, 0) end
    if status(co) ~= "dead" then
      n = n + 1
      cos[n], wake[n] = co, w
    end
    return co
  end

  -- A task started by the next frame (fn gets no arguments).
  function S.defer(fn)
    n = n + 1
    cos[n], wake[n] = create(fn), now
  end

  function S.yield() return cyield(now) end
  function S.sleep(s) return cyield(now + s) end

  -- One frame: resume every task that is due, keep the others in order;
  -- tasks spawned during the frame (appended past m) wait for the next.
  function S.frame(dt)
    now = now + dt
    local m, j = n, 0
    for i = 1, m do
      local co, w = cos[i], wake[i]
      if w <= now then
        local ok, nw = resume(co)
        if not ok then error(nw, 0) end
        if status(co) ~= "dead" then
          j = j + 1
          cos[j], wake[j] = co, nw
        end
      else
        j = j + 1
        cos[j], wake[j] = co, w
      end
    end
    for i = m + 1, n do
      j = j + 1
      cos[j], wake[j] = cos[i], wake[i]
    end
    for i = j + 1, n do cos[i], wake[i] = nil, nil end
    n = j
  end

  function S.count() return n end
  return S
end

local function frames(S, k)
  local frame = S.frame
  return C.timed(function() for _ = 1, k do frame(DT) end end)
end

local function run_until_idle(S)
  local frame, count = S.frame, S.count
  while count() > 0 do frame(DT) end
end

function W.W1_yield(n)
  local S, R = scheduler(), C.rounds(n)
  local yield = S.yield
  local function body(r) for _ = 1, r do yield() end end
  for _ = 1, n do S.spawn(body, R + 2) end
  frames(S, 1)
  local a0 = bench.allocs()
  local ns = frames(S, R)
  local allocs = bench.allocs() - a0
  run_until_idle(S)
  return ns / (n * R), nil, allocs / (n * R), n * R
end

function W.W2_sleepers(n)
  local S, d = scheduler(), bench.sleep_times(n)
  local spawn, sleep = S.spawn, S.sleep
  local function body(s) sleep(s) end
  local ns = C.timed(function()
    for i = 1, n do spawn(body, d[i]) end
    run_until_idle(S)
  end)
  return ns / n, nil, nil, n
end

function W.W2_steady(n)
  math.randomseed(7)
  local S = scheduler()
  local sleep = S.sleep
  local ops = 0
  local function body(s)
    while true do
      sleep(s)
      ops = ops + 1
    end
  end
  for _ = 1, n do S.spawn(body, math.random() * 0.1) end
  frames(S, 20)
  local ops0, a0 = ops, bench.allocs()
  local ns = frames(S, C.rounds(n, 100))
  local allocs = bench.allocs() - a0
  local done = ops - ops0
  return ns / done, nil, allocs / done, done
end

function W.W2_frame(n)
  local S = scheduler()
  local sleep = S.sleep
  local function body() sleep(1e6) end
  for _ = 1, n do S.spawn(body) end
  frames(S, 2)
  -- A frame scans every sleeper: measure for about 50 ms (or C.rounds).
  local fixed = C.rounds_set or (bench.quick and 10)
  if fixed then return frames(S, fixed) / fixed, nil, nil, fixed end
  local k, ns = 0, 0
  repeat
    ns = ns + frames(S, 5)
    k = k + 5
  until ns > 50e6
  return ns / k, nil, nil, k
end

function W.W3_churn(n)
  local S = scheduler()
  local yield = S.yield
  local function one() yield() end
  local ns = C.timed(function()
    S.spawn(C.churn_spawner(n, S.spawn, yield, one))
    run_until_idle(S)
  end)
  return ns / n, nil, nil, n
end

function W.W3_tick(n)
  local S = scheduler()
  local frame, count = S.frame, S.count
  local start = bench.impl == "purelua_defer" and S.defer or S.spawn
  local ns = C.tick(n, start, function() frame(DT) end, function() return count() == 0 end)
  return ns, nil, nil, n
end

function W.W4_memory(n)
  C.collect()
  local m0 = bench.mem()
  local S = scheduler()
  local sleep = S.sleep
  local function body(s) sleep(s) end
  for _ = 1, n do S.spawn(body, 1e6) end
  C.collect()
  local bytes = (bench.mem() - m0) / n
  assert(S.count() == n)
  return nil, bytes
end

-- W6: the update layer a modder writes: a list of functions called every
-- frame. impl "purelua": plain calls, as usually written; impl
-- "purelua_pcall": each call protected, so one failing callback cannot stop
-- the others (what task.on guarantees).
function W.W6_update(n)
  local R = C.rounds(n)
  local fns = {}
  for i = 1, n do
    local x = 0
    fns[i] = function(dt) x = x + dt end
  end
  local update
  if bench.impl == "purelua_pcall" then
    local pcall = pcall
    update = function(dt)
      for i = 1, #fns do
        local ok, err = pcall(fns[i], dt)
        if not ok then print(err) end
      end
    end
  else
    update = function(dt)
      for i = 1, #fns do fns[i](dt) end
    end
  end
  update(DT)
  local a0 = bench.allocs()
  local ns = C.timed(function() for _ = 1, R do update(DT) end end)
  return ns / (n * R), nil, (bench.allocs() - a0) / (n * R), n * R
end

-- W8_frames: frame stability (C.W8) on this scheduler; wait_until is what
-- a modder writes without one: a loop that yields each frame until the
-- predicate holds.
function W.W8_frames(n)
  local S = scheduler()
  local yield = S.yield
  local mean = C.W8(n, {spawn = S.spawn, yield = yield, delay = S.sleep,
    wait_until = function(pred) repeat yield() until pred() end,
    frame = function() S.frame(DT) end})
  return mean, nil, nil, C.W8_FRAMES
end

return C.workloads(W)
