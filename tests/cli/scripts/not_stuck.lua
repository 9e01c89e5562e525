-- Runs in which every task waits on another task or a channel for a while,
-- but something else can still wake one: a delay, a wait_until predicate,
-- a task.on or task.every callback, a frame wait, a running group's clock.
-- None of them is stuck; each ends by itself with status 0.
local ch = task.channel()
local receiver = task.spawn(function() return ch:receive() end)
local shape = ...
if shape == "delay" then
  task.spawn(function() task.delay(0.5); ch:send("by a delay") end)
elseif shape == "predicate" then
  local start = task.frame()
  task.spawn(function()
    task.wait_until(function() return task.frame() >= start + 20 end)
    ch:send("by a predicate")
  end)
elseif shape == "on" then
  local h
  h = task.on(function()
    if task.frame() == 20 then h:remove(); ch:send("by a callback") end
  end)
elseif shape == "every" then
  local h
  h = task.every(0.25, function() h:remove(); ch:send("by task.every") end)
elseif shape == "frames" then
  task.spawn(function() task.delay_frame(30); ch:send("by a frame wait") end)
elseif shape == "group" then
  -- a group's clock runs (slowly): its delay is progress; paused for a
  -- while by a callback, which is progress too
  local g = task.group{time_scale = 0.5}
  g:spawn(function() g:delay(0.25); ch:send("by a group's delay") end)
  local h
  h = task.on(function()
    if task.frame() == 3 then g:pause() elseif task.frame() == 10 then g:resume(); h:remove() end
  end)
end
print(task.await(receiver), task.frame() > 0)
