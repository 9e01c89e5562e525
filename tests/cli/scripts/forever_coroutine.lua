-- Ctrl-C must stop a loop inside a plain coroutine: it runs on a thread of
-- its own, which the interrupt did not reach (regression: only the killing
-- second Ctrl-C ended it). The task is cancelled (not failed), and its
-- to-be-closed variable runs.
local r <close> = setmetatable({}, {__close = function() print("closed") end})
print("looping")
io.stdout:flush()
local which = ...
if which == "resume" then
  while true do coroutine.resume(coroutine.create(function() while true do end end)) end
else
  coroutine.wrap(function() while true do end end)()
end
