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
local mtype, floor, huge, maxinteger = math.type, math.floor, math.huge, math.maxinteger
local format, sub = string.format, string.sub
local spack, sunpack = string.pack, string.unpack
local pack, unpack, sort, remove, concat = table.pack, table.unpack, table.sort, table.remove, table.concat
local argerror, number_text = P.argerror, P.number_text
local sim_call, sim_report, sim_store = I.sim_call, I.sim_report, I.sim_store
local sim_suspend, sim_wake = I.sim_suspend, I.sim_wake
local task_on = M.on

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

-- The tick flags of lunaloop/sim.h (luna_sim_flag).
local F_RESIM, F_FIRST, F_PARTIAL, F_CATCH_UP, F_FINAL = 1, 2, 4, 8, 16
local POLICIES = {drop = 0, batch = 1, debt = 2, render_paced = 3, manual = 4}
local POLICY_NAMES = {[0] = "drop", "batch", "debt", "render_paced", "manual"}
local groups = setmetatable({}, {__mode = "k"}) -- group -> its private wait_tick

-- new_group(br) -> the group's function table over bridge br (src/lua/sim.c),
-- which it becomes the state provider of.
local function new_group(br)
  local cfg = br:config()
  local tick_ns, history = cfg.tick_ns, cfg.history
  local dt = tick_ns / 1e9
  local sim = {}
  local Timer, Random = {}, {}
  local TimerMT = {__index = Timer, __name = "lunaloop.SimTimer", __metatable = "lunaloop.SimTimer"}
  local RandomMT = {__index = Random, __name = "lunaloop.SimRandom", __metatable = "lunaloop.SimRandom"}
  local classes = {[TimerMT] = 1, [RandomMT] = 2, TimerMT, RandomMT}
  local store = sim_store(history + 2, classes) -- the core's slots: the ring, partial, check
  local sys = {tick = 0, rng = {}}
  local roots = {[SYS] = sys}
  local regs = {} -- the tick callbacks, sorted; replaced, never changed
  local slot_regs = {}
  local cur -- the tick being simulated, or nil
  local just_first -- the tick just simulated for the first time, until it is saved
  local fired = {} -- [tick] = {[key] = true}: effects run (not rolled back)
  local pending = {} -- [tick] = {keys in order, [key] = packed call}: confirm effects
  local waiters = {} -- tasks in task.wait_tick, {task, target, seq}
  local wait_seq = setmetatable({}, {__mode = "k"}) -- task -> its current wait's number
  local seq = 0
  local first_mismatch
  local t = {} -- the tick table handed to callbacks, refilled per tick
  local closed = false

  local function now()
    if cur then return cur end
    return br:tick()
  end

  -- ---- the state provider (lunaloop/sim.h), called by the core ---------------

  local P = {}

  -- Wakes the tasks whose tick came, in the order they began to wait (an
  -- entry whose task waits again, or no more, is dropped).
  local function wake_waiters(head)
    local due, keep = {}, {}
    for i = 1, #waiters do
      local w = waiters[i]
      if wait_seq[w[1]] ~= w[3] then -- stale
      elseif w[2] <= head then due[#due + 1] = w
      else keep[#keep + 1] = w end
    end
    waiters = keep
    for i = 1, #due do
      wait_seq[due[i][1]] = nil
      sim_wake(due[i][1], head)
    end
  end

  -- Tasks in wait_tick are woken between ticks, never inside the core's
  -- callbacks (where the sim's tick, checksum and operations are not
  -- settled yet): by the host operation that ran the tick (sim.step ...)
  -- once it returns, or by a callback at the sim's timing (after the
  -- tick's save, in the run that follows it) that exists while tasks wait.
  local wake_due -- the head, when a first tick was saved and tasks wait
  local wake_item
  local function wake_now()
    if wake_due then
      local head = wake_due
      wake_due = nil
      wake_waiters(head)
    end
    if wake_item and #waiters == 0 then wake_item:remove(); wake_item = nil end
  end

  -- Forgets the effects run at ticks up to `upto`, which no load can reach
  -- again: every tick number from the last call's on (batches skip some,
  -- so clearing one number per tick would leave those), or, after a jump
  -- (an imported future), whatever the table holds up to there.
  -- Confirm effects of ticks that left the history unconfirmed go too (no
  -- load reaches those ticks, and a host that never confirms would keep
  -- them for ever): dropped, never run, and counted (sim.stats().
  -- effects_expired).
  local fired_low = 0
  local effects_expired = 0
  local function forget_fired(upto)
    if upto < fired_low then return end
    if upto - fired_low > 1024 then
      for k in pairs(fired) do if k <= upto then fired[k] = nil end end
    else
      for k = fired_low, upto do fired[k] = nil end
    end
    if next(pending) ~= nil then
      for k, p in pairs(pending) do
        if k <= upto then pending[k] = nil; effects_expired = effects_expired + #p end
      end
    end
    fired_low = upto + 1
  end

  function P.save(tick, slot)
    sys.tick = tick
    local sum = store:save(slot, roots, tick, "sim")
    slot_regs[slot] = regs
    if tick == just_first then
      just_first = nil
      forget_fired(tick - history - 1)
      if #waiters > 0 then wake_due = tick end
    end
    return sum
  end

  function P.load(tick, slot)
    if not store:load(slot, roots) then error("sim: slot " .. slot .. " holds no snapshot", 0) end
    regs = slot_regs[slot] or regs
    -- Confirm effects of the ticks rolled back are dropped: the ticks'
    -- next simulation records them again, or not.
    for k in pairs(pending) do if k > tick then pending[k] = nil end end
  end

  function P.discard(_, slot)
    store:clear(slot)
    slot_regs[slot] = nil
  end

  local function call_all(list)
    for i = 1, #list do sim_call(list[i].fn, t, "sim.on_tick callback") end
  end

  function P.tick(tick, tdt, batch, flags)
    t.tick, t.dt, t.batch, t.flags = tick, tdt, batch, flags
    t.resimulating = flags & F_RESIM ~= 0
    t.first = flags & F_FIRST ~= 0
    t.partial = flags & F_PARTIAL ~= 0
    t.catch_up = flags & F_CATCH_UP ~= 0
    t.final = flags & F_FINAL ~= 0
    cur = tick
    local ok, err = pcall(call_all, regs)
    cur = nil
    if t.first then just_first = tick end
    if not ok then error(err, 0) end
  end

  function P.export(_, slot)
    return store:bytes(slot) or error("sim: slot " .. slot .. " holds no snapshot", 0)
  end

  -- A snapshot's root must hold this group's states (each a table) and
  -- its own data, and nothing else: a load restores the root in place, so
  -- another script's snapshot would drop the registered tables from every
  -- later snapshot. Returns nil or what is wrong.
  local function foreign(root)
    local lacks, has = {}, {}
    for k in pairs(roots) do if type(root[k]) ~= "table" then lacks[#lacks + 1] = k end end
    for k in pairs(root) do if roots[k] == nil then has[#has + 1] = k end end
    if #lacks == 0 and #has == 0 then return nil end
    local function names(list)
      sort(list, key_less)
      for i, k in ipairs(list) do list[i] = k == SYS and "(sim)" or show(k) end
      return concat(list, ", ")
    end
    local parts = {}
    if #lacks > 0 then parts[#parts + 1] = "it lacks " .. names(lacks) end
    if #has > 0 then parts[#parts + 1] = "has " .. names(has) end
    return "sim.import: the snapshot is not of this group's states (" .. concat(parts, ", ") .. ")"
  end

  function P.import(tick, slot, bytes)
    local sum, msg = store:put(slot, bytes, tick)
    if not sum then return nil, "sim.import: " .. msg end
    local wrong = foreign(store:decode(slot))
    if wrong then store:clear(slot); return nil, wrong end
    slot_regs[slot] = regs
    return sum
  end

  local function run_confirmed(upto)
    local ticks = {}
    for k in pairs(pending) do if k <= upto then ticks[#ticks + 1] = k end end
    sort(ticks)
    for _, k in ipairs(ticks) do
      local p = pending[k]
      pending[k] = nil
      local done = fired[k]
      if not done then
        done = {}
        if k >= fired_low then fired[k] = done end -- older: no load reaches it again
      end
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
  P.confirm = run_confirmed

  -- The first mismatch is reported; the later ones are counted
  -- (sim.stats().mismatches): one bug makes every tick after it differ.
  function P.mismatch(tick, expected_slot, actual_slot)
    if first_mismatch then return end
    local path, a, b = root_difference(store:decode(expected_slot), store:decode(actual_slot))
    first_mismatch = {tick = tick, path = path}
    local cfg_now = br:config()
    local where = path and format("at %s: %s the first time, %s after rolling back",
      path, show(a), show(b)) or "(the snapshots decode equal: a NaN?)"
    local _, head = br:info()
    sim_report(format("sim sync-test: tick %d differs when re-simulated from tick %d " ..
      "(checking tick %d), %s (state the callbacks keep outside sim.state: an upvalue, a " ..
      "global, math.random?; later mismatches are counted in sim.stats().mismatches)",
      tick, head - cfg_now.check_distance, head, where), "sim sync-test")
  end

  -- ---- the group's functions ----------------------------------------------------

  local function check_open(fname, level)
    if closed then error(fname .. ": the simulation was closed", level or 3) end
  end

  local function check_host(fname)
    check_open(fname, 4)
    if cur ~= nil then error(fname .. ": called from a tick callback (roll back between ticks)", 3) end
  end

  -- Raises the error of a host operation that failed, at the caller.
  local function host(fname, ok, msg, ...)
    if ok == nil then error(fname .. ": " .. msg, 3) end
    return ok, msg, ...
  end

  local function history_text()
    local tick, _, _, oldest = br:info()
    return oldest and format("the history holds ticks %d to %d", oldest, tick) or "the history is empty"
  end

  local function no_snapshot(tick)
    return nil, format("no snapshot of tick %d (%s)", tick, history_text())
  end

  -- What sim.state and sim.random add outside a tick is in no snapshot
  -- taken so far: the history starts again at the present tick.
  local function restart()
    for k in pairs(pending) do if k > br:tick() then pending[k] = nil end end
    br:restart()
  end

  -- sim.state(name, tbl) -> tbl
  function sim.state(name, tbl)
    check_open("sim.state")
    if type(name) ~= "string" or name == "" then
      argerror("sim.state", 1, "expected a name (a non-empty string), got " .. show(name))
    end
    if type(tbl) ~= "table" then
      argerror("sim.state", 2, "expected a table, got " .. type(tbl))
    end
    local ok, err = pcall(store.check, store, tbl, "sim.state", name)
    if not ok then error(err, 2) end
    if roots[name] ~= tbl then
      if cur ~= nil then error("sim.state: called from a tick callback (register states outside ticks)", 2) end
      roots[name] = tbl
      local rok, rerr = pcall(restart)
      if not rok then roots[name] = nil; error(rerr, 2) end
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
  local function edit_regs(edit)
    if cur ~= nil then
      regs = edit(regs)
      return
    end
    local done = {}
    local function redo(list)
      local new = done[list]
      if not new then new = edit(list); done[list] = new end
      return new
    end
    regs = redo(regs)
    for slot, list in pairs(slot_regs) do slot_regs[slot] = redo(list) end
  end

  -- sim.on_tick(fn [, opts]) -> handle
  function sim.on_tick(fn, opts)
    check_open("sim.on_tick")
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
  -- the tick the state belongs to.
  function sim.tick() return now() end

  -- sim.newest() -> the head: the newest tick ever fully simulated.
  function sim.newest()
    local _, head = br:info()
    return head
  end

  -- sim.confirmed() -> the newest confirmed tick.
  function sim.confirmed()
    local _, _, confirmed = br:info()
    return confirmed
  end

  -- sim.history() -> oldest, newest tick the history holds (nil when empty).
  function sim.history()
    local tick, _, _, oldest = br:info()
    if oldest == nil then return nil end
    return oldest, tick
  end

  -- sim.alpha() -> the fraction of the next tick already accumulated.
  function sim.alpha() return br:alpha() end

  -- sim.dt() -> the tick length in seconds.
  function sim.dt() return dt end

  -- sim.stats() -> the core's counters (luna_sim_stats).
  function sim.stats()
    check_open("sim.stats")
    local st = br:stats()
    st.first_mismatch = first_mismatch and {tick = first_mismatch.tick, path = first_mismatch.path}
    st.effects_expired = effects_expired
    return st
  end

  -- sim.config() -> the settings in effect.
  function sim.config()
    check_open("sim.config")
    local c = br:config()
    c.policy = POLICY_NAMES[c.policy]
    c.tick = c.tick_ns / 1e9
    return c
  end

  -- sim.set_rate_scale(scale): the clock stretch.
  function sim.set_rate_scale(scale)
    check_open("sim.set_rate_scale")
    if type(scale) ~= "number" or not br:set_rate_scale(scale) then
      argerror("sim.set_rate_scale", 1, "expected a scale from 0 to 16, got " .. show(scale))
    end
  end

  -- sim.timer(ticks) -> a timer that expires `ticks` ticks from now.
  function sim.timer(ticks)
    ticks = check_count("sim.timer", 1, ticks, "a count of ticks >= 0", 0)
    if ticks > 2^48 then argerror("sim.timer", 1, "expected at most 2^48 ticks, got " .. show(ticks)) end
    return setmetatable({at = now() + ticks}, TimerMT)
  end
  function Timer:remaining()
    local r = self.at - now()
    return r > 0 and r or 0
  end
  function Timer:expired() return now() >= self.at end

  -- sim.random(seed) -> a generator (splitmix64) whose state is in the snapshot.
  function sim.random(seed)
    check_open("sim.random")
    if mtype(seed) ~= "integer" then
      argerror("sim.random", 1, "expected an integer seed, got " .. show(seed))
    end
    local r = setmetatable({s = seed}, RandomMT)
    sys.rng[#sys.rng + 1] = r
    if cur == nil then
      local ok, err = pcall(restart)
      if not ok then sys.rng[#sys.rng] = nil; error(err, 2) end
    end
    return r
  end
  local function next64(r)
    local x = r.s + 0x9e3779b97f4a7c15
    r.s = x
    x = (x ~ (x >> 30)) * 0xbf58476d1ce4e5b9
    x = (x ~ (x >> 27)) * 0x94d049bb133111eb
    return x ~ (x >> 31)
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
    if (kt ~= "string" and kt ~= "number" and kt ~= "boolean") or key ~= key then
      argerror("sim.effect", 1, "expected a key (a string, number or boolean), got " .. show(key))
    end
    if type(fn) ~= "function" then
      argerror("sim.effect", args, "expected a function, got " .. type(fn))
    end
    if cur == nil then error("sim.effect: called outside a tick callback", 2) end
    if t.partial then return false end
    local done = fired[cur]
    if done and done[key] then return false end
    if confirm and cur > sim.confirmed() then
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
    check_host("sim.confirm")
    tick = check_count("sim.confirm", 1, tick, "a tick number >= 0", 0)
    if tick > br:tick() then
      argerror("sim.confirm", 1, format("expected a tick up to the current tick %d, got %d", br:tick(), tick))
    end
    host("sim.confirm", br:confirm(tick))
  end

  -- sim.step([n]) -> checksum: simulates n ticks (default 1) after the present state.
  function sim.step(n)
    check_host("sim.step")
    n = n == nil and 1 or check_count("sim.step", 1, n, "a count of ticks >= 1", 1)
    local sum
    for i = 1, n do
      local before = br:tick()
      local ok, a, b = pcall(br.step, br, i == n and F_FINAL or 0)
      if ok and a == nil then error("sim.step: " .. b, 2) end
      if not ok then
        -- The tick ran but could not be saved: back to the tick before,
        -- so that the group stays consistent, and the error at the call.
        if br:tick() ~= before and br:checksum(before) then br:load(before) end
        error(a, 2)
      end
      sum = a
    end
    wake_now()
    return sum
  end

  -- sim.save() -> checksum: the snapshot of the current tick, taken again.
  function sim.save()
    check_host("sim.save")
    return (host("sim.save", br:save()))
  end

  -- sim.load(tick) -> tick | nil, msg
  function sim.load(tick)
    check_host("sim.load")
    tick = check_count("sim.load", 1, tick, "a tick number >= 0", 0)
    local confirmed = sim.confirmed()
    if tick < confirmed then
      return nil, format("tick %d is before the confirmed tick %d", tick, confirmed)
    end
    if not br:checksum(tick) then return no_snapshot(tick) end
    return (host("sim.load", br:load(tick)))
  end

  -- sim.resimulate([from]) -> ticks run | nil, msg: loads tick `from`
  -- (default the current tick) and simulates again up to the head.
  function sim.resimulate(from)
    check_host("sim.resimulate")
    from = from == nil and br:tick() or check_count("sim.resimulate", 1, from, "a tick number >= 0", 0)
    local confirmed = sim.confirmed()
    if from < confirmed then
      return nil, format("tick %d is before the confirmed tick %d", from, confirmed)
    end
    if not br:checksum(from) then return no_snapshot(from) end
    local ran, msg = host("sim.resimulate", br:resimulate(from))
    wake_now()
    return ran, msg
  end

  -- sim.partial([fraction]) -> true | false: runs the next tick for
  -- `fraction` of its length (default alpha); undone before the next full
  -- tick. false when the fraction is 0 (nothing to run).
  function sim.partial(fraction)
    check_host("sim.partial")
    local ns
    if fraction == nil then
      ns = floor(br:alpha() * tick_ns + 0.5)
    else
      if type(fraction) ~= "number" or not (fraction > 0 and fraction <= 1) then
        argerror("sim.partial", 1, "expected a fraction above 0 and at most 1, got " .. show(fraction))
      end
      ns = floor(fraction * tick_ns + 0.5)
    end
    if ns <= 0 then return false end
    if ns > tick_ns then ns = tick_ns end
    host("sim.partial", br:partial(ns))
    return true
  end

  -- sim.checksum([tick]) -> the checksum of the live state, or of a saved tick.
  function sim.checksum(tick)
    check_open("sim.checksum")
    if tick == nil then return store:check(roots) end
    tick = check_count("sim.checksum", 1, tick, "a tick number >= 0", 0)
    local sum = br:checksum(tick)
    if not sum then return no_snapshot(tick) end
    return sum
  end

  -- sim.diff(a, b) -> path, value in a, value in b | nil: the first
  -- difference between the snapshots of ticks a and b.
  function sim.diff(a, b)
    check_open("sim.diff")
    a = check_count("sim.diff", 1, a, "a tick number >= 0", 0)
    b = check_count("sim.diff", 2, b, "a tick number >= 0", 0)
    for _, k in ipairs({a, b}) do
      if not br:checksum(k) then error("sim.diff: " .. select(2, no_snapshot(k)), 2) end
    end
    return root_difference(store:decode(a % history), store:decode(b % history))
  end

  -- sim.export([tick]) -> bytes | nil, msg: the snapshot of a saved tick
  -- (default the current one).
  function sim.export(tick)
    check_open("sim.export")
    tick = tick == nil and br:tick() or check_count("sim.export", 1, tick, "a tick number >= 0", 0)
    if not br:checksum(tick) then return no_snapshot(tick) end
    return spack(HEADER, MAGIC, tick) .. host("sim.export", br:export(tick))
  end

  -- sim.import(bytes [, opts]) -> tick, checksum | nil, msg: stores the
  -- snapshot in the history as its tick's; {load = true} also loads it.
  function sim.import(bytes, opts)
    check_host("sim.import")
    if type(bytes) ~= "string" then argerror("sim.import", 1, "expected a string, got " .. type(bytes)) end
    opts = check_options("sim.import", 2, opts, {load = true})
    local hsize = #spack(HEADER, MAGIC, 0)
    if #bytes <= hsize or sub(bytes, 1, #MAGIC) ~= MAGIC then
      return nil, "sim.import: the bytes are not a snapshot made by sim.export"
    end
    local _, tick = sunpack(HEADER, bytes)
    if tick < 0 then return nil, "sim.import: the snapshot's tick is negative" end
    if tick > 1 << 62 then -- so that stepping on from it never reaches math.maxinteger
      return nil, format("sim.import: the snapshot's tick %d is out of range (0 to 2^62)", tick)
    end
    local ok, sum = pcall(br.import, br, tick, sub(bytes, hsize + 1))
    if not ok then return nil, sum end
    if sum == nil then return nil, "sim.import: the bytes are not a snapshot (damaged, or not made by sim.export)" end
    if opts.load then
      local loaded, msg = sim.load(tick)
      if not loaded then return nil, msg end
    end
    return tick, sum
  end

  -- wait_tick(n, what, level): level positions the await errors (as error()).
  local function wait_tick(n, what, level)
    check_open(what)
    n = n == nil and 1 or check_count(what, 1, n, "a count of ticks >= 0", 0)
    local head = sim.newest()
    local target = n > maxinteger - head and maxinteger or head + n -- never wraps
    local me = sim_suspend(target, what, level) -- raises when the caller cannot await
    if n == 0 then return target end
    seq = seq + 1
    wait_seq[me] = seq
    waiters[#waiters + 1] = {me, target, seq}
    if not wake_item then wake_item = task_on(cfg.timing, wake_now, {priority = "high"}) end
    return sim_suspend(target, what)
  end
  groups[sim] = wait_tick

  -- sim.wait_tick([n]) -> tick: the calling task waits until n more ticks
  -- (default 1) were simulated for the first time.
  function sim.wait_tick(n) return wait_tick(n, "sim.wait_tick", 3) end

  -- sim.close(): frees a simulation task.sim_open made (the host's: stops
  -- providing its state); the group's functions raise afterwards.
  function sim.close()
    if closed then return end
    check_host("sim.close")
    local ok, err = pcall(br.close, br)
    if not ok then error((err:gsub("^[^:]*:%d+: ", "")), 2) end -- at the caller
    if wake_item then wake_item:remove(); wake_item = nil end
    closed = true
    if M.sim == sim then M.sim = nil end
  end

  br:attach(P)
  br:save() -- the present is tick 0's snapshot (or the host's current tick's)
  return sim
end

local OPEN_OPTS = {tick_rate = true, tick = true, history = true, check_distance = true,
  policy = true, max_ticks = true, max_batch = true, max_debt = true, rate_scale = true,
  timing = true}

-- task.sim_open([opts]) -> sim: a simulation on the state's loop (one per
-- loop), driven by the frames at its timing pair and by the script
-- (sim.step, sim.load ...). It becomes task.sim.
function M.sim_open(opts)
  opts = check_options("task.sim_open", 1, opts, OPEN_OPTS)
  local c = {}
  local function bad(key, expected)
    argerror("task.sim_open", 1, format("opts.%s: expected %s, got %s", key, expected, show(opts[key])), 3)
  end
  if opts.tick_rate ~= nil and opts.tick ~= nil then
    argerror("task.sim_open", 1, "opts.tick_rate and opts.tick: give one of them", 2)
  end
  if opts.tick_rate ~= nil then
    local r = opts.tick_rate
    if type(r) ~= "number" or not (r >= 1e-3 and r <= 1e6) then bad("tick_rate", "a rate from 0.001 to 1e6 Hz") end
    c.tick_ns = floor(1e9 / r + 0.5)
  elseif opts.tick ~= nil then
    local s = opts.tick
    if type(s) ~= "number" or not (s >= 1e-6 and s <= 1000) then bad("tick", "seconds from 1e-6 to 1000") end
    c.tick_ns = floor(s * 1e9 + 0.5)
  end
  local function count(key, min, max)
    local v = opts[key]
    if v == nil then return nil end
    if mtype(v) ~= "integer" or v < min or v > max then
      bad(key, format("an integer from %d to %d", min, max))
    end
    return v
  end
  c.history = count("history", 1, 65536)
  c.check_distance = count("check_distance", 0, 65535)
  c.max_ticks = count("max_ticks", 1, 65536)
  c.max_batch = count("max_batch", 1, 65536)
  c.max_debt = count("max_debt", 1, 65536)
  if c.check_distance and c.check_distance >= (c.history or 64) then
    bad("check_distance", format("less than the history (%d)", c.history or 64))
  end
  if opts.policy ~= nil then
    c.policy = POLICIES[opts.policy]
    if not c.policy then bad("policy", '"drop", "batch", "debt", "render_paced" or "manual"') end
  end
  if opts.rate_scale ~= nil then
    local v = opts.rate_scale
    if type(v) ~= "number" or not (v >= 0 and v <= 16) then bad("rate_scale", "a scale from 0 to 16") end
    c.rate_scale = v
  end
  if opts.timing ~= nil then
    for i, name in ipairs(M.timings) do
      if name == opts.timing and i % 2 == 1 then c.timing = i - 1 end
    end
    if c.timing == nil or c.timing == 0 then bad("timing", "the first timing of a pair (\"FixedUpdate\", ...)") end
  end
  if c.rate_scale == 0 then c.rate_scale = nil end -- the core's 0 is "the default, 1": set after
  local br, msg = I.sim_new(c)
  if not br then error("task.sim_open: " .. msg, 2) end
  if opts.rate_scale == 0 then br:set_rate_scale(0) end
  local sim = new_group(br)
  M.sim = sim
  return sim
end

-- task.wait_tick([n] [, sim]) -> tick: waits for n ticks of sim (default task.sim).
function M.wait_tick(n, sim)
  sim = sim or M.sim
  local wait = groups[sim]
  if wait == nil then
    error("task.wait_tick: no simulation (task.sim is nil: open one with task.sim_open)", 2)
  end
  return wait(n, "task.wait_tick", 3)
end

-- The host attached a sim (luna_lua_attach_sim): task.sim is its group.
I.sim_set_attach(function(br) M.sim = new_group(br) end)
