-- scope_test.lua: structured concurrency with task.scope
-- (docs/composition.md, section 6).
local H = require "harness"

H.case("scope_returns_after_body_and_all_children_end", function()
  local log = {}
  local F = task.frame()
  local out = H.run_task(function()
    return task.scope(function(s, x)
      s:spawn(function() task.delay_frame(3); log[#log + 1] = "child3" end)
      s:spawn(function() task.delay_frame(1); log[#log + 1] = "child1" end)
      log[#log + 1] = "body ends"
      return x, "body"
    end, 7)
  end)
  local done_at
  task.spawn(function() task.wait_until(function() return out.values end); done_at = task.frame() - F end)
  H.frames(5)
  H.eq(log, {"body ends", "child1", "child3"})
  H.eq(out.values, {n = 3, true, 7, "body"})
  H.eq(done_at, 3, "the scope returned in the frame its last child ended")
end)

-- Called as a method, self is not counted, as luaL_argerror does: the
-- errors of scope:spawn named the argument after the one at fault.
H.case("spawn_argument_errors_count_as_lua_does", function()
  local got = {}
  task.spawn(function()
    task.scope(function(s)
      got[1] = select(2, pcall(function() s:spawn(nil) end))
      got[2] = select(2, pcall(function() s.spawn(s, 5) end))
      got[3] = select(2, pcall(function() s.spawn({}, print) end))
    end)
  end)
  H.has(got[1], "bad argument #1 to 'spawn' (expected a function, got nil)")
  H.has(got[2], "bad argument #2 to 'spawn' (expected a function, got number)")
  H.has(got[3], "bad argument #1 to 'spawn' (expected a Scope)")
end)

H.case("first_child_failure_cancels_siblings_and_body_and_is_raised", function()
  local log = {}
  local out = H.run_task(function()
    return task.scope(function(s)
      s:spawn(function()
        local r <close> = setmetatable({}, {__close = function(_, e)
          log[#log + 1] = "sibling " .. (task.is_cancelled(e) and "cancelled" or tostring(e)) end})
        task.delay_frame(10)
      end)
      s:spawn(function() task.delay_frame(2); error("child failed", 0) end)
      local ok, e = pcall(task.delay_frame, 10)
      log[#log + 1] = "body interrupted: " .. tostring(task.is_cancelled(e))
      task.yield() -- the interruption is one-shot: the body may still await
      log[#log + 1] = "body finished"
    end)
  end)
  H.frames(4)
  H.eq(log, {"sibling cancelled", "body interrupted: true", "body finished"})
  H.eq({out.values[1], out.values[2]}, {false, "child failed"})
end)

H.case("interrupt_does_not_leak_past_the_scope", function()
  local after
  local out = H.run_task(function()
    local ok, err = pcall(task.scope, function(s)
      s:spawn(function() error("instant", 0) end)
    end)
    task.yield()                   -- must not raise a stale cancellation
    after = {ok, err}
    return "continued"
  end)
  H.frames(2)
  H.eq(after, {false, "instant"})
  H.eq(out.values, {n = 2, true, "continued"})
end)

H.case("a_child_that_would_fail_later_is_cancelled_by_the_first_failure", function()
  local reports, restore = H.capture_errors()
  local second
  local out = H.run_task(function()
    return task.scope(function(s)
      s:spawn(function() task.yield(); error("first", 0) end)
      second = s:spawn(function() task.yield(); error("second", 0) end)
    end)
  end)
  H.frames(2)
  restore()
  H.eq({out.values[1], out.values[2], second:status(), #reports}, {false, "first", "cancelled", 0})
end)

H.case("a_cancelled_child_is_not_a_failure", function()
  local out = H.run_task(function()
    return task.scope(function(s)
      local c = s:spawn(function() task.delay_frame(5) end)
      s:spawn(function() task.delay_frame(1); c:cancel() end)
      return "fine"
    end)
  end)
  H.frames(3)
  H.eq(out.values, {n = 2, true, "fine"})
end)

H.case("a_second_child_failure_is_reported_not_lost", function()
  -- Both children fail before the scope hears of the first failure, so the
  -- second cannot be cancelled any more: it must be reported.
  local reports, restore = H.capture_errors()
  local out = H.run_task(function()
    return task.scope(function(s)
      s:spawn(function() error("first", 0) end)
      s:spawn(function() error("second", 0) end)
      task.yield()
    end)
  end)
  H.frames(2)
  restore()
  H.eq({out.values[1], out.values[2]}, {false, "first"})
  H.eq(#reports, 1)
  H.eq(reports[1].err, "second")
end)

H.case("body_error_cancels_children_and_is_raised", function()
  local child_closed = false
  local out = H.run_task(function()
    return task.scope(function(s)
      s:spawn(function()
        local r <close> = setmetatable({}, {__close = function() child_closed = true end})
        task.delay(10)
      end)
      error("body broke", 0)
    end)
  end)
  H.eq({out.values[1], out.values[2], child_closed}, {false, "body broke", true})
end)

H.case("cancelling_the_calling_task_cancels_all_children", function()
  local closed = 0
  local t = task.spawn(function()
    task.scope(function(s)
      for _ = 1, 3 do
        s:spawn(function()
          local r <close> = setmetatable({}, {__close = function() closed = closed + 1 end})
          task.delay(10)
        end)
      end
      task.delay(10)
    end)
  end)
  t:cancel()
  H.eq({t:status(), closed}, {"cancelled", 3})
end)

H.case("any_task_may_spawn_into_an_open_scope_and_not_after", function()
  local scope_ref, late_err
  local log = {}
  local out = H.run_task(function()
    return task.scope(function(s)
      scope_ref = s
      s:spawn(function() task.delay_frame(2) end)
    end)
  end)
  -- another task spawns into the scope while it is open
  task.spawn(function()
    task.yield()
    scope_ref:spawn(function() task.delay_frame(2); log[#log + 1] = "outsider child done" end)
  end)
  H.frames(5)
  H.eq(log, {"outsider child done"})
  H.eq(out.values, {n = 1, true})
  late_err = H.raises(function() scope_ref:spawn(function() end) end, "scope has ended")
  H.has(tostring(scope_ref), "ended")
end)

H.case("spawn_into_a_failed_scope_raises", function()
  local got
  H.run_task(function()
    return task.scope(function(s)
      s:spawn(function() error("boom", 0) end)
      task.yield()  -- interrupted here
    end)
  end)
  local s2
  local out = H.run_task(function()
    return task.scope(function(s)
      s2 = s
      s:spawn(function() task.yield(); error("x", 0) end)
      local ok = pcall(task.delay_frame, 5)
      got = select(2, pcall(s.spawn, s, function() end))
    end)
  end)
  H.frames(2)
  H.has(got, "scope has failed")
end)

H.case("scopes_nest", function()
  local log = {}
  local out = H.run_task(function()
    return task.scope(function(outer)
      outer:spawn(function()
        task.scope(function(inner)
          inner:spawn(function() task.delay_frame(2); log[#log + 1] = "inner child" end)
        end)
        log[#log + 1] = "inner scope done"
      end)
      return "outer"
    end)
  end)
  H.frames(3)
  H.eq(log, {"inner child", "inner scope done"})
  H.eq(out.values, {n = 2, true, "outer"})
end)

H.case("outer_child_failure_unwinds_a_nested_scope_body", function()
  local log = {}
  local out = H.run_task(function()
    return task.scope(function(outer)
      outer:spawn(function() task.delay_frame(1); error("outer child", 0) end)
      task.scope(function(inner)
        inner:spawn(function()
          local r <close> = setmetatable({}, {__close = function() log[#log + 1] = "inner child closed" end})
          task.delay_frame(10)
        end)
        task.delay_frame(10)
      end)
    end)
  end)
  H.frames(2)
  H.eq(log, {"inner child closed"})
  H.eq({out.values[1], out.values[2]}, {false, "outer child"})
end)

H.case("a_second_failing_child_is_reported_under_its_function_s_position", function()
  -- It was reported as "task #N": the label came from the child's
  -- coroutine, whose function is gone once it failed.
  local reports, restore = H.capture_errors()
  local second = function() error("two") end
  local ok, err
  task.spawn(function()
    ok, err = pcall(task.scope, function(s)
      s:spawn(function() error("one") end)
      s:spawn(second)
    end)
  end)
  restore()
  H.eq(ok, false); H.has(err, "one")
  H.eq(#reports, 1)
  local where = debug.getinfo(second, "S")
  H.eq(reports[1].what, "task " .. where.short_src .. ":" .. where.linedefined)
  H.has(reports[1].err, "two")
end)

H.run()
