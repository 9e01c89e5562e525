-- bench/cqueues.lua: the workloads on cqueues (Debian's lua-cqueues for Lua
-- 5.4), used the way cqueues is meant to be used: a task is cq:wrap(fn);
-- "wait for the next frame" is cqueues.sleep(0) (one cq:step(0) resumes each
-- such task once, so a frame is cq:step(0)); "sleep" is cqueues.sleep(s).
-- cqueues has no virtual clock: sleepers run in real time and their cost is
-- the process's CPU time. Memory counts what cqueues allocates through Lua.
-- W6 (an update layer of plain callbacks) does not map onto cqueues. Each
-- workload returns ns_per_op, bytes_per_task, allocs_per_op and the op
-- count (bench/common.lua).
local C = dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "common.lua")
local cqueues = require "cqueues"
local bench = bench
local sleep = cqueues.sleep

local W = {}

local function step(cq)
  local ok, err = cq:step(0)
  if not ok then error(err, 0) end
end

local function frames(cq, k)
  return C.timed(function() for _ = 1, k do step(cq) end end)
end

function W.W1_yield(n)
  local cq, R = cqueues.new(), C.rounds(n)
  local function body(r) for _ = 1, r do sleep(0) end end
  for _ = 1, n do cq:wrap(body, R + 2) end
  frames(cq, 2) -- the first step starts them
  local a0 = bench.allocs()
  local ns = frames(cq, R)
  local allocs = bench.allocs() - a0
  while not cq:empty() do step(cq) end
  return ns / (n * R), nil, allocs / (n * R), n * R
end

function W.W2_sleepers(n)
  local cq = cqueues.new()
  local d = bench.sleep_times(n)
  local done = 0
  local function body(s)
    sleep(s)
    done = done + 1
  end
  local c0 = bench.cpu()
  for i = 1, n do cq:wrap(body, d[i]) end
  local ok, err = cq:loop()
  if not ok then error(err, 0) end
  assert(done == n, "W2: tasks left")
  return (bench.cpu() - c0) / n, nil, nil, n
end

-- Sleep again and again for half a second of real time: CPU per sleep.
function W.W2_steady(n)
  math.randomseed(7)
  local cq = cqueues.new()
  local ops, stop = 0, false
  local function body(s)
    while not stop do
      sleep(s)
      ops = ops + 1
    end
  end
  for _ = 1, n do cq:wrap(body, math.random() * 0.1) end
  local function window(s)
    local t_end = cqueues.monotime() + s
    while cqueues.monotime() < t_end do
      local ok, err = cq:step(t_end - cqueues.monotime())
      if not ok then error(err, 0) end
    end
  end
  window(0.2)
  local ops0, a0, c0 = ops, bench.allocs(), bench.cpu()
  window(0.5)
  local cpu, allocs, done = bench.cpu() - c0, bench.allocs() - a0, ops - ops0
  stop = true
  return cpu / done, nil, allocs / done, done
end

function W.W2_frame(n)
  local cq = cqueues.new()
  local function body() sleep(1e6) end
  for _ = 1, n do cq:wrap(body) end
  frames(cq, 10)
  local k = C.rounds(n, bench.quick and 100 or 20000)
  local a0 = bench.allocs()
  local ns = frames(cq, k)
  return ns / k, nil, (bench.allocs() - a0) / k, k
end

function W.W3_churn(n)
  local cq = cqueues.new()
  local function wrap(fn) cq:wrap(fn) end
  local function yield() sleep(0) end
  local ns = C.timed(function()
    wrap(C.churn_spawner(n, wrap, yield, yield))
    while not cq:empty() do step(cq) end
  end)
  return ns / n, nil, nil, n
end

-- cq:wrap starts a task at the next step: the deferred idiom.
function W.W3_tick(n)
  local cq = cqueues.new()
  local ns = C.tick(n, function(fn) cq:wrap(fn) end, function() step(cq) end,
    function() return cq:empty() end)
  return ns, nil, nil, n
end

function W.W4_memory(n)
  C.collect()
  local m0 = bench.mem()
  local cq = cqueues.new()
  local function body(s) sleep(s) end
  for _ = 1, n do cq:wrap(body, 1e6) end
  step(cq) -- start them: each is now asleep
  C.collect()
  return nil, (bench.mem() - m0) / n
end

return C.workloads(W)
