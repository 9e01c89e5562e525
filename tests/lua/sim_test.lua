-- sim_test.lua: the simulation group's Lua side (lua/lunaloop/sim.lua over
-- src/lua/sim.c): registered state and its snapshots, rollback, timers,
-- random generators, effects, partial ticks, awaits in tick callbacks, the
-- sync-test, task.wait_tick, export/import, and hostile input. Numbered
-- cases are the acceptance tests of the simulation issue. Every group here
-- is driven by the script (sim.step, sim.load ...), so each case is exact.
local H = require "harness"

-- One simulation per loop: each case closes the one before.
local function open(opts)
  if task.sim then task.sim.close() end
  return task.sim_open(opts)
end

local function world(n)
  local ships = {}
  for i = 1, n do ships[i] = {x = i, y = 0, vx = 1, vy = 0.5, name = "s" .. i} end
  return {ships = ships, score = 0}
end

local function mover(w)
  return function(t)
    for _, s in ipairs(w.ships) do
      s.x = s.x + s.vx
      s.y = s.y + s.vy
    end
    w.score = w.score + t.tick
  end
end

-- 6. Rollback order: ticks 1..20 saved; loading 15 and then 10 in the same
-- frame leaves the tick-10 snapshot, not live values or tick 15's: a
-- restore that merged into the live tables instead of replacing them, or
-- that kept keys the snapshot lacks, would leave traces of later ticks.
H.case("6_load_15_then_10_gives_the_tick_10_snapshot", function()
  local sim = open{tick_rate = 50}
  local w = sim.state("world", world(3))
  sim.on_tick(mover(w))
  sim.on_tick(function(t) if t.tick == 12 then w.late = {t.tick} end end)
  local sums = {}
  for i = 1, 20 do sums[i] = sim.step() end
  local path, a, b = sim.diff(10, 15)
  H.eq({path, a, b}, {"world.late", nil, {12}}, "first difference, in sorted key order")
  local ships = w.ships
  local ship1 = w.ships[1]
  H.eq(sim.load(15), 15)
  H.eq(sim.load(10), 10)
  H.eq(sim.tick(), 10)
  H.truthy(w.ships == ships and w.ships[1] == ship1, "tables keep their identity")
  H.eq(ship1.x, 11, "x after 10 ticks")
  H.eq(ship1.y, 5.0, "y after 10 ticks")
  H.eq(w.score, 55, "sum of ticks 1..10")
  H.eq(w.late, nil, "a key made at tick 12 is gone")
  H.eq(sim.checksum(), sums[10], "the checksum of tick 10")
  H.eq(sim.checksum(10), sums[10])
  H.eq(sim.diff(10, 10), nil)
  H.eq({sim.load(15)}, {nil, "no snapshot of tick 15 (the history holds ticks 0 to 10)"},
    "a load discards the later ticks: they belong to the future it replaces")
end)

-- 7. Timers are data: made at tick 10 with 30 ticks, it is gone when tick
-- 5 is loaded and has 20 ticks left when tick 20 is loaded.
H.case("7_timers_roll_back_with_the_state", function()
  local sim = open{}
  local s = sim.state("s", {})
  sim.on_tick(function(t)
    if t.tick == 10 then s.cool = sim.timer(30) end
  end)
  for _ = 1, 25 do sim.step() end
  H.eq(s.cool:remaining(), 15)
  local bytes20 = sim.export(20)
  sim.load(20)
  H.eq(s.cool:remaining(), 20, "20 ticks remain at tick 20")
  H.eq(s.cool:expired(), false)
  H.eq(s.cool.at, 40)
  sim.load(5)
  H.eq(s.cool, nil, "gone at tick 5")
  H.eq(sim.import(bytes20, {load = true}), 20)
  H.eq(s.cool:remaining(), 20, "back from the bytes of tick 20, with its class")
  local seen
  sim.on_tick(function(t) if t.tick == 40 then seen = {s.cool:expired(), s.cool:remaining()} end end)
  sim.step(20)
  H.eq(seen, {true, 0})
end)

-- 8. An effect runs once per (tick, key): tick 100 simulated once,
-- re-simulated 4 times and run twice as a partial tick runs it once. With
-- confirm it runs at confirmation, and never for a tick rolled back first.
H.case("8_effects_run_once_per_tick_and_key", function()
  local sim = open{}
  local ran, confirmed = {}, {}
  local fire_confirmed = true
  sim.state("s", {})
  sim.on_tick(function(t)
    if t.tick == 100 then
      sim.effect("boom", function(tick) ran[#ran + 1] = tick end, t.tick)
      if fire_confirmed then
        sim.effect("hit", {confirm = true}, function(a, b) confirmed[#confirmed + 1] = a .. b end, "x", t.tick)
      end
    end
  end)
  sim.step(99)
  sim.partial(0.5) -- tick 100 as a partial tick: no effect
  sim.step()       -- tick 100, first full simulation
  H.eq(ran, {100})
  for _ = 1, 4 do
    sim.resimulate(98)
  end
  sim.load(99)
  sim.partial(0.25)
  sim.partial(0.75)
  sim.step()
  H.eq(ran, {100}, "once")
  H.eq(confirmed, {}, "not before confirmation")
  sim.confirm(100)
  H.eq(confirmed, {"x100"})
  H.eq({sim.load(99)}, {nil, "tick 99 is before the confirmed tick 100"})
  sim.step(); sim.confirm(101)
  H.eq(confirmed, {"x100"}, "once")
  -- a second group: tick 100 predicted, rolled back, re-simulated without
  -- the effect: it never runs.
  local sim2 = open{}
  local n = 0
  local with = true
  sim2.on_tick(function(t)
    if t.tick == 100 and with then sim2.effect(1, {confirm = true}, function() n = n + 1 end) end
  end)
  sim2.step(100)
  sim2.load(99)
  with = false
  sim2.resimulate()
  sim2.confirm(100)
  H.eq(n, 0, "a tick rolled back first never runs its confirm effect")
end)

-- 10. After a partial tick, the next full tick starts from the state before
-- it: the same checksum as a run without the partial tick.
H.case("10_partial_ticks_are_undone_before_the_next_full_tick", function()
  local function run(partials)
    local sim = open{tick_rate = 50}
    local w = sim.state("world", world(4))
    sim.on_tick(mover(w))
    local seen = {}
    sim.on_tick(function(t) if t.partial then seen[#seen + 1] = {t.tick, t.dt} end end)
    local sums = {}
    for i = 1, 10 do
      if partials then
        H.eq(sim.partial(0.5), true)
        H.truthy(sim.checksum() ~= sim.checksum(sim.tick()), "the partial state differs")
      end
      sums[i] = sim.step()
    end
    return sums, seen, w
  end
  local a = run(false)
  local b, seen = run(true)
  H.eq(b, a)
  H.eq(#seen, 10)
  H.eq(seen[1], {1, 0.01})
end)

-- 11. An await inside a tick callback raises at the call, with the message
-- the issue gives; the tick's other callbacks still run, and the error is
-- reported through task.on_error.
H.case("11_awaits_in_tick_callbacks_raise_and_the_others_run", function()
  local reports, restore = H.capture_errors()
  local sim = open{}
  local order, caught = {}, nil
  sim.on_tick(function() order[#order + 1] = "a"; task.delay(0.1); order[#order + 1] = "never" end)
  sim.on_tick(function() order[#order + 1] = "b"; caught = select(2, pcall(task.yield)) end)
  sim.on_tick(function() order[#order + 1] = "c" end, {priority = -1})
  -- a task driving the group: its callbacks still cannot await
  local t = task.spawn(function() sim.step() end)
  restore()
  H.eq(order, {"c", "a", "b"})
  H.has(caught, "cannot await in a simulation tick: coroutines cannot be rolled back; use sim.timer")
  H.eq(#reports, 1)
  H.has(tostring(reports[1].err), "sim_test.lua:")
  H.has(tostring(reports[1].err), "task.delay: cannot await in a simulation tick")
  H.has(reports[1].what, "sim.on_tick callback")
  H.eq(t:status(), "done")
end)

-- 12. Sync-test: with d = 7, every tick is rolled back 7 ticks and
-- re-simulated. 10,000 ticks of seeded inputs through a correct script
-- report nothing; a script that keeps a counter in an upvalue is reported
-- with the tick and the path.
H.case("12_sync_test_reports_hidden_state_with_tick_and_path", function()
  local inputs = {}
  local x = 7
  for i = 1, 10000 do x = (x * 1103515245 + 12345) % 2147483648; inputs[i] = x % 3 - 1 end
  local function script(sim, bad)
    local w = sim.state("world", world(3))
    local rng = sim.random(99)
    local counter = 0
    sim.on_tick(function(t)
      local s = w.ships[1 + t.tick % 3]
      s.vx = s.vx + inputs[t.tick] + rng:float()
      counter = counter + 1
      if bad then w.ships[3].hits = counter end
    end)
    sim.on_tick(mover(w))
  end
  local reports, restore = H.capture_errors()
  local good = open{check_distance = 7, history = 16}
  script(good, false)
  good.step(10000)
  H.eq(#reports, 0, "a correct script reports nothing: " .. tostring(reports[1] and reports[1].err))
  H.eq(good.stats().checks, 7 * (10000 - 7 + 1))
  H.eq(good.stats().mismatches, 0)
  local bad = open{check_distance = 7, history = 16}
  script(bad, true)
  bad.step(20)
  restore()
  H.eq(#reports, 1, "reported once")
  H.has(reports[1].err, "sim sync-test: tick 1 differs when re-simulated from tick 0 (checking tick 7)")
  H.has(reports[1].err, "at world.ships[3].hits: 1 the first time, 8 after rolling back")
  H.eq(reports[1].what, "sim sync-test")
  local st = bad.stats()
  H.eq({st.checks, st.mismatches, st.first_mismatch}, {14 * 7, 14 * 7, {tick = 1, path = "world.ships[3].hits"}})
end)

-- The checksum does not depend on the order next visits pairs in: the same
-- contents built in different orders (and with holes made and filled) sum
-- alike; one changed value changes it.
H.case("checksums_do_not_depend_on_next_order", function()
  local sim = open{}
  local a, b = {}, {}
  sim.state("a", a)
  for i = 1, 200 do a["k" .. i] = i; a[i] = {i, tostring(i)} end
  local s1 = sim.checksum()
  sim.state("a", b)
  for i = 200, 1, -1 do b[i] = {i, tostring(i)}; b["k" .. i] = i; b["z" .. i] = true end
  for i = 1, 200 do b["z" .. i] = nil end
  H.eq(sim.checksum(), s1)
  b.k3 = 3.0
  H.truthy(sim.checksum() ~= s1, "a float 3.0 is not the integer 3")
end)

-- Random generators are in the snapshot: a load replays the same numbers.
H.case("random_generators_roll_back", function()
  local sim = open{}
  local rng = sim.random(1234)
  local got = {}
  sim.on_tick(function(t) got[t.tick] = rng:int(1, 1000000) end)
  sim.step(10)
  local first = {table.unpack(got, 1, 10)}
  sim.load(3)
  sim.resimulate()
  H.eq({table.unpack(got, 1, 10)}, first)
  local f = rng:float()
  H.truthy(f >= 0 and f < 1, "float in [0, 1)")
  H.raises(function() rng:int(5, 1) end, "rng:int: expected integers m <= n")
  H.raises(function() sim.random(1.5) end, "bad argument #1 to 'sim.random' (expected an integer seed, got 1.5)")
end)

-- The tick table's fields and the callbacks' order: priority, then
-- registration order; registrations roll back by reference.
H.case("tick_flags_order_and_registrations_roll_back", function()
  local sim = open{tick_rate = 50}
  local log = {}
  local function rec(name)
    return function(t)
      log[#log + 1] = string.format("%s:%d:%s%s%s%s", name, t.tick, t.first and "F" or "",
        t.resimulating and "R" or "", t.partial and "P" or "", t.final and "L" or "")
    end
  end
  sim.on_tick(rec("b"), {priority = 1})
  sim.on_tick(rec("a"))
  local h
  sim.on_tick(function(t) -- registered inside tick 2: part of the snapshots from tick 2 on
    if t.tick == 2 and not h then h = sim.on_tick(rec("c"), {priority = 1}) end
  end, {priority = 5})
  sim.step(2)
  sim.step()
  H.eq(log, {"a:1:F", "b:1:F", "a:2:FL", "b:2:FL", "a:3:FL", "b:3:FL", "c:3:FL"})
  log = {}
  sim.resimulate(1) -- c was registered in tick 2: gone
  H.eq(log, {"a:2:R", "b:2:R", "a:3:R", "b:3:R"})
  h.remove()
  log = {}
  sim.partial(0.5)
  sim.step()
  H.eq(log, {"a:4:P", "b:4:P", "a:4:FL", "b:4:FL"})
  log = {}; sim.resimulate(2)
  H.eq(log, {"a:3:R", "b:3:R", "a:4:R", "b:4:R"})
  local dts = {}
  sim.on_tick(function(t) dts[#dts + 1] = t.dt end) -- outside a tick: in every snapshot
  sim.resimulate(1)
  H.eq(dts, {0.02, 0.02, 0.02}, "t.dt is the tick length in every re-simulated tick")
  H.eq(sim.tick(), 4)
  H.eq(sim.newest(), 4)
end)

-- Restoring keeps the registered table and every nested table the
-- snapshot has at the same key; metatables scripts set stay.
H.case("restore_keeps_identity_and_metatables", function()
  local sim = open{}
  local Vec = {__index = {len = function(v) return math.sqrt(v.x * v.x + v.y * v.y) end}}
  local w = sim.state("w", {p = setmetatable({x = 3, y = 4}, Vec), list = {1, 2, 3}})
  local p = w.p
  sim.step()
  w.p.x = 100; w.list[4] = 4; w.list[1] = nil; w.extra = {}
  sim.load(1)
  H.truthy(w.p == p, "nested table kept")
  H.eq(p:len(), 5.0)
  H.eq(w.list, {1, 2, 3})
  H.eq(w.extra, nil)
end)

-- Snapshots as bytes: export and import give the same state and checksum;
-- damaged bytes are refused without harm.
H.case("export_and_import", function()
  local sim = open{}
  local w = sim.state("world", world(5))
  w.cool = sim.timer(9)
  sim.on_tick(mover(w))
  sim.step(6)
  local bytes = sim.export()
  local at6 = sim.checksum()
  H.eq(sim.export(6), bytes)
  sim.step(3)
  H.eq({sim.export(100)}, {nil, "no snapshot of tick 100 (the history holds ticks 0 to 9)"})
  local other = open{}
  local w2 = other.state("world", {})
  local tick, sum = other.import(bytes)
  H.eq({tick, sum}, {6, at6})
  H.eq(other.tick(), 0, "stored, not loaded")
  H.eq(other.load(6), 6)
  H.eq(other.checksum(), at6)
  H.eq(other.tick(), 6)
  H.eq(w2.ships[5].x, 11)
  H.eq(w2.cool:remaining(), 3, "a timer keeps its class across bytes")
  H.eq({other.import("nonsense")}, {nil, "sim.import: the bytes are not a snapshot made by sim.export"})
  local cut = bytes:sub(1, #bytes - 3)
  local ok, msg = other.import(cut)
  H.eq(ok, nil)
  H.has(msg, "damaged")
  for i = #bytes - 40, #bytes, 7 do -- flipped bytes: refused or imported, never a crash
    local b = bytes:sub(1, i - 1) .. string.char((bytes:byte(i) + 77) % 256) .. bytes:sub(i + 1)
    pcall(other.import, b)
  end
  other.close()
  H.raises(function() other.step() end, "sim.step: the simulation was closed")
end)

-- Loading past the history is an expected failure: nil and a message.
H.case("load_past_the_history_returns_nil_and_a_message", function()
  local sim = open{history = 8}
  sim.step(20)
  H.eq({sim.load(12)}, {nil, "no snapshot of tick 12 (the history holds ticks 13 to 20)"})
  H.eq(sim.load(13), 13)
  H.eq({sim.checksum(3)}, {nil, "no snapshot of tick 3 (the history holds ticks 13 to 13)"},
    "the load of 13 discarded the ticks after it")
end)

-- task.wait_tick: a task waits for ticks simulated for the first time
-- (re-simulated ticks do not count), and is woken in the order it waited.
H.case("wait_tick_wakes_tasks_on_first_time_ticks", function()
  local sim = open{}
  local log = {}
  local a = task.spawn(function() local n = task.wait_tick(3, sim); log[#log + 1] = "a" .. n end)
  local b = task.spawn(function() local n = sim.wait_tick(2); log[#log + 1] = "b" .. n end)
  H.eq(a:info().wait, "tick")
  H.eq(a:info().deadline, 3)
  sim.step(2)
  H.eq(log, {"b2"})
  sim.resimulate(0)
  H.eq(log, {"b2"}, "re-simulated ticks do not wake")
  sim.step()
  H.eq(log, {"b2", "a3"})
  H.eq(a:status(), "done")
  H.eq(b:status(), "done")
  local c = task.spawn(function() sim.wait_tick(5) end)
  c:cancel()
  sim.step(6)
  H.eq(c:status(), "cancelled")
  H.raises(function() sim.wait_tick(1) end, "not inside a task")
  H.raises(function() sim.wait_tick(-1) end, "expected a count of ticks >= 0, got -1")
end)

-- Hostile input: what cannot be in a snapshot is refused at the call,
-- naming the path; bad arguments name what was expected.
H.case("hostile_input_is_refused_at_the_call_with_the_path", function()
  local sim = open{}
  H.raises(function() sim.state("w", {ships = {{x = 1}, {x = 2, fn = print}}}) end,
    "sim_test.lua")
  H.raises(function() sim.state("w", {ships = {{x = 1}, {x = 2, fn = print}}}) end,
    "sim.state: a function value cannot be copied into a simulation snapshot (at w.ships[2].fn)")
  H.raises(function() sim.state("w", {u = io.stdout}) end,
    "sim.state: a userdata value cannot be copied into a simulation snapshot (at w.u)")
  H.raises(function() sim.state("w", {[{}] = 1}) end, "a table key of type table cannot be copied")
  local cyc = {a = {}}
  cyc.a.back = cyc
  H.raises(function() sim.state("w", cyc) end, "sim.state: the value has a cycle (at w.a.back)")
  H.raises(function() sim.state("w", 5) end, "bad argument #2 to 'sim.state' (expected a table, got number)")
  H.raises(function() sim.state(nil, {}) end, "bad argument #1 to 'sim.state' (expected a name (a non-empty string), got nil)")
  H.raises(function() sim.on_tick(5) end, "bad argument #1 to 'sim.on_tick' (expected a function, got number)")
  H.raises(function() sim.on_tick(print, {prio = 1}) end, "unknown option \"prio\"")
  H.raises(function() sim.timer(-1) end, "bad argument #1 to 'sim.timer' (expected a count of ticks >= 0, got -1)")
  H.raises(function() sim.timer(1.5) end, "expected a count of ticks >= 0, got 1.5")
  H.raises(function() sim.effect("k", print) end, "sim.effect: called outside a tick callback")
  H.raises(function() sim.partial(1.5) end, "expected a fraction above 0 and at most 1, got 1.5")
  H.raises(function() task.sim_open{} end, "task.sim_open: the loop has a simulation already (task.sim)")
  H.raises(function() task.sim_open{tick_rate = 0} end, "opts.tick_rate: expected a rate from 0.001 to 1e6 Hz, got 0")
  H.raises(function() task.sim_open{policy = "fast"} end, "opts.policy: expected")
  H.raises(function() task.sim_open{check_distance = 64} end, "opts.check_distance: expected less than the history (64), got 64")
  H.raises(function() task.sim_open{rate = 60} end, "unknown option \"rate\"")
  -- a function put into the state after registration fails the save at
  -- the step, naming the path; the group stays usable.
  local w = sim.state("w", {})
  local armed = true
  sim.on_tick(function(t) if t.tick == 2 and armed then armed = false; w.f = print end end)
  sim.step()
  H.raises(function() sim.step() end, "sim: a function value cannot be copied into a simulation snapshot (at w.f)")
  H.eq({sim.tick(), w.f}, {1, nil}, "back at tick 1")
  H.eq(sim.step(), sim.checksum(2))
  -- effect keys: scalars only, never NaN
  local key_err
  sim.on_tick(function() key_err = select(2, pcall(sim.effect, 0 / 0, print)) end)
  sim.step()
  H.has(key_err, "expected a key (a string, number or boolean), got nan")
  H.raises(function() sim.timer(2^60) end, "expected at most 2^48 ticks")
  -- host calls from inside a tick callback are refused
  local err
  sim.on_tick(function() err = select(2, pcall(sim.load, 0)) end)
  sim.step()
  H.has(err, "sim.load: called from a tick callback")
end)

-- A load restores the snapshot even when the live tables were rearranged
-- after it: one table now reached at two keys (w.b = w.a, a target that
-- points at a ship), or a cycle a callback made before the save refused
-- it. The in-place restore used to refill the shared table once per key,
-- so both keys ended with the last one's contents (a.x read 1 where the
-- snapshot had 1 and 2), and a table under its own key cleared its
-- ancestor (v.x vanished); the checksum then differed from the snapshot's.
H.case("loads_restore_tables_that_were_aliased_or_made_cyclic_after_the_snapshot", function()
  local sim = open{}
  local w = sim.state("w", {a = {x = 1}, b = {x = 2}, ships = {{x = 1}, {x = 2}}, target = {id = 0}})
  sim.on_tick(function(t)
    if t.tick == 2 then w.b = w.a; w.target = w.ships[2]; w.ships[1] = w.ships[2] end
  end)
  local s1 = sim.step()
  local a = w.a
  sim.step()
  H.eq(sim.load(1), 1)
  H.eq({w.a.x, w.b.x, w.ships[1].x, w.ships[2].x, w.target.id, w.target.x}, {1, 2, 1, 2, 0, nil})
  H.truthy(w.a ~= w.b and w.ships[1] ~= w.ships[2] and w.target ~= w.ships[2], "no table is shared any more")
  H.truthy(w.a == a or w.b == a, "the first key reached (in the snapshot's order) keeps the table")
  H.eq(sim.checksum(), s1, "the live state is the snapshot")
  -- a table shared when the snapshot was taken stays shared
  -- (tick 2 again shares ships[2] at ships[1]; tick 3 also at lead)
  sim.on_tick(function(t) if t.tick == 3 then w.lead = w.ships[1] end end)
  sim.step()
  local s3 = sim.step()
  w.ships[1].x = 50
  H.eq(sim.load(3), 3)
  H.truthy(w.lead == w.ships[1] and w.ships[1] == w.ships[2], "still one table")
  H.eq({w.lead.x, sim.checksum() == s3}, {2, true})
  local v = sim.state("v", {x = {y = {z = 1}}})
  sim.on_tick(function(t) if t.tick == 6 then v.x.y = v end end)
  local s5 = sim.step(2)
  H.raises(function() sim.step() end, "the value has a cycle (at v.x.y)")
  H.eq({sim.tick(), v.x and v.x.y and v.x.y.z, v.z}, {5, 1, nil}, "back at tick 5, whole")
  H.eq(sim.checksum(), s5)
end)

-- task.sim_open{rate_scale = 0} pauses the simulation, as
-- sim.set_rate_scale(0) does. The option was handed to the core's config,
-- where 0 means "the default, 1", so the sim ran at full rate.
H.case("a_rate_scale_of_0_at_open_pauses_the_simulation", function()
  local sim = open{tick_rate = 50, rate_scale = 0}
  H.eq(sim.config().rate_scale, 0.0)
  task.step(0.1)
  H.eq(sim.tick(), 0, "no tick while paused")
  sim.set_rate_scale(1)
  task.step(0.1)
  H.eq(sim.tick(), 5)
end)

-- task.wait_tick(n) with n near math.maxinteger waits (for ever, in
-- practice). head + n used to wrap around to a negative target, which the
-- next tick reached, so the task woke at once.
H.case("wait_tick_of_a_huge_count_does_not_wrap_around", function()
  local sim = open{}
  sim.step(5)
  local t1 = task.spawn(function() return task.wait_tick(math.maxinteger) end)
  local t2 = task.spawn(function() return task.wait_tick(math.maxinteger - 2) end)
  sim.step(3)
  H.eq({t1:status(), t2:status()}, {"suspended", "suspended"})
  t1:cancel(); t2:cancel()
end)

-- sim.import refuses a snapshot whose states are not the group's (another
-- script's, an old save game): the names it registers, each a table, and
-- the group's own data. It used to store it, and a load then removed the
-- group's registered tables from every later snapshot (a state silently
-- not rolled back any more) and added the foreign ones.
H.case("import_refuses_a_snapshot_of_other_states", function()
  local a = open{}
  a.state("world", {n = 1})
  a.step()
  local bytes = a.export()
  local b = open{}
  local o = b.state("other", {m = 2})
  H.eq({b.import(bytes, {load = true})},
    {nil, 'sim.import: the snapshot is not of this group\'s states (it lacks "other", has "world")'})
  H.eq(b.tick(), 0)
  o.m = 3
  H.truthy(b.checksum() ~= b.checksum(0), "other is still in the snapshot")
  local c = open{}
  c.state("world", {n = 0})
  local tick, sum = c.import(bytes, {load = true})
  H.eq(tick, 1)
  H.eq(sum, c.checksum(1))
end)

-- task.sim_open takes a history of 1 tick, as the core and `lunaloop run
-- --sim-history 1` do (it used to ask for 2 to 65536): only the present
-- tick is held.
H.case("a_history_of_one_tick_holds_the_present", function()
  local sim = open{history = 1}
  local w = sim.state("w", {n = 0})
  sim.on_tick(function() w.n = w.n + 1 end)
  sim.step(5)
  H.eq({sim.history()}, {5, 5})
  H.eq({sim.load(4)}, {nil, "no snapshot of tick 4 (the history holds ticks 5 to 5)"})
  w.n = 99
  H.eq({sim.load(5), w.n}, {5, 5})
  H.raises(function() task.sim_open{history = 0} end, "opts.history: expected an integer from 1 to 65536, got 0")
end)

-- sim.import refuses a snapshot whose header names a tick past 2^62 (bytes
-- from a peer are not trusted): it was stored and loaded, and the next
-- step took the group's tick past math.maxinteger, where Lua integers
-- wrap: sim.tick() read negative and sim.export() raised.
H.case("import_refuses_a_tick_past_2_to_the_62", function()
  local sim = open{}
  sim.state("w", {n = 0})
  sim.step()
  local b = sim.export()
  local hdr = #string.pack("=c13j", "lunaloop-sim\1", 0)
  local body = b:sub(hdr + 1)
  for _, tick in ipairs{math.maxinteger, (1 << 62) + 1} do
    H.eq({sim.import(string.pack("=c13j", "lunaloop-sim\1", tick) .. body, {load = true})},
      {nil, "sim.import: the snapshot's tick " .. tick .. " is out of range (0 to 2^62)"})
  end
  H.eq(sim.tick(), 1)
  H.eq(sim.import(string.pack("=c13j", "lunaloop-sim\1", 1 << 62) .. body), 1 << 62)
end)

-- The record of effects already run is kept for the ticks that can still be
-- re-simulated only. It was cleared one tick number at a time, history + 1
-- ticks behind each first-time tick, so tick numbers a batch skipped never
-- came round and a server under the batch policy kept one entry per step
-- for ever (about 2 MB per 20,000 frames).
H.case("effects_of_batched_ticks_are_forgotten_behind_the_history", function()
  local sim = open{tick = 0.01, policy = "batch", max_ticks = 1, max_batch = 2}
  sim.state("w", {})
  local ran = 0
  sim.on_tick(function() sim.effect("k", function() ran = ran + 1 end) end)
  local function kb()
    collectgarbage(); collectgarbage()
    return collectgarbage("count")
  end
  for _ = 1, 500 do task.step(0.02) end
  local before = kb()
  for _ = 1, 3000 do task.step(0.02) end
  local grown = kb() - before
  H.eq({sim.tick(), ran}, {7000, 3500}, "a batch of 2 each frame, an effect each")
  H.truthy(grown < 64, "memory grew by " .. grown .. " KiB over 3,000 batched steps")
  sim.close()
end)

-- Confirm effects recorded for ticks that are never confirmed were kept
-- for ever: a host that never calls sim.confirm grew memory by one record a
-- tick. A tick that leaves the history unconfirmed drops its calls without
-- running them, and counts them.
H.case("confirm_effects_of_ticks_that_leave_the_history_unconfirmed_are_dropped_and_counted", function()
  local sim = open{history = 8}
  sim.state("w", {})
  local ran = {}
  sim.on_tick(function(t)
    sim.effect("k", {confirm = true}, function(tick) ran[#ran + 1] = tick end, t.tick)
  end)
  sim.step(1000)
  H.eq(#ran, 0, "nothing confirmed, nothing run")
  H.eq(sim.stats().effects_expired, 991, "ticks 1..991 left the history of 8 behind tick 1000")
  sim.confirm(1000)
  H.eq(ran, {992, 993, 994, 995, 996, 997, 998, 999, 1000})
  H.eq(sim.stats().effects_expired, 991)
  sim.close()
end)

-- sim.close refused during a frame's tick (a task woken at FixedUpdate by
-- wait_tick) raises at the caller and leaves the group whole: it used to
-- remove the item that wakes wait_tick tasks before the refusal, so the
-- other waiters were never woken by frames again, and the message named
-- a line of sim.lua.
H.case("a_refused_close_leaves_wait_tick_working", function()
  local sim = open{tick = 0.01}
  sim.state("w", {})
  local err, woke
  task.spawn(function()
    task.wait_tick(1)
    err = select(2, pcall(sim.close))
  end)
  task.spawn(function() task.wait_tick(3); woke = sim.tick() end)
  task.step(0.01)
  H.has(err, "sim.close: called during a tick of the simulation")
  H.truthy(not err:find("sim.lua"), "at the caller: " .. err)
  task.step(0.01); task.step(0.01)
  H.eq(woke, 3)
  sim.close()
  -- a closed group's calls raise at the caller too
  local ok, e = pcall(sim.step)
  H.eq({ok, e}, {false, "sim.step: the simulation was closed"})
end)

H.run()
