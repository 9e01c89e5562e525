-- Ctrl-C must stop a loop inside an xpcall message handler: Lua runs a
-- handler with hooks off when the error comes from a hook, so the
-- interrupt raised into it could never be raised again (regression: only a
-- second Ctrl-C, which kills, ended it). The task's to-be-closed variable
-- still runs. Outside a stop, xpcall is the stock one.
local r <close> = setmetatable({}, {__close = function() print("closed") end})
print(xpcall(function(a) return a + 1 end, function(e) return e end, 41))
print(select(2, xpcall(error, debug.traceback, "msg")):match("^msg\nstack traceback:\n%s*%[C%]: in function 'error'") ~= nil)
print("looping")
io.stdout:flush()
xpcall(function() error("x") end, function(e) while true do end end)
