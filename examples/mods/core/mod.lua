-- core: a small, well-behaved game. It plays three waves of enemies, tells
-- the other mods about the score over the bus, and ends by itself.
local waves = require "waves"

local score = 0

-- Hot reload: the score survives a reload of this mod (edit this file while
-- `lunaloop mods examples/mods` runs).
mods.on_unload(function() return {score = score} end)
mods.on_load(function(saved)
  score = saved.score
  print("reloaded with score " .. score)
end)

-- Anyone may ask for the score.
mods.subscribe("core.query", function(_, _, from)
  mods.send("core.score", {score = score, to = from})
end)

print("core " .. mods.version .. " starts at frame " .. task.frame())
for n = 1, 3 do
  local enemies = waves.make(n)
  mods.send("core.wave", {wave = n, enemies = enemies})
  -- Each enemy falls after a little while; the wave ends when all fell.
  local fights = {}
  for i, e in ipairs(enemies) do
    fights[i] = function()
      task.delay(0.1 * i)
      score = score + e.hp
      mods.send("core.score", {score = score})
    end
  end
  task.when_all(table.unpack(fights))
  print(("wave %d cleared, score %d"):format(n, score))
  task.delay(0.5)
end
mods.send("core.over", {score = score})
print("game over, final score " .. score)
