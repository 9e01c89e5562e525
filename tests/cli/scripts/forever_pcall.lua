-- Ctrl-C must stop a runaway loop even when a pcall catches the interrupt
-- (regression: pcall swallowed it and a second Ctrl-C was needed), and the
-- task's to-be-closed variable must still run.
local r <close> = setmetatable({}, {__close = function() print("closed") end})
print("looping")
io.stdout:flush()
while true do pcall(function() while true do end end) end
