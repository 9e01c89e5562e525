-- Ctrl-C stops a loop inside an xpcall body: the interrupt's error goes
-- through the message handler (Lua runs it with hooks off; a finite one
-- returns) and the task is cancelled; its to-be-closed variable runs.
-- xpcall is the stock one: results, and debug.traceback as a handler.
local r <close> = setmetatable({}, {__close = function() print("closed") end})
print(xpcall(function(a) return a + 1 end, function(e) return e end, 41))
print(select(2, xpcall(error, debug.traceback, "msg")):match("^msg\nstack traceback:\n%s*%[C%]: in function 'error'") ~= nil)
-- the handler is called right below the error, with no frame between
print(select(2, xpcall(function() local x; return x + 1 end,
                       function() return debug.getinfo(2, "S").what end)))
print("looping")
io.stdout:flush()
local handled = 0
while true do
  xpcall(function() while true do end end, function(e) handled = handled + 1 return e end)
end
