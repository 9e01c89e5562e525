-- task_thread_test.lua: a task is its coroutine.
--
-- task.spawn and friends return the task's thread, and the scheduler's
-- record lives in C behind the thread's extra space; it is freed when the
-- task settles, and the thread alone then says what the task was. These
-- cases guard what that representation could break: a plain coroutine
-- taken for a task (the task methods live in the metatable of every
-- thread), the protection of that metatable, a settled task whose record
-- is gone and whose thread went through the collector, and a host that
-- swaps the thread metatable behind the module's back.
local H = require "harness"

H.case("a_task_is_its_coroutine", function()
  local inside, seen
  local t = task.spawn(function()
    inside = coroutine.running()
    task.spawn(function() seen = coroutine.status(inside) end)
    task.yield()
  end)
  H.eq(type(t), "thread")
  H.eq(rawequal(inside, t), true, "coroutine.running() in the task is the task")
  H.eq({seen, coroutine.status(t)}, {"normal", "suspended"}, "coroutine.status gives the stock answer")
  H.eq(t:status(), "suspended")
  H.eq(rawequal(task.list()[#task.list()], t), true, "task.list holds the threads")
  t:cancel()
  H.eq(coroutine.status(t), "dead")
  H.eq(t:status(), "cancelled")
end)

H.case("a_plain_coroutine_given_to_task_methods_raises_not_a_task", function()
  local co = coroutine.create(function() end)
  local t = task.spawn(function() task.yield() end)
  H.raises(function() return co:status() end, "attempt to index a plain coroutine (not a task) with 'status'")
  H.raises(function() return co.name end, "plain coroutine (not a task)")
  H.raises(function() co.name = "x" end, "plain coroutine (not a task)")
  for _, m in ipairs({"status", "result", "traceback", "cancel", "info", "handled"}) do
    H.raises(function() return t[m](co) end, "Task expected, got a plain coroutine", m)
  end
  H.raises(function() return t.await(co) end, "Task or Promise expected, got a plain coroutine")
  H.raises(function() task.await(co) end, "Task or Promise expected, got a plain coroutine")
  H.raises(function() task.cancel(co) end, "Task expected, got a plain coroutine")
  H.raises(function() task.when_all(co) end, nil, "when_all")
  H.raises(function() do local c <close> = co end end, nil, "a plain coroutine is not closable")
  H.has(tostring(co), "thread: ", "tostring gives the stock answer")
  H.eq(coroutine.status(co), "suspended")
  H.eq(coroutine.resume(co), true, "plain coroutines work as ever")
  t:cancel()
end)

-- A task's thread is handed out before the task starts (task.defer,
-- task.spawn_at): coroutine.resume on it ran the task's function with the
-- caller's values, outside the scheduler. It is refused as for a
-- suspended task, and coroutine.close cancels it.
H.case("a_task_not_started_yet_is_the_scheduler_s_to_start", function()
  local ran
  local t = task.defer(function(...) ran = {...}; return "r" end)
  H.raises(function() coroutine.resume(t, "forged") end, "cannot resume a task's coroutine")
  H.eq({ran, t:status(), coroutine.status(t)}, {nil, "suspended", "suspended"})
  H.frames(1)
  H.eq({ran, t:status()}, {{}, "done"})
  local t2 = task.spawn_at("PostLateUpdate", function() ran = "t2" end)
  H.eq(coroutine.close(t2), true)
  H.eq(t2:status(), "cancelled")
  H.frames(1)
  H.eq(ran, {}, "a closed task never starts")
end)

H.case("the_thread_metatable_is_protected", function()
  local t = task.spawn(function() end)
  H.eq(getmetatable(t), "lunaloop.Task")
  H.eq(getmetatable(coroutine.create(print)), "lunaloop.Task", "it is every thread's")
  H.raises(function() setmetatable(t, {}) end, "table expected")
end)

H.case("a_settled_task_answers_after_its_record_was_freed_and_the_collector_ran", function()
  local done = task.spawn(function() task.yield(); return 1, "two", nil end)
  done.name = "finisher"
  local failed = task.spawn(function() task.yield(); error({code = 7}) end):handled()
  failed.name = "breaker"
  local cancelled = task.spawn(function() task.yield() end)
  local ids = {done.id, failed.id, cancelled.id}
  cancelled:cancel()
  H.frames(2)
  collectgarbage("collect")
  collectgarbage("collect")
  H.eq({done:status(), failed:status(), cancelled:status()}, {"done", "failed", "cancelled"})
  H.eq({done.id, failed.id, cancelled.id}, ids)
  H.eq({done.name, failed.name, cancelled.name}, {"finisher", "breaker", nil})
  H.eq(table.pack(done:result()), table.pack(true, 1, "two", nil))
  local ok, err = failed:result()
  H.eq({ok, err.code}, {false, 7})
  H.has(failed:traceback(), "stack traceback")
  H.eq(cancelled:traceback(), nil)
  local info = done:info()
  H.eq({info.id, info.name, info.status, info.wait}, {ids[1], "finisher", "done", nil})
  H.has(tostring(done), "Task(finisher, done)")
  H.eq(coroutine.status(done), "dead")
  H.eq(coroutine.resume(done), false, "a settled task's thread stays dead")
  local got
  task.spawn(function() got = table.pack(task.await(done)) end)
  H.eq(got, table.pack(1, "two", nil), "task.await on a settled task")
  H.raises(function() task.await(failed) end, nil, "its error")
  done:cancel() -- left alone
  H.eq(done:status(), "done")
end)

H.case("a_host_that_replaces_the_thread_metatable_takes_the_task_methods_away", function()
  local t = task.spawn(function() task.yield(); return "ok" end)
  local mt = debug.getmetatable(t)
  debug.setmetatable(t, {__index = {hostmethod = function() return "host" end}})
  H.eq(t:hostmethod(), "host", "the host's metatable is every thread's now")
  H.raises(function() return t:status() end, "status")
  task.cancel(t) -- the module's functions still take the thread
  H.eq(coroutine.status(t), "dead")
  debug.setmetatable(t, mt)
  H.eq(t:status(), "cancelled")
end)

H.run()
