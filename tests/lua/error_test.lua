-- error_test.lua: failures, reports, tracebacks and misuse (docs/api.md,
-- docs/composition.md section 5).
local H = require "harness"
local SRC = debug.getinfo(1, "S").short_src

-- A failing task that nothing awaits is reported to task.on_error exactly
-- once, in the frame it fails, with the failed task and a traceback that
-- points at the raising line. A failure never reported, reported twice, or
-- reported a frame late hides or doubles errors in the host's log.
H.case("each_unawaited_failure_is_reported_once_in_the_frame_it_fails", function()
  local reports, restore = H.capture_errors()
  local F = task.frame()
  local line1 = debug.getinfo(1, "l").currentline + 1
  local t1 = task.spawn(function() error("first") end)
  local line2 = debug.getinfo(1, "l").currentline + 1
  local t2 = task.spawn(function() task.yield(); error("second") end)
  H.frames(3)
  restore()
  H.eq(#reports, 2, "reports")
  H.has(reports[1].err, "first"); H.eq(reports[1].frame, F, "first fails before the frame")
  H.has(reports[2].err, "second"); H.eq(reports[2].frame, F + 1, "second fails in the next frame")
  H.has(reports[1].tb, SRC .. ":" .. line1 .. ":")
  H.has(reports[2].tb, SRC .. ":" .. line2 .. ":")
  H.eq({reports[1].task, reports[2].task}, {t1, t2}, "the failing tasks are passed")
  H.eq({t1:status(), t2:status()}, {"failed", "failed"})
end)

-- A wait_until predicate that raises fails its own task (reported once, in
-- the frame it raised) and nothing else: the other predicates waiting in
-- that timing are still called in that frame and in every later one. A
-- raise that escaped the predicate pass would skip the rest of the pass.
H.case("raising_predicate_fails_its_task_and_the_other_predicates_still_run", function()
  local reports, restore = H.capture_errors()
  local F = task.frame()
  local calls = {}
  local a = task.spawn(function()
    task.wait_until(function()
      if task.frame() == F + 3 then error("pred boom", 0) end
      return false
    end)
  end)
  local b = task.spawn(function()
    task.wait_until(function() calls[#calls + 1] = task.frame() - F; return false end)
  end)
  H.frames(4)
  restore()
  H.eq({a:status(), #reports, reports[1] and reports[1].err, reports[1] and reports[1].frame},
    {"failed", 1, "pred boom", F + 3})
  H.eq(calls, {1, 2, 3, 4}, "the other predicate is called every frame including 3")
  b:cancel()
end)

H.case("raising_predicate_is_catchable_around_the_await", function()
  local got
  task.spawn(function()
    local ok, err = pcall(task.wait_while, function() error({code = 7}) end)
    got = {ok, type(err) == "table" and err.code}
  end)
  H.frames(1)
  H.eq(got, {false, 7})
end)

H.case("predicates_are_never_called_synchronously", function()
  local calls = 0
  local t = task.spawn(function() task.wait_until(function() calls = calls + 1; return true end) end)
  H.eq({calls, t:status()}, {0, "suspended"})
  H.frames(1)
  H.eq({calls, t:status()}, {1, "done"})
  -- wait_while resumes when the predicate turns false
  local n = 0
  local w = task.spawn(function() task.wait_while(function() n = n + 1; return n < 3 end) end)
  H.frames(2)
  H.eq({n, w:status()}, {2, "suspended"})
  H.frames(1)
  H.eq({n, w:status()}, {3, "done"})
end)

-- An await inside a C function that calls back into Lua (here
-- table.sort's comparator) cannot yield, so it raises "attempt to await
-- across a C-call boundary". The refused await must leave nothing armed
-- behind it: a stale wake-up would end the task's next delay early (after
-- one frame instead of twelve).
H.case("await_across_a_c_call_boundary_is_refused_and_leaves_no_stale_wakeup", function()
  local got = {}
  task.spawn(function()
    local ok, err = xpcall(function()
      table.sort({3, 1, 2}, function(x, y) task.delay(0); return x < y end)
    end, function(e) return e end)
    got.ok, got.err = ok, err
    local F = task.frame()
    task.delay(0.2)
    got.frames = task.frame() - F
  end)
  H.frames(20, 1 / 60)
  H.eq(got.ok, false)
  H.has(got.err, "task.delay: attempt to await across a C-call boundary")
  H.eq(got.frames, 12, "0.2 s at 60 Hz is 12 frames, not 1 (no stale wake-up)")
end)

-- A failed task's report carries the traceback of the task's own
-- coroutine: the line that raised and the line of the entry function that
-- called it, though the raise came after a yield, on a resumed coroutine.
-- A traceback taken on the scheduler's side names neither.
H.case("traceback_names_the_raising_function_and_the_task_entry", function()
  local reports, restore = H.capture_errors()
  local raise_line = debug.getinfo(1, "l").currentline + 1
  local function inner() task.yield(); error("boom") end
  local call_line = debug.getinfo(1, "l").currentline + 1
  local function entry() inner() end
  task.spawn(entry)
  H.frames(1)
  restore()
  H.eq(#reports, 1)
  H.has(reports[1].err, "boom")
  H.has(reports[1].tb, SRC .. ":" .. raise_line .. ": in ")
  H.has(reports[1].tb, SRC .. ":" .. call_line .. ": in ")
  H.has(reports[1].tb, "inner")
end)

-- A task that fails is reported and task.step returns normally, so every
-- other task keeps running in each frame. An error escaping the step would
-- stop the frame for every task.
H.case("one_failing_task_does_not_stop_the_others", function()
  local reports, restore = H.capture_errors()
  local F = task.frame()
  local frames = {}
  local a = task.spawn(function()
    while true do task.next_frame(); frames[#frames + 1] = task.frame() - F end
  end)
  task.spawn(function() task.delay_frame(2); error("B broke") end)
  for _ = 1, 5 do H.eq(task.step(), task.frame(), "step returns normally") end
  restore()
  H.eq(frames, {1, 2, 3, 4, 5})
  H.eq(#reports, 1)
  a:cancel()
end)

H.case("error_value_is_kept_unchanged_and_reraised_by_await", function()
  local errobj = setmetatable({}, {__tostring = function() return "custom error" end})
  local failing = task.spawn(function() task.yield(); error(errobj) end)
  local got
  task.spawn(function()
    local ok, err = pcall(task.await, failing)
    got = {ok, rawequal(err, errobj)}
  end)
  H.frames(1)
  H.eq(got, {false, true})
  local ok, err = failing:result()
  H.eq({ok, rawequal(err, errobj), failing:status()}, {false, true, "failed"})
  H.has(failing:traceback(), "stack traceback:")
end)

H.case("awaited_failure_goes_to_the_awaiter_not_the_handler", function()
  local reports, restore = H.capture_errors()
  local failing = task.spawn(function() task.yield(); error("mine") end)
  task.spawn(function() pcall(task.await, failing) end)
  H.frames(1)
  restore()
  H.eq(#reports, 0)
end)

H.case("awaiter_that_dies_from_an_error_is_reported_itself", function()
  local reports, restore = H.capture_errors()
  local failing = task.spawn(function() task.yield(); error("deep", 0) end)
  local awaiter = task.spawn(function() task.await(failing) end)
  H.frames(1)
  restore()
  H.eq({#reports, reports[1].err, reports[1].task == awaiter}, {1, "deep", true})
end)

H.case("on_error_returns_previous_and_nil_restores_default", function()
  local function h1() end
  local function h2() end
  H.eq(task.on_error(h1), nil, "default is nil")
  H.eq(task.on_error(h2), h1)
  H.eq(task.on_error(nil), h2)
  H.eq(task.on_error(nil), nil)
end)

H.case("the_handler_gets_the_default_reports_subject", function()
  -- docs/api.md task.on_error: `what` is the text between "lunaloop: " and
  -- " failed:" of the default report.
  local reports, restore = H.capture_errors()
  local named = task.spawn(function() task.yield(); error("a", 0) end)
  named.name = "worker"
  local line = debug.getinfo(1, "l").currentline + 1
  task.spawn(function() task.yield(); error("b", 0) end)
  local cb_line = debug.getinfo(1, "l").currentline + 1
  local h = task.on("Update", function() error("c", 0) end)
  H.frames(1)
  restore()
  h:remove()
  H.eq(#reports, 3)
  H.eq({reports[1].err, reports[1].what}, {"a", "task worker"})
  H.eq({reports[2].err, reports[2].what}, {"b", "task " .. SRC .. ":" .. line})
  H.eq({reports[3].err, reports[3].what, reports[3].task}, {"c", "callback " .. SRC .. ":" .. cb_line, nil})
end)

H.case("a_failing_error_handler_does_not_break_the_loop", function()
  task.on_error(function() error("handler broke") end)
  local before = testhost.error_count()
  task.spawn(function() error("x") end)
  H.eq(testhost.error_count(), before + 1, "still counted")
  task.on_error(nil)
end)

H.case("an_xpcall_handler_cannot_await_but_pcall_can", function()
  -- docs/api.md "Awaits": Lua runs a message handler where it cannot yield.
  local got = {}
  task.spawn(function()
    got.xpcall = table.pack(xpcall(function() error("x", 0) end,
      function(e) task.yield(); return e end))
    got.pcall = table.pack(pcall(function() task.yield(); return "after" end))
  end)
  H.frames(1)
  H.eq(got.xpcall, {n = 2, false, "error in error handling"})
  H.eq(got.pcall, {n = 2, true, "after"})
end)

H.case("await_outside_a_task_raises_a_clear_error", function()
  H.has(H.raises(function() task.yield() end), "task.yield: not inside a task")
  H.has(H.raises(function() task.delay(1) end), "task.delay: not inside a task")
  local got
  task.spawn(function()
    local co = coroutine.create(function() task.next_frame() end)
    local ok, err = coroutine.resume(co)
    got = {ok, err}
  end)
  H.eq(got[1], false)
  H.has(got[2], "task.next_frame: called from a coroutine that is not a task")
end)

H.case("awaiting_in_a_callback_predicate_or_handler_says_what_the_code_is", function()
  -- All three said "the main thread cannot await; start a task with
  -- task.spawn", which is wrong advice where the code is a callback.
  local got = {}
  local h = task.on(function() got.on = select(2, pcall(task.yield)) end)
  local e = task.every(0.01, function() got.every = select(2, pcall(task.delay, 1)) end)
  local t = task.spawn(function()
    got.until_ = select(2, pcall(task.wait_until, function() task.yield(); return true end))
  end)
  local prev = task.on_error(function() got.handler = select(2, pcall(task.next_frame)) end)
  task.spawn(error, "boom")
  task.on_error(prev)
  H.frames(2)
  h:remove(); e:remove()
  H.has(got.on, "task.yield: called from a task.on or task.every callback, which cannot await")
  H.has(got.every, "task.delay: called from a task.on or task.every callback")
  H.has(got.until_, "task.yield: called from a wait_until or wait_while predicate, which must answer at once")
  H.has(got.handler, "task.next_frame: called from the task.on_error handler, which cannot await")
  H.eq(t:status(), "done")
  -- Outside all of them, the main thread's message stays.
  H.has(H.raises(function() task.yield() end), "the main thread cannot await")
end)

H.case("plain_coroutine_generators_keep_working_inside_a_task", function()
  local got = {}
  task.spawn(function()
    local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
    got[#got + 1] = gen()
    task.yield()
    got[#got + 1] = gen()
    got[#got + 1] = gen()
  end)
  H.frames(1)
  H.eq(got, {1, 2, 3})
end)

H.case("bare_coroutine_yield_in_a_task_fails_it_with_advice", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local t = task.spawn(function()
    local r <close> = setmetatable({}, {__close = function(_, e) log[#log + 1] = tostring(e) end})
    coroutine.yield("stray")
    log[#log + 1] = "not reached"
  end)
  restore()
  H.eq(t:status(), "failed")
  H.eq(#reports, 1)
  H.has(reports[1].err, "use a task.* await")
  H.eq(#log, 1); H.has(log[1], "use a task.* await")
end)

H.case("a_bare_yield_s_error_names_the_yield_s_own_line", function()
  -- It named the caller's line, or none when the yield was in the task's
  -- own body, and the traceback showed the line after the yield (the
  -- error was raised from a hook at the next instruction, one level up).
  local function line_of(f) return debug.getinfo(f, "S").linedefined end
  local reports, restore = H.capture_errors()
  local function helper()
    coroutine.yield()
    return 1
  end
  local body = function()
    coroutine.yield()
    return 2
  end
  task.spawn(body)
  task.spawn(function() helper() end)
  restore()
  local src = "error_test.lua:"
  H.has(reports[1].err, src .. (line_of(body) + 1) .. ": coroutine.yield inside a task")
  H.has(reports[1].tb, "[C]: in function 'coroutine.yield'\n\t")
  H.has(reports[1].tb, src .. (line_of(body) + 1) .. ": in function")
  H.has(reports[2].err, src .. (line_of(helper) + 1) .. ": coroutine.yield inside a task")
  H.has(reports[2].tb, src .. (line_of(helper) + 1) .. ": in ")
end)

H.case("a_body_of_c_functions_that_yields_fails_the_same_way", function()
  -- Nothing was left to raise the error in: such tasks ended "done" with
  -- their coroutine suspended.
  local reports, restore = H.capture_errors()
  local a = task.spawn(coroutine.yield)
  local b = task.spawn(pcall, coroutine.yield, "x")
  restore()
  H.eq({a:status(), b:status(), #reports}, {"failed", "failed", 2})
  H.has(select(2, a:result()), "coroutine.yield inside a task: use a task.* await")
  H.has(select(2, b:result()), "coroutine.yield inside a task: use a task.* await")
end)

H.case("result_is_pcall_shaped_and_raises_before_settling", function()
  local t = task.spawn(function() task.yield(); return 1, nil, "three" end)
  H.has(H.raises(function() t:result() end), "has not settled")
  H.frames(1)
  H.eq(table.pack(t:result()), {n = 4, true, 1, nil, "three"})
end)

H.case("a_task_cannot_await_itself_or_a_cycle", function()
  local got = {}
  local a, b
  a = task.spawn(function()
    got.self = select(2, pcall(task.await, task.current()))
    task.yield()
    got.cycle = select(2, pcall(task.await, b))
  end)
  b = task.spawn(function() task.await(a) end)
  H.frames(1)
  H.has(got.self, "cannot await itself")
  H.has(got.cycle, "await cycle")
  b:cancel()
end)

H.case("await_is_also_a_method_of_the_task", function()
  local got = {}
  task.spawn(function()
    local t = task.spawn(function() task.yield(); return 1, nil, 3 end)
    got.values = table.pack(t:await())
    local bad = task.defer(function() error("no", 0) end)
    got.err = select(2, pcall(bad.await, bad))
  end)
  H.frames(2)
  H.eq(got.values, {n = 3, 1, nil, 3})
  H.eq(got.err, "no")
end)

H.case("a_failure_marked_handled_waits_for_its_await_instead_of_being_reported", function()
  -- A failure nobody awaits at the moment it happens is reported, even if
  -- the script takes it later with pcall(task.await, t); t:handled() says
  -- it will be taken later.
  local reports, restore = H.capture_errors()
  local errors = testhost.error_count()
  local t = task.spawn(function() task.yield(); error("later", 0) end):handled()
  local r = task.spawn(function() task.yield(); error("read", 0) end)
  H.eq(r:handled(), r)
  H.frames(2)
  H.eq({t:status(), r:status(), #reports, testhost.error_count()}, {"failed", "failed", 0, errors})
  local got
  task.spawn(function() got = table.pack(pcall(task.await, t)) end)
  H.eq(got, {n = 2, false, "later"})
  H.eq(table.pack(r:result()), {n = 2, false, "read"})
  task.run{fast = true}               -- nothing is left to report when the run ends
  restore()
  H.eq({#reports, testhost.error_count()}, {0, errors})
end)

H.case("a_failure_marked_handled_and_never_taken_is_reported_when_the_run_ends", function()
  local reports, restore = H.capture_errors()
  local function lost() task.yield(); error("lost", 0) end
  local t = task.spawn(lost):handled()
  task.spawn(function() task.yield(); error("plain", 0) end) -- reported when it fails
  H.frames(1)
  H.eq(#reports, 1)
  H.eq(reports[1].err, "plain")
  H.eq(task.run{fast = true}, 1)      -- an error was reported in the state
  restore()
  H.eq(#reports, 2)
  H.eq({reports[2].err, reports[2].task}, {"lost", t})
  local where = debug.getinfo(lost, "S")
  H.eq(reports[2].what, "task " .. where.short_src .. ":" .. where.linedefined)
  H.truthy(reports[2].tb:find("in function", 1, true), "its traceback")
  -- Marking a task that already ended changes nothing.
  H.eq(t:handled(), t)
end)

H.run()
