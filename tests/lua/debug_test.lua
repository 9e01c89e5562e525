-- debug_test.lua: task.debug: creation tracebacks in t:info()
-- and the time spent per timing in task.stats(), both off by default.
local H = require "harness"

local function spawner() -- a named function, so the traceback names it
  return task.spawn(function() task.delay(1) end)
end

H.case("creation_traceback_is_off_by_default_and_kept_when_enabled", function()
  H.eq(task.debug(), {creation_traceback = false, profile = false})
  H.has(H.raises(function() task.debug{creation_traceback = true, bogus = 1} end),
    "unknown option 'bogus' (expected: creation_traceback, profile)")
  H.eq(task.debug().creation_traceback, false, "a refused call changes nothing")
  H.has(H.raises(function() task.debug{profile = 1} end),
    "bad argument #1 to 'debug' (opts.profile: expected a boolean, got number)")
  H.has(H.raises(function() task.debug{profile = true, creation_traceback = "yes"} end),
    "(opts.creation_traceback: expected a boolean, got string)")
  H.eq(task.debug(), {creation_traceback = false, profile = false}, "neither was set")
  local before = spawner()
  H.eq(before:info().traceback, nil, "off: nothing is kept")
  H.eq(task.debug{creation_traceback = true}.creation_traceback, true)
  local t = spawner()
  local tb = t:info().traceback
  H.has(tb, "created", "the header")
  H.has(tb, "spawner", "the function that spawned it")
  H.has(tb, "debug_test.lua", "its file")
  task.debug{creation_traceback = false}
  H.eq(spawner():info().traceback, nil, "off again: new tasks keep none")
  H.eq(t:info().traceback, tb, "what was kept stays")
  for _, x in ipairs(task.list()) do x:cancel() end
end)

H.case("profile_measures_time_per_timing_and_runs_are_always_counted", function()
  local s0 = task.stats()
  H.frames(2)
  local s1 = task.stats()
  H.eq(s1.timings.Update.runs - s0.timings.Update.runs, 2)
  H.eq(s1.timings.Update.time, s0.timings.Update.time, "profiling off: no time")
  task.debug{profile = true}
  local h = task.on("PreUpdate", function()
    local x = 0
    for i = 1, 20000 do x = x + i end
  end)
  H.frames(3)
  local s2 = task.stats()
  h:remove()
  H.truthy(s2.timings.PreUpdate.time > s1.timings.PreUpdate.time, "PreUpdate spent time")
  H.eq(s2.timings.PreUpdate.runs - s1.timings.PreUpdate.runs, 3)
  task.debug{profile = false}
  H.eq(task.debug().profile, false)
  H.raises(function() task.debug(1) end, "table expected")
end)

H.run()
