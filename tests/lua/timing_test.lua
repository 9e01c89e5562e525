-- timing_test.lua: when each await resumes (docs/timings.md, section 5).
local H = require "harness"
local DT = 1 / 60

-- task.next_frame("Update") resumes in Update of the next frame whether it
-- is called before Update (PreUpdate) or after it (PostLateUpdate) in the
-- current one. Reading "next" as "the next run of Update" resumes the
-- PreUpdate task in the same frame.
H.case("next_frame_from_two_timings_resumes_in_the_next_update", function()
  local log = {}
  task.spawn_at("PreUpdate", function()
    local F = task.frame()
    task.next_frame("Update")
    log[#log + 1] = {"A", task.frame() - F, testhost.timing()}
  end)
  task.spawn_at("PostLateUpdate", function()
    local F = task.frame()
    task.next_frame("Update")
    log[#log + 1] = {"B", task.frame() - F, testhost.timing()}
  end)
  H.frames(3)
  H.eq(log, {{"A", 1, "Update"}, {"B", 1, "Update"}}, "resumes")
end)

-- task.yield("Update") called in PreUpdate resumes in Update of the same
-- frame, which is still to come; waiting for the next frame would add a
-- frame of latency to every hand-off between timings.
H.case("yield_to_update_from_preupdate_resumes_in_the_same_frame", function()
  local got
  task.spawn_at("PreUpdate", function()
    local F = task.frame()
    task.yield("Update")
    got = {task.frame() - F, testhost.timing()}
  end)
  H.frames(2)
  H.eq(got, {0, "Update"}, "frame offset and timing")
end)

-- A task that yields to the timing it runs in resumes in that timing of
-- the next frame, not again in the same run: a loop of such yields would
-- otherwise never let the frame end.
H.case("yield_to_the_running_timing_waits_a_frame", function()
  local frames = {}
  local F
  task.spawn_at("Update", function()
    F = task.frame()
    for _ = 1, 3 do
      task.yield("Update")
      frames[#frames + 1] = task.frame() - F
    end
  end)
  H.frames(5)
  H.eq(frames, {1, 2, 3}, "frames after F")
end)

H.case("endless_yield_loop_never_spins_a_frame", function()
  local n = 0
  local t = task.spawn(function() while true do n = n + 1; task.yield() end end)
  local f0 = task.frame()
  H.frames(4)                       -- each step returns: the loop yields to the next run
  H.eq({task.frame() - f0, n}, {4, 5}, "frames run and resumes (1 at spawn + 1 per frame)")
  t:cancel()
end)

H.case("awaits_return_nothing_whatever_the_previous_resume_carried", function()
  -- Regression: task.yield() returned the values of the previous resume
  -- (spawn arguments, await results), read from outside its stack frame.
  local counts = {}
  local t = task.spawn(function() return 1, 2, 3 end)
  task.spawn(function(a, b)
    counts[#counts + 1] = select("#", task.yield())
    task.await(t)
    counts[#counts + 1] = select("#", task.yield())
    counts[#counts + 1] = select("#", task.delay(0))
    counts[#counts + 1] = select("#", task.next_frame())
    counts[#counts + 1] = select("#", task.wait_until(function() return true end))
  end, "x", "y")
  H.frames(6)
  H.eq(counts, {0, 0, 0, 0, 0})
end)

H.case("yield_default_timing_is_update", function()
  local got
  task.spawn(function() task.yield(); got = testhost.timing() end)
  H.frames(1)
  H.eq(got, "Update")
end)

H.case("next_frame_is_always_a_later_frame", function()
  local got = {}
  -- awaited outside any run (before the frame): the next frame is F+1
  task.spawn(function()
    local F = task.frame(); task.next_frame("Update"); got[#got + 1] = task.frame() - F
  end)
  -- awaited in Update: the Update of F+1, not a second run in F
  task.spawn_at("Update", function()
    local F = task.frame(); task.next_frame("Update"); got[#got + 1] = task.frame() - F
  end)
  H.frames(3)
  H.eq(got, {1, 1})
end)

H.case("delay_frame_counts_frames_even_if_timing_not_run_yet", function()
  local got = {}
  task.spawn_at("PreUpdate", function()
    local F = task.frame()
    task.delay_frame(1, "Update")           -- Update has not run in F yet: still F+1
    got[#got + 1] = {task.frame() - F, testhost.timing()}
    F = task.frame()
    task.delay_frame(3)                      -- from Update of F: Update of F+3
    got[#got + 1] = {task.frame() - F, testhost.timing()}
  end)
  H.frames(6)
  H.eq(got, {{1, "Update"}, {3, "Update"}})
end)

H.case("delay_frame_0_and_delay_0_act_as_yield_never_synchronous", function()
  local log = {}
  task.spawn(function() task.delay_frame(0); log[#log + 1] = "df0@" .. testhost.timing() end)
  task.spawn(function() task.delay(0); log[#log + 1] = "d0@" .. testhost.timing() end)
  log[#log + 1] = "spawned"
  H.frames(1)
  H.eq(log, {"spawned", "df0@Update", "d0@Update"})
  -- awaited during Update's own run, they wait for the next run (next frame)
  local got = {}
  task.spawn_at("Update", function()
    local F = task.frame()
    task.delay(0); got[#got + 1] = task.frame() - F
    F = task.frame()
    task.delay_frame(0); got[#got + 1] = task.frame() - F
  end)
  H.frames(4)
  H.eq(got, {1, 1})
end)

H.case("spawn_at_and_defer_start_at_the_next_run_of_their_timing", function()
  local log = {}
  local t1 = task.defer(function() log[#log + 1] = "defer@" .. testhost.timing() end)
  local t2 = task.spawn_at("LastTimeUpdate", function() log[#log + 1] = "late@" .. testhost.timing() end)
  local t3 = task.spawn_at("Initialization", function() log[#log + 1] = "init@" .. testhost.timing() end)
  H.eq({t1:status(), t2:status(), #log}, {"suspended", "suspended", 0}, "not started yet")
  H.frames(1)
  H.eq(log, {"init@Initialization", "defer@Update", "late@LastTimeUpdate"})
  H.eq({t1:status(), t2:status(), t3:status()}, {"done", "done", "done"})
end)

H.case("spawn_runs_now_until_first_await", function()
  local log = {}
  task.spawn(function(a, b)
    log[#log + 1] = a + b
    task.yield()
    log[#log + 1] = "after"
  end, 2, 3)
  log[#log + 1] = "returned"
  H.frames(1)
  H.eq(log, {5, "returned", "after"})
end)

H.case("timings_run_in_the_documented_frame_order", function()
  local log = {}
  for _, name in ipairs(task.timings) do
    task.spawn_at(name, function() log[#log + 1] = testhost.timing() end)
  end
  testhost.fixed_dt(DT)
  H.frames(1, 1 / 60)
  -- FixedUpdate runs once per due step: one step of 1/60 is due in a 1/60 frame
  -- (or none when rounding leaves it a nanosecond short), so compare the rest.
  local rest = {}
  for _, n in ipairs(log) do if n ~= "FixedUpdate" and n ~= "LastFixedUpdate" then rest[#rest + 1] = n end end
  H.eq(rest, {"Initialization", "LastInitialization", "EarlyUpdate", "LastEarlyUpdate",
    "PreUpdate", "LastPreUpdate", "Update", "LastUpdate", "PreLateUpdate", "LastPreLateUpdate",
    "PostLateUpdate", "LastPostLateUpdate", "TimeUpdate", "LastTimeUpdate"})
  H.frames(2)
  testhost.fixed_dt(0.02)
end)

H.case("timings_table_lists_the_16_names_in_order", function()
  H.eq(#task.timings, 16)
  H.eq({task.timings[1], task.timings[5], task.timings[9], task.timings[16]},
    {"Initialization", "FixedUpdate", "Update", "LastTimeUpdate"})
end)

H.case("registered_during_a_run_first_considered_at_next_run", function()
  -- A continuation that queues a timer due at once, a predicate and a
  -- task.on callback for the running timing: none of them runs in this run.
  local log = {}
  local h
  task.spawn_at("Update", function()
    local F = task.frame()
    task.spawn(function() task.delay(0); log[#log + 1] = "timer+" .. (task.frame() - F) end)
    task.spawn(function()
      task.wait_until(function() log[#log + 1] = "pred+" .. (task.frame() - F); return true end)
    end)
    h = task.on("Update", function() log[#log + 1] = "on+" .. (task.frame() - F) end)
  end)
  H.frames(3)
  h:remove()
  H.eq(log, {"timer+1", "pred+1", "on+1", "on+2"})
end)

H.run()
