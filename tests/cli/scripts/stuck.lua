-- A run that can no longer make progress: after a few frames of delay,
-- every task waits on another task or on a channel that nobody will send
-- to. It must be reported (each task, what it waits on, the line of its
-- await) and end with status 3, its to-be-closed variables running, where
-- it used to spin for ever in silence.
local ch = task.channel()
local consumer = task.spawn(function()
  local v = ch:receive()
  print("got", v)
end)
consumer.name = "consumer"
local waiter = task.spawn(function()
  local r = task.await(consumer)
  return r
end)
local guard <close> = setmetatable({}, {__close = function(_, e)
  print("main closed", task.is_cancelled(e))
end})
print("started")
task.delay(0.1)
task.await(waiter)
