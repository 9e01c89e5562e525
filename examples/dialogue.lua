-- dialogue.lua: a conversation with a smuggler at the city gate. It puts
-- the composition tools together:
--
--   task.when_all   load the scene's assets side by side; the first failure
--                   is raised at once and the other loads are cancelled
--   task.scope      the scene: the conversation and the companion run side
--                   by side, and the scene ends when both are done; and
--                   the NPC barks, children of a scope that is cancelled
--                   when the scene ends
--   task.channel    the player's key presses, sent by a simulated input
--                   task; the journal of the player's choices, written by
--                   a slow writer task and closed at the end
--   task.timeout    a timed choice: no answer in time picks the default
--   task.when_any   the companion races a path search against its patience
--
-- Run it in real time (about 6 seconds):
--   scripts/run examples/dialogue.lua
-- or with virtual time, instantly and with the same output on every run:
--   scripts/run --fast --seed 1 examples/dialogue.lua

local function say(fmt, ...)
  print(string.format("[frame %3d  t=%5.2fs] " .. fmt, task.frame(), task.time(), ...))
end

---------------------------------------------------------------------------
-- Loading: when_all
---------------------------------------------------------------------------

-- A load that takes `seconds`; a `<close>` variable says when it is
-- cancelled (when_all cancels the loads it started once one fails).
local function load(what, seconds, broken)
  return function()
    local watch <close> = setmetatable({}, {__close = function(_, err)
      if task.is_cancelled(err) then say("  load %s: cancelled", what) end
    end})
    task.delay(seconds)
    if broken then error(what .. ": file not found", 0) end
    say("  loaded %s", what)
    return what
  end
end

local function load_scene()
  say("loading the scene with the fan-made voice pack")
  local ok, err = pcall(task.when_all,
    load("portraits", 0.4), load("voices-fanmade", 0.1, true), load("music", 0.2))
  if ok then return end
  say("loading failed at once: %s", err)
  say("loading again with the stock voice pack")
  -- The loads finish in the order music, voices, portraits; when_all
  -- returns their results in argument order.
  local portraits, voices, music = task.when_all(
    load("portraits", 0.4), load("voices", 0.25), load("music", 0.15))
  say("scene loaded: %s, %s, %s", portraits, voices, music)
end

---------------------------------------------------------------------------
-- The player: key presses through a channel
---------------------------------------------------------------------------

local keys = task.channel()         -- unbounded: sending never waits
local asked = 0                     -- questions shown so far

-- The simulated player: for each question, the keys pressed and when, in
-- seconds after the question appears. Question 2 gets its answer too late.
local PLAYER = {
  {{0.4, "9"}, {0.8, "3"}},         -- a key that does nothing, then [3]
  {{1.7, "1"}},                     -- the limit is 1.5 s: too late
  {{0.5, "2"}},
}

-- Input is sampled at EarlyUpdate, before the game logic of the frame.
local function keyboard()
  for q, presses in ipairs(PLAYER) do
    task.wait_until(function() return asked >= q end, "EarlyUpdate")
    local shown = task.time()
    for _, press in ipairs(presses) do
      task.delay(math.max(0, shown + press[1] - task.time()), "EarlyUpdate")
      say("  (the player presses %s)", press[2])
      keys:send(press[2])
    end
  end
end

---------------------------------------------------------------------------
-- The journal: a channel with a slow writer, closed at the end
---------------------------------------------------------------------------

local journal = task.channel()

local function journal_writer()
  local saved = 0
  while true do
    local entry = journal:receive()   -- nil, "closed" once closed and drained
    if entry == nil then return saved end
    task.delay(0.7)                   -- a slow disk
    saved = saved + 1
    say("  journal: saved \"%s\"", entry)
  end
end

---------------------------------------------------------------------------
-- A timed choice: timeout around a receive
---------------------------------------------------------------------------

local function ask(question, options, seconds, default)
  -- A key pressed before the question was shown must not answer it. A
  -- receive that a timeout cancelled did not take it: it waits in the
  -- channel (a sent value is never lost), so drop it here.
  while keys:len() > 0 do
    say("  (key %s was pressed before this question: dropped)", keys:receive())
  end
  asked = asked + 1
  say('Smuggler: "%s"  %s  (%.1f s)', question, table.concat(options, " "), seconds)
  local ok, choice = pcall(task.timeout, seconds, function()
    while true do
      local n = tonumber(keys:receive())
      if options[n] then return n end
      say("  that key does nothing here")
    end
  end)
  if ok then
    say("the player chose %s", options[choice])
  elseif task.is_timeout(choice) then
    choice = default
    say("no answer in %.1f s: the default, %s", seconds, options[choice])
  else
    error(choice, 0)                  -- a real error: let it through
  end
  journal:send(("%s -> %s"):format(question, options[choice]))
  return choice
end

local function line(who, text)
  say('%s: "%s"', who, text)
  task.delay(0.5)                     -- the line stays on screen
end

---------------------------------------------------------------------------
-- NPC barks: children of a scope
---------------------------------------------------------------------------

local BARKS = {
  guard = {"Move along.", "No loitering at the gate.", "Papers, please."},
  merchant = {"Fresh figs!", "Silk from the south!", "Two for one, today only!"},
  beggar = {"Spare a coin?", "Bless you, traveller."},
}

local function bark(who, every)
  local quiet <close> = setmetatable({}, {__close = function(_, err)
    if task.is_cancelled(err) then say("  (the %s falls silent)", who) end
  end})
  while true do
    task.delay(every)
    local lines = BARKS[who]
    say("  %s, aside: \"%s\"", who, lines[math.random(#lines)])
  end
end

---------------------------------------------------------------------------
-- The companion: a path search raced against a timer with when_any
---------------------------------------------------------------------------

-- The town: a 48 x 24 grid. Market stalls stand in columns with gaps; row
-- 16 is the city wall, whose gate is closed, so the gatehouse below it
-- cannot be reached.
local W, H, WALL = 48, 24, 16
local function blocked(x, y)
  if x < 1 or y < 1 or x > W or y > H or y == WALL then return true end
  return x % 8 == 0 and y % 6 ~= 3
end

local HERE, MARKET, GATEHOUSE = {2, 2}, {14, 5}, {30, 20}
local NODES_PER_FRAME = 12          -- the search never takes a whole frame

-- Breadth-first search, a few nodes per frame. Returns the number of
-- steps, or nil when there is no path.
local function find_path(from, to)
  local expanded = 0
  local stop <close> = setmetatable({}, {__close = function(_, err)
    if task.is_cancelled(err) then
      say("  (the search is cancelled after %d nodes)", expanded)
    end
  end})
  local function key(x, y) return y * W + x end
  local dist = {[key(from[1], from[2])] = 0}
  local queue, head = {from}, 1
  while queue[head] do
    local p = queue[head]
    head = head + 1
    local d = dist[key(p[1], p[2])]
    if p[1] == to[1] and p[2] == to[2] then return d, expanded end
    expanded = expanded + 1
    if expanded % NODES_PER_FRAME == 0 then task.yield() end
    for _, s in ipairs({{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) do
      local x, y = p[1] + s[1], p[2] + s[2]
      if not blocked(x, y) and not dist[key(x, y)] then
        dist[key(x, y)] = d + 1
        queue[#queue + 1] = {x, y}
      end
    end
  end
  return nil, expanded
end

local function go_to(place, target, patience)
  say('Companion: "I\'ll find a way to the %s."', place)
  local winner, steps, nodes = task.when_any(
    function() return find_path(HERE, target) end,
    function() task.delay(patience) end)
  if winner == 1 and steps then
    say('Companion: "Found it: %d steps." (%d nodes searched)', steps, nodes)
  elseif winner == 1 then
    say('Companion: "There is no way there." (%d nodes searched)', nodes)
  else
    say('Companion: "This maze... I\'ll wait here." (gave up after %.1f s)', patience)
  end
end

---------------------------------------------------------------------------
-- The scene
---------------------------------------------------------------------------

local barks                         -- the barks' scope, kept to show it ends

local function play_scene()
  -- The barks run in their own scope, run by a task held in a <close>
  -- variable: however play_scene ends, the task is cancelled, and the
  -- scope cancels every bark with it.
  local ambience <close> = task.spawn(task.scope, function(s)
    barks = s
    s:spawn(bark, "guard", 1.5)
    s:spawn(bark, "merchant", 2.0)
  end)

  -- The scene's own scope returns once the conversation (its body) and the
  -- companion (its child) are both done.
  task.scope(function(scene)
    scene:spawn(function()
      task.delay(0.3)
      go_to("market", MARKET, 0.75)
      task.delay(1.5)
      go_to("gatehouse", GATEHOUSE, 0.6)
    end)

    line("Smuggler", "Psst. You look like someone who needs to get past that gate.")
    local deal = ask("Want a map of the sewers?", {"[1] yes", "[2] no", "[3] haggle"}, 3.0, 2)
    line("Smuggler", deal == 3 and "Haggle? With me? Fine, half price." or "Suit yourself.")

    -- Any task may spawn into an open scope: a beggar joins the barks.
    say("  (a beggar wanders up)")
    barks:spawn(bark, "beggar", 1.2)

    ask("Last chance: do we have a deal?", {"[1] deal", "[2] no deal"}, 1.5, 2)
    line("Smuggler", "Then we never met.")
    ask("One more thing: seen any guards?", {"[1] yes", "[2] no"}, 3.0, 2)
    line("Smuggler", "Good. Off you go.")
  end)
end

---------------------------------------------------------------------------
-- Main
---------------------------------------------------------------------------

load_scene()
local input = task.spawn(keyboard)
local writer = task.spawn(journal_writer)

play_scene()
say("the scene is over")
journal:send("the scene is over")
local ok, err = pcall(barks.spawn, barks, bark, "guard", 1.0)
say("a late bark cannot join: %s", err)

-- After close, the writer still gets what is buffered, then nil, "closed".
journal:close()
say("journal closed; entries still in the channel: %d", journal:len())
say("journal: %d entries saved", task.await(writer))
task.await(input)
say("the end")
