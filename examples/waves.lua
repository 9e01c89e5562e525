-- waves.lua: a wave spawner for a small lane-defence game. Enemies walk down
-- a lane towards the base; a turret shoots them while the player holds
-- "fire". It shows how the timings of a frame divide the work:
--
--   EarlyUpdate         sample the input once, before anything reads it
--   FixedUpdate         physics: move every enemy by speed * fixed dt
--   LastFixedUpdate     physics contacts: enemies do not walk through each other
--   Update              game logic: waves, enemies, turret (the default timing)
--   PostLateUpdate      the camera follows the leading enemy
--   LastPostLateUpdate  the HUD, drawn once the camera has moved
--   LastTimeUpdate      end-of-frame bookkeeping (frame statistics)
--
-- and how tasks fit together: enemies spawned on delays, waiting on
-- conditions, a wave task awaited by the main chunk, a wave called off with
-- its enemies cleaned up by to-be-closed variables, and one enemy whose
-- script has a bug: its error is caught around an await and the game goes on.
--
-- Run it in real time (about 6 seconds):
--   scripts/run examples/waves.lua
-- or with virtual time, instantly and with the same output on every run:
--   scripts/run --fast --seed 1 examples/waves.lua

local function say(fmt, ...)
  print(string.format("[frame %3d  t=%5.2fs] " .. fmt, task.frame(), task.time(), ...))
end

---------------------------------------------------------------------------
-- The world
---------------------------------------------------------------------------

local LANE = 4.5        -- metres from the spawn point (x = 0) to the base
local RANGE = 1.5       -- the turret reaches enemies at x >= RANGE
local SPACING = 0.5     -- enemies keep this far apart
local COOLDOWN = 0.2    -- seconds between two turret shots

local world = {
  enemies = {},         -- on the field, in spawn order (the first one leads)
  next_id = 0,
  base_hp = 5,
  score = 0,
  wave = 0,
}

local KINDS = {
  grunt    = {hp = 2, speed = 2.0},
  runner   = {hp = 1, speed = 3.0},
  shielded = {hp = 3, speed = 1.5},
}

local function leading_enemy()
  local best
  for _, e in ipairs(world.enemies) do
    if not best or e.x > best.x then best = e end
  end
  return best
end

-- Puts an enemy on the field. The returned value is meant for a `<close>`
-- variable: when the enemy's task ends, however it ends (returned, failed or
-- cancelled), the body leaves the field and says why.
local function place_body(e)
  table.insert(world.enemies, e)
  return setmetatable({}, {__close = function(_, err)
    for i, other in ipairs(world.enemies) do
      if other == e then table.remove(world.enemies, i) break end
    end
    if err == nil then return end
    if task.is_cancelled(err) then
      say("  enemy #%d leaves the field (recalled at x=%.2f)", e.id, e.x)
    else
      say("  enemy #%d leaves the field (its script failed)", e.id)
    end
  end})
end

---------------------------------------------------------------------------
-- Input, sampled once per frame at EarlyUpdate
---------------------------------------------------------------------------

-- A recorded input tape, by unscaled time in seconds: the player holds
-- "fire" during these intervals and presses "retreat" once.
local FIRE = {{0.7, 1.05}, {2.05, 4.2}, {4.5, 7.0}}
local RETREAT_AT = 6.3

local input = {fire = false, retreat = false}

local function sample_input()
  local now = task.time("unscaled")
  input.fire = false
  for _, span in ipairs(FIRE) do
    if now >= span[1] and now < span[2] then input.fire = true end
  end
  input.retreat = now >= RETREAT_AT
end

---------------------------------------------------------------------------
-- Physics, once per fixed step
---------------------------------------------------------------------------

local stats = {frames = 0, fixed_steps = 0, max_on_field = 0}

local function integrate(dt)          -- FixedUpdate: dt is the fixed step
  stats.fixed_steps = stats.fixed_steps + 1
  for _, e in ipairs(world.enemies) do
    e.x = math.min(LANE, e.x + e.speed * dt)
  end
end

local function resolve_contacts()     -- LastFixedUpdate: after every enemy moved
  for i = 2, #world.enemies do
    local ahead, e = world.enemies[i - 1], world.enemies[i]
    if e.x > ahead.x - SPACING and ahead.x < LANE then e.x = ahead.x - SPACING end
  end
end

---------------------------------------------------------------------------
-- Enemies
---------------------------------------------------------------------------

local function enemy_ai(e)
  local body <close> = place_body(e)
  say("  enemy #%d (%s, %d hp, %.1f m/s) enters the lane", e.id, e.kind, e.hp, e.speed)

  if e.kind == "shielded" then
    -- Raise the shield again when badly hurt. The bug: no shield object was
    -- ever made for this enemy, so this line raises an error.
    task.wait_until(function() return e.hp <= 1 or e.x >= LANE end)
    if e.hp <= 1 then e.shield:recharge() end
  end

  -- Wait until shot down or at the base. The predicate is checked at each
  -- Update from the next one on, after the physics steps of that frame.
  task.wait_until(function() return e.hp <= 0 or e.x >= LANE end)
  if e.hp <= 0 then
    world.score = world.score + 10
    say("  enemy #%d destroyed at x=%.2f (+10, score %d)", e.id, e.x, world.score)
    return "destroyed"
  end
  world.base_hp = world.base_hp - 1
  say("  enemy #%d reaches the base: base hp %d", e.id, world.base_hp)
  return "reached"
end

-- A watcher awaits one enemy and turns its outcome into a word. Because it
-- awaits the enemy from the moment the enemy exists, an error in the enemy
-- goes to this pcall instead of the error handler: it is not reported, and
-- the run still exits 0.
local function watch(enemy_task, e)
  return task.spawn(function()
    local ok, outcome = pcall(task.await, enemy_task)
    if ok then return outcome end
    if task.is_cancelled(outcome) then return "recalled" end
    say("  enemy #%d crashed: %s", e.id, tostring(outcome))
    say("  (caught around task.await: the game goes on)")
    return "crashed"
  end)
end

---------------------------------------------------------------------------
-- Waves
---------------------------------------------------------------------------

local WAVES = {
  {gap = 0.4, "grunt", "runner", "grunt"},
  {gap = 0.3, "runner", "shielded", "grunt"},
  {gap = 0.4, "grunt", "runner", "grunt", "grunt"},
}

local function run_wave(n, spec)
  local live = {}                     -- enemy tasks of this wave
  -- If the wave is called off, recall the enemies it sent.
  local recall <close> = setmetatable({}, {__close = function(_, err)
    if task.is_cancelled(err) then
      say("wave %d called off: recalling its enemies", n)
      for _, t in ipairs(live) do t:cancel() end
    end
  end})

  world.wave = n
  say("wave %d: %d enemies, one every %.1f s", n, #spec, spec.gap)
  local watchers = {}
  for i, kind in ipairs(spec) do
    if i > 1 then task.delay(spec.gap) end
    world.next_id = world.next_id + 1
    local k = KINDS[kind]
    local e = {id = world.next_id, kind = kind, x = 0.0, hp = k.hp,
               speed = k.speed + (math.random() - 0.5) * 0.2}
    local t = task.spawn(enemy_ai, e)   -- runs now, until its first await
    t.name = "enemy #" .. e.id
    live[#live + 1] = t
    watchers[#watchers + 1] = watch(t, e)
  end

  local tally = {destroyed = 0, reached = 0, crashed = 0, recalled = 0}
  for _, w in ipairs(watchers) do
    local outcome = task.await(w)
    tally[outcome] = tally[outcome] + 1
  end
  return tally
end

---------------------------------------------------------------------------
-- The turret and the commander: game logic at Update
---------------------------------------------------------------------------

local function turret_ai()
  while true do
    -- input.fire was sampled at this frame's EarlyUpdate.
    task.wait_until(function()
      local e = leading_enemy()
      return input.fire and e ~= nil and e.x >= RANGE and e.hp > 0
    end)
    local e = leading_enemy()
    e.hp = e.hp - 1
    say("turret hits enemy #%d at x=%.2f (hp %d)", e.id, e.x, e.hp)
    task.delay(COOLDOWN)
  end
end

local current_wave

local function commander()
  task.wait_until(function() return input.retreat end)
  say("player presses RETREAT during wave %d", world.wave)
  if current_wave then current_wave:cancel() end
end

---------------------------------------------------------------------------
-- Camera, HUD and bookkeeping
---------------------------------------------------------------------------

local camera = {x = 0.0}
local hud_next = 1.0

local function follow(dt)             -- PostLateUpdate
  local e = leading_enemy()
  local target = e and e.x or 0.0
  camera.x = camera.x + (target - camera.x) * math.min(1, 4 * dt)
end

local function draw_hud()             -- LastPostLateUpdate: the camera has moved
  if task.time("unscaled") < hud_next then return end
  hud_next = hud_next + 1.0
  say("HUD  wave %d | on field %d | base %d | score %d | camera x=%.2f",
    world.wave, #world.enemies, world.base_hp, world.score, camera.x)
end

local function end_of_frame()         -- LastTimeUpdate
  stats.frames = stats.frames + 1
  stats.max_on_field = math.max(stats.max_on_field, #world.enemies)
end

---------------------------------------------------------------------------
-- The game: the main chunk is itself a task
---------------------------------------------------------------------------

say("lane %.1f m, turret range from x=%.1f m, base hp %d", LANE, RANGE, world.base_hp)

-- Per-tick callbacks and helper tasks live as long as the main chunk: the
-- `<close>` variables remove or cancel them when it ends, and then nothing
-- is left alive, so `lunaloop run` exits.
local h_input   <close> = task.on("EarlyUpdate", sample_input)
local h_physics <close> = task.on("FixedUpdate", integrate)
local h_contact <close> = task.on("LastFixedUpdate", resolve_contacts)
local h_camera  <close> = task.on("PostLateUpdate", follow)
local h_hud     <close> = task.on("LastPostLateUpdate", draw_hud)
local h_stats   <close> = task.on("LastTimeUpdate", end_of_frame)
local turret    <close> = task.spawn(turret_ai)
local orders    <close> = task.spawn(commander)

for n, spec in ipairs(WAVES) do
  current_wave = task.spawn(run_wave, n, spec)
  current_wave.name = "wave " .. n
  local ok, result = pcall(task.await, current_wave)
  current_wave = nil
  if ok then
    say("wave %d over: %d destroyed, %d reached the base, %d crashed",
      n, result.destroyed, result.reached, result.crashed)
  elseif task.is_cancelled(result) then
    say("wave %d ended early (cancelled)", n)
  else
    error(result, 0)                  -- a bug in run_wave itself
  end
  if n < #WAVES then task.delay(0.4) end
end

say("game over: score %d, base hp %d (%d frames and %d fixed steps done, at most %d enemies at once)",
  world.score, world.base_hp, stats.frames, stats.fixed_steps, stats.max_on_field)
