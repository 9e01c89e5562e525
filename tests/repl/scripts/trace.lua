-- trace.lua: a run with a known set of resumes, for trace_test.py.
-- "fixed": starts at Update, then resumes at 3 FixedUpdate runs (4 slices).
-- "late":  starts at Update, then at LastPostLateUpdate two frames later,
--          then at the next Initialization (3 slices).
-- main:    one resume, outside any timing (the host starts it).
local fixed = task.defer(function()
  for _ = 1, 3 do task.yield("FixedUpdate") end
end)
fixed.name = "fixed"
local late = task.defer(function()
  task.delay_frame(2, "LastPostLateUpdate")
  task.yield("Initialization")
end)
late.name = "late"
