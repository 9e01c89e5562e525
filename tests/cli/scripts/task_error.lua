-- A task other than main fails: it is reported, everything else goes on,
-- and the run ends with status 1.
task.spawn(function()
  task.yield()
  error("boom")
end)
task.yield()
task.yield()
print("main still running")
