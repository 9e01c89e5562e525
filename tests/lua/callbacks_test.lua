-- callbacks_test.lua: task.on, the per-tick runner (docs/update-layer.md).
local H = require "harness"

H.case("on_calls_in_registration_order_with_dt_from_next_run", function()
  local log = {}
  local hs = {}
  for i = 1, 3 do hs[i] = task.on("Update", function(dt) log[#log + 1] = {i, dt} end) end
  H.eq(#log, 0, "not called synchronously")
  H.frames(2, 0.25)
  H.eq(log, {{1, 0.25}, {2, 0.25}, {3, 0.25}, {1, 0.25}, {2, 0.25}, {3, 0.25}})
  for i = 1, 3 do hs[i]:remove() end
end)

H.case("remove_during_the_run_is_safe_and_keeps_order", function()
  local log = {}
  local hs = {}
  for i = 1, 5 do
    hs[i] = task.on("Update", function()
      log[#log + 1] = i
      if i == 2 then hs[2]:remove(); hs[4]:remove() end
    end)
  end
  H.frames(2)
  H.eq(log, {1, 2, 3, 5, 1, 3, 5})
  for i = 1, 5 do hs[i]:remove() end
  H.eq(testhost.callback_count(), 0)
end)

H.case("a_raising_callback_is_removed_and_reported_with_nil_task", function()
  local reports, restore = H.capture_errors()
  local calls, others = 0, 0
  local bad = task.on("Update", function() calls = calls + 1; error("cb boom") end)
  local good = task.on("Update", function() others = others + 1 end)
  H.frames(3)
  restore()
  H.eq({calls, others, #reports, bad:active(), good:active()}, {1, 3, 1, false, true})
  H.has(reports[1].err, "cb boom")
  H.eq(reports[1].task, nil)
  H.has(reports[1].tb, "stack traceback:")
  good:remove()
end)

H.case("a_callback_that_removes_and_drops_its_own_handle_then_raises_is_named", function()
  -- Its handle and function were released at remove(): the report read
  -- the freed handle (ASan: use after free) and named "[C]:-1". Alone
  -- (every), in a stretch between others (on), and returning normally.
  local reports, restore = H.capture_errors()
  local line = debug.getinfo(1, "l").currentline
  local h1, h2, h3, h4
  local log = {}
  h1 = task.on("Update", function() log[#log + 1] = "first" end)
  h2 = task.on("Update", function()
    h2:remove(); h2 = nil; collectgarbage(); collectgarbage(); error("on boom", 0)
  end)
  h3 = task.on("Update", function()
    h3:remove(); h3 = nil; collectgarbage(); collectgarbage(); log[#log + 1] = "returned"
  end)
  h4 = task.every(0.01, function()
    h4:remove(); h4 = nil; collectgarbage(); collectgarbage(); error("every boom", 0)
  end)
  H.frames(2, 0.1)
  restore()
  H.eq(log, {"first", "returned", "first"})
  table.sort(reports, function(a, b) return a.err < b.err end)
  H.eq({reports[1].err, reports[2].err}, {"every boom", "on boom"})
  H.eq(reports[1].what:match("^callback .*callbacks_test%.lua:(%d+)$"), tostring(line + 10))
  H.eq(reports[2].what:match("^callback .*callbacks_test%.lua:(%d+)$"), tostring(line + 4))
  H.eq(testhost.callback_count(), 1)
  h1:remove()
end)

-- Callbacks run in stretches, several in one protected call (runner.h,
-- callbacks.c): a raising callback must still be isolated, the stretch
-- going on with the next one in the same frame, and its traceback must end
-- at the callback as when it ran alone.
H.case("raising_callbacks_inside_a_stretch_leave_the_rest_of_the_frame_running", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local hs = {}
  for i = 1, 5 do
    hs[i] = task.on("Update", function()
      log[#log + 1] = i
      if i == 2 or i == 4 then error("boom " .. i) end
    end)
  end
  H.frames(2)
  restore()
  H.eq(log, {1, 2, 3, 4, 5, 1, 3, 5})
  H.eq(#reports, 2)
  H.has(reports[1].err, "boom 2")
  H.has(reports[2].err, "boom 4")
  for k = 1, 2 do
    local tb = reports[k].tb
    H.eq(tb:find("[C]: in ?", 1, true), nil, "no frame of the stretch: " .. tb)
    H.has(tb:match("stack traceback:\n\t[^\n]*\n\t([^\n]*)"), "in function <")
  end
  H.eq({hs[1]:active(), hs[2]:active(), hs[3]:active(), hs[4]:active(), hs[5]:active()},
       {true, false, true, false, true})
  for i = 1, 5 do hs[i]:remove() end
end)

-- A callback that adds callbacks during the run makes the runner grow its
-- array for the merge at the run's end: the stretch must follow the move
-- (it read the old array once: a use after free, and a removed callback
-- still called).
-- Callbacks and wait_until predicates of a timing run in registration
-- order (docs/update-layer.md, section 1). A predicate between two callbacks ends a stretch;
-- the order must not change for it.
H.case("a_predicate_between_callbacks_keeps_registration_order", function()
  local log = {}
  local a = task.on("Update", function() log[#log + 1] = "a" end)
  local n = 0
  task.spawn(function()
    task.wait_until(function() n = n + 1; log[#log + 1] = "pred"; return n == 2 end)
    log[#log + 1] = "woke"
  end)
  local b = task.on("Update", function() log[#log + 1] = "b" end)
  H.frames(2)
  a:remove(); b:remove()
  H.eq(log, {"a", "pred", "b", "a", "pred", "woke", "b"})
end)

H.case("callbacks_added_during_a_stretch_do_not_resurrect_removed_ones", function()
  local reports, restore = H.capture_errors()
  local log, added, late = {}, {}, nil
  local first = task.on("Update", function()
    log[#log + 1] = "first"
    if #added == 0 then
      for i = 1, 200 do added[i] = task.on("Update", function() end) end
      late:remove()
    end
  end)
  local middle = task.on("Update", function() log[#log + 1] = "middle" end)
  late = task.on("Update", function() log[#log + 1] = "late" end)
  H.frames(2)
  restore()
  H.eq(log, {"first", "middle", "first", "middle"})
  H.eq(#reports, 0)
  first:remove(); middle:remove()
  for i = 1, #added do added[i]:remove() end
  H.eq(testhost.callback_count(), 0)
end)

H.case("a_callback_traceback_keeps_its_tail_call_line", function()
  local reports, restore = H.capture_errors()
  local function g() error("tail boom") end
  local h = task.on("Update", function() return g() end)
  H.frames(1)
  restore()
  H.eq(#reports, 1)
  H.has(reports[1].tb, "(...tail calls...)")
  H.eq(reports[1].tb:find("[C]: in ?", 1, true), nil, reports[1].tb)
  h:remove()
end)

H.case("a_deep_callback_traceback_skips_levels_but_not_into_the_stretch", function()
  local reports, restore = H.capture_errors()
  local function rec(n) if n == 0 then error("deep boom") end rec(n - 1) end
  local h = task.on("Update", function() rec(40) end)
  H.frames(1)
  restore()
  H.eq(#reports, 1)
  H.has(reports[1].tb, "(skipping ")
  H.eq(reports[1].tb:find("[C]: in ?", 1, true), nil)
  h:remove()
end)

-- A stack overflow in a callback is reported like any error, and at once:
-- finding the stretch's frame must not cost the square of the depth.
H.case("a_stack_overflow_in_a_callback_is_reported_and_the_rest_run", function()
  local reports, restore = H.capture_errors()
  local function f(n) return 1 + f(n + 1) end
  local after = 0
  local bad = task.on("Update", function() f(1) end)
  local good = task.on("Update", function() after = after + 1 end)
  H.frames(2)
  restore()
  H.eq({#reports, after, bad:active(), good:active()}, {1, 2, false, true})
  H.has(reports[1].err, "stack overflow")
  good:remove()
end)

-- The stretch's own C function is an implementation detail: a debug hook
-- that refuses calls of unnamed C functions must not fail the callbacks
-- (they then run one protected call each, as before stretches existed).
H.case("a_hook_that_refuses_the_stretch_frame_fails_no_callback", function()
  local reports, restore = H.capture_errors()
  local calls = 0
  local hooker = task.on("Update", function()
    debug.sethook(function()
      local info = debug.getinfo(2, "Sn")
      if info.what == "C" and info.name == nil then error("hook says no") end
    end, "c")
  end)
  local counter = task.on("Update", function() calls = calls + 1 end)
  H.frames(3)
  debug.sethook()
  restore()
  H.eq({calls, #reports, hooker:active(), counter:active()}, {3, 0, true, true})
  hooker:remove(); counter:remove()
end)

-- dt is read at each call, so a fixed step changed by one callback is seen
-- by the next one in the same run, as task.delta_time() sees it.
H.case("dt_is_read_at_each_call_of_a_stretch", function()
  testhost.fixed_dt(0.02)
  local seen = {}
  local h1 = task.on("FixedUpdate", function(dt)
    if #seen == 0 then testhost.fixed_dt(0.01) end
    seen[#seen + 1] = dt
  end)
  local h2 = task.on("FixedUpdate", function(dt) seen[#seen + 1] = dt; seen[#seen + 1] = task.delta_time() end)
  H.frames(1, 0.05)
  h1:remove(); h2:remove()
  testhost.fixed_dt(0.02)
  H.eq({seen[1], seen[2], seen[3]}, {0.02, 0.01, 0.01})
end)

H.case("on_fixed_update_gets_fixed_dt", function()
  testhost.fixed_dt(0.02)
  local dts = {}
  local h = task.on("FixedUpdate", function(dt) dts[#dts + 1] = dt end)
  local u = task.on("Update", function(dt) dts[#dts + 1] = -dt end)
  H.frames(1, 0.05)
  h:remove(); u:remove()
  -- a 0.05 s frame holds two 0.02 s steps (plus whatever the accumulator kept)
  H.truthy(#dts == 3 or #dts == 4, "2 or 3 steps then Update")
  H.eq(dts[1], 0.02); H.eq(dts[#dts], -0.05)
end)

H.case("close_handle_removes_the_callback", function()
  local n = 0
  do
    local h <close> = task.on("Update", function() n = n + 1 end)
    H.frames(2)
  end
  H.frames(2)
  H.eq(n, 2)
  H.eq(testhost.callback_count(), 0)
end)

H.case("return_values_of_callbacks_are_ignored", function()
  local n = 0
  local h = task.on("Update", function() n = n + 1; return false end)
  H.frames(3)
  h:remove()
  h:remove() -- a second remove does nothing
  H.eq(n, 3)
end)

H.case("delta_time_inside_and_outside_fixed_step", function()
  testhost.fixed_dt(0.01)
  local inside, outside
  task.spawn(function()
    task.yield("FixedUpdate"); inside = task.delta_time()
    task.yield("Update"); outside = task.delta_time()
  end)
  task.time_scale(0.5)
  H.frames(2, 0.1)
  H.eq({inside, outside}, {0.01, 0.05})
  testhost.fixed_dt(0.02)
end)

H.case("on_defaults_to_update_and_orders_by_priority_then_registration", function()
  local log = {}
  local hs = {
    task.on(function() log[#log + 1] = "default" end),
    task.on("Update", function() log[#log + 1] = "p5" end, {priority = 5}),
    task.on("Update", function() log[#log + 1] = "p-1" end, {priority = -1}),
    task.on("Update", function() log[#log + 1] = "p5b" end, {priority = 5}),
    task.on("Update", function() log[#log + 1] = "high" end, {priority = "high"}),
  }
  H.frames(1)
  for _, h in ipairs(hs) do h:remove() end
  H.eq(log, {"high", "p-1", "default", "p5", "p5b"})
  H.has(H.raises(function() task.on("Update", print, {priority = "urgent"}) end), "2147483647, or \"high\"")
end)

H.case("budget_defers_callbacks_to_the_next_run_high_priority_always_runs", function()
  -- The fake cost clock advances 1 ms per read; with a 3 ms budget a run
  -- calls the first item, then reads the clock before each further one.
  testhost.fake_cost(0.001)
  task.set_budget("Update", 0.003)
  local calls = {}
  local hs = {}
  for i = 1, 6 do
    hs[i] = task.on("Update", function() calls[#calls + 1] = i end)
  end
  hs[7] = task.on("Update", function() calls[#calls + 1] = "H" end, {priority = "high"})
  local frames = {}
  for f = 1, 3 do
    calls = {}
    H.frames(1)
    frames[f] = table.concat(calls, " ")
  end
  for _, h in ipairs(hs) do h:remove() end
  local st = task.stats().timings.Update
  task.set_budget("Update", nil)
  testhost.fake_cost(nil)
  -- run 1: 1 is called unmeasured, 2 and 3 fit, 4..6 are deferred;
  -- run 2: the deferred 4..6 go first, H keeps its place, 1..3 are deferred;
  -- run 3: 1..3 first, then H, and 4..6 wait again.
  H.eq(frames, {"H 1 2 3", "4 5 6 H", "1 2 3 H"})
  H.eq({st.deferred, st.budget_exceeded}, {9, 3}, "deferred calls and runs over budget")
  H.has(H.raises(function() task.set_budget("Update", -1) end), "non-negative number of seconds")
end)

H.case("a_timing_after_the_function_is_taken_and_bad_arguments_name_their_own_position", function()
  -- task.on(fn, "FixedUpdate") and task.every(0.5, fn, "FixedUpdate")
  -- reported "bad argument #3 ... table expected" for the user's second
  -- (or third) argument.
  local log = {}
  local h1 <close> = task.on(function() log[#log + 1] = "on@" .. testhost.timing() end, "FixedUpdate")
  local h2 <close> = task.on(function() end, "PreUpdate", {priority = "high"})
  local h3 <close> = task.every(1 / 60, function() log[#log + 1] = "every@" .. testhost.timing() end,
    "LastUpdate")
  H.eq({h2:active(), h3:active()}, {true, true})
  testhost.fixed_dt(1 / 60)
  H.frames(1)
  H.eq(log, {"on@FixedUpdate", "every@LastUpdate"})
  local function err(f) return select(2, pcall(f)) end
  local fn = function() end
  H.has(err(function() task.on(fn, 42) end),
    "bad argument #2 to 'on' (expected a timing name or an options table, got number)")
  H.has(err(function() task.on(fn, "Fixed") end), "bad argument #2 to 'on' (unknown timing 'Fixed'")
  H.has(err(function() task.on("Update", fn, "FixedUpdate") end),
    "bad argument #3 to 'on' (expected an options table, got string)")
  H.has(err(function() task.on(fn, "FixedUpdate", true) end),
    "bad argument #3 to 'on' (expected an options table, got boolean)")
  H.has(err(function() task.every(0.5, fn, 7) end),
    "bad argument #3 to 'every' (expected a timing name or an options table, got number)")
  H.has(err(function() task.every(0.5, fn, "Update", {timing = "Update"}) end),
    "bad argument #4 to 'every' (opts.timing: the timing was given as argument #3 already)")
  H.eq(testhost.callback_count(), 3)
end)

H.run()
