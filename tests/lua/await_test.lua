-- await_test.lua: awaiting tasks and the same-run wake-up rule (a task
-- woken by another resumes in the same run of the timing: docs/timings.md).
local H = require "harness"

H.case("await_returns_all_results_of_the_task", function()
  local got
  local t = task.spawn(function(a) task.yield(); return a, a * 2, nil end, 21)
  task.spawn(function() got = table.pack(task.await(t)) end)
  H.frames(1)
  H.eq(got, {n = 3, 21, 42, nil})
end)

H.case("awaiting_a_settled_task_returns_at_once", function()
  local log = {}
  local t = task.spawn(function() return "v" end)
  task.spawn(function()
    log[#log + 1] = task.await(t)
    log[#log + 1] = task.frame()
  end)
  H.eq(log, {"v", task.frame()}, "no suspension")
end)

H.case("awaiters_resume_in_the_same_run_in_the_order_they_began", function()
  local log = {}
  local target = task.spawn(function() task.yield("PreUpdate"); log[#log + 1] = "target done@" .. testhost.timing() end)
  for i = 1, 3 do
    task.spawn(function() task.await(target); log[#log + 1] = "w" .. i .. "@" .. testhost.timing() end)
  end
  H.frames(1)
  H.eq(log, {"target done@PreUpdate", "w1@PreUpdate", "w2@PreUpdate", "w3@PreUpdate"})
end)

H.case("cancelling_the_first_middle_and_last_awaiters_keeps_the_others_in_order", function()
  -- The awaiters of a task form a ring through the awaiting tasks: removing
  -- its head, an inner link and its tail must leave the rest in order.
  local log = {}
  local target = task.spawn(function() task.yield(); return "v" end)
  local w = {}
  for i = 1, 6 do
    w[i] = task.spawn(function()
      local v = task.await(target)
      log[#log + 1] = "w" .. i .. "=" .. v
    end)
  end
  w[1]:cancel()
  w[4]:cancel()
  w[6]:cancel()
  local late = task.spawn(function()
    local v = task.await(target)
    log[#log + 1] = "late=" .. v
  end)
  H.frames(1)
  H.eq(log, {"w2=v", "w3=v", "w5=v", "late=v"})
  H.eq({w[1]:status(), w[4]:status(), w[6]:status(), late:status()},
    {"cancelled", "cancelled", "cancelled", "done"})
end)

H.case("a_lone_awaiter_cancelled_leaves_the_task_unawaited", function()
  -- With its only awaiter gone, a failing task is reported again (nobody
  -- awaits it), which shows the ring was emptied.
  local target = task.spawn(function() task.yield(); error("boom", 0) end)
  local w = task.spawn(function() task.await(target) end)
  w:cancel()
  local errors, restore = H.capture_errors()
  H.frames(1)
  restore()
  H.eq(#errors, 1)
  H.eq(errors[1].err, "boom")
  H.eq(target:status(), "failed")
end)

H.case("wake_ups_wait_until_the_running_task_suspends", function()
  local log = {}
  local child
  task.spawn(function()
    child = task.spawn(function() log[#log + 1] = "child ends" end)
    log[#log + 1] = "parent still running"
  end)
  local a = task.spawn(function() task.yield(); return 1 end)
  task.spawn(function()
    task.await(a); log[#log + 1] = "awaiter resumed"
  end)
  task.spawn(function()
    task.yield()
    log[#log + 1] = "second continuation runs after the awaiter"
  end)
  H.frames(1)
  H.eq(log, {"child ends", "parent still running", "awaiter resumed",
    "second continuation runs after the awaiter"})
end)

H.case("chain_of_10000_awaits_completes_in_one_run", function()
  local n = 10000
  local first = task.spawn(function() task.yield(); return 0 end)
  local prev = first
  for _ = 1, n do
    local p = prev
    prev = task.spawn(function() return task.await(p) + 1 end)
  end
  local last = prev
  H.eq(last:status(), "suspended")
  local F = task.frame()
  H.frames(1)
  H.eq({last:status(), select(2, last:result()), task.frame() - F}, {"done", n, 1})
end)

H.case("await_from_the_host_side_through_luna_lua_spawn", function()
  local t = testhost.spawn_c(function(x) task.yield(); return x * 3 end, 5)
  H.eq({t.name, t:status()}, {"from-c", "suspended"})
  H.frames(1)
  H.eq({t:result()}, {true, 15})
end)

H.case("task_fields_name_id_and_tostring", function()
  local t = task.spawn(function() task.yield() end)
  H.eq(t.name, nil)
  t.name = "walker"
  H.eq(t.name, "walker")
  H.eq(math.type(t.id), "integer")
  H.has(tostring(t), "Task(walker, suspended)")
  H.has(H.raises(function() t.status = 1 end), "cannot be set")
  H.has(H.raises(function() t.name = 5 end), "Task.name: expected a string or nil, got number")
  H.eq(task.current(), nil, "no current task on the main thread")
  local inside
  local t2 = task.spawn(function() inside = task.current() end)
  H.eq(inside, t2)
  H.frames(1)
end)

H.run()
