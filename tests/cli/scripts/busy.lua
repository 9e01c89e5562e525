-- Never yields: only luna_lua_interrupt (from the SIGINT handler) can stop it.
local guard <close> = setmetatable({}, {__close = function()
  print("busy closed")
end})
print("started")
io.stdout:flush()
while true do end
