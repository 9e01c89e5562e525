-- The first task.exit decides the exit status, even when a task cancelled
-- after it calls task.exit again from a __close handler.
task.spawn(function()
  local r <close> = setmetatable({}, {__close = function() task.exit(11) end})
  task.delay(100)
end)
task.exit(12)
