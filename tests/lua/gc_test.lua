-- gc_test.lua: task.gc, the collector paced by the frame, and
-- task.stats().gc: the settings it returns, its argument errors (raised at
-- the call, nothing changed by a bad table), and that paced steps run at
-- the chosen timing's end and are counted.
local H = require "harness"

local function settings(s)
  return {s.budget, s.timing, s.ceiling, s.stop_auto, s.idle, s.mode, s.own}
end

H.case("gc_returns_the_settings_in_force_and_false_returns_to_the_loops", function()
  H.eq(settings(task.gc()), {0, "LastTimeUpdate", 0, false, false, "incremental", false})
  local s = task.gc{budget = 0.002, timing = "PostLateUpdate", ceiling = 64 * 1024 * 1024,
                    stop_auto = true, idle = true}
  H.eq(settings(s), {0.002, "PostLateUpdate", 64 * 1024 * 1024, true, true, "incremental", true})
  H.eq(settings(task.gc()), settings(s), "task.gc() only reads")
  H.eq(collectgarbage("isrunning"), false, "stop_auto stops Lua's collector")
  H.eq(settings(task.gc(false)), {0, "LastTimeUpdate", 0, false, false, "incremental", false})
  H.eq(collectgarbage("isrunning"), true, "and un-pacing restarts it")
  H.eq(task.gc{}.own, true, "an empty table is settings of its own: none")
  H.eq(task.gc{budget = 0.004, frame = 0.016}.frame, 0.016, "frame is returned in seconds")
  H.eq(task.gc{budget = 0.004}.frame, 0, "and is 0 when not given")
  task.gc(false)
end)

H.case("gc_argument_errors_name_the_option_and_change_nothing", function()
  task.gc{budget = 0.001}
  H.raises(function() task.gc{budgte = 1} end, "unknown option 'budgte' (expected: budget, timing")
  H.raises(function() task.gc{budget = -1} end,
    "opts.budget: expected a finite, non-negative number of seconds, got -1.0")
  H.raises(function() task.gc{budget = "1"} end, "opts.budget: expected a finite, non-negative number of seconds, got string")
  H.raises(function() task.gc{budget = 1 / 0} end, "opts.budget: expected a finite")
  H.raises(function() task.gc{timing = "Later"} end, "opts.timing")
  H.raises(function() task.gc{timing = "Initialization"} end,
    "opts.timing: the collector cannot be paced at Initialization")
  H.raises(function() task.gc{ceiling = 1.5} end, "opts.ceiling: expected a whole number of bytes >= 0, got 1.5")
  H.raises(function() task.gc{ceiling = -1} end, "opts.ceiling: expected a whole number of bytes >= 0")
  H.raises(function() task.gc{idle = 1} end, "opts.idle: expected a boolean, got number")
  H.raises(function() task.gc{stop_auto = "yes"} end, "opts.stop_auto: expected a boolean, got string")
  H.raises(function() task.gc{mode = "manual"} end,
    "opts.mode: expected 'incremental' or 'generational', got manual")
  H.raises(function() task.gc{stop_auto = true} end,
    "opts.stop_auto: needs a budget or idle (the collector would never run)")
  H.raises(function() task.gc{budget = 0.001, frame = -1} end,
    "opts.frame: expected a finite, non-negative number of seconds, got -1.0")
  H.raises(function() task.gc{frame = 0.016} end,
    "opts.frame: needs a budget (it shares out the budget's time)")
  H.raises(function() task.gc(true) end, "table, false or nil expected, got boolean")
  H.raises(function() task.gc(5) end, "table, false or nil expected, got number")
  H.eq(task.gc().budget, 0.001, "a bad table changed nothing")
  task.gc(false)
end)

H.case("paced_steps_run_at_the_paced_timing_and_are_counted", function()
  testhost.fake_cost(0.00001)
  local before = task.stats().gc
  task.gc{budget = 0.0005, timing = "LastUpdate", stop_auto = true}
  local seen = {}
  local h = task.on("Update", function() seen[#seen + 1] = task.stats().gc.steps end)
  local g = task.on("PostLateUpdate", function() seen[#seen + 1] = task.stats().gc.steps end)
  for _ = 1, 4 do
    local junk = {}
    for i = 1, 30000 do junk[i] = {i} end
    H.frames(1)
  end
  h:remove(); g:remove()
  local stepped = 0
  for i = 1, #seen - 2, 2 do
    stepped = stepped + (seen[i + 1] - seen[i])
    H.eq(seen[i + 2], seen[i + 1], "no step between PostLateUpdate and the next Update")
  end
  H.truthy(stepped > 0, "steps happen between Update and PostLateUpdate")
  local st = task.stats().gc
  H.truthy(st.steps > before.steps)
  H.truthy(st.time > 0 and st.longest_step > 0 and st.bytes > 0)
  H.eq({st.full_collections, st.ceiling_hits}, {before.full_collections, before.ceiling_hits})
  task.gc(false)
  testhost.fake_cost(nil)
end)

H.case("the_same_settings_given_every_frame_keep_the_pacer_going", function()
  -- Giving the settings begins the pacer's estimates afresh; the same
  -- ones again must not, or a script that sets them each frame (after
  -- its allocations) never lets a cycle begin.
  testhost.fake_cost(0.00001)
  local A = {budget = 0.001, frame = 0.016, stop_auto = true}
  local before = task.stats().gc
  local keep = {}
  for f = 1, 30 do
    for j = 1, 2000 do keep[#keep + 1] = {j} end
    if #keep > 20000 then keep = {} end
    task.gc(A)
    H.frames(1)
  end
  local st = task.stats().gc
  H.truthy(st.steps - before.steps > 0, "steps ran")
  H.truthy(st.cycles - before.cycles > 0, "cycles completed")
  task.gc(false)
  testhost.fake_cost(nil)
end)

H.case("gc_cannot_change_the_collector_from_a_finalizer", function()
  -- Lua ignores every collector call inside a __gc metamethod, so the
  -- settings could not be applied: the call says so instead.
  local ok, err
  setmetatable({}, {__gc = function() ok, err = pcall(task.gc, {budget = 0.001}) end})
  collectgarbage()
  H.eq(ok, false)
  H.has(err, "task.gc: cannot change the collector from a __gc metamethod")
  H.eq(task.gc().own, false, "nothing changed")
end)

H.case("generational_mode_is_set_by_task_gc", function()
  H.eq(task.gc{budget = 0.001, mode = "generational"}.mode, "generational")
  H.eq(collectgarbage("incremental"), "generational", "the state was put in that mode")
  task.gc(false)
end)

H.run()
