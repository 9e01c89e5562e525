-- A failure that nobody awaits when it happens is reported, even if the
-- script takes it later with pcall(task.await, t); t:handled() says it
-- will be taken later. Argument 1 picks the case.
local mode = ...
local t = task.spawn(function() task.yield(); error("late failure", 0) end)
if mode ~= "unmarked" then t:handled() end
task.delay_frame(3)
if mode ~= "never" then
  print("took:", select(2, pcall(t.await, t)))
end
print("end of main")
