-- signal_test.lua: task.signal, its Signal and Connection objects
-- (docs/api.md, "Signals"): fire order, disconnection and connection during
-- a fire, once, deferred fires, waits (with timeouts, through task.await and
-- the combinators), destroy, error reports and hostile arguments.
local H = require "harness"

-- A signal with handlers named by tag that log "<tag>:<values>".
local function logger()
  local log = {}
  return log, function(tag)
    return function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
      log[#log + 1] = tag .. ":" .. table.concat(parts, ",")
    end
  end
end

H.case("fire_calls_handlers_in_connection_order_with_every_value", function()
  local s = task.signal()
  local log, h = logger()
  s:connect(h("a"))
  s:connect(h("b"))
  s:connect(h("c"))
  s:fire(1, nil, "x")
  s:fire()
  H.eq(log, {"a:1,nil,x", "b:1,nil,x", "c:1,nil,x", "a:", "b:", "c:"})
end)

H.case("a_handler_disconnected_during_a_fire_does_not_run_later_in_it", function()
  local s = task.signal()
  local log, h = logger()
  local c3
  s:connect(function() log[#log + 1] = "a"; c3:disconnect() end)
  local c2 = s:connect(function(self_c) log[#log + 1] = "b" end)
  c3 = s:connect(h("c"))
  s:connect(h("d"))
  s:fire()
  H.eq(log, {"a", "b", "d:"})
  H.eq(c3:connected(), false)
  H.eq(c2:connected(), true)
  -- a handler disconnecting itself still ends its own call, and is gone after
  local log2 = {}
  local me
  me = s:connect(function() log2[#log2 + 1] = "self"; me:disconnect(); log2[#log2 + 1] = "after" end)
  s:fire(); s:fire()
  H.eq(log2, {"self", "after"})
end)

H.case("a_handler_connected_during_a_fire_first_runs_at_the_next_fire", function()
  local s = task.signal()
  local log = {}
  local added = false
  s:connect(function(n)
    log[#log + 1] = "a" .. n
    if not added then
      added = true
      s:connect(function(m) log[#log + 1] = "new" .. m end)
    end
  end)
  s:fire(1)
  H.eq(log, {"a1"})
  s:fire(2)
  H.eq(log, {"a1", "a2", "new2"})
end)

H.case("a_fire_inside_a_handler_is_a_next_fire", function()
  local s = task.signal()
  local log = {}
  s:connect(function(n)
    log[#log + 1] = "a" .. n
    if n == 1 then
      s:connect(function(m) log[#log + 1] = "late" .. m end)
      s:fire(2) -- runs every connection there is now, the new one too
    end
  end)
  s:connect(function(n) log[#log + 1] = "b" .. n end)
  s:fire(1)
  H.eq(log, {"a1", "a2", "b2", "late2", "b1"})
end)

H.case("once_runs_once_and_is_disconnected_before_its_call", function()
  local s = task.signal()
  local log = {}
  local c
  c = s:connect(function(n)
    log[#log + 1] = "once" .. n .. ":" .. tostring(c:connected())
    s:fire(n + 1) -- a nested fire does not call it again
  end, {once = true})
  s:fire(1)
  s:fire(5)
  H.eq(log, {"once1:false"})
  H.eq(c:connected(), false)
  H.eq(s:connect(function() end, {once = false}):connected(), true)
end)

H.case("a_raising_handler_is_reported_stays_connected_and_the_others_run", function()
  local reports, restore = H.capture_errors()
  local s = task.signal()
  local log = {}
  s:connect(function(n) log[#log + 1] = "a" .. n end)
  local bad = s:connect(function(n) log[#log + 1] = "bad" .. n; error("boom " .. n, 0) end)
  s:connect(function(n) log[#log + 1] = "c" .. n end)
  s:fire(1)
  s:fire(2)
  restore()
  H.eq(log, {"a1", "bad1", "c1", "a2", "bad2", "c2"})
  H.eq(#reports, 2)
  H.eq(reports[1].err, "boom 1")
  H.eq(reports[2].err, "boom 2")
  H.eq(reports[1].task, nil)
  H.has(reports[1].what, "signal handler")
  H.has(reports[1].what, "signal_test.lua:")
  H.has(reports[1].tb, "stack traceback")
  H.has(reports[1].tb, "in method 'fire'")   -- the handler's caller is the fire,
  H.eq(reports[1].tb:find("in ?", 1, true), nil, "the fire loop's own frame") -- not its C loop
  H.eq(bad:connected(), true)
end)

H.case("a_handler_cannot_await_and_says_so", function()
  local reports, restore = H.capture_errors()
  local s = task.signal()
  s:connect(function() task.yield() end)
  local t = task.spawn(function() s:fire(); return "fired" end) -- fired from a task
  s:fire()                                                       -- and from the main thread
  restore()
  H.eq(#reports, 2)
  H.has(tostring(reports[1].err), "task.yield: called from a signal handler, which cannot await")
  H.has(tostring(reports[2].err), "task.yield: called from a signal handler, which cannot await")
  H.eq({t:result()}, {true, "fired"})
end)

H.case("fire_deferred_is_delivered_at_the_next_run_of_the_timing_in_fire_order", function()
  local a, b = task.signal(), task.signal()
  local log = {}
  a:connect(function(v) log[#log + 1] = "a" .. v .. "@" .. testhost.timing() .. task.frame() end)
  b:connect(function(v) log[#log + 1] = "b" .. v .. "@" .. testhost.timing() .. task.frame() end)
  a:fire_deferred(1)
  b:fire_deferred(2)
  a:fire_deferred(3)
  H.eq(log, {})
  H.frames(1)
  H.eq(log, {"a1@Update1", "b2@Update1", "a3@Update1"})
  -- fired from inside the signal's timing: at its next run (next frame)
  local late = task.signal{timing = "PostLateUpdate"}
  late:connect(function(v) log[#log + 1] = "late" .. v .. "@" .. testhost.timing() .. task.frame() end)
  local h <close> = task.on("PostLateUpdate", function()
    if task.frame() == 2 then late:fire_deferred("x") end
  end)
  H.frames(2)
  H.eq(log[4], "late" .. "x@PostLateUpdate3")
  H.eq(#log, 4)
end)

H.case("fire_deferred_keeps_the_signal_alive_and_a_reset_drops_it_cleanly", function()
  local got = {}
  do
    local s = task.signal()
    s:connect(function(v) got[#got + 1] = v end)
    s:fire_deferred("kept")
  end
  collectgarbage(); collectgarbage()
  H.frames(1)
  H.eq(got, {"kept"})
  -- left queued: the harness resets the loop after the case (purged)
  local s2 = task.signal()
  s2:connect(function() error("never delivered") end)
  s2:fire_deferred()
end)

H.case("wait_returns_the_values_of_the_next_fire", function()
  local s = task.signal()
  local out = {}
  local t = task.spawn(function()
    out[#out + 1] = table.pack(s:wait())
    out[#out + 1] = table.pack(task.await(s))
    return "end"
  end)
  H.eq(t:info().wait, "external")
  H.eq(t:info().waits_on, "signal:wait")
  s:fire("a", nil, 3)
  H.eq(out[1], {n = 3, "a", nil, 3})
  H.eq(t:status(), "suspended")
  s:fire()
  H.eq(out[2], {n = 0})
  H.eq({t:result()}, {true, "end"})
  H.eq(tostring(s):match("^Signal%(0 connected%)") ~= nil, true)
end)

H.case("waiters_and_handlers_are_woken_in_connection_order_waiters_resume_after_the_fire", function()
  local s = task.signal()
  local log = {}
  task.spawn(function() s:wait(); log[#log + 1] = "waiter" end)
  s:connect(function() log[#log + 1] = "handler" end)
  task.spawn(function()
    s:fire()
    log[#log + 1] = "fire returned"
  end)
  H.eq(log, {"handler", "fire returned", "waiter"})
end)

H.case("wait_with_a_timeout_raises_the_timeout_error_at_the_exact_frame", function()
  local s = task.signal()
  local out, t = H.run_task(function() return s:wait(0.05) end)
  H.eq(t:info().wait, "timer")
  H.frames(2)
  H.eq(out.values, nil)
  H.frames(1) -- 3 frames of 1/60 s: 0.05 s
  H.eq(out.values[1], false)
  H.eq(task.is_timeout(out.values[2]), true)
  H.eq(task.is_cancelled(out.values[2]), false)
  H.eq(out.values[2].seconds, 0.05)
  H.has(tostring(out.values[2].message), "timeout after 0.05")
  s:fire("late") -- nobody waits now
  -- a fire before the deadline wins, and the timer is gone with it
  local out2 = H.run_task(function() return s:wait(1) end)
  H.frames(1)
  s:fire("v", 2)
  H.eq(out2.values, {n = 3, true, "v", 2})
  H.frames(70)
  H.eq(tostring(s):match("^Signal%(0 connected%)") ~= nil, true)
end)

H.case("cancelling_a_waiting_task_removes_its_wait", function()
  local s = task.signal()
  local closed
  local t = task.spawn(function()
    local x <close> = setmetatable({}, {__close = function(_, e) closed = task.is_cancelled(e) end})
    s:wait()
  end)
  local t2 = task.spawn(function() s:wait(5) end)
  t:cancel()
  t2:cancel()
  H.eq(closed, true)
  H.eq(t:status(), "cancelled")
  H.eq(t2:status(), "cancelled")
  local n = 0
  s:connect(function() n = n + 1 end)
  s:fire()
  H.eq(n, 1)
  H.eq(tostring(s):match("^Signal%(1 connected%)") ~= nil, true)
end)

H.case("destroy_gives_waiters_the_cancellation_error_and_ends_connections", function()
  local s = task.signal()
  local c = s:connect(function() error("must not run") end)
  local o1 = H.run_task(function() return s:wait() end)
  local o2 = H.run_task(function() return s:wait(10) end)
  local o3 = H.run_task(function() return task.await(s) end)
  s:fire_deferred("dropped")
  s:destroy()
  for _, o in ipairs({o1, o2, o3}) do
    H.eq(o.values[1], false)
    H.eq(task.is_cancelled(o.values[2]), true)
  end
  H.eq(c:connected(), false)
  H.eq(s:is_destroyed(), true)
  H.frames(2) -- the deferred fire is not delivered
  s:fire("nothing")
  s:destroy() -- again: nothing
  H.raises(function() s:connect(function() end) end, "signal:connect: the signal was destroyed")
  local o4 = H.run_task(function() return s:wait() end)
  H.has(o4.values[2], "signal:wait: the signal was destroyed")
  H.has(tostring(s), "Signal(destroyed)")
end)

H.case("a_handler_may_destroy_its_signal_the_rest_do_not_run", function()
  local s = task.signal()
  local log = {}
  s:connect(function() log[#log + 1] = "a"; s:destroy() end)
  s:connect(function() log[#log + 1] = "b" end)
  s:fire()
  H.eq(log, {"a"})
end)

H.case("signals_are_awaitables_for_when_any_when_all_and_timeout", function()
  local s, u = task.signal(), task.signal()
  local out = H.run_task(function() return task.when_any(s, u) end)
  u:fire("from u", 1)
  H.eq(out.values, {n = 4, true, 2, "from u", 1})
  local all = H.run_task(function() return task.when_all(s, u) end)
  s:fire("s1")
  H.eq(all.values, nil)
  u:fire("u1")
  H.eq(all.values, {n = 3, true, "s1", "u1"})
  local to = H.run_task(function() return task.timeout(0.1, s) end)
  H.frames(6)
  H.eq(to.values[1], false)
  H.eq(task.is_timeout(to.values[2]), true)
  local ok = H.run_task(function() return task.timeout(0.1, s) end)
  H.frames(1)
  s:fire("in time")
  H.eq(ok.values, {n = 2, true, "in time"})
  -- nothing is left waiting on either signal
  H.eq(tostring(s):match("^Signal%(0 connected%)") ~= nil, true)
  H.eq(tostring(u):match("^Signal%(0 connected%)") ~= nil, true)
end)

H.case("a_handler_that_cancels_the_firing_task_unwinds_it_when_fire_returns", function()
  -- task.cancel of the running task raises the cancellation error at once,
  -- in the handler here: not reported as a failure, the other handlers
  -- run, and fire raises it when it returns.
  local reports, restore = H.capture_errors()
  local s = task.signal()
  local log = {}
  local t
  s:connect(function() log[#log + 1] = "first"; task.cancel(t); log[#log + 1] = "not reached" end)
  s:connect(function() log[#log + 1] = "second" end)
  t = task.spawn(function()
    task.yield()
    s:fire()
    log[#log + 1] = "not reached"
  end)
  H.frames(1)
  restore()
  H.eq(log, {"first", "second"})
  H.eq(t:status(), "cancelled")
  H.eq(#reports, 0)
end)

H.case("connection_in_a_close_variable_disconnects_at_scope_exit", function()
  local s = task.signal()
  local n = 0
  do
    local c <close> = s:connect(function() n = n + 1 end)
    s:fire()
  end
  s:fire()
  H.eq(n, 1)
end)

H.case("ten_thousand_handlers_keep_their_order_through_disconnections", function()
  local s = task.signal()
  local order, conns = {}, {}
  for i = 1, 10000 do conns[i] = s:connect(function() order[#order + 1] = i end) end
  for i = 1, 10000, 2 do conns[i]:disconnect() end -- compaction runs on the way
  for i = 10001, 10010 do conns[i] = s:connect(function() order[#order + 1] = i end) end
  s:fire()
  H.eq(#order, 5010)
  for k = 1, 5000 do
    if order[k] ~= 2 * k then error("order broken at " .. k .. ": " .. tostring(order[k])) end
  end
  for k = 1, 10 do H.eq(order[5000 + k], 10000 + k) end
  H.has(tostring(s), "Signal(5010 connected)")
end)

H.case("an_unreachable_signal_is_collected_with_its_handlers", function()
  local weak = setmetatable({}, {__mode = "k"})
  do
    local s = task.signal()
    local fn = function() end
    s:connect(fn)
    weak[s], weak[fn] = true, true
  end
  collectgarbage(); collectgarbage()
  H.eq(next(weak), nil)
end)

H.case("hostile_arguments_raise_clear_errors_at_the_call", function()
  local s = task.signal()
  H.raises(function() s:connect() end, "bad argument #1 to 'connect' (function expected, got no value)")
  H.raises(function() s:connect(42) end, "bad argument #1 to 'connect' (function expected, got number)")
  H.raises(function() s:connect(print, 5) end, "bad argument #2 to 'connect' (table expected, got number)")
  H.raises(function() s:connect(print, {once = 1}) end, "opts.once: expected a boolean, got number")
  H.raises(function() s:connect(print, {onse = true}) end, "unknown option 'onse' (expected: once)")
  H.raises(function() s.fire({}) end, "lunaloop.Signal expected, got table")
  H.raises(function() s.connect(nil, print) end, "lunaloop.Signal expected, got nil")
  H.raises(function() s.destroy(5) end, "lunaloop.Signal expected, got number")
  H.raises(function() task.signal(5) end, "bad argument #1 to 'signal' (table expected, got number)")
  H.raises(function() task.signal{timing = "Nope"} end, "opts.timing")
  H.raises(function() task.signal{bogus = 1} end, "unknown option 'bogus' (expected: timing)")
  local c = s:connect(print)
  H.raises(function() c.disconnect(s) end, "lunaloop.Connection expected")
  H.raises(function() s:wait() end, "signal:wait: not inside a task")
  local out = H.run_task(function() s:wait(-1) end)
  H.has(out.values[2], "expected a finite, non-negative number of seconds, got -1")
  out = H.run_task(function() s:wait("soon") end)
  H.has(out.values[2], "number expected, got string")
  out = H.run_task(function() s:wait(0 / 0) end)
  H.has(out.values[2], "got nan")
  H.raises(function() task.await(5) end, "Task, Promise or Signal expected, got number")
  H.eq(getmetatable(s), "lunaloop.Signal")
  H.eq(getmetatable(c), "lunaloop.Connection")
  c:disconnect(); c:disconnect()
end)

H.case("many_values_and_nils_reach_handlers_waiters_and_deferred_deliveries", function()
  local s = task.signal()
  local vals = {}
  for i = 1, 250 do vals[i] = (i % 3 ~= 0) and i or nil end
  local got = {}
  s:connect(function(...) got[#got + 1] = table.pack(...) end)
  local out = H.run_task(function() return s:wait() end)
  s:fire(table.unpack(vals, 1, 250))
  s:fire_deferred(nil, nil, "x", nil)
  H.frames(1)
  H.eq(got[1].n, 250)
  H.eq(got[1][249], nil)
  H.eq(got[1][250], 250)
  H.eq(out.values.n, 251)
  H.eq(out.values[251], 250)
  H.eq(got[2], {n = 4, nil, nil, "x", nil})
end)

H.case("a_handler_error_value_is_reported_as_it_is", function()
  local reports, restore = H.capture_errors()
  local s = task.signal()
  local e = setmetatable({}, {__tostring = function() return "custom error" end})
  s:connect(function() error(e) end)
  s:fire()
  restore()
  H.eq(reports[1].err, e)
end)

H.case("wait_from_a_plain_coroutine_or_a_callback_says_why_it_cannot", function()
  local s = task.signal()
  local out = H.run_task(function()
    local co = coroutine.wrap(function() return s:wait() end)
    return co()
  end)
  H.has(out.values[2], "signal:wait: called from a coroutine that is not a task")
  local reports, restore = H.capture_errors()
  local h <close> = task.on(function() s:wait() end)
  H.frames(1)
  restore()
  H.has(tostring(reports[1].err), "signal:wait: called from a task.on or task.every callback")
  H.has(tostring(s), "Signal(0 connected)")
end)

H.case("a_destroyed_signal_with_a_queued_fire_is_released", function()
  local weak = setmetatable({}, {__mode = "k"})
  do
    local s = task.signal()
    s:fire_deferred(1)
    s:destroy()
    weak[s] = true
  end
  H.frames(1) -- the queued continuation finds it destroyed and lets go
  collectgarbage(); collectgarbage()
  H.eq(next(weak), nil)
end)

H.run()
