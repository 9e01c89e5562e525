-- task.exit() after a reported error ends with 1; task.exit(code) with code.
task.spawn(function() error("reported") end)
task.yield()
local code = ...
if code then task.exit(tonumber(code)) else task.exit() end
