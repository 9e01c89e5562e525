-- Yields forever; --frames, Ctrl-C or task.exit must end it. Cancellation
-- runs the to-be-closed variables of main and of the child, in creation order.
local guard <close> = setmetatable({}, {__close = function(_, err)
  print("main closed", task.is_cancelled(err), task.frame())
end})
task.spawn(function()
  local child <close> = setmetatable({}, {__close = function(_, err)
    print("child closed", task.is_cancelled(err))
  end})
  while true do task.yield() end
end)
print("started")
io.stdout:flush()
while true do task.yield() end
