-- compose_cancel_test.lua: the combinators (when_all, when_any, timeout,
-- scope) and channels when cancellation and failure meet: await cycles
-- through a function input, a caller cancelled by one of its own
-- children, cleanup loops whose handlers cancel, and failures that must
-- reach exactly one place (raised, or reported).
local H = require "harness"

-- A to-be-closed value whose __close calls fn(err).
local function closer(fn)
  return setmetatable({}, {__close = function(_, err) fn(err) end})
end

local function errs(reports)
  local out = {}
  for i, r in ipairs(reports) do out[i] = r.err end
  return out
end

-- The combinator's caller was declared as waiting on its children only
-- once it suspended, so a function input that awaited the caller before
-- its first await was no cycle yet: child and caller waited for each
-- other for ever (task.scope caught this shape, the others did not).
H.case("a_function_input_awaiting_the_caller_at_once_is_an_await_cycle", function()
  local got, reports, restore = {}, H.capture_errors()
  task.spawn(function()
    local me = task.current()
    local function awaits_caller() return task.await(me) end
    got[1] = {pcall(task.when_all, awaits_caller)}
    got[2] = {pcall(task.when_any, function() task.delay_frame(5) end, awaits_caller)}
    got[3] = {pcall(task.timeout, 1, awaits_caller)}
  end)
  restore()
  for i = 1, 3 do
    H.eq(got[i][1], false, "call " .. i)
    H.has(got[i][2], "bad argument #1 to 'await' (await cycle: that task is (indirectly) awaiting this one)", "call " .. i)
  end
  H.eq(#reports, 0, "each cycle error is raised once, not also reported")
end)

-- The other side of that rule: a when_any decided at once by a settled
-- Task does not wait, so a function input awaiting the caller is no cycle;
-- it is cancelled like any other child, and nothing is reported.
H.case("a_when_any_decided_at_once_does_not_wait_on_its_children", function()
  local reports, restore = H.capture_errors()
  local settled = task.spawn(function() return "ready" end)
  local got, child
  task.spawn(function()
    local me = task.current()
    got = {task.when_any(settled, function() child = task.current(); return task.await(me) end)}
  end)
  restore()
  H.eq(got, {1, "ready"})
  H.eq({child:status(), #reports}, {"cancelled", 0})
end)

-- A function input that cancels the caller before its first await made
-- the caller's start of the children raise the cancellation, which left
-- the watchers waiting on the children not yet started: nothing ever
-- cancelled them and the run never ended.
H.case("a_function_input_cancelling_the_caller_leaves_nothing_running", function()
  for _, name in ipairs({"when_all", "when_any"}) do
    local log, caller = {}, nil
    caller = task.spawn(function()
      task.yield()
      local ok, err = pcall(task[name], function() task.cancel(caller) end,
        function() log[#log + 1] = "second ran" end)
      log[#log + 1] = "raised cancelled: " .. tostring(not ok and task.is_cancelled(err))
    end)
    H.frames(1)
    H.eq(log, {"raised cancelled: true"}, name .. ": the later inputs are cancelled unstarted")
    H.eq(caller:status(), "cancelled", name)
  end
end)

-- Child 1 failed, when_all cancelled the others, and the __close handler
-- of child 2 cancelled the when_all caller: the public cancel then raised
-- the caller's own cancellation in the middle of the cleanup loop, and
-- child 3 was still running frames later. The caller is cancelled, so it
-- raises the cancellation; child 1's failure, which it would have raised,
-- reaches no one else and is reported.
H.case("cleanup_finishes_when_a_childs_close_handler_cancels_the_caller", function()
  local reports, restore = H.capture_errors()
  local third, caller, got
  caller = task.spawn(function()
    local ok, err = pcall(task.when_all,
      function() task.delay_frame(1); error("first failed", 0) end,
      function()
        local c <close> = closer(function() task.cancel(caller) end)
        task.delay_frame(50)
      end,
      function() third = task.current(); task.delay_frame(50) end)
    got = {ok, task.is_cancelled(err)}
  end)
  H.frames(2)
  restore()
  H.eq(got, {false, true}, "when_all raised the cancellation")
  H.eq({third:status(), caller:status()}, {"cancelled", "cancelled"})
  H.eq(errs(reports), {"first failed"})
end)

H.case("scope_cleanup_finishes_when_a_childs_close_handler_cancels_the_caller", function()
  local reports, restore = H.capture_errors()
  local third, caller, got
  caller = task.spawn(function()
    got = {pcall(task.scope, function(s)
      s:spawn(function() task.delay_frame(1); error("first failed", 0) end)
      s:spawn(function()
        local c <close> = closer(function() task.cancel(caller) end)
        task.delay_frame(50)
      end)
      third = s:spawn(function() task.delay_frame(50) end)
    end)}
  end)
  H.frames(2)
  restore()
  H.eq({got[1], task.is_cancelled(got[2])}, {false, true})
  H.eq({third:status(), caller:status()}, {"cancelled", "cancelled"})
  H.eq(errs(reports), {"first failed"})
end)

-- finish_error decided whether the failure was awaited before the task's
-- __close handlers ran; one of them cancelled the only awaiter, and the
-- error was neither raised nor reported.
H.case("a_failure_whose_close_handler_cancels_its_only_awaiter_is_reported", function()
  local reports, restore = H.capture_errors()
  local waiter
  local t = task.spawn(function()
    local c <close> = closer(function() task.cancel(waiter) end)
    task.delay_frame(1)
    error("boom", 0)
  end)
  waiter = task.spawn(function() task.await(t) end)
  H.frames(1)
  restore()
  H.eq({t:status(), waiter:status()}, {"failed", "cancelled"})
  H.eq(errs(reports), {"boom"})
  H.eq(reports[1].task, t)
end)

-- A when_any decided at once by a settled Task: a function input that
-- failed before its first await had woken its watcher, which when_any
-- then cancelled before it ran: the error was lost.
H.case("when_any_decided_at_once_reports_a_function_input_failing_at_once", function()
  local reports, restore = H.capture_errors()
  local settled = task.spawn(function() return "ready" end)
  local got
  task.spawn(function()
    got = {task.when_any(settled, function() error("early", 0) end)}
  end)
  H.frames(1)
  restore()
  H.eq(got, {1, "ready"})
  H.eq(errs(reports), {"early"})
end)

-- The general form: an awaiter woken with a failure and cancelled before
-- it resumed to raise it. The failure is reported when every awaiter
-- woken with it lost it that way; one that raised it is enough.
H.case("a_failure_lost_by_every_awaiter_before_it_resumed_is_reported", function()
  local reports, restore = H.capture_errors()
  local t = task.spawn(function() task.yield(); error("boom", 0) end)
  local late
  local first = task.spawn(function() pcall(task.await, t); task.cancel(late) end)
  late = task.spawn(function() task.await(t) end)
  H.frames(1)
  H.eq({first:status(), late:status(), #reports}, {"done", "cancelled", 0},
    "raised by one awaiter: not reported")
  -- u's __close wakes the killer, which is thus queued ahead of u's two
  -- awaiters and cancels both before either resumes.
  local ch, a, b = task.channel(), nil, nil
  local killer = task.spawn(function() ch:receive(); task.cancel(a); task.cancel(b) end)
  local u = task.spawn(function()
    local c <close> = closer(function() ch:send("go") end)
    task.yield()
    error("lost", 0)
  end)
  a = task.spawn(function() task.await(u) end)
  b = task.spawn(function() task.await(u) end)
  H.frames(1)
  restore()
  H.eq({killer:status(), a:status(), b:status()}, {"done", "cancelled", "cancelled"})
  H.eq(errs(reports), {"lost"}, "lost by both awaiters: reported once")
end)

-- A sender blocked on a channel that was closed and then cancelled before
-- it resumed raised "send on a closed channel", a failure that was
-- reported: the cancellation must win, as it does in every other wait.
H.case("a_sender_cancelled_after_its_channel_closed_ends_cancelled", function()
  local reports, restore = H.capture_errors()
  local ch = task.channel(0)
  local seen
  local producer = task.spawn(function()
    local c <close> = closer(function(e) seen = e end)
    ch:send("v")
  end)
  -- From a task, so that the producer is woken by close() but not resumed
  -- before the cancel.
  task.spawn(function()
    ch:close()
    task.cancel(producer)
  end)
  restore()
  H.eq({producer:status(), task.is_cancelled(seen), #reports}, {"cancelled", true, 0})
end)

-- A task whose cancellation is queued behind one unwinding read
-- "cancelled" while t:result() raised "task has not settled". Both now
-- say it is cancelled.
H.case("a_queued_cancellation_reads_cancelled_in_status_and_result", function()
  local got
  local b = task.spawn(function() task.yield() end)
  local a = task.spawn(function()
    local c <close> = closer(function()
      task.cancel(b)
      local ok, err = b:result()
      got = {b:status(), ok, task.is_cancelled(err)}
    end)
    task.yield()
  end)
  task.cancel(a)
  H.eq(got, {"cancelled", false, true})
end)

-- The body of a scope caught its task's cancellation and no child was
-- left: task.scope returned normally in a cancelled task, and the code
-- after it ran on. It is an await, and raises the cancellation.
H.case("scope_raises_a_cancellation_its_body_caught", function()
  local got, caller
  caller = task.spawn(function()
    local ok, err = pcall(task.scope, function() pcall(task.cancel, task.current()) end)
    got = {ok, task.is_cancelled(err)}
  end)
  H.eq(got, {false, true})
  H.eq(caller:status(), "cancelled")
end)

-- A child failed before its first await, so the scope's watcher heard of
-- it only after the scope had ended (its caller was cancelled meanwhile):
-- the failure marked a scope nobody would raise it from, and was lost.
H.case("a_scope_child_failure_heard_after_the_scope_ended_is_reported", function()
  local reports, restore = H.capture_errors()
  local caller
  caller = task.spawn(function()
    pcall(task.scope, function(s)
      s:spawn(function() error("child failed", 0) end)
      pcall(task.cancel, task.current())
    end)
  end)
  H.frames(1)
  restore()
  H.eq(caller:status(), "cancelled")
  H.eq(errs(reports), {"child failed"})
end)

H.run()
