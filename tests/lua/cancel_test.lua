-- cancel_test.lua: cancellation, an error value of its own that unwinds the
-- task through its to-be-closed variables (docs/api.md).
local H = require "harness"

-- A task the host cancels while it waits in a delay is never resumed
-- again: the delay's timer does not fire into it when its time comes, and
-- the cancellation is not reported as a failure.
H.case("cancelled_task_is_never_resumed", function()
  local reports, restore = H.capture_errors()
  local after = false
  local t = task.spawn(function() task.delay(2); after = true end)
  H.frames(10, 0.1)                        -- 1 s
  task.cancel(t)                            -- the host cancels
  H.frames(20, 0.1)                         -- 2 more seconds
  restore()
  H.eq({after, t:status(), #reports}, {false, "cancelled", 0})
end)

-- The to-be-closed variables of a failing task get its error as the
-- __close argument, and those of a cancelled task get the cancellation
-- error (task.is_cancelled is true), each in the frame it happens; only
-- the failure is reported. Closing a cancelled task's variables with nil
-- leaves cleanup code unable to tell a cancellation from a normal end.
H.case("close_handlers_see_the_error_then_the_cancellation", function()
  local log = {}
  local function closer(tag)
    return setmetatable({}, {__close = function(_, err)
      log[#log + 1] = {tag, task.is_cancelled(err) and "cancelled" or tostring(err), task.frame()}
    end})
  end
  local reports, restore = H.capture_errors()
  local F = task.frame()
  task.spawn(function()
    local r <close> = closer("fail")
    task.yield()
    error("boom", 0)
  end)
  local t = task.spawn(function()
    local r <close> = closer("cancel")
    task.delay(10)
  end)
  H.frames(2)
  t:cancel()
  restore()
  H.eq(log, {{"fail", "boom", F + 1}, {"cancel", "cancelled", F + 2}})
  H.eq(#reports, 1, "only the failure is reported")
end)

H.case("awaiting_a_cancelled_task_raises_the_cancellation_error", function()
  local got
  local target = task.spawn(function() task.delay(5) end)
  task.spawn(function()
    local ok, err = pcall(task.await, target)
    got = {ok, task.is_cancelled(err), task.is_timeout(err), tostring(err)}
  end)
  target:cancel()
  H.eq(got, {false, true, false, "task cancelled"})
  -- awaiting it after it settled raises at once
  task.spawn(function()
    local ok, err = pcall(task.await, target)
    got = {ok, task.is_cancelled(err)}
  end)
  H.eq(got, {false, true})
end)

H.case("cancellation_is_never_reported_and_ends_awaiters_cancelled", function()
  local reports, restore = H.capture_errors()
  local target = task.spawn(function() task.delay(5) end)
  local awaiter = task.spawn(function() task.await(target) end)
  target:cancel()
  H.frames(1)
  restore()
  H.eq({target:status(), awaiter:status(), #reports}, {"cancelled", "cancelled", 0})
end)

H.case("cancelling_the_running_task_unwinds_it_at_once", function()
  local log = {}
  local t
  t = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function(_, e)
      log[#log + 1] = task.is_cancelled(e) and "close:cancelled" or "close:" .. tostring(e)
    end})
    task.cancel(task.current())
    log[#log + 1] = "not reached"
  end)
  H.eq({log, t:status()}, {{"close:cancelled"}, "cancelled"})
end)

H.case("a_task_that_catches_its_cancellation_keeps_getting_it", function()
  local log = {}
  local t = task.spawn(function()
    local ok, err = pcall(task.delay, 10)
    log[#log + 1] = {"first", ok, task.is_cancelled(err)}
    ok, err = pcall(task.yield)
    log[#log + 1] = {"second", ok, task.is_cancelled(err)}
    ok, err = pcall(task.wait_until, function() return true end)
    log[#log + 1] = {"third", ok, task.is_cancelled(err)}
    return "finished anyway"
  end)
  t:cancel()
  H.eq(log, {{"first", false, true}, {"second", false, true}, {"third", false, true}})
  H.eq(t:status(), "cancelled")
  local ok, err = t:result()
  H.eq({ok, task.is_cancelled(err)}, {false, true})
end)

H.case("cancel_returns_after_target_unwound", function()
  local log = {}
  local t = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function() log[#log + 1] = "closed" end})
    task.yield()
  end)
  task.cancel(t)
  log[#log + 1] = "cancel returned"
  H.eq(log, {"closed", "cancel returned"})
end)

H.case("cancel_from_close_handler_is_queued_and_finished_before_outer_returns", function()
  local log = {}
  local b = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function() log[#log + 1] = "b closed" end})
    task.yield()
  end)
  local a = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function()
      task.cancel(b)
      log[#log + 1] = "b reads " .. b:status()
    end})
    task.yield()
  end)
  task.cancel(a)
  log[#log + 1] = "outer returned"
  H.eq(log, {"b reads cancelled", "b closed", "outer returned"})
end)

-- A __close handler of a task that failed or was cancelled runs after the
-- task's resume returned (Lua leaves those to lua_resetthread), but still
-- as part of that task: cancelling the task that is cancelling it (up the
-- resume chain) is queued like any cancellation made while another
-- unwinds, instead of raising there as if the handler were that task's
-- own code. That task then unwinds when its
-- own cancel call returns.
H.case("close_handler_cancelling_the_canceller_queues_it", function()
  local log = {}
  local a, b
  b = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function()
      log[#log + 1] = "b closing, current is b: " .. tostring(task.current() == b)
      local ok, err = pcall(task.cancel, a)
      log[#log + 1] = "inner cancel: " .. tostring(ok) .. " " .. tostring(err)
      log[#log + 1] = "a reads " .. a:status()
    end})
    task.delay(100)
  end)
  a = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function(_, err)
      log[#log + 1] = "a closed, cancelled: " .. tostring(task.is_cancelled(err))
    end})
    task.yield()
    local ok, err = pcall(task.cancel, b)
    log[#log + 1] = "a's cancel raised the cancellation: " .. tostring(not ok and task.is_cancelled(err))
    task.yield()
    log[#log + 1] = "a went on"
  end)
  task.step()
  H.eq(log, {
    "b closing, current is b: true",
    "inner cancel: true nil",
    "a reads running",
    "a's cancel raised the cancellation: true",
    "a closed, cancelled: true",
  })
  H.eq(a:status(), "cancelled")
  H.eq(b:status(), "cancelled")
end)

-- A failed task whose __close handler cancels its own task: the handler
-- stops there (the cancellation is raised in it), the task's other
-- handlers run, it ends cancelled, and only its own error is reported: a
-- cancellation is never reported, also from a __close handler (review).
H.case("failed_task_cancelling_itself_in_close_is_not_a_close_failure", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local t = task.spawn(function()
    local r0 <close> = setmetatable({}, {__close = function(_, err)
      log[#log + 1] = "r0 sees cancellation: " .. tostring(task.is_cancelled(err))
    end})
    local r <close> = setmetatable({}, {__close = function()
      task.cancel(task.current())
      log[#log + 1] = "not reached"
    end})
    task.yield()
    error("failA", 0)
  end)
  task.step()
  restore()
  H.eq(log, {"r0 sees cancellation: true"})
  H.eq(t:status(), "cancelled")
  H.eq(#reports, 1)
  H.eq(reports[1].err, "failA")
end)

H.case("two_hundred_chained_cancels", function()
  local n = 200
  local tasks, closed = {}, 0
  for i = 1, n do
    tasks[i] = task.spawn(function()
      local r <close> = setmetatable({}, {__close = function()
        closed = closed + 1
        if tasks[i + 1] then task.cancel(tasks[i + 1]) end
      end})
      task.delay(100)
    end)
  end
  task.cancel(tasks[1])
  H.eq(closed, n)
  for i = 1, n do H.eq(tasks[i]:status(), "cancelled", "task " .. i) end
end)

H.case("cancelled_task_is_not_resumed_by_pending_yield_predicate_or_timer", function()
  local resumed = 0
  local calls = 0
  local t1 = task.spawn(function() task.yield(); resumed = resumed + 1 end)
  local t2 = task.spawn(function() task.wait_until(function() calls = calls + 1; return true end); resumed = resumed + 1 end)
  local t3 = task.spawn(function() task.delay(0); resumed = resumed + 1 end)
  local t4 = task.spawn_at("Update", function() resumed = resumed + 1 end)
  t1:cancel(); t2:cancel(); t3:cancel(); t4:cancel()
  H.frames(3)
  H.eq({resumed, calls}, {0, 0})
  H.eq({t1:status(), t2:status(), t3:status(), t4:status()},
    {"cancelled", "cancelled", "cancelled", "cancelled"})
end)

H.case("cancel_a_woken_task_before_it_runs", function()
  -- B and C await A; when A finishes both are woken; B's resume cancels C
  -- before C runs: C must end cancelled and never see A's results.
  local log = {}
  local c
  local a = task.spawn(function() task.yield(); return "A" end)
  task.spawn(function() log[#log + 1] = "B got " .. task.await(a); c:cancel() end)
  c = task.spawn(function() log[#log + 1] = "C got " .. task.await(a) end)
  H.frames(1)
  H.eq(log, {"B got A"})
  H.eq(c:status(), "cancelled")
end)

H.case("a_task_unwinding_its_cancellation_may_still_cancel_and_spawn", function()
  -- Regression: cancel() called by a task that is already being cancelled
  -- raised again, cutting its cleanup short after the first call.
  local others = {}
  for i = 1, 3 do others[i] = task.spawn(function() task.delay(10) end) end
  local spawned
  local t = task.spawn(function()
    local ok, err = pcall(task.delay, 10)
    for i = 1, 3 do task.cancel(others[i]) end
    spawned = task.spawn(function() return "ran" end)
    error(err, 0)
  end)
  t:cancel()
  H.eq({others[1]:status(), others[2]:status(), others[3]:status()},
    {"cancelled", "cancelled", "cancelled"})
  H.eq({t:status(), spawned and spawned:status()}, {"cancelled", "done"})
end)

H.case("an_error_in_close_during_cancellation_is_reported_not_lost", function()
  local reports, restore = H.capture_errors()
  local t = task.spawn(function()
    local g <close> = setmetatable({}, {__close = function() error("cleanup broke", 0) end})
    task.delay(10)
  end)
  t:cancel()
  local f = task.spawn(function()
    local g <close> = setmetatable({}, {__close = function() error("cleanup 2", 0) end})
    task.yield()
    error("body", 0)
  end)
  H.frames(1)
  restore()
  H.eq({t:status(), f:status(), select(2, f:result())}, {"cancelled", "failed", "body"})
  local errs = {}
  for i, r in ipairs(reports) do errs[i] = r.err end
  H.eq(errs, {"cleanup broke", "cleanup 2", "body"})
end)

H.case("close_variable_of_a_task_cancels_it_at_scope_exit", function()
  local t
  do
    local tt <close> = task.spawn(function() task.delay(10) end)
    t = tt
    H.eq(t:status(), "suspended")
  end
  H.eq(t:status(), "cancelled")
end)

H.case("cancel_settled_task_does_nothing", function()
  local t = task.spawn(function() return 1 end)
  t:cancel()
  H.eq({t:status(), select(2, t:result())}, {"done", 1})
end)

H.case("reset_cancels_every_task_and_nothing_resumes_afterwards", function()
  local log = {}
  for i = 1, 3 do
    task.spawn(function()
      local r <close> = setmetatable({}, {__close = function(_, e)
        log[#log + 1] = i .. (task.is_cancelled(e) and ":cancelled" or ":?")
      end})
      task.delay(0.1)
      log[#log + 1] = "resumed " .. i
    end)
  end
  local h = task.on("Update", function() log[#log + 1] = "callback" end)
  testhost.reset()
  H.frames(10, 0.1)
  H.eq(log, {"1:cancelled", "2:cancelled", "3:cancelled"})
  H.eq({testhost.task_count(), testhost.callback_count(), h:active()}, {0, 0, false})
end)

-- A task asleep for 10 s whose to-be-closed variable logs `name` when it
-- is closed and then spawns another such task named `child`, if given.
local function sleeper(log, name, child)
  return task.spawn(function()
    local r <close> = setmetatable({}, {__close = function()
      log[#log + 1] = name
      if child then sleeper(log, child) end
    end})
    task.delay(10)
  end)
end

H.case("reset_cancels_in_creation_order_then_what_close_handlers_spawned", function()
  -- Creation order, though b1 and b2 took the slots a4 and a2 left; tasks
  -- spawned by close handlers while all are cancelled come last, in the
  -- order they were spawned.
  local log = {}
  local a = {}
  for i = 1, 5 do a[i] = sleeper(log, "a" .. i, i == 1 and "c1" or i == 3 and "c2" or nil) end
  a[2]:cancel()
  a[4]:cancel()
  sleeper(log, "b1")
  sleeper(log, "b2")
  for k in pairs(log) do log[k] = nil end -- a2 and a4 logged their closing
  testhost.reset()
  H.eq(log, {"a1", "a3", "a5", "b1", "b2", "c1", "c2"})
  H.eq(testhost.task_count(), 0)
end)

H.case("reset_of_a_hundred_tasks_whose_close_handlers_each_spawn_one", function()
  -- The spawned tasks outgrow the anchor table while the cancelled ones
  -- leave it nearly empty; every one is still cancelled, in order, and
  -- the slots are reused in creation order afterwards.
  local log = {}
  local want = {}
  for i = 1, 100 do
    sleeper(log, "a" .. i, "c" .. i)
    want[i] = "a" .. i
    want[100 + i] = "c" .. i
  end
  testhost.reset()
  H.eq(log, want)
  H.eq(testhost.task_count(), 0)
  local t = {}
  for i = 1, 3 do t[i] = task.spawn(function() task.delay(10) end) end
  t[2]:cancel()
  t[4] = task.spawn(function() task.delay(10) end)
  H.eq(task.list(), {t[1], t[3], t[4]})
  testhost.reset()
end)

H.run()
