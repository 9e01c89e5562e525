-- introspect_test.lua: task.list, t:info and task.stats.
local H = require "harness"

H.case("list_and_info_describe_live_tasks_and_their_waits", function()
  local F = task.frame()
  local a = task.spawn(function() task.delay(2, "LastUpdate") end)
  local b = task.spawn(function() task.wait_until(function() return false end, "PreUpdate") end)
  local c = task.spawn(function() task.await(a) end)
  local d = task.spawn(function() task.delay_frame(10) end)
  local e = task.defer(function() end)
  b.name = "watcher"
  H.frames(3, 0.1)
  local list = task.list()
  H.eq(#list, 4, "e started and finished")
  H.eq({list[1], list[2], list[3], list[4]}, {a, b, c, d})
  local ia = a:info()
  H.eq({ia.status, ia.wait, ia.timing, ia.clock, ia.age, ia.created_frame},
    {"suspended", "timer", "LastUpdate", "scaled", 3, F})
  H.eq(math.floor(ia.deadline * 10 + 0.5) / 10 > 0, true)
  H.eq({b:info().name, b:info().wait, b:info().timing}, {"watcher", "predicate", "PreUpdate"})
  H.eq({c:info().wait, c:info().timing}, {"task", nil})
  H.eq({d:info().wait, d:info().clock, d:info().deadline}, {"timer", "frame", F + 10})
  local running
  task.spawn(function() running = task.current():info() end)
  H.eq({running.status, running.wait}, {"running", nil})
  for _, t in ipairs(list) do t:cancel() end
  H.eq({a:info().status, a:info().wait}, {"cancelled", nil})
end)

H.case("stats_count_per_timing_work_and_resumes_this_frame", function()
  local hs = {task.on("Update", function() end), task.on("LastUpdate", function() end)}
  local ts = {}
  for i = 1, 3 do ts[i] = task.spawn(function() while true do task.yield("PreUpdate") end end) end
  local sleeper = task.spawn(function() task.delay(100) end)
  H.frames(1)
  local s = task.stats()
  H.eq({s.tasks, s.callbacks, s.frame}, {4, 2, task.frame()})
  H.eq({s.timings.Update.items, s.timings.LastUpdate.items}, {1, 1})
  H.eq(s.timings.PreUpdate.resumes, 3)
  H.eq(s.timings.PreUpdate.queued, 3, "each waits for the next PreUpdate")
  H.eq(s.timings.Update.timers, 1)
  for _, h in ipairs(hs) do h:remove() end
  for _, t in ipairs(ts) do t:cancel() end
  sleeper:cancel()
end)

H.case("walks_with_no_task_left_keep_slots_in_creation_order", function()
  -- Once no task holds a slot, the walks skip the anchor table (anchors.c:
  -- the free slots are remade without reading it); the tasks created next
  -- still take the lowest slots, and a later walk lists them in order.
  for _, t in ipairs(task.list()) do t:cancel() end
  for _ = 1, 6 do task.spawn(function() task.yield() end) end
  H.frames(1)
  H.eq({#task.list(), task.stats().tasks}, {0, 0})
  local b = {}
  for i = 1, 3 do b[i] = task.spawn(function() task.delay(10) end) end
  H.eq(task.list(), b)
  b[2]:cancel()
  local c = task.spawn(function() task.delay(10) end)
  H.eq(task.list(), {b[1], b[3], c})
  for _, t in ipairs(task.list()) do t:cancel() end
  H.eq(#task.list(), 0)
end)

H.case("list_keeps_creation_order_when_ended_tasks_free_their_slots", function()
  -- Tasks keep no list of their own: their anchor slots, reused once
  -- freed, are sorted by creation. b1 and b2 take a4's and a2's slots.
  local a = {}
  for i = 1, 5 do a[i] = task.spawn(function() task.delay(10) end) end
  a[2]:cancel()
  a[4]:cancel()
  local b1 = task.spawn(function() task.delay(10) end)
  local b2 = task.spawn(function() task.delay(10) end)
  H.eq(task.list(), {a[1], a[3], a[5], b1, b2})
  a[1]:cancel()
  local b3 = task.spawn(function() task.delay(10) end)
  H.eq(task.list(), {a[3], a[5], b1, b2, b3})
  H.eq(task.stats().tasks, 5)
  for _, t in ipairs(task.list()) do t:cancel() end
  H.eq(task.list(), {})
end)

H.case("info_says_what_a_task_waits_on_and_the_line_of_its_await", function()
  -- t:info() named the kind of wait only: nothing said which task, call
  -- or channel operation a task waited on, or where in its code, which is
  -- what a stuck run needs reported.
  local ch = task.channel()
  local line = debug.getinfo(1, "l").currentline
  local rx = task.spawn(function() local v = ch:receive(); return v end)
  local aw = task.spawn(function() local v = task.await(rx); return v end)
  local all = task.spawn(function() local v = task.when_all(rx); return v end)
  local sl = task.spawn(function() task.delay(5); return 1 end)
  local tail = task.spawn(function() return ch:receive() end)
  H.frames(1)
  local here = debug.getinfo(1, "S").short_src .. ":"
  H.eq({rx:info().waits_on, rx:info().where}, {"channel:receive", here .. (line + 1)})
  H.eq({aw:info().waits_on, aw:info().where}, {rx, here .. (line + 2)})
  H.eq({all:info().waits_on, all:info().where}, {"task.when_all", here .. (line + 3)})
  H.eq({sl:info().waits_on, sl:info().where}, {nil, here .. (line + 4)})
  -- a tail call leaves no frame of the task's own code to point at
  H.eq({tail:info().waits_on, tail:info().where}, {"channel:receive", nil})
  local running
  task.spawn(function() running = task.current():info() end)
  H.eq({running.waits_on, running.where}, {nil, nil})
  for _, t in ipairs(task.list()) do t:cancel() end
  H.eq({rx:info().waits_on, rx:info().where}, {nil, nil})
end)

H.case("stats_frames_give_the_cost_distribution_of_the_last_profiled_frames", function()
  -- Unprofiled frames leave no distribution. With the fake cost clock each
  -- run of a timing costs exactly 1 ms: a frame of dt 0 runs the 14 timings
  -- outside the fixed step (14 ms), one of dt 0.06 adds three fixed steps
  -- of two runs (20 ms). 126 + 2 such frames fill the 128-frame history.
  H.frames(2, 0)
  H.eq(task.stats().frames, {count = 0})
  testhost.fake_cost(0.001)
  task.debug{profile = true}
  H.frames(63, 0)
  H.frames(1, 0.06)
  H.frames(63, 0)
  H.frames(1, 0.06)
  task.debug{profile = false}
  testhost.fake_cost(nil)
  local f = task.stats().frames
  local function ms(d) return {d.p50 * 1000, d.p99 * 1000, d.max * 1000} end
  H.eq(f.count, 128)
  H.eq(ms(f), {14, 20, 20}, "nearest rank: the 2 slow frames are p99 of 128")
  H.eq(ms(f.timings.Update), {1, 1, 1})
  H.eq(ms(f.timings.FixedUpdate), {0, 3, 3})
  H.frames(5, 0)
  H.eq(task.stats().frames.count, 128, "frames with profiling off are not recorded")
end)

H.run()
