-- hello.lua: a first look at lunaloop. Run it with
--   scripts/run examples/hello.lua
-- The main chunk is itself a task, so it can await at top level.

local function say(fmt, ...)
  print(string.format("[frame %3d  t=%5.2fs] " .. fmt, task.frame(), task.time(), ...))
end

say("hello from the main task (before the first frame)")

-- A task that wakes at three different timings of the same frame.
task.spawn(function()
  task.yield("EarlyUpdate");    say("EarlyUpdate: read input here")
  task.yield("Update");         say("Update: game logic, same frame")
  task.yield("PostLateUpdate"); say("PostLateUpdate: camera follows, same frame")
end)

-- A per-tick callback on the physics timing, removed after five fixed steps.
local steps = 0
local physics
physics = task.on("FixedUpdate", function(dt)
  steps = steps + 1
  if steps == 5 then
    say("FixedUpdate ran 5 fixed steps of %.3fs each", dt)
    physics:remove()
  end
end)

-- Tasks can wait for each other; errors come back through await.
local loader = task.spawn(function()
  task.delay(0.25)
  return "level-1", 42
end)
local name, enemies = task.await(loader)
say("loaded %s with %d enemies after a 0.25 s delay", name, enemies)

-- Wait on a condition, checked once per frame at Update.
local hp = 3
task.spawn(function()
  while hp > 0 do task.delay(0.1); hp = hp - 1 end
end)
task.wait_until(function() return hp == 0 end)
say("the enemy is down (wait_until saw hp == 0)")

-- Cancellation unwinds a task; its to-be-closed variables see why.
local music = task.spawn(function()
  local track <close> = setmetatable({}, {__close = function(_, err)
    say("music stops: %s", task.is_cancelled(err) and "cancelled" or tostring(err))
  end})
  while true do task.delay(1) end
end)
task.delay_frame(2)
music:cancel()

say("goodbye: nothing is left alive, so `lunaloop run` exits 0")
