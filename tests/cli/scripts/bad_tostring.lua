-- Error values whose __tostring raises or returns a non-string: the report
-- must fall back to a description, never abort the process (regression:
-- "PANIC: unprotected error in call to Lua API", exit 134).
local raising = setmetatable({}, {__tostring = function() error("tostring fails") end})
local not_a_string = setmetatable({}, {__tostring = function() return {} end})
task.spawn(function() error(raising) end)          -- fails before its first await
print("spawner still running")
task.spawn(function() task.yield(); error(not_a_string) end)
task.on_error(function(err) error(raising) end)   -- a handler that fails the same way
task.spawn(function() task.yield(); error("plain") end)
task.delay_frame(3)
task.on_error(nil)
print("main done")
