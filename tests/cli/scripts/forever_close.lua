-- Ctrl-C stops a __close handler that loops while its failed task unwinds
-- (it ran where the interrupt could not reach it: only the killing second
-- Ctrl-C ended it), also when it catches the interrupt with pcall; the
-- task's other handlers still run, and the task's own error is reported,
-- not the cancellation.
local t = task.spawn(function()
  local r1 <close> = setmetatable({}, {__close = function() print("r1 closed") end})
  local r2 <close> = setmetatable({}, {__close = function()
    print("r2 looping")
    io.stdout:flush()
    while true do pcall(function() while true do end end) end
  end})
  task.yield()
  error("tfail", 0)
end)
task.delay(100)
