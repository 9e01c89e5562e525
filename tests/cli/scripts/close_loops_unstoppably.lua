-- The first stop signal cancels main, whose __close handler then loops in
-- an xpcall message handler (Lua runs it with hooks off, so the interrupt
-- cannot stop it): only the second signal, which kills, ends the process.
local r <close> = setmetatable({}, {__close = function()
  print("closing")
  io.stdout:flush()
  xpcall(error, function() while true do end end)
  print("after the loop")
end})
print("started")
io.stdout:flush()
while true do task.yield() end
