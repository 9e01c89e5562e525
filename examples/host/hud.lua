-- hud.lua: a second Lua state on the same loop (one per mod, or one for the
-- UI, as a host likes). It cannot see the game's tasks; it reads the world
-- through `host` and writes the status line the host renders. Its periodic
-- callback runs at PostLateUpdate, after the camera moved and before the
-- host renders. It never ends by itself: the host closes this state.
local lines = 0
task.every(0.25, function()
  local x, y = host.unit()
  lines = lines + 1
  host.status(("t=%5.2fs  unit at (%2d,%d)  jobs running %d  [hud update %d]"):format(
    task.time(), math.floor(x + 0.5), math.floor(y + 0.5), host.busy(), lines))
end, {timing = "PostLateUpdate"})
