-- netcode.lua: one game, two roles (ROLE is "server" or "client"; the host,
-- netcode.c, runs one state of each on its own loop and gives each `net`:
-- net.send(bytes), net.poll() -> {bytes...}, through a lossy, jittery link).
--
-- The simulation (task.sim, 50 ticks a second): a ship that thrusts, turns
-- and fires from the client's inputs, and its shots, all in one registered
-- table, so every tick is a snapshot. The server simulates with the inputs
-- that reached it, and gusts of wind only it knows of, and sends a snapshot
-- every 3 ticks; the client runs 8
-- ticks ahead of the server with its own inputs (prediction), and when a
-- snapshot arrives compares it with its own prediction of that tick: the
-- same checksum confirms it, another one means a rollback (load the
-- server's tick, re-simulate to the present). The correction is smoothed
-- (an offset that decays), and the ship is drawn with the sim's alpha (a
-- partial tick, undone before the next full one). The projectile effect is
-- a sim.effect: it runs once however often the tick is re-simulated.
local sim = task.sim
local is_server = ROLE == "server"
local LEAD, SNAPSHOT_EVERY, LOG_EVERY = 8, 3, 50
local frames = FRAMES or 600
local format, pack, unpack = string.format, string.pack, string.unpack
local cos, sin, sqrt, floor = math.cos, math.sin, math.sqrt, math.floor

local function log(fmt, ...)
  print(format("[%s frame %3d] " .. fmt, ROLE, task.frame(), ...))
end

-- The client's controls for each tick: a scripted pilot (the same inputs
-- every run; the network's weather is what --seed changes).
local function input_at(tick)
  local phase = tick % 200
  return {
    thrust = phase < 120 and 1 or 0,
    turn = (phase >= 60 and phase < 100) and 1 or ((phase >= 150 and phase < 180) and -1 or 0),
    fire = tick % 75 == 40 and 1 or 0,
  }
end

-- ---- the simulated state and its tick ------------------------------------------

local world = sim.state("world", {
  ship = {x = 0.0, y = 0.0, vx = 0.0, vy = 0.0, angle = 0.0},
  shots = {},
  fired = 0,
})

local inputs = {}       -- [tick] = input: data outside the snapshot, fixed per tick
local last_input = {thrust = 0, turn = 0, fire = 0}
local predicted = {}    -- client: [tick] = {x, y}, its latest prediction of that tick
local fire_sims = 0     -- client: simulations of firing ticks (for the summary)
local effects_run = 0

-- Gusts of wind that only the server knows of (its own random numbers,
-- from the host's --seed): what a client cannot predict, like another
-- player's push. Each one the client learns of from a snapshot, a rollback.
local gusts = {}
if is_server then
  math.randomseed(SEED or 1)
  for tick = 1, 4000 do
    if math.random() < 0.03 then gusts[tick] = {math.random() - 0.5, math.random() - 0.5} end
  end
end

local function input_for(tick)
  local inp = inputs[tick]
  if inp then last_input = inp; return inp end
  return last_input -- the server repeats the last input it has
end

sim.on_tick(function(t)
  local inp = input_for(t.tick)
  local s = world.ship
  s.angle = s.angle + inp.turn * 0.05
  s.vx = (s.vx + cos(s.angle) * 3.0 * inp.thrust * t.dt) * 0.995
  s.vy = (s.vy + sin(s.angle) * 3.0 * inp.thrust * t.dt) * 0.995
  local g = gusts[t.tick]
  if g then s.vx, s.vy = s.vx + g[1], s.vy + g[2] end
  s.x, s.y = s.x + s.vx * t.dt, s.y + s.vy * t.dt
  if inp.fire == 1 then
    world.fired = world.fired + 1
    local id = world.fired
    world.shots[id] = {x = s.x, y = s.y, vx = cos(s.angle) * 8, vy = sin(s.angle) * 8,
      life = sim.timer(40)}
    if not is_server and not t.partial then fire_sims = fire_sims + 1 end
    -- once per (tick, key): not again when the tick is re-simulated
    sim.effect("shot" .. id, function(tick)
      effects_run = effects_run + 1
      log("tick %d: projectile effect for shot #%d (%s)", tick, id,
        is_server and "authoritative" or "predicted")
    end, t.tick)
  end
  for id, shot in pairs(world.shots) do
    shot.x, shot.y = shot.x + shot.vx * t.dt, shot.y + shot.vy * t.dt
    if shot.life:expired() then world.shots[id] = nil end
  end
  if not is_server and not t.partial then predicted[t.tick] = {s.x, s.y} end
end)

-- ---- the server -----------------------------------------------------------------

if is_server then
  local late = 0
  task.spawn(function() -- inputs in: each packet holds the client's last 4 ticks
    while true do
      task.yield("EarlyUpdate")
      for _, p in ipairs(net.poll()) do
        local pos = 1
        while pos <= #p do
          local tick, thrust, turn, fire
          tick, thrust, turn, fire, pos = unpack("<jbbb", p, pos)
          if tick > sim.tick() then
            inputs[tick] = inputs[tick] or {thrust = thrust, turn = turn, fire = fire}
          elseif not inputs[tick] then
            late = late + 1
          end
        end
      end
    end
  end)
  task.spawn(function() -- snapshots out, every 3 ticks
    while true do
      local tick = task.wait_tick(1)
      if tick % SNAPSHOT_EVERY == 0 then net.send(assert(sim.export(tick))) end
      if tick % LOG_EVERY == 0 then
        log("tick %4d  ship (%6.2f, %6.2f)  inputs late or lost %d", tick, world.ship.x,
          world.ship.y, late)
      end
    end
  end)
  return
end

-- ---- the client -----------------------------------------------------------------

local rollbacks, frame_rollbacks, confirmed_ok = 0, 0, 0
local max_error, last_error = 0.0, 0.0
local offset = {0.0, 0.0}   -- the smoothed correction still to hide
local drawn = {0.0, 0.0}
local sent = 0

for tick = 1, 4000 do inputs[tick] = input_at(tick) end

-- Inputs out after each new tick, the last 4 ticks in every packet (one
-- lost packet costs nothing).
local function send_inputs(upto)
  while sent < upto do
    sent = sent + 1
    local parts = {}
    for tick = math.max(1, sent - 3), sent do
      local inp = inputs[tick]
      parts[#parts + 1] = pack("<jbbb", tick, inp.thrust, inp.turn, inp.fire)
    end
    net.send(table.concat(parts))
  end
end

sim.step(LEAD) -- the client runs ahead of the server by LEAD ticks
send_inputs(sim.tick())

task.spawn(function()
  while true do send_inputs(task.wait_tick(1)) end
end)

-- Snapshots in, between ticks (EarlyUpdate): confirm or roll back.
task.spawn(function()
  while true do
    task.yield("EarlyUpdate")
    frame_rollbacks = 0
    for _, bytes in ipairs(net.poll()) do
      local _, tick = unpack("=c13j", bytes)
      local mine = tick > sim.confirmed() and sim.checksum(tick)
      if mine then -- older snapshots (reordered by jitter) are skipped
        local head = sim.tick()
        local before = predicted[head]
        local _, theirs = assert(sim.import(bytes))
        if theirs ~= mine then
          assert(sim.load(tick))
          local p = predicted[tick]
          last_error = sqrt((p[1] - world.ship.x) ^ 2 + (p[2] - world.ship.y) ^ 2)
          if last_error > max_error then max_error = last_error end
          local ran = sim.resimulate()
          local after = predicted[head]
          log("snapshot of tick %d differs from the prediction by %.3f: rolled back, %d ticks " ..
            "re-simulated, correction (%.3f, %.3f) smoothed over the next frames", tick,
            last_error, ran, before[1] - after[1], before[2] - after[2])
          offset[1] = offset[1] + before[1] - after[1]
          offset[2] = offset[2] + before[2] - after[2]
          rollbacks, frame_rollbacks = rollbacks + 1, frame_rollbacks + 1
        else
          confirmed_ok = confirmed_ok + 1
        end
        sim.confirm(tick)
      end
    end
  end
end)

-- Drawing (PreLateUpdate): the state a partial tick of alpha ahead, plus the
-- correction offset, which decays by a fifth a frame.
task.spawn(function()
  while true do
    task.yield("PreLateUpdate")
    local alpha = sim.alpha()
    sim.partial() -- false when alpha is 0: the state is the tick's own
    drawn[1], drawn[2] = world.ship.x + offset[1], world.ship.y + offset[2]
    offset[1], offset[2] = offset[1] * 0.8, offset[2] * 0.8
    local f = task.frame()
    if f % LOG_EVERY == 0 then
      log("tick %4d (confirmed %4d)  rollbacks %2d (%d this frame)  prediction error %.3f  " ..
        "drawn (%6.2f, %6.2f) at alpha %.2f", sim.tick(), sim.confirmed(), rollbacks,
        frame_rollbacks, last_error, drawn[1], drawn[2], alpha)
    end
    if f == frames then
      local st = sim.stats()
      log("summary: %d ticks predicted, %d snapshots confirmed as predicted, %d rollbacks " ..
        "(%d ticks re-simulated), largest prediction error %.3f; firing ticks simulated %d " ..
        "times, projectile effects run %d (one per shot)", sim.newest(), confirmed_ok,
        rollbacks, st.resimulated_ticks, max_error, fire_sims, effects_run)
    end
  end
end)
