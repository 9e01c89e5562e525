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
-- "waiter": starts at Update and awaits "late", whose end wakes it inside
--           late's last resume: a wake arrow from that slice (on the
--           Initialization track) to waiter's second slice there.
local waiter = task.defer(function() task.await(late) end)
waiter.name = "waiter"
-- "parent": starts at Update and spawns "child" there, which ends at once
--           (one slice each, and a flow arrow from parent to child; the
--           main chunk has one to each task it created).
local parent = task.defer(function()
  task.spawn(function() task.current().name = "child" end)
end)
parent.name = "parent"
-- Three Update callbacks under a 1 ns budget for one frame: the first is
-- called, the other two are put off (one "deferred" event); "remover"
-- takes them away at the next frame's Initialization, before Update.
task.set_budget("Update", 1e-9)
local hs = {}
for i = 1, 3 do hs[i] = task.on("Update", function() end) end
local remover = task.defer(function()
  task.yield("Initialization")
  for _, h in ipairs(hs) do h:remove() end
  task.set_budget("Update", nil)
end)
remover.name = "remover"
-- The collector paced with a budget at LastTimeUpdate, and garbage for it:
-- its work in each frame is a "gc" slice on the collector track.
task.gc{budget = 0.001, stop_auto = true}
for i = 1, 20000 do local _ = {i} end
