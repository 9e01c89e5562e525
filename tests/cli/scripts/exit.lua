-- task.exit(3) unwinds main at once, cancels the other tasks (their
-- to-be-closed variables run) and ends the run with status 3.
task.spawn(function()
  local guard <close> = setmetatable({}, {__close = function()
    print("other closed")
  end})
  task.delay(10)
  print("not reached: other")
end)
task.yield()
print("exiting")
task.exit(3)
print("not reached: main")
