-- sim.lua: the Lua side of the simulation group (docs/netcode.md): the
-- state scripts register for every snapshot, tick callbacks, timers and
-- random generators kept as data, effects that run once per (tick, key),
-- rollback (save, load, resimulate, partial ticks), snapshots as bytes,
-- the first differing path between two snapshots, and the sync-test.
--
-- A group (the object task.sim_open returns, and task.sim) is a table of
-- functions bound to one simulation, called with a dot: sim.state(...),
-- sim.tick(). Its snapshot engine is the store of src/lua/sim.c: one slot
-- per tick of the history ring, each the copier's bytes of the group's
-- root table (the registered states by name, and under the key `true` the
-- group's own data: the tick, the random generators). Tick callbacks run
-- through I.sim_call, on a thread of their own with the calling context
-- that makes an await raise.
--
-- What is rolled back: the registered tables (in place: every table a
-- script holds stays the one the state uses), timers and generators (data
-- in them), and the list of tick callbacks (by reference: a registration
-- made after a tick is gone when that tick is loaded). What is not: upvalues
-- and globals the callbacks change (the sync-test finds those), tasks, and
-- the effects already run.
local M, I, P = ...

local error, ipairs, pairs, pcall, select, setmetatable, type, tostring =
  error, ipairs, pairs, pcall, select, setmetatable, type, tostring
local mtype, floor, huge = math.type, math.floor, math.huge
local format, sub = string.format, string.sub
local spack, sunpack = string.pack, string.unpack
local pack, unpack, sort, remove = table.pack, table.unpack, table.sort, table.remove
local argerror, number_text = P.argerror, P.number_text
local sim_call, sim_report, sim_store, sim_calling = I.sim_call, I.sim_report, I.sim_store,
  I.sim_calling
local sim_suspend, sim_wake = I.sim_suspend, I.sim_wake

local SYS = true -- the root key of the group's own data
local MAGIC = "lunaloop-sim\1"
local HEADER = "=c" .. #MAGIC .. "j" -- magic, tick (host order, as the payload)

-- ---- values as messages show them ------------------------------------------------

local function show(v)
  if type(v) == "string" then return format("%q", v) end
  if mtype(v) == "float" then return number_text(v) end
  if type(v) == "table" then return "a table" end
  return tostring(v)
end

-- The path of key k under path p: "ships", "ships[3]", "ships[3].x".
local function path_join(p, k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then
    return p == "" and k or p .. "." .. k
  end
  if type(k) == "string" then return p .. format("[%q]", k) end
  return p .. "[" .. show(k) .. "]"
end

-- Keys in an order that does not depend on next: booleans, then numbers,
-- then strings.
local KEY_RANK = {boolean = 1, number = 2, string = 3}
local function key_less(a, b)
  local ra, rb = KEY_RANK[type(a)], KEY_RANK[type(b)]
  if ra ~= rb then return ra < rb end
  if ra == 1 then return not a and b end
  return a < b
end

local function sorted_keys(a, b)
  local keys, seen = {}, {}
  for k in pairs(a) do keys[#keys + 1] = k; seen[k] = true end
  for k in pairs(b) do if not seen[k] then keys[#keys + 1] = k end end
  sort(keys, key_less)
  return keys
end

local function same_number(x, y)
  return x == y and mtype(x) == mtype(y) or (x ~= x and y ~= y)
end

-- The first path (in sorted key order, depth first) where plain values a
-- and b differ, and the two values there; nil when they are equal.
local function first_difference(a, b, path)
  if type(a) == "table" and type(b) == "table" then
    for _, k in ipairs(sorted_keys(a, b)) do
      local p, x, y = first_difference(a[k], b[k], path_join(path, k))
      if p then return p, x, y end
    end
    return nil
  end
  if type(a) == "number" and type(b) == "number" then
    if same_number(a, b) then return nil end
  elseif a == b then
    return nil
  end
  return path, a, b
end

-- The difference between two decoded roots, with the group's own data
-- named "(sim)".
local function root_difference(a, b)
  local keys = sorted_keys(a, b)
  keys[#keys + 1] = SYS -- the group's own data last: its tick differs whenever a state does
  for _, k in ipairs(keys) do
    if k ~= SYS or _ == #keys then
      local p, x, y = first_difference(a[k], b[k], k == SYS and "(sim)" or path_join("", k))
      if p then return p, x, y end
    end
  end
  return nil
end

-- ---- arguments -------------------------------------------------------------------

local function check_count(fname, n, v, what, min)
  if mtype(v) ~= "integer" and not (mtype(v) == "float" and v == floor(v) and v > -2^63 and v < 2^63) then
    argerror(fname, n, format("expected %s, got %s", what,
      type(v) == "number" and number_text(v) or type(v)), 3)
  end
  v = math.tointeger(v) or v
  if v < min then argerror(fname, n, format("expected %s, got %d", what, v), 3) end
  return v
end

local function check_options(fname, n, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then argerror(fname, n, "expected an options table, got " .. type(opts), 3) end
  for k in pairs(opts) do
    if not known[k] then argerror(fname, n, "unknown option " .. show(k), 3) end
  end
  return opts
end

-- ---- the group -------------------------------------------------------------------

local OPEN_OPTS = {tick_rate = true, tick = true, history = true, check_distance = true}

-- new_group(opts, core) -> the group's function table. core: nil for a
-- group the script drives (host-driven calls only), or the C simulation's
-- bridge when the core drives ticks from the frame.
local function new_group(opts)
  local dt
  if opts.tick_rate ~= nil then
    if type(opts.tick_rate) ~= "number" or not (opts.tick_rate > 0 and opts.tick_rate <= 1e6) then
      argerror("task.sim_open", 1, "opts.tick_rate: expected a rate from 0 to 1e6 Hz, got " ..
        show(opts.tick_rate), 3)
    end
    dt = 1 / opts.tick_rate
  elseif opts.tick ~= nil then
    if type(opts.tick) ~= "number" or not (opts.tick > 0 and opts.tick <= 3600) then
      argerror("task.sim_open", 1, "opts.tick: expected seconds from 0 to 3600, got " ..
        show(opts.tick), 3)
    end
    dt = opts.tick
  else
    dt = 1 / 60
  end
  local history = opts.history == nil and 64 or
    check_count("task.sim_open", 1, opts.history, "opts.history: a count of ticks from 2", 2)
  local distance = opts.check_distance == nil and 0 or
    check_count("task.sim_open", 1, opts.check_distance, "opts.check_distance: a count of ticks >= 0", 0)
  if distance >= history then
    argerror("task.sim_open", 1, format("opts.check_distance: expected less than the history (%d), got %d",
      history, distance), 2)
  end

  local sim = {}
  local Timer, Random = {}, {}
  local TimerMT = {__index = Timer, __name = "lunaloop.SimTimer", __metatable = "lunaloop.SimTimer"}
  local RandomMT = {__index = Random, __name = "lunaloop.SimRandom", __metatable = "lunaloop.SimRandom"}
  local classes = {[TimerMT] = 1, [RandomMT] = 2, TimerMT, RandomMT}
  local PARTIAL, SCRATCH = history, history + 1 -- the two slots past the ring
  local store = sim_store(history + 2, classes)
  local sys = {tick = 0, rng = {}}
  local roots = {[SYS] = sys}
  local regs = {} -- the tick callbacks, sorted; replaced, never changed
  local slot_regs = {}
  local newest = 0 -- the newest tick fully simulated (the present)
  local cur -- the tick being simulated, or nil
  local partial_regs -- while a partial tick's state is live: the callbacks before it
  local alpha = 0
  local fired = {} -- [tick] = {[key] = true}: effects run (not rolled back)
  local pending = {} -- [tick] = {keys in order, [key] = packed call}: confirm effects
  local confirmed = 0
  local waiters = {} -- tasks in task.wait_tick, {task, target}
  local seq = 0
  local sync = {checks = 0, mismatches = 0, first = nil}
  local t = {} -- the tick table handed to callbacks, refilled per tick
  local bridge -- the core's simulation, when one drives this group

  local function now() return cur or sys.tick end

  -- ---- snapshots ----------------------------------------------------------------

  local function save(tick)
    local slot = tick % history
    local sum = store:save(slot, roots, tick, "sim")
    slot_regs[slot] = regs
    return sum
  end

  -- Puts the state from before a partial tick back.
  local function undo_partial()
    if partial_regs then
      store:load(PARTIAL, roots)
      regs, partial_regs = partial_regs, nil
    end
  end

  local function history_text()
    local lo, hi
    for s = 0, history - 1 do
      local k = store:info(s)
      if k then
        lo = (lo == nil or k < lo) and k or lo
        hi = (hi == nil or k > hi) and k or hi
      end
    end
    return lo and format("the history holds ticks %d to %d", lo, hi) or "the history is empty"
  end

  local function load(tick)
    local slot = tick % history
    if store:info(slot) ~= tick then
      return nil, format("no snapshot of tick %d (%s)", tick, history_text())
    end
    partial_regs = nil
    store:load(slot, roots)
    regs = slot_regs[slot]
    alpha = 0
    -- Confirm effects of the ticks rolled back are dropped: the ticks'
    -- next simulation records them again, or not.
    for k in pairs(pending) do if k > tick then pending[k] = nil end end
    return tick
  end

  -- ---- ticks ----------------------------------------------------------------------

  local function call_all(list)
    for i = 1, #list do sim_call(list[i].fn, t, "sim.on_tick callback") end
  end

  -- Runs tick `tick` with the flags given; the callbacks see cur = tick.
  local function run_tick(tick, tdt, batch, partial, catch_up, final)
    t.tick, t.dt, t.batch = tick, tdt, batch
    t.first = not partial and tick > newest
    t.resimulating = not partial and tick <= newest
    t.partial, t.catch_up, t.final = partial, catch_up, final
    cur = tick
    local ok, err = pcall(call_all, regs)
    cur = nil
    if not ok then error(err, 0) end
  end

  local wait_seq
  -- Wakes the tasks whose tick came, in the order they began to wait
  -- (an entry whose task waits again, or no more, is dropped).
  local function wake_waiters()
    local due, keep = {}, {}
    for i = 1, #waiters do
      local w = waiters[i]
      if wait_seq[w[1]] ~= w[3] then -- stale
      elseif w[2] <= newest then due[#due + 1] = w
      else keep[#keep + 1] = w end
    end
    waiters = keep
    for i = 1, #due do
      wait_seq[due[i][1]] = nil
      sim_wake(due[i][1], newest)
    end
  end

  local sync_check, edit_regs

  -- One full tick after the present state (the next tick number); k > 1:
  -- a batched step covering k ticks. Returns its checksum.
  local function full_tick(batch, catch_up, final, checking)
    undo_partial()
    alpha = 0
    local tick = sys.tick + batch
    local first = tick > newest
    run_tick(tick, dt * batch, batch, false, catch_up, final)
    sys.tick = tick
    local ok, sum = pcall(save, tick)
    if not ok then
      -- The state cannot be saved (a value a snapshot cannot hold): back
      -- to the tick before, so that the group stays consistent.
      if store:info((tick - batch) % history) == tick - batch then load(tick - batch) end
      error(sum, 0)
    end
    if first then
      newest = tick
      fired[tick - history - 1] = nil
      if #waiters > 0 then wake_waiters() end
      if distance > 0 and not checking then sum = sync_check(tick, sum) end
    end
    return sum
  end

  local function resimulate(to)
    local sum
    while sys.tick < to do sum = full_tick(1, false, sys.tick + 1 == to, true) end
    return sum
  end

  -- The sync-test: tick `tick` was just simulated for the first time with
  -- checksum `sum`; roll back `distance` ticks, simulate them again and
  -- compare.
  function sync_check(tick, sum)
    local back = tick - distance
    if back < 0 or store:info(back % history) ~= back then return sum end
    store:copy(tick % history, SCRATCH)
    load(back)
    local again = resimulate(tick)
    sync.checks = sync.checks + 1
    if again ~= sum then
      sync.mismatches = sync.mismatches + 1
      if sync.mismatches == 1 then
        local path, a, b = root_difference(store:decode(SCRATCH), store:decode(tick % history))
        local where = path and format("at %s: %s the first time, %s after rolling back",
          path, show(a), show(b)) or "(the snapshots decode equal: a float that is NaN?)"
        sync.first = {tick = tick, path = path}
        sim_report(format("sim sync-test: tick %d differs when re-simulated from tick %d, %s " ..
          "(state the callbacks keep outside sim.state: an upvalue, a global, math.random?)",
          tick, back, where), "sim sync-test")
      end
    end
    return again
  end

  -- ---- the group's functions ----------------------------------------------------

  -- The snapshots taken so far lack what was just added outside a tick (a
  -- state, a generator): the history starts again at the present state.
  local function restart()
    for s = 0, history - 1 do store:clear(s) end
    for k in pairs(pending) do if k > sys.tick then pending[k] = nil end end
    newest = sys.tick
    save(sys.tick)
  end

  local function check_host(fname)
    if cur ~= nil then error(fname .. ": called from a tick callback", 3) end
  end

  -- sim.state(name, tbl) -> tbl
  function sim.state(name, tbl)
    if type(name) ~= "string" or name == "" then
      argerror("sim.state", 1, "expected a name (a non-empty string), got " .. show(name))
    end
    if type(tbl) ~= "table" then
      argerror("sim.state", 2, "expected a table, got " .. type(tbl))
    end
    local ok, err = pcall(store.check, store, tbl, "sim.state", name)
    if not ok then error(err, 2) end
    if roots[name] ~= tbl then
      check_host("sim.state")
      undo_partial()
      roots[name] = tbl
      restart()
    end
    return tbl
  end

  local function reg_less(a, b)
    if a.priority ~= b.priority then return a.priority < b.priority end
    return a.seq < b.seq
  end

  -- Changes the list of tick callbacks with edit(list) -> new list. Inside
  -- a tick, the change is the present's only (a load of an earlier tick
  -- undoes it); outside, it is made to every snapshot too (setting up is
  -- not rolled back).
  function edit_regs(edit)
    if cur ~= nil then
      regs = edit(regs)
      return
    end
    local done = {}
    local function redo(list)
      if list == nil then return nil end
      local new = done[list]
      if not new then new = edit(list); done[list] = new end
      return new
    end
    regs = redo(regs)
    partial_regs = redo(partial_regs)
    for slot, list in pairs(slot_regs) do slot_regs[slot] = redo(list) end
  end

  -- sim.on_tick(fn [, opts]) -> handle
  function sim.on_tick(fn, opts)
    if type(fn) ~= "function" then argerror("sim.on_tick", 1, "expected a function, got " .. type(fn)) end
    opts = check_options("sim.on_tick", 2, opts, {priority = true})
    local prio = opts.priority or 0
    if mtype(prio) ~= "integer" then
      argerror("sim.on_tick", 2, "opts.priority: expected an integer, got " .. show(prio))
    end
    seq = seq + 1
    local r = {fn = fn, priority = prio, seq = seq}
    edit_regs(function(list)
      local out = {}
      for i = 1, #list do out[i] = list[i] end
      out[#out + 1] = r
      sort(out, reg_less)
      return out
    end)
    local handle = {}
    -- handle.remove(): the callback runs no more (inside a tick: until a
    -- tick from before the removal is loaded).
    function handle.remove()
      edit_regs(function(list)
        local out = {}
        for i = 1, #list do if list[i] ~= r then out[#out + 1] = list[i] end end
        return out
      end)
    end
    return handle
  end

  -- sim.tick() -> the tick being simulated (inside a tick callback), else
  -- the tick the state is at.
  function sim.tick() return now() end

  -- sim.newest() -> the newest tick ever fully simulated (the present).
  function sim.newest() return newest end

  -- sim.alpha() -> the fraction of the next tick already accumulated.
  function sim.alpha()
    if bridge then return bridge.alpha() end
    return alpha
  end

  -- sim.dt() -> the tick length in seconds.
  function sim.dt() return dt end

  -- sim.timer(ticks) -> a timer that expires `ticks` ticks from now.
  function sim.timer(ticks)
    ticks = check_count("sim.timer", 1, ticks, "a count of ticks >= 0", 0)
    return setmetatable({at = now() + ticks}, TimerMT)
  end
  function Timer:remaining()
    local r = self.at - now()
    return r > 0 and r or 0
  end
  function Timer:expired() return now() >= self.at end

  -- sim.random(seed) -> a generator (splitmix64) whose state is in the snapshot.
  function sim.random(seed)
    if mtype(seed) ~= "integer" then
      argerror("sim.random", 1, "expected an integer seed, got " .. show(seed))
    end
    local r = setmetatable({s = seed}, RandomMT)
    undo_partial()
    sys.rng[#sys.rng + 1] = r
    if cur == nil then restart() end
    return r
  end
  local function next64(r)
    local s = r.s + 0x9e3779b97f4a7c15
    r.s = s
    s = (s ~ (s >> 30)) * 0xbf58476d1ce4e5b9
    s = (s ~ (s >> 27)) * 0x94d049bb133111eb
    return s ~ (s >> 31)
  end
  Random.next = next64
  function Random:float() return (next64(self) >> 11) * 0x1p-53 end
  function Random:int(m, n)
    if n == nil then m, n = 1, m end
    if mtype(m) ~= "integer" or mtype(n) ~= "integer" or n < m then
      error(format("rng:int: expected integers m <= n, got %s and %s", show(m), show(n)), 2)
    end
    return m + floor(((next64(self) >> 11) * 0x1p-53) * (n - m + 1))
  end

  -- sim.effect(key, [opts,] fn, ...) -> true when fn ran now
  function sim.effect(key, fn, ...)
    local confirm = false
    local args = 2
    if type(fn) == "table" then
      local o = check_options("sim.effect", 2, fn, {confirm = true})
      confirm = o.confirm and true or false
      fn = ...
      args = 3
    end
    local kt = type(key)
    if kt ~= "string" and kt ~= "number" and kt ~= "boolean" then
      argerror("sim.effect", 1, "expected a key (a string, number or boolean), got " .. kt)
    end
    if type(fn) ~= "function" then
      argerror("sim.effect", args, "expected a function, got " .. type(fn))
    end
    if cur == nil then
      error("sim.effect: called outside a tick callback", 2)
    end
    if t.partial then return false end
    local done = fired[cur]
    if done and done[key] then return false end
    if confirm and cur > confirmed then
      local p = pending[cur]
      if not p then p = {}; pending[cur] = p end
      if not p[key] then p[#p + 1] = key end
      p[key] = pack(fn, select(args == 2 and 1 or 2, ...))
      return false
    end
    if not done then done = {}; fired[cur] = done end
    done[key] = true
    fn(select(args == 2 and 1 or 2, ...))
    return true
  end

  -- sim.confirm(tick): ticks up to `tick` will not be rolled back: their
  -- confirm effects run, in tick then first-record order.
  function sim.confirm(tick)
    tick = check_count("sim.confirm", 1, tick, "a tick number >= 0", 0)
    if tick <= confirmed then return end
    local ticks = {}
    for k in pairs(pending) do if k <= tick then ticks[#ticks + 1] = k end end
    sort(ticks)
    confirmed = tick
    for _, k in ipairs(ticks) do
      local p = pending[k]
      pending[k] = nil
      local done = fired[k]
      if not done then done = {}; fired[k] = done end
      for _, key in ipairs(p) do
        if not done[key] then
          done[key] = true
          local c = p[key]
          local ok, err = pcall(c[1], unpack(c, 2, c.n))
          if not ok then sim_report(err, "sim.effect") end
        end
      end
    end
  end

  -- sim.confirmed() -> the newest confirmed tick
  function sim.confirmed() return confirmed end

  -- sim.step([n]) -> checksum: simulates n ticks (default 1) after the present state.
  function sim.step(n)
    check_host("sim.step")
    n = n == nil and 1 or check_count("sim.step", 1, n, "a count of ticks >= 1", 1)
    local sum
    for i = 1, n do sum = full_tick(1, false, i == n) end
    return sum
  end

  -- sim.save() -> checksum: the snapshot of the current tick, taken again.
  function sim.save()
    check_host("sim.save")
    undo_partial()
    return save(sys.tick)
  end

  -- sim.load(tick) -> tick | nil, msg
  function sim.load(tick)
    check_host("sim.load")
    tick = check_count("sim.load", 1, tick, "a tick number >= 0", 0)
    return load(tick)
  end

  -- sim.resimulate([to]) -> checksum: simulates again up to `to` (default the present).
  function sim.resimulate(to)
    check_host("sim.resimulate")
    to = to == nil and newest or check_count("sim.resimulate", 1, to, "a tick number >= 0", 0)
    undo_partial()
    return resimulate(to) or store:check(roots)
  end

  -- sim.partial(fraction) -> checksum of the partial state: runs the next
  -- tick for `fraction` of its length; undone before the next full tick.
  function sim.partial(fraction)
    check_host("sim.partial")
    if type(fraction) ~= "number" or not (fraction >= 0 and fraction < 1) then
      argerror("sim.partial", 1, "expected a fraction from 0 to below 1, got " .. show(fraction))
    end
    undo_partial()
    store:save(PARTIAL, roots, sys.tick, "sim")
    partial_regs = regs
    run_tick(sys.tick + 1, dt * fraction, 1, true, false, true)
    alpha = fraction
    return store:check(roots)
  end

  -- sim.checksum([tick]) -> the checksum of the live state, or of a saved tick.
  function sim.checksum(tick)
    if tick == nil then return store:check(roots) end
    tick = check_count("sim.checksum", 1, tick, "a tick number >= 0", 0)
    local at, sum = store:info(tick % history)
    if at ~= tick then return nil, format("no snapshot of tick %d (%s)", tick, history_text()) end
    return sum
  end

  -- sim.diff(a, b) -> path, value in a, value in b | nil: the first
  -- difference between the snapshots of ticks a and b.
  function sim.diff(a, b)
    a = check_count("sim.diff", 1, a, "a tick number >= 0", 0)
    b = check_count("sim.diff", 2, b, "a tick number >= 0", 0)
    for _, k in ipairs({a, b}) do
      if store:info(k % history) ~= k then
        return error(format("sim.diff: no snapshot of tick %d (%s)", k, history_text()), 2)
      end
    end
    return root_difference(store:decode(a % history), store:decode(b % history))
  end

  -- sim.export([tick]) -> bytes: a snapshot (the live state by default).
  function sim.export(tick)
    local slot
    if tick == nil then
      store:save(SCRATCH, roots, sys.tick, "sim.export")
      slot = SCRATCH
    else
      tick = check_count("sim.export", 1, tick, "a tick number >= 0", 0)
      slot = tick % history
      if store:info(slot) ~= tick then
        return nil, format("no snapshot of tick %d (%s)", tick, history_text())
      end
    end
    return spack(HEADER, MAGIC, (store:info(slot))) .. store:bytes(slot)
  end

  -- sim.import(bytes) -> tick | nil, msg: makes the snapshot the live
  -- state (and the history's entry for its tick).
  function sim.import(bytes)
    check_host("sim.import")
    if type(bytes) ~= "string" then argerror("sim.import", 1, "expected a string, got " .. type(bytes)) end
    local hsize = #spack(HEADER, MAGIC, 0)
    if #bytes <= hsize or sub(bytes, 1, #MAGIC) ~= MAGIC then
      return nil, "sim.import: the bytes are not a snapshot made by sim.export"
    end
    local _, tick = sunpack(HEADER, bytes)
    if tick < 0 then return nil, "sim.import: the snapshot's tick is negative" end
    local sum, msg = store:put(tick % history, sub(bytes, hsize + 1), tick)
    if not sum then return nil, "sim.import: " .. msg end
    slot_regs[tick % history] = regs
    load(tick)
    if tick > newest then newest = tick end
    return tick
  end

  -- sim.history() -> the oldest and newest ticks the history holds (nil when empty)
  function sim.history()
    local lo, hi
    for s = 0, history - 1 do
      local k = store:info(s)
      if k then
        lo = (lo == nil or k < lo) and k or lo
        hi = (hi == nil or k > hi) and k or hi
      end
    end
    return lo, hi
  end

  -- sim.sync_stats() -> {checks, mismatches, first = {tick, path} | nil}
  function sim.sync_stats()
    return {checks = sync.checks, mismatches = sync.mismatches,
      first = sync.first and {tick = sync.first.tick, path = sync.first.path}}
  end

  -- wait_tick(n, what, level): level positions the await errors (as error()).
  wait_seq = setmetatable({}, {__mode = "k"}) -- task -> its current wait's number
  local function wait_tick(n, what, level)
    n = n == nil and 1 or check_count(what, 1, n, "a count of ticks >= 0", 0)
    local target = newest + n
    local me = sim_suspend(target, what, level) -- raises when the caller cannot await
    if n == 0 then return newest end
    seq = seq + 1
    wait_seq[me] = seq
    waiters[#waiters + 1] = {me, target, seq}
    return sim_suspend(target, what)
  end
  sim._wait_tick = wait_tick

  -- sim.wait_tick([n]) -> tick: the calling task waits until n more ticks
  -- (default 1) were simulated for the first time.
  function sim.wait_tick(n) return wait_tick(n, "sim.wait_tick", 3) end

  -- The save state that the snapshot of tick 0 is: a load(0) works.
  save(0)
  return sim
end

-- task.sim_open([opts]) -> sim: a simulation group the script drives
-- (sim.step, sim.load, ...). The first one opened becomes task.sim.
function M.sim_open(opts)
  opts = check_options("task.sim_open", 1, opts, OPEN_OPTS)
  local sim = new_group(opts)
  if M.sim == nil then M.sim = sim end
  return sim
end

-- task.wait_tick([n] [, sim]) -> tick: waits for n ticks of sim (default task.sim).
function M.wait_tick(n, sim)
  sim = sim or M.sim
  if sim == nil then error("task.wait_tick: no simulation (task.sim is nil; open one with task.sim_open)", 2) end
  return sim._wait_tick(n, "task.wait_tick", 3)
end
