-- boss_fight.lua: a boss fight with a pause menu, on groups and a signal.
--
--   the game       a group: everything the fight runs is a member of it
--                  (task.group), so one g:pause() stops all of it, and
--                  waits on the game's clock (game:delay) stand still
--   the boss       a group inside the game's: its brain, its aura and its
--                  volleys; when the boss dies, boss:cancel() ends all of
--                  it in one call (its to-be-closed variables run)
--   damage taken   a signal (task.signal): the HUD, the boss's death check
--                  and the combat log connect to it, a hint task awaits
--                  it with a timeout; the hero fires it
--   the pause menu a plain task outside the game's group: it pauses the
--                  game and fades in and out on the unscaled clock, which
--                  a pause does not stop
--
-- Run it in real time (about 3 seconds):
--   scripts/run examples/boss_fight.lua
-- or with virtual time, instantly and with the same output on every run:
--   scripts/run --fast examples/boss_fight.lua

local game = task.group{name = "game"}
local boss = task.group{name = "boss", parent = game}
local damage_taken = task.signal() -- (who, amount, hp left)

-- Game time (stops while paused) and real time since the start.
local function say(fmt, ...)
  print(string.format("[game %4.2f  real %4.2f] " .. fmt, game:time(), task.time("unscaled"), ...))
end

---------------------------------------------------------------------------
-- Listeners of "damage taken"
---------------------------------------------------------------------------

-- The HUD: a handler is a plain call, in the order of connection.
local hud <close> = damage_taken:connect(function(who, amount, hp)
  say("hud: %s takes %d, %d left", who, amount, hp)
end)

-- The boss dies at 0 hp: its group is cancelled from the handler.
local boss_hp = 40
damage_taken:connect(function(who, _, hp)
  if who == "boss" and hp <= 0 then
    say("the boss falls")
    local n = boss:cancel()
    say("boss group cancelled: %d task(s) ended", n)
  end
end)

-- The first hit only (opts.once), for the combat log.
damage_taken:connect(function(who) say("log: first blood on the %s", who) end, {once = true})

-- A tutorial hint: a task awaits the signal, with a timeout (s:wait).
game:spawn(function()
  local ok, err = pcall(damage_taken.wait, damage_taken, 0.25)
  if not ok and task.is_timeout(err) then say("hint: press X to attack") end
  local who, amount = damage_taken:wait()
  say("hint: well done, %d damage to the %s", amount, who)
end)

---------------------------------------------------------------------------
-- The boss: everything it runs is a member of its group
---------------------------------------------------------------------------

boss:spawn(function()
  local aura <close> = setmetatable({}, {__close = function(_, err)
    say("boss: the aura fades (%s)", task.is_cancelled(err) and "cancelled" or "ended")
  end})
  boss:every(0.75, function() say("boss: a volley of fire") end) -- on the boss's clock
  while true do
    boss:delay(1)
    say("boss: roars")
  end
end)

---------------------------------------------------------------------------
-- The hero: a member of the game, hits every 0.4 s of game time
---------------------------------------------------------------------------

game:spawn(function()
  while boss_hp > 0 do
    game:delay(0.4)
    boss_hp = boss_hp - 10
    damage_taken:fire("boss", 10, boss_hp)
  end
  say("hero: victory pose")
end)

---------------------------------------------------------------------------
-- The pause menu: outside the game's group, on the unscaled clock
---------------------------------------------------------------------------

local menu = task.spawn(function()
  task.delay(0.9, "Update", "unscaled")
  game:pause()
  say("menu: open, game paused")
  for alpha = 25, 100, 25 do -- the menu's tween runs while the game is paused
    task.delay(0.1, "Update", "unscaled")
    say("menu: fade in %d%%", alpha)
  end
  task.delay(0.5, "Update", "unscaled")
  game:resume()
  say("menu: closed, game resumed")
end)

---------------------------------------------------------------------------
-- The main chunk is a task: it awaits the end of the fight
---------------------------------------------------------------------------

game:wait() -- every member of the game (and of the boss's group) has ended
task.await(menu)
say("fight over: boss group %s, hp %d", boss:cancelled() and "cancelled" or "alive", boss_hp)
damage_taken:destroy()
