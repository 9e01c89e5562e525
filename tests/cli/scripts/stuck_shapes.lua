-- Stuck runs through the composition calls: the awaiting task is reported
-- at the line of its call (not inside the module's own Lua code), the
-- call named as what it waits on.
local shape = ...
local ch = task.channel()
if shape == "scope" then
  task.scope(function(s)
    s:spawn(function()
      local v = ch:receive()
      return v
    end)
  end)
elseif shape == "when_all" then
  local ok = pcall(task.when_all, function()
    local v = ch:receive()
    return v
  end)
  print("not reached", ok)
elseif shape == "send" then
  local full = task.channel(1)
  full:send(1)
  full:send(2)
elseif shape == "paused_group" then
  -- nothing is left that could resume the group
  local g = task.group{paused = true}
  g:delay(1)
end
