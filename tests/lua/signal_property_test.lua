-- signal_property_test.lua: random interleavings of connect (plain and
-- once), disconnect, fire, fire_deferred and frames on one signal, with
-- handlers that themselves disconnect others or themselves, connect new
-- handlers, fire again (nested), queue deferred fires and raise, run
-- through the real binding and checked against a model of the rules
-- (docs/api.md, "Signals"):
--
--   * a fire calls the connections there were when it began, in
--     connection order, skipping those disconnected since (also by a
--     handler earlier in the same fire);
--   * a once handler is disconnected before its call, so it runs once;
--   * a handler connected during a fire first runs at the next fire (a
--     nested fire is a next fire);
--   * a raising handler is reported once and stays connected, and the
--     fire goes on;
--   * deferred fires are delivered at the next Update, in fire order; one
--     queued during a delivery waits for the next frame;
--   * a task waiting in s:wait() is a connection too (a once one): it gets
--     the values of the first fire that reaches it, nested fires included.
--
-- After every step the calls made (handler id and fire value) and every
-- connection's connected() are compared with the model's. Each program is
-- generated from its seed, printed when they disagree.
-- LUNA_PROPERTY_PROGRAMS sets how many programs (default 500).
local H = require "harness"

local PROGRAMS = tonumber(os.getenv("LUNA_PROPERTY_PROGRAMS") or "") or 500
local STEPS = 40
local MAXCONN = 40 -- handlers connecting handlers stop there (growth)

-- A small deterministic generator per (seed, id), so the real handlers and
-- the model draw the same behaviour for the same connection.
local function rng(seed)
  local x = seed % 2147483647
  if x <= 0 then x = x + 2147483646 end
  return function(n)
    x = (x * 48271) % 2147483647
    return x % n + 1
  end
end

-- What handler `id` does when called: a list of actions.
local function behaviour(seed, id, nids)
  local r = rng(seed * 7919 + id * 104729 + 1)
  local acts = {}
  for _ = 1, r(3) - 1 do
    local k = r(10)
    if k <= 3 then acts[#acts + 1] = {"disconnect", r(nids + 2)}
    elseif k == 4 then acts[#acts + 1] = {"disconnect_self"}
    elseif k <= 6 then acts[#acts + 1] = {"connect", r(3) == 1}
    elseif k == 7 then acts[#acts + 1] = {"fire"}
    elseif k == 8 then acts[#acts + 1] = {"fire_deferred"}
    else acts[#acts + 1] = {"raise"} end
  end
  return acts
end

-- Runs one program; returns nil or a description of the first difference.
local function program(seed)
  local r = rng(seed)
  local real = {s = task.signal(), conns = {}, log = {}, n = 0, waited = {}, nw = 0}
  local model = {conns = {}, log = {}, n = 0, queue = {}, reports = 0, waited = {}, nw = 0}
  local reports, restore = H.capture_errors()
  local depth = 0

  -- ---- the model ----
  local mfire
  local function mconnect(once)
    model.n = model.n + 1
    model.conns[#model.conns + 1] = {id = model.n, connected = true, once = once}
    return model.n
  end
  local function mfind(id)
    for _, c in ipairs(model.conns) do if c.id == id then return c end end
  end
  local function mrun(c, v)
    model.log[#model.log + 1] = c.id .. ":" .. v
    for _, a in ipairs(behaviour(seed, c.id, model.n)) do
      if a[1] == "disconnect" then
        local t = mfind(a[2]); if t then t.connected = false end
      elseif a[1] == "disconnect_self" then c.connected = false
      elseif a[1] == "connect" then if model.n < MAXCONN then mconnect(a[2]) end
      elseif a[1] == "fire" then
        if depth < 1 then depth = depth + 1; mfire(v .. "n"); depth = depth - 1 end
      elseif a[1] == "fire_deferred" then
        if #v < 4 then model.queue[#model.queue + 1] = v .. "d" end
      else model.reports = model.reports + 1; return end
    end
  end
  mfire = function(v)
    local n = #model.conns
    for i = 1, n do
      local c = model.conns[i]
      if c.connected then
        if c.once then c.connected = false end
        if c.waiter then model.waited[c.waiter] = v else mrun(c, v) end
      end
    end
  end

  -- ---- the real signal ----
  local rfire
  local rconnect
  local function rrun(id, v, self_conn)
    real.log[#real.log + 1] = id .. ":" .. v
    for _, a in ipairs(behaviour(seed, id, real.n)) do
      if a[1] == "disconnect" then
        local t = real.conns[a[2]]; if t then t:disconnect() end
      elseif a[1] == "disconnect_self" then real.conns[id]:disconnect()
      elseif a[1] == "connect" then if real.n < MAXCONN then rconnect(a[2]) end
      elseif a[1] == "fire" then
        if depth < 1 then depth = depth + 1; real.s:fire(v .. "n"); depth = depth - 1 end
      elseif a[1] == "fire_deferred" then
        if #v < 4 then real.s:fire_deferred(v .. "d") end -- bounded growth
      else error("raised by " .. id, 0) end
    end
  end
  rconnect = function(once)
    real.n = real.n + 1
    local id = real.n
    real.conns[id] = real.s:connect(function(v) rrun(id, v) end, {once = once})
    return id
  end

  local function compare(step, what)
    local a, b = table.concat(real.log, " "), table.concat(model.log, " ")
    if a ~= b then return string.format("step %d (%s): calls\n  real:  %s\n  model: %s", step, what, a, b) end
    for id = 1, model.n do
      local rc, mc = real.conns[id], mfind(id)
      if rc == nil or rc:connected() ~= mc.connected then
        return string.format("step %d (%s): connection %d connected real %s, model %s", step, what,
          id, tostring(rc and rc:connected()), tostring(mc.connected))
      end
    end
    for w = 1, model.nw do
      if real.waited[w] ~= model.waited[w] then
        return string.format("step %d (%s): waiter %d got %s, model %s", step, what, w,
          tostring(real.waited[w]), tostring(model.waited[w]))
      end
    end
    if #reports ~= model.reports then
      return string.format("step %d (%s): %d reports, model %d", step, what, #reports, model.reports)
    end
  end

  local diff
  for step = 1, STEPS do
    local k, what = r(10)
    if k <= 3 then
      local once = r(4) == 1
      rconnect(once); mconnect(once)
      what = "connect" .. (once and " once" or "")
    elseif k == 4 and r(2) == 1 then
      real.nw = real.nw + 1
      local w = real.nw
      task.spawn(function() real.waited[w] = real.s:wait() end)
      model.nw = model.nw + 1
      model.conns[#model.conns + 1] = {id = -model.nw, connected = true, once = true, waiter = model.nw}
      what = "wait " .. w
    elseif k <= 5 and model.n > 0 then
      local id = r(model.n)
      real.conns[id]:disconnect()
      mfind(id).connected = false
      what = "disconnect " .. id
    elseif k <= 8 then
      local v = "f" .. step
      real.s:fire(v); mfire(v)
      what = "fire " .. v
    elseif k == 9 then
      local v = "q" .. step
      real.s:fire_deferred(v); model.queue[#model.queue + 1] = v
      what = "fire_deferred " .. v
    else
      H.frames(1)
      local q = model.queue
      model.queue = {}
      for _, v in ipairs(q) do mfire(v) end
      what = "frame"
    end
    diff = compare(step, what)
    if diff then break end
  end
  restore()
  real.s:destroy()
  return diff
end

H.case("random_connect_disconnect_fire_interleavings_match_the_model", function()
  for seed = 1, PROGRAMS do
    local diff = program(seed)
    if diff then error("seed " .. seed .. ": " .. diff) end
    testhost.reset()
  end
end)

H.run()
