-- delay_test.lua: delays on the three clocks, time scale and argument errors.
local H = require "harness"

H.case("delay_1s_at_dt_0_1_resumes_exactly_10_frames_later", function()
  local got
  task.spawn(function()
    local F = task.frame()
    task.delay(1.0)
    got = task.frame() - F
  end)
  H.frames(12, 0.1)
  H.eq(got, 10)
end)

H.case("delay_half_second_at_60hz_takes_30_frames_and_1s_60", function()
  local got = {}
  task.spawn(function()
    local F = task.frame(); task.delay(0.5); got[1] = task.frame() - F
    F = task.frame(); task.delay(1); got[2] = task.frame() - F
  end)
  H.frames(100, 1 / 60)
  H.eq(got, {30, 60})
end)

-- Tasks that delay by the same time resume in the same frame and in the
-- order they were spawned: timers with equal deadlines break ties by
-- creation order. A heap left to break ties as it likes resumes them in
-- any order.
H.case("equal_delays_resume_in_spawn_order_in_the_same_frame", function()
  local log = {}
  for i = 1, 3 do
    task.spawn(function() task.delay(0.5); log[#log + 1] = {i, task.frame()} end)
  end
  local F = task.frame()
  H.frames(31, 1 / 60)
  H.eq(log, {{1, F + 30}, {2, F + 30}, {3, F + 30}})
end)

-- Twenty children spawned one frame apart by a parent that never awaits
-- them each wait delay_frame(100) and all wake exactly 100 frames after
-- they began. A frame count taken from another frame than the one the
-- child waits from (its parent's, say) makes some wake early or late.
H.case("unawaited_children_each_wait_their_full_delay_frame", function()
  local res = {}
  task.spawn(function()
    for i = 1, 20 do
      task.spawn(function()
        local F = task.frame()
        task.delay_frame(100)
        res[i] = task.frame() - F
      end)
      task.delay_frame(1)
    end
  end)
  H.frames(125)
  local want = {}
  for i = 1, 20 do want[i] = 100 end
  H.eq(res, want)
end)

-- With task.time_scale(0) a delay on the scaled clock never ends, while a
-- delay on the unscaled clock ends after its real time (1 s of 0.05 s
-- frames: 20 frames). A scale applied to both clocks freezes the unscaled
-- wait too.
H.case("time_scale_zero_stops_scaled_waits_while_unscaled_ones_fire", function()
  H.eq(task.time_scale(0), 0, "time_scale returns the new scale")
  local a_done, b_frames = false, nil
  local a = task.spawn(function() task.delay(1); a_done = true end)
  task.spawn(function()
    local F = task.frame()
    task.delay(1, "Update", "unscaled")
    b_frames = task.frame() - F
  end)
  H.frames(100, 0.05)
  H.eq({a_done, a:status(), b_frames}, {false, "suspended", 20})
  a:cancel()
end)

H.case("time_scale_applies_from_next_frame_and_scales_delays", function()
  local t0 = task.time()
  H.eq(task.time_scale(2), 2)
  H.frames(1, 0.1)
  H.eq(math.floor((task.time() - t0) * 1000 + 0.5), 200, "scaled ms after one frame")
  local got
  task.spawn(function() local F = task.frame(); task.delay(1); got = task.frame() - F end)
  H.frames(6, 0.1)
  H.eq(got, 5, "delay(1) at scale 2 and dt 0.1")
end)

H.case("realtime_follows_unscaled_dt_under_virtual_time", function()
  task.time_scale(0.5)
  local r0, u0 = task.time("realtime"), task.time("unscaled")
  H.frames(10, 0.1)
  H.eq(math.floor((task.time("realtime") - r0) * 1000 + 0.5), 1000)
  H.eq(math.floor((task.time("unscaled") - u0) * 1000 + 0.5), 1000)
  local got
  task.spawn(function() local F = task.frame(); task.delay(0.3, "Update", "realtime"); got = task.frame() - F end)
  H.frames(5, 0.1)
  H.eq(got, 3, "realtime delay frames")
end)

H.case("delay_on_other_timing_resumes_there", function()
  local got
  task.spawn(function()
    local F = task.frame()
    task.delay(0.1, "LastPostLateUpdate")
    got = {task.frame() - F, testhost.timing()}
  end)
  H.frames(3, 0.1)
  H.eq(got, {1, "LastPostLateUpdate"})
end)

H.case("due_timers_fire_frame_waits_then_scaled_unscaled_realtime", function()
  local log = {}
  -- created in reverse kind order; all due in the same Update run
  task.spawn(function() task.delay(0.1, "Update", "realtime"); log[#log + 1] = "realtime" end)
  task.spawn(function() task.delay(0.1, "Update", "unscaled"); log[#log + 1] = "unscaled" end)
  task.spawn(function() task.delay(0.1); log[#log + 1] = "scaled" end)
  task.spawn(function() task.delay_frame(1); log[#log + 1] = "frame" end)
  H.frames(1, 0.1)
  H.eq(log, {"frame", "scaled", "unscaled", "realtime"})
end)

H.case("equal_deadline_ties_break_by_creation_then_deadline_order", function()
  local log = {}
  task.spawn(function() task.delay(0.3); log[#log + 1] = "c" end)
  task.spawn(function() task.delay(0.1); log[#log + 1] = "a1" end)
  task.spawn(function() task.delay(0.1); log[#log + 1] = "a2" end)
  task.spawn(function() task.delay(0.2); log[#log + 1] = "b" end)
  H.frames(1, 0.5)
  H.eq(log, {"a1", "a2", "b", "c"})
end)

-- Wrong arguments to the awaits (a negative, NaN or infinite delay, a
-- negative frame count, a misspelt timing or clock, a string for seconds)
-- raise a clear error at the call that names the function and the
-- argument, and the task can await again afterwards. An await that raised
-- after arming its wait would leave the task half suspended.
H.case("bad_arguments_raise_at_the_call_site_and_the_task_goes_on", function()
  local errs, after
  task.spawn(function()
    errs = {}
    local function try(f, ...) local ok, e = pcall(f, ...); errs[#errs + 1] = ok and "no error" or e end
    try(task.delay, -1)
    try(task.delay, 0 / 0)
    try(task.delay, math.huge)
    try(task.delay_frame, -1)
    try(task.yield, "Updte")
    try(task.delay, 1, "Update", "wallclock")
    try(task.delay, "soon")
    task.yield()                      -- nothing hangs: the task still works
    after = task.frame()
  end)
  H.frames(1)
  H.truthy(after, "task continued after the errors")
  H.has(errs[1], "bad argument #1 to 'lunaloop.delay'"); H.has(errs[1], "non-negative number of seconds, got -1")
  H.has(errs[2], "non-negative number of seconds, got nan")
  H.has(errs[3], "non-negative number of seconds, got inf")
  H.has(errs[4], "bad argument #1 to 'lunaloop.delay_frame'"); H.has(errs[4], "non-negative frame count, got -1")
  H.has(errs[5], "bad argument #1 to 'lunaloop.yield'"); H.has(errs[5], "unknown timing 'Updte'")
  H.has(errs[5], "Initialization, LastInitialization, EarlyUpdate")
  H.has(errs[5], "TimeUpdate, LastTimeUpdate")
  H.has(errs[6], "unknown clock 'wallclock'")
  H.has(errs[7], "number expected, got string")
end)

H.case("waits_longer_than_the_clocks_count_are_capped_not_refused", function()
  -- docs/api.md "Conventions": 2^62 ns or frames, never firing early.
  local cap = 2 ^ 62
  local fired = {}
  local a = task.spawn(function() task.delay(1e308); fired.a = true end)
  local b = task.spawn(function() task.delay_frame(math.maxinteger); fired.b = true end)
  H.eq(a:info().deadline, cap / 1e9)
  H.eq(b:info().deadline, math.tointeger(cap))
  H.frames(3)
  H.eq(fired, {}, "neither fires")
  a:cancel(); b:cancel()
end)

H.case("bad_arguments_to_spawn_and_friends", function()
  H.has(H.raises(function() task.spawn(42) end), "function expected, got number")
  H.has(H.raises(function() task.defer() end), "function expected, got no value")
  H.has(H.raises(function() task.spawn_at("Nope", print) end), "unknown timing 'Nope'")
  H.has(H.raises(function() task.spawn_at(nil, print) end), "expected a timing name")
  H.has(H.raises(function() task.time("sundial") end), "unknown clock 'sundial'")
  H.has(H.raises(function() task.time_scale(-1) end), "time scale from 0 to 1e6")
  H.has(H.raises(function() task.time_scale(0 / 0) end), "time scale from 0 to 1e6, got nan")
  H.has(H.raises(function() task.time_scale(1e300) end), "time scale from 0 to 1e6")
  H.has(H.raises(function() task.on("Update", 5) end), "function expected")
  H.has(H.raises(function() task.wait_until(nil) end), "function expected")
  H.has(H.raises(function() task.await(5) end), "Task, Promise or Signal expected, got number")
  H.has(H.raises(function() task.cancel({}) end), "Task expected, got table")
  H.eq(testhost.task_count(), 0, "nothing created by failed calls")
end)

H.run()
