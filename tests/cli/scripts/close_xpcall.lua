-- After Ctrl-C, the to-be-closed handlers of the cancelled tasks run with
-- an interrupt still pending: an ordinary error in an xpcall there must
-- get its message handler (review: a guarded xpcall skipped every handler
-- while the interrupt was pending).
local r <close> = setmetatable({}, {__close = function()
  print("close", xpcall(error, function(e) return "handled " .. e end, "cx", 0))
end})
print("waiting")
io.stdout:flush()
task.delay(100)
