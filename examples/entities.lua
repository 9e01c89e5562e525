-- entities.lua: 10,000 entities moved by the custom update layer, under a
-- frame budget. It shows the intended use of task.on: instead of 10,000
-- tasks that each yield every frame, 10,000 plain functions registered at
-- one timing, which the scheduler calls from one C loop.
--
--   task.on("Update", fn)          one callback per entity, fn(dt) each frame
--   task.set_budget("Update", s)   caps the time one Update run spends on
--                                  callbacks; those left over run first at
--                                  the next run
--   {priority = "high"}            the player's callback: runs first and is
--                                  never deferred by the budget
--   task.every(s, fn, {spread = true, timing = "PreUpdate"})
--                                  AI "thinks", staggered evenly over the
--                                  interval instead of all in one frame
--   task.stats()                   deferred calls and runs over budget
--
-- The run has three phases: 4 frames without a budget (every entity moves
-- every frame), 20 frames with a budget, and 4 frames after the budget is
-- removed. Each line is one frame:
--
--   moved     entity callbacks called at this frame's Update
--   player    calls of the player's callback (always 1)
--   thinks    AI thinks at this frame's PreUpdate
--   deferred  entity calls the budget put off at this frame
--   waited    the longest any entity that moved had waited, in frames
--
-- A budget measures real time (a monotonic clock, also under --fast), so
-- how many callbacks fit in it depends on the machine and changes from run
-- to run: the moved, deferred and waited columns are not repeatable. What
-- holds on every run: the player is called once a frame; moved + deferred
-- is 10,000 in every frame of phase 2; and under --fast the thinks column
-- is the same every time (it depends on the game clock only).
--
-- Run it (well under a second):
--   scripts/run examples/entities.lua
--   scripts/run --fast examples/entities.lua

local function say(fmt, ...)
  print(string.format("[frame %3d  t=%5.2fs] " .. fmt, task.frame(), task.time(), ...))
end

local N = 10000             -- entities
local BUDGET = 0.0005       -- seconds per Update run for their callbacks
local THINK = 0.25          -- seconds between two thinks of one entity
local ARENA = 100.0         -- the world is [0, ARENA) squared, wrapping

---------------------------------------------------------------------------
-- Counters, reset by the report at the end of each frame
---------------------------------------------------------------------------

local moved, player_calls, thinks, waited = 0, 0, 0, 0
local longest_wait = 0      -- over the whole run

---------------------------------------------------------------------------
-- The player: a high priority callback, never deferred
---------------------------------------------------------------------------

local player = {x = ARENA / 2, y = ARENA / 2}

local player_handle = task.on("Update", function(dt)
  player_calls = player_calls + 1
  local a = task.time() * 2
  player.x = ARENA / 2 + 30 * math.cos(a)
  player.y = ARENA / 2 + 30 * math.sin(a)
end, {priority = "high"})

---------------------------------------------------------------------------
-- The entities
---------------------------------------------------------------------------

-- Under a budget an entity's callback may skip frames: the dt argument is
-- this frame's delta, not the time since the entity last moved. So each
-- entity integrates over its own elapsed time, and a deferred entity
-- catches up on its next call instead of falling behind.
local function mover(e)
  return function()
    local now, frame = task.time(), task.frame()
    local dt = now - e.t
    e.t = now
    e.x = (e.x + e.vx * dt) % ARENA
    e.y = (e.y + e.vy * dt) % ARENA
    local wait = frame - e.frame
    e.frame = frame
    if wait > waited then waited = wait end
    moved = moved + 1
  end
end

-- An AI think: steer towards the player. Due every THINK seconds; n is how
-- many intervals came due since the last think (usually 1).
local function thinker(e)
  return function(n)
    thinks = thinks + 1
    local dx, dy = player.x - e.x, player.y - e.y
    local d = math.sqrt(dx * dx + dy * dy) + 1e-9
    e.vx, e.vy = e.speed * dx / d, e.speed * dy / d
  end
end

local handles = {player_handle}
local t0, f0 = task.time(), task.frame()
for i = 1, N do
  -- deterministic positions and speeds: no math.random needed
  local e = {x = (i * 7.31) % ARENA, y = (i * 3.17) % ARENA, vx = 0.0, vy = 0.0,
             speed = 1 + (i % 5), t = t0, frame = f0}
  handles[#handles + 1] = task.on("Update", mover(e))
  handles[#handles + 1] = task.every(THINK, thinker(e), {spread = true, timing = "PreUpdate"})
end

---------------------------------------------------------------------------
-- The report, at LastUpdate: after this frame's thinks and moves
---------------------------------------------------------------------------

local last_deferred = 0

handles[#handles + 1] = task.on("LastUpdate", function()
  local st = task.stats().timings.Update
  local deferred = st.deferred - last_deferred
  last_deferred = st.deferred
  if waited > longest_wait then longest_wait = waited end
  say("moved %5d  player %d  thinks %4d  deferred %5d  waited %d",
    moved, player_calls, thinks, deferred, waited)
  moved, player_calls, thinks, waited = 0, 0, 0, 0
end)

---------------------------------------------------------------------------
-- Main: the three phases, switched at the end of a frame
---------------------------------------------------------------------------

say("%d entities: %d task.on callbacks at Update, %d task.every thinks at PreUpdate",
  N, N, N)
say("phase 1: no budget")
task.delay_frame(4, "LastTimeUpdate")

task.set_budget("Update", BUDGET)
say("phase 2: Update budget %.1f ms (from the next frame's Update on)", BUDGET * 1000)
task.delay_frame(20, "LastTimeUpdate")

local st = task.stats().timings.Update
say("phase 2 done: %d calls deferred in %d runs over budget; longest wait %d frames",
  st.deferred, st.budget_exceeded, longest_wait)
say("  (the guarantee: with %d callbacks under a budget, each one runs at least", N)
say("   once in every %d runs of Update, however small the budget)", N)
task.set_budget("Update", nil)
say("phase 3: no budget again (the deferred order is forgotten, all run)")
task.delay_frame(4, "LastTimeUpdate")

for _, h in ipairs(handles) do h:remove() end
say("removed %d callbacks; %d left, so the run ends", #handles, task.stats().callbacks)
