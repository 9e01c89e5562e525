-- bench/cqueues.lua: the workloads on cqueues (Debian's lua-cqueues for Lua
-- 5.4), used the way cqueues is meant to be used: a task is cq:wrap(fn);
-- "wait for the next frame" is cqueues.sleep(0) (one cq:step(0) resumes each
-- such task once, so a frame is cq:step(0)); "sleep" is cqueues.sleep(s).
-- cqueues has no virtual clock: sleepers run in real time and their cost is
-- the process's CPU time. Memory counts what cqueues allocates through Lua.
-- W6 (an update layer of plain callbacks) does not map onto cqueues.
local cqueues = require "cqueues"
local bench = bench
local sleep = cqueues.sleep

local W = {}


local function step(cq)
  local ok, err = cq:step(0)
  if not ok then error(err, 0) end
end

local function frames(cq, k)
  local t0 = bench.now()
  for _ = 1, k do step(cq) end
  return bench.now() - t0
end

function W.W1_yield(n)
  local cq, R = cqueues.new(), bench.rounds(n)
  local function body(r) for _ = 1, r do sleep(0) end end
  for _ = 1, n do cq:wrap(body, R + 2) end
  frames(cq, 2) -- the first step starts them
  local a0 = bench.allocs()
  local ns = frames(cq, R)
  local allocs = bench.allocs() - a0
  while not cq:empty() do step(cq) end
  return ns / (n * R), nil, allocs / (n * R)
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
  return (bench.cpu() - c0) / n
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
  return cpu / done, nil, allocs / done
end

function W.W2_frame(n)
  local cq = cqueues.new()
  local function body() sleep(1e6) end
  for _ = 1, n do cq:wrap(body) end
  frames(cq, 10)
  local k = bench.quick and 100 or 20000
  local a0 = bench.allocs()
  local ns = frames(cq, k)
  return ns / k, nil, (bench.allocs() - a0) / k
end

function W.W3_churn(n)
  local cq = cqueues.new()
  local batch = math.min(n, 10000)
  local function one() sleep(0) end
  local function spawner()
    local done = 0
    while done < n do
      local k = math.min(batch, n - done)
      for _ = 1, k do cq:wrap(one) end
      done = done + k
      sleep(0)
    end
  end
  local t0 = bench.now()
  cq:wrap(spawner)
  while not cq:empty() do step(cq) end
  return (bench.now() - t0) / n
end

function W.W4_memory(n)
  collectgarbage()
  collectgarbage()
  local m0 = bench.mem()
  local cq = cqueues.new()
  local function body(s) sleep(s) end
  for _ = 1, n do cq:wrap(body, 1e6) end
  step(cq) -- start them: each is now asleep
  collectgarbage()
  collectgarbage()
  return nil, (bench.mem() - m0) / n
end

return W
