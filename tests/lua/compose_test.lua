-- compose_test.lua: when_all, when_any, timeout; combinators cancel what
-- they started, never what they were given (docs/composition.md).
local H = require "harness"

-- task.when_all raises the first failure of an input in the frame it
-- happens (frame 2), not once every input ended (frame 5), and it cancels
-- only what it started: b, a Task it was given, still finishes on its
-- own.
H.case("when_all_raises_the_first_error_at_once_and_leaves_given_tasks_running", function()
  local F = task.frame()
  local a = task.spawn(function() task.delay_frame(2); error("A failed", 0) end)
  local b_done
  local b = task.spawn(function() task.delay_frame(5); b_done = task.frame() - F; return "B" end)
  local got
  task.spawn(function()
    local ok, err = pcall(task.when_all, a, b)
    got = {ok, err, task.frame() - F}
  end)
  H.frames(6)
  H.eq(got, {false, "A failed", 2})
  H.eq({b_done, b:status()}, {5, "done"})
end)

H.case("when_all_returns_first_result_of_each_in_argument_order", function()
  local slow = task.spawn(function() task.delay_frame(3); return "slow", "ignored" end)
  local out = H.run_task(function()
    return task.when_all(slow, function() task.delay_frame(1); return 2 end, function() return 3 end)
  end)
  H.frames(4)
  H.eq(out.values, {n = 4, true, "slow", 2, 3})
end)

H.case("when_all_cancels_the_children_it_started_never_given_tasks", function()
  local log = {}
  local given = task.spawn(function() task.delay_frame(10); return "given" end)
  local child
  local out = H.run_task(function()
    return task.when_all(given,
      function()
        child = task.current()
        local r <close> = setmetatable({}, {__close = function(_, e)
          log[#log + 1] = task.is_cancelled(e) and "child cancelled" or "child closed" end})
        task.delay_frame(10)
      end,
      function() task.delay_frame(1); error("fails first", 0) end)
  end)
  H.frames(2)
  H.eq({out.values[1], out.values[2]}, {false, "fails first"})
  H.eq(log, {"child cancelled"})
  H.eq({child:status(), given:status()}, {"cancelled", "suspended"})
  given:cancel()
end)

H.case("errors_of_tasks_left_running_are_still_reported", function()
  local reports, restore = H.capture_errors()
  local loser = task.spawn(function() task.delay_frame(3); error("late failure", 0) end)
  local out = H.run_task(function()
    return task.when_any(loser, function() task.delay_frame(1); return "winner" end)
  end)
  H.frames(4)
  restore()
  H.eq({out.values[1], out.values[2], out.values[3]}, {true, 2, "winner"})
  H.eq(#reports, 1)
  H.eq({reports[1].err, reports[1].task}, {"late failure", loser})
end)

H.case("when_all_reports_a_second_failure_it_does_not_raise", function()
  -- Regression: both children fail in the same run; the first is raised,
  -- the second was dropped silently.
  local reports, restore = H.capture_errors()
  local out = H.run_task(function()
    return task.when_all(function() error("a", 0) end, function() error("b", 0) end)
  end)
  H.frames(1)
  restore()
  H.eq({out.values[1], out.values[2], #reports, reports[1] and reports[1].err}, {false, "a", 1, "b"})
end)

H.case("when_any_reports_a_loser_that_failed_before_it_returned", function()
  local reports, restore = H.capture_errors()
  local out = H.run_task(function()
    return task.when_any(function() return "w" end, function() error("lost", 0) end)
  end)
  H.frames(1)
  restore()
  H.eq({out.values[2], out.values[3], #reports, reports[1] and reports[1].err}, {1, "w", 1, "lost"})
end)

H.case("combinators_refuse_the_current_task_like_await", function()
  -- Regression: when_all(task.current()) waited for itself forever.
  local got = {}
  task.spawn(function()
    got[1] = select(2, pcall(task.when_all, task.current()))
    got[2] = select(2, pcall(task.when_any, function() end, task.current()))
  end)
  H.has(got[1], "bad argument #1 to 'when_all' (a task cannot await itself)")
  H.has(got[2], "bad argument #2 to 'when_any' (a task cannot await itself)")
end)

H.case("a_failure_reported_before_the_combinator_is_not_reported_again", function()
  -- Regression: f failed unawaited (reported at once); when_any then saw
  -- its failure as an ignored loser and reported it a second time.
  local reports, restore = H.capture_errors()
  local f = task.spawn(function() error("boom", 0) end)
  local d = task.spawn(function() return 1 end)
  local out = H.run_task(function() return task.when_any(d, f) end)
  restore()
  H.eq({out.values[1], out.values[2], out.values[3], #reports}, {true, 1, 1, 1})
end)

H.case("a_task_given_twice_fails_once_raised_not_reported", function()
  local reports, restore = H.capture_errors()
  local p = task.spawn(function() task.yield(); error("e2", 0) end)
  local out = H.run_task(function() return task.when_all(p, p) end)
  H.frames(1)
  restore()
  H.eq({out.values[1], out.values[2], #reports}, {false, "e2", 0})
end)

H.case("when_all_with_a_cancelled_given_task_raises_the_cancellation", function()
  local victim = task.spawn(function() task.delay_frame(5) end)
  local out = H.run_task(function() return task.when_all(victim, function() task.delay_frame(9) end) end)
  victim:cancel()
  H.frames(1)
  H.eq({out.values[1], task.is_cancelled(out.values[2])}, {false, true})
end)

H.case("when_any_returns_index_and_results_of_first_and_cancels_losers", function()
  local loser_closed = false
  local out = H.run_task(function()
    return task.when_any(
      function()
        local r <close> = setmetatable({}, {__close = function() loser_closed = true end})
        task.delay_frame(5)
      end,
      function() task.delay_frame(2); return "b", 42 end)
  end)
  local F = task.frame()
  H.frames(2)
  H.eq(out.values, {n = 4, true, 2, "b", 42})
  H.truthy(loser_closed, "loser child cancelled")
end)

H.case("when_any_raises_a_failure_that_finishes_first", function()
  local out = H.run_task(function()
    return task.when_any(function() task.delay_frame(3) end, function() task.yield(); error({code = 9}) end)
  end)
  H.frames(1)
  H.eq({out.values[1], out.values[2].code}, {false, 9})
end)

H.case("combinators_wake_the_caller_in_the_same_run", function()
  local log = {}
  task.spawn(function()
    task.when_all(function() task.yield("PreUpdate") end, function() task.yield("PreUpdate") end)
    log[#log + 1] = testhost.timing()
    task.when_any(function() task.yield("LastUpdate") end)
    log[#log + 1] = testhost.timing()
  end)
  H.frames(1)
  H.eq(log, {"PreUpdate", "LastUpdate"})
end)

H.case("combinators_validate_arguments_and_context", function()
  H.has(H.raises(function() task.when_all(1) end), "expected a Task, a Promise, a Signal or a function, got number")
  H.has(H.raises(function() task.when_any() end), "at least one")
  local at = "compose_test.lua:" .. (debug.getinfo(1, "l").currentline + 1) .. ": task.when_all: not inside a task"
  H.has(H.raises(function() task.when_all(function() end) end), at)
  H.has(H.raises(function() task.timeout(-1, print) end), "non-negative number of seconds")
  -- NaN reads "nan", as in the C functions' messages (tostring gives -nan).
  H.has(H.raises(function() task.timeout(0 / 0, print) end), "number of seconds, got nan)")
  -- the error points at the caller's line, not inside the library
  local line = debug.getinfo(1, "l").currentline + 1
  H.has(H.raises(function() task.timeout(nil, print) end), "compose_test.lua:" .. line .. ":")
  H.has(H.raises(function() task.timeout(1, 5) end), "expected a function, a Task, a Promise or a Signal")
  at = "compose_test.lua:" .. (debug.getinfo(1, "l").currentline + 1) .. ": task.scope: not inside a task"
  H.has(H.raises(function() task.scope(function() end) end), at)
  at = "compose_test.lua:" .. (debug.getinfo(1, "l").currentline + 1) .. ": task.timeout: not inside a task"
  H.has(H.raises(function() task.timeout(1, print) end), at)
  H.eq(testhost.task_count(), 0, "nothing was started")
  local out = H.run_task(function() return task.when_all() end)
  H.eq(out.values, {n = 1, true}, "when_all of nothing returns nothing at once")
end)

H.case("timeout_returns_results_when_in_time", function()
  local out = H.run_task(function() return task.timeout(1, function(x) task.delay(0.5); return x * 2 end, 21) end)
  H.frames(6, 0.1)
  H.eq(out.values, {n = 2, true, 42})
end)

H.case("timeout_cancels_the_child_and_raises_a_timeout_error", function()
  local log = {}
  local F = task.frame()
  local out = H.run_task(function()
    return task.timeout(0.3, function()
      local r <close> = setmetatable({}, {__close = function(_, e)
        log[#log + 1] = {task.is_cancelled(e), task.frame() - F} end})
      task.delay(10)
    end)
  end)
  local got_frame
  task.spawn(function() task.wait_until(function() return out.values ~= nil end); got_frame = task.frame() - F end)
  H.frames(5, 0.1)
  local err = out.values[2]
  H.eq({out.values[1], task.is_timeout(err), task.is_cancelled(err)}, {false, true, false})
  H.has(tostring(err), "timeout after 0.3")
  H.eq(log, {{true, 3}}, "the child's <close> saw the cancellation at frame +3")
end)

H.case("timeout_propagates_the_child_error_and_leaves_a_given_task_running", function()
  local out = H.run_task(function() return task.timeout(1, function() task.yield(); error("inner", 0) end) end)
  H.frames(1)
  H.eq({out.values[1], out.values[2]}, {false, "inner"})
  local given = task.spawn(function() task.delay(5); return "late" end)
  local out2 = H.run_task(function() return task.timeout(0.1, given) end)
  H.frames(2, 0.1)
  H.eq({out2.values[1], task.is_timeout(out2.values[2]), given:status()}, {false, true, "suspended"})
  given:cancel()
end)

H.case("timeout_deadline_is_checked_at_update_on_the_scaled_clock", function()
  task.time_scale(0)
  local out = H.run_task(function() return task.timeout(0.1, function() task.delay(1, "Update", "unscaled"); return "ok" end) end)
  H.frames(12, 0.1)
  H.eq(out.values, {n = 2, true, "ok"}, "scaled time stands still: no timeout")
end)

H.case("cancelling_the_caller_of_a_combinator_cancels_its_children", function()
  local child_closed = false
  local t = task.spawn(function()
    task.when_all(function()
      local r <close> = setmetatable({}, {__close = function() child_closed = true end})
      task.delay(10)
    end)
  end)
  t:cancel()
  H.eq({t:status(), child_closed}, {"cancelled", true})
end)

-- Await cycles through combinators: both tasks waited for ever, and
-- nothing showed it. The await or combinator call that would close a
-- cycle raises, whichever side comes second.
local CYCLE = "await cycle: that task is (indirectly) awaiting this one"

H.case("an_await_closing_a_cycle_through_when_all_or_when_any_raises", function()
  for _, combinator in ipairs{"when_all", "when_any"} do
    local got, a, b = {}
    a = task.spawn(function() task.yield(); return task[combinator](function() task.delay_frame(10) end, b) end)
    b = task.spawn(function()
      task.yield(); task.yield()
      got.b = select(2, pcall(task.await, a))
      return "b done"
    end)
    H.frames(3)
    H.has(got.b, "bad argument #1 to 'lunaloop.await' (" .. CYCLE .. ")")
    H.eq(b:status(), "done", combinator)
    H.frames(10)
    H.eq(a:status(), "done", combinator)
  end
end)

H.case("a_combinator_closing_a_cycle_raises_at_its_argument", function()
  local got, c, d = {}
  d = task.spawn(function() task.yield(); return task.await(c) end)
  c = task.spawn(function()
    task.yield(); task.yield()
    got.all = select(2, pcall(task.when_all, task.spawn(function() end), d))
    got.any = select(2, pcall(task.when_any, d))
    got.timeout = select(2, pcall(task.timeout, 1, d))
    got.self = select(2, pcall(task.timeout, 1, task.current()))
  end)
  H.frames(3)
  H.has(got.all, "bad argument #2 to 'when_all' (" .. CYCLE .. ")")
  H.has(got.any, "bad argument #1 to 'when_any' (" .. CYCLE .. ")")
  H.has(got.timeout, "bad argument #2 to 'timeout' (" .. CYCLE .. ")")
  H.has(got.self, "bad argument #2 to 'timeout' (a task cannot await itself)")
  H.eq({c:status(), d:status()}, {"done", "done"})
end)

H.case("an_await_closing_a_cycle_through_timeout_and_a_chain_raises", function()
  local got, e, f, g = {}
  e = task.spawn(function() task.yield(); return task.timeout(100, f) end)
  f = task.spawn(function() task.yield(); return task.await(g) end)
  g = task.spawn(function()
    task.yield(); task.yield()
    got.g = select(2, pcall(task.await, e)) -- g -> e -> (timeout) f -> g
  end)
  H.frames(3)
  H.has(got.g, CYCLE)
  H.eq({e:status(), f:status(), g:status()}, {"done", "done", "done"})
end)

H.case("a_scope_child_awaiting_its_owner_fails_the_scope", function()
  local owners, errs = {}, {}
  -- awaiting before the body ended (found when the scope starts waiting),
  -- after (the child's await raises), and from a child spawned late
  local bodies = {
    function(s, me) s:spawn(function() task.await(me) end); task.yield() end,
    function(s, me) s:spawn(function() task.yield(); task.await(me) end) end,
    function(s, me)
      s:spawn(function() task.yield(); s:spawn(function() task.yield(); task.await(me) end) end)
    end,
  }
  for i, body in ipairs(bodies) do
    owners[i] = task.spawn(function()
      task.yield()
      local ok, err = pcall(task.scope, body, task.current())
      errs[i] = err
    end)
  end
  H.frames(4)
  H.has(errs[1], "task.scope: await cycle: a child of the scope is (indirectly) awaiting its owner")
  H.has(errs[2], "bad argument #1 to 'await' (" .. CYCLE .. ")")
  H.has(errs[3], "bad argument #1 to 'await' (" .. CYCLE .. ")")
  H.eq({owners[1]:status(), owners[2]:status(), owners[3]:status()}, {"done", "done", "done"})
  H.eq(testhost.task_count(), 0)
end)

H.case("a_combinator_that_ended_no_longer_counts_in_cycles", function()
  -- Its declared waits are withdrawn on every way out: after when_all
  -- returned, raised or was cancelled, awaiting the caller is no cycle.
  local x = task.spawn(function() task.yield() end)
  local got, caller = {}
  caller = task.spawn(function()
    task.when_all(x)
    pcall(task.when_all, task.spawn(function() error("no", 0) end))
    task.delay(10)
  end)
  local y = task.spawn(function() task.yield(); task.yield(); got.y = select(2, pcall(task.await, caller)) end)
  H.frames(3)
  caller:cancel()
  H.eq(task.is_cancelled(got.y), true, "y saw the caller's cancellation")
  H.eq({caller:status(), y:status()}, {"cancelled", "done"})
end)

H.run()
