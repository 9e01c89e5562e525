-- lifecycle_test.lua: tasks leave nothing behind; reset and state close.
local H = require "harness"

local function settle_memory()
  collectgarbage("collect"); collectgarbage("collect")
  return collectgarbage("count")
end

H.case("finished_and_cancelled_tasks_leave_no_bookkeeping", function()
  -- The first round sizes the scheduler's tables for 20,000 live tasks (a
  -- high-water mark, reused afterwards); later rounds must not grow memory.
  local base
  for round = 1, 5 do
    local ts = {}
    for i = 1, 20000 do
      ts[i] = task.spawn(function() task.yield(); return i end)
    end
    for i = 1, 20000, 2 do ts[i]:cancel() end
    H.frames(1)
    ts = nil
    H.eq(testhost.task_count(), 0, "round " .. round)
    if round == 1 then base = settle_memory() end
  end
  local after = settle_memory()
  H.truthy(after - base < 16, string.format("memory grew by %.1f KiB over 80k more tasks", after - base))
end)

H.case("a_task_is_collected_once_settled_and_unreachable", function()
  local weak = setmetatable({}, {__mode = "v"})
  weak[1] = task.spawn(function() task.yield() end)
  settle_memory()
  H.truthy(weak[1] ~= nil, "a suspended task is kept alive by the scheduler")
  H.frames(1)
  settle_memory()
  H.eq(weak[1], nil, "a done task is collected")
  weak[2] = task.spawn(function() task.delay(100) end)
  weak[2]:cancel()
  settle_memory()
  H.eq(weak[2], nil, "a cancelled task is collected")
end)

H.case("reset_releases_tasks_whose_continuations_it_dropped", function()
  -- Regression: a reset dropped queued continuations in the core but the
  -- tasks kept counting them, so they were never collected.
  local weak = setmetatable({}, {__mode = "v"})
  weak[1] = task.spawn(function() task.yield() end)
  weak[2] = task.defer(function() end)
  weak[3] = task.spawn(function() task.delay(5) end)
  testhost.reset()
  settle_memory()
  H.eq({weak[1], weak[2], weak[3]}, {nil, nil, nil})
end)

H.case("a_task_waiting_forever_stays_suspended_and_visible", function()
  local t = task.spawn(function() task.wait_until(function() return false end) end)
  H.frames(50)
  H.eq({t:status(), testhost.task_count()}, {"suspended", 1})
  t:cancel()
end)

H.run()
