-- game.lua: the game script of examples/host (see host.c and
-- docs/embedding.md). It runs as the task "main" of the game's Lua state;
-- the host gives it `task` (lunaloop) and `host` (its own functions).
-- host.checksum and host.find_path return promises that the host's worker
-- threads complete; task.await turns them into values or errors.

-- 0. The brain of an enemy: the host spawns it into the enemy's own group
-- (luna_lua_group_spawn) and cancels that group when the enemy is
-- destroyed. Everything the brain starts joins the group; its cleanup is
-- a to-be-closed variable, so it runs however the brain ends.
function enemy_brain(name, g)
  local cleanup <close> = setmetatable({}, {__close = function()
    print(("[game] frame %d: %s's brain stopped, its cleanup ran"):format(task.frame(), name))
  end})
  g:every(0.25, function() host.enemy_tick(name) end) -- a callback of the group
  task.spawn(function() while true do g:delay(1) end end) -- joins the group
  while true do g:delay(0.5) end
end

print(("[game] frame %d: asking %d workers for checksums"):format(task.frame(), host.workers))

-- 1. Several jobs at once: checksum the files of this example in parallel.
local names = {"game.lua", "hud.lua", "host.c", "work.c"}
local jobs = {}
for i, name in ipairs(names) do jobs[i] = host.checksum(host.dir .. name) end
local sums = {task.when_all(table.unpack(jobs))}
for i, name in ipairs(names) do
  assert(sums[i].bytes > 0)
  print(("[game] %-8s %6d bytes  crc32 %08x"):format(name, sums[i].bytes, sums[i].crc))
end

-- 2. A job that fails: its error comes back as a Lua error at the await.
local ok, err = pcall(task.await, host.checksum(host.dir .. "missing.dat"))
assert(not ok and err:find("No such file", 1, true), err)
print("[game] as expected, " .. err)

-- 3. Two searches at once: a huge one (slow on purpose) and the level's
-- route. The level's route wins; the huge search is cancelled, which tells
-- the host (its cancel callback runs) and stops the worker early.
local huge = host.find_path_huge()
local level = host.find_path(host.start, host.goal)
local first = task.when_any(level, huge)
assert(first == 1, "the level's route should come first")
local route = task.await(level)
huge:cancel()
assert(huge:status() == "cancelled")
print(("[game] frame %d: route of %d steps; the huge search is %s"):format(
  task.frame(), #route - 1, huge:status()))

-- A promise given to a combinator is never cancelled by it: with a
-- timeout that expires, the promise stays pending until cancelled here.
local slow = host.find_path_huge()
local timed_out = select(2, pcall(task.timeout, 0.05, slow))
assert(task.is_timeout(timed_out) and slow:status() == "pending")
slow:cancel()

-- 4. Input and physics: wait for the player, then walk the route. The
-- host moves the unit at fixed steps; the HUD state shows where it is.
print(("[game] frame %d: press space to walk"):format(task.frame()))
task.wait_until(function() return host.key("space") end)
local t0 = task.time()
print(("[game] frame %d: space pressed, walking"):format(task.frame()))
host.walk(route)
host.snapshot("(start)")
task.wait_until(host.arrived)
host.snapshot("(arrived)")
print(("[game] frame %d: arrived after %.2f s of game time"):format(task.frame(), task.time() - t0))

-- Done: once the game has no task left, the host shuts down.
task.next_frame()
print(("[game] frame %d: bye (%d jobs still with the workers)"):format(task.frame(), host.busy()))
