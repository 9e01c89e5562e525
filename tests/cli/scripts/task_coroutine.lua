-- A task's coroutine driven from the script: resuming it raises at the call
-- (this crashed the program: SIGSEGV), closing it cancels the task.
local co
local t = task.spawn(function()
  co = coroutine.running()
  local c <close> = setmetatable({}, {__close = function(_, e) print("closed:", e) end})
  task.delay(0.1)
  print("not reached")
end)
print(pcall(coroutine.resume, co))
print(t:status())
print(coroutine.close(co), t:status())
