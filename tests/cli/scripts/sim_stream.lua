-- sim_stream.lua: a simulation run from `lunaloop run --sim-tick-rate`
-- (task.sim), for cli_test.sh: seeded inputs (math.random under --seed,
-- drawn before the first tick), a registered world, a generator in the
-- snapshot, a rollback of 5 ticks every 20 frames, and one line per tick
-- simulated for the first time: "tick <n> <checksum>". With "bad" as the
-- first argument a tick callback keeps a counter in an upvalue, which
-- the sync-test (--sim-check) reports.
local sim = assert(task.sim, "no task.sim: run with --sim-tick-rate")
local bad = ... == "bad"
local inputs = {}
for i = 1, 400 do inputs[i] = math.random(-2, 2) end
local world = sim.state("world", {ships = {}})
for i = 1, 8 do world.ships[i] = {x = i * 10, v = 0} end
local rng = sim.random(1234)
local hidden = 0
sim.on_tick(function(t)
  local input = inputs[t.tick] or 0
  for i, s in ipairs(world.ships) do
    s.v = s.v + input * 0.5 + (rng:float() - 0.5)
    s.x = s.x + s.v * t.dt
    if bad and i == 2 then hidden = hidden + 1; s.hits = hidden end
  end
end)
task.spawn(function()
  while sim.tick() < 100 do
    local n = task.wait_tick(1)
    print(string.format("tick %d %016x", n, sim.checksum(n)))
  end
  task.exit()
end)
task.spawn(function()
  while true do
    task.delay_frame(20)
    local back = sim.tick() - 5
    sim.resimulate(back)
  end
end)
