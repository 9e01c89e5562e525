-- A task.on callback keeps the run alive after main has ended; once it
-- removes itself nothing is alive and the run ends.
local n = 0
local handle
handle = task.on("Update", function()
  n = n + 1
  print("tick", task.frame())
  if n == 3 then handle:remove() end
end)
print("main done")
