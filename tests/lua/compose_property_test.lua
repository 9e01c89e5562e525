-- compose_property_test.lua: random programs over spawn, the awaits (yield,
-- frame and clock delays, awaiting tasks), cancel, `<close>` variables,
-- errors, the combinators (when_all, when_any, timeout, scope) and
-- channels, run through the real binding and checked against rules that
-- need no model of the right answer:
--
--   * every run ends: all tasks settle within a bounded number of frames
--     (the channels are closed at frame CLOSE_AT, so a wait on one ends);
--   * every task it created ends done, failed or cancelled;
--   * every failure reaches exactly one place: an error value is caught by
--     the program's own pcall or reported through task.on_error once, and
--     never both or neither (relaxed only where the rules give a failure
--     to several places: a task awaited twice, or after it settled; an
--     error replaced by a __close handler's, as stock Lua does);
--   * nothing runs after it was cancelled: no await returns normally in a
--     task that task.cancel has cancelled (or that a combinator cancelled),
--     and task.cancel of a task that is not running returns with it
--     settled (or its cancellation queued, which reads "cancelled");
--   * every `<close>` variable that was declared is closed exactly once;
--   * a channel loses no value and makes none up: a value is received at
--     most once, only if a send offered it, and always (or is still
--     buffered) when its send returned;
--   * a combinator leaves no child running: when it returns or raises,
--     every task it started (function inputs, scope children) has settled.
--
-- Each program is generated from its own seed and printed with that seed
-- when a rule breaks. Environment:
--   LUNA_PROPERTY_PROGRAMS  how many programs (default 10,000, about 2 s in
--                           a debug build; the sanitizer builds default to
--                           fewer, tests/CMakeLists.txt)
--   LUNA_PROPERTY_SEED      the first program's seed (default 1); program i
--                           uses seed + i - 1, so a failure is replayed with
--                           LUNA_PROPERTY_SEED=<its seed> LUNA_PROPERTY_PROGRAMS=1
--   LUNA_PROPERTY_SIZE      the most statements a program has (default 40;
--                           a replay needs the size its failure ran with)
-- The longer mode (README.md, "Tests") is the same script with a larger
-- count, any seed and a larger size.

local PROGRAMS = tonumber(os.getenv("LUNA_PROPERTY_PROGRAMS") or "")
  or tonumber(os.getenv("LUNA_PROPERTY_DEFAULT_PROGRAMS") or "") or 10000
local SEED = tonumber(os.getenv("LUNA_PROPERTY_SEED") or "") or 1
local SIZE = tonumber(os.getenv("LUNA_PROPERTY_SIZE") or "") or 40
local CLOSE_AT = 20  -- frame at which every channel is closed
local MAX_FRAMES = 300 -- a run that has not ended by then never will
local DT = 1 / 60

-- The generator -----------------------------------------------------------

local rnd = math.random
local function pick(t) return t[rnd(#t)] end

-- Generation state for one program: a statement budget (so runs stay
-- short), an id counter, and the channel names.
local G

local function new_id()
  G.id = G.id + 1
  return G.id
end

-- A copy of a list of visible names (each block sees its parents' names,
-- and what it consumes is gone for the code after it).
local function copy(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  return c
end

local gen_block

-- A function literal run as a task: its first line records the task. It
-- sees the handles of the code around it (upvalues), so tasks await and
-- cancel their siblings too.
local function gen_task_fn(ctx, owner, depth)
  local m = "m" .. new_id()
  local inner = {handles = copy(ctx.handles), parents = copy(ctx.parents), scope = nil}
  inner.parents[#inner.parents + 1] = m
  return ("function() local %s = P.enter(%s) %s end"):format(m, owner or "nil",
    gen_block(inner, depth + 1))
end

-- A task to await, cancel or give to a combinator: a handle in sight
-- (taken from this block's list when awaited, though a function defined
-- earlier may still use it: the checks count the uses) or an enclosing
-- task (possibly the caller itself: the cycles and self-awaits the rules
-- refuse).
local function take_task(ctx, consume)
  if #ctx.handles > 0 and rnd() < 0.75 then
    local i = rnd(#ctx.handles)
    local h = ctx.handles[i]
    if consume then table.remove(ctx.handles, i) end
    return h
  end
  if #ctx.parents > 0 then return pick(ctx.parents) end
  return nil
end

local gen_stmt

local function gen_close_action(ctx, depth)
  local r = rnd(8)
  if r == 1 then
    local t = take_task(ctx, false)
    if t then return ("P.cancel(%s)"):format(t) end
  elseif r == 2 then
    return ("P.close_error(err, %d)"):format(new_id())
  elseif r == 3 then
    return ("P.send(%s, %d)"):format(pick(G.channels), new_id())
  elseif r == 4 then
    return ("%s:close()"):format(pick(G.channels))
  elseif r == 5 then
    return "task.yield()" -- an await in a handler (raises in a cancelled task)
  elseif r == 6 and depth < 3 then -- any statement, a combinator's await included
    return gen_stmt({handles = copy(ctx.handles), parents = ctx.parents, scope = nil}, depth + 1)
  end
  return ""
end

local function gen_input(ctx, cid, depth)
  if rnd() < 0.3 then
    local t = take_task(ctx, true)
    if t then return t end
  end
  return gen_task_fn(ctx, cid, depth)
end

-- A call and its probe, caught by the program's own pcall half the time.
local function maybe_try(code)
  if rnd() < 0.5 then return ("P.try(function() %s end)"):format(code) end
  return code
end

function gen_stmt(ctx, depth)
  G.budget = G.budget - 1
  local id = new_id()
  local deep = depth >= 3 or G.budget <= 0
  local r = rnd(deep and 9 or 17)
  if r == 1 then
    return ("task.yield() P.ok(%d)"):format(id)
  elseif r == 2 then
    return ("task.delay_frame(%d) P.ok(%d)"):format(rnd(0, 3), id)
  elseif r == 3 then
    return ("task.delay(%g) P.ok(%d)"):format(rnd(0, 5) / 100, id)
  elseif r == 4 then
    local t = take_task(ctx, true)
    if t then return ("P.await(%s) P.ok(%d)"):format(t, id) end
    return ("task.yield() P.ok(%d)"):format(id)
  elseif r == 5 then
    local t = take_task(ctx, false)
    if t then return ("P.cancel(%s)"):format(t) end
    return ""
  elseif r == 6 then
    return ("local c%d <close> = P.closer(%d, function(err) %s end)"):format(id, id,
      gen_close_action(ctx, depth))
  elseif r == 7 then -- (a send or receive that need not wait is no await: no P.ok)
    return ("P.send(%s, %d)"):format(pick(G.channels), id)
  elseif r == 8 then
    return ("P.receive(%s)"):format(pick(G.channels))
  elseif r == 9 then
    if rnd() < 0.5 then return ("%s:close()"):format(pick(G.channels)) end
    return ("P.drain(%s)"):format(pick(G.channels))
  elseif r <= 11 then
    local name = "t" .. id
    local fn = gen_task_fn(ctx, nil, depth)
    ctx.handles[#ctx.handles + 1] = name
    -- task.defer: a task that has not started yet when it is cancelled or awaited
    return ("local %s = %s(%s)"):format(name, r == 10 and "task.defer" or "P.spawn", fn)
  elseif r == 12 then
    local inner = {handles = copy(ctx.handles), parents = ctx.parents, scope = ctx.scope}
    return ("P.try(function() %s end)"):format(gen_block(inner, depth + 1))
  elseif r == 13 or r == 14 then
    local n = rnd(r == 13 and 0 or 1, 3)
    local inputs = {}
    for i = 1, n do inputs[i] = gen_input(ctx, id, depth) end
    local call = ("P.combine(%d, %q%s%s)"):format(id, r == 13 and "when_all" or "when_any",
      n > 0 and ", " or "", table.concat(inputs, ", "))
    return maybe_try(call .. (" P.ok(%d)"):format(id))
  elseif r == 15 then
    local call = ("P.timeout(%d, %g, %s)"):format(id, rnd(0, 6) / 100, gen_input(ctx, id, depth))
    return maybe_try(call .. (" P.ok(%d)"):format(id))
  elseif r == 16 then
    local s = "s" .. id
    local inner = {handles = copy(ctx.handles), parents = ctx.parents, scope = {s, id}}
    local call = ("P.scope(%d, function(%s) %s end)"):format(id, s, gen_block(inner, depth + 1))
    return maybe_try(call .. (" P.ok(%d)"):format(id))
  else
    if ctx.scope then
      local s, sid = ctx.scope[1], ctx.scope[2]
      local name = "t" .. id
      ctx.handles[#ctx.handles + 1] = name
      return ("local %s = P.scope_spawn(%d, %s, %s)"):format(name, sid, s,
        gen_task_fn(ctx, sid, depth))
    end
    return ("error(P.err(%d))"):format(id)
  end
end

-- A block: a few statements, sometimes ending with an error.
function gen_block(ctx, depth)
  local out = {}
  local n = G.budget > 0 and rnd(1, 5) or 0
  for i = 1, n do out[i] = gen_stmt(ctx, depth) end
  if rnd() < 0.15 then out[#out + 1] = ("error(P.err(%d))"):format(new_id()) end
  return table.concat(out, " ")
end

-- The text of one program: a chunk returning the main task's function.
local function generate(seed)
  math.randomseed(seed)
  G = {id = 0, budget = rnd(6, math.max(6, SIZE)), channels = {}}
  local lines = {}
  for i = 1, rnd(1, 3) do
    local caps = {"nil", "0", "1", "2"}
    G.channels[i] = "ch" .. i
    lines[#lines + 1] = ("local ch%d = P.channel(%s)"):format(i, pick(caps))
  end
  local main = {handles = {}, parents = {"main"}, scope = nil}
  lines[#lines + 1] = "return function() local main = P.enter(nil) " .. gen_block(main, 0) .. " end"
  return table.concat(lines, "\n")
end

-- The probe: what programs call, and the rules checked ----------------------

local P, R -- R: the record of one run
-- What the programs did, over the whole test (printed at the end, so a
-- change to the generator that stops exercising something shows).
local stats = {combinators = 0, cancels = 0, failures = 0, closes = 0, tasks = 0}

local function fail(fmt, ...)
  error({violation = fmt:format(...)}, 0)
end

local function settled(t)
  local st = t:status()
  return st == "done" or st == "failed" or st == "cancelled"
end

local function is_tracked(e)
  return type(e) == "table" and not task.is_cancelled(e)
end

local function failure_of(t)
  if t:status() ~= "failed" then return nil end
  local _, e = t:result()
  return e
end

-- A use of task t by an await or a combinator: a second use, or a use of a
-- settled task, gives its failure to more than one place.
local function use(t)
  R.uses[t] = (R.uses[t] or 0) + 1
  if R.uses[t] > 1 or settled(t) then R.shared[t] = true end
end

local function delivered(e)
  stats.failures = stats.failures + 1
  if is_tracked(e) or type(e) == "string" then R.delivered[e] = (R.delivered[e] or 0) + 1 end
end

-- A child that is running is up the resume chain (it cancelled the caller
-- itself): it unwinds when control comes back to it, and must not pass
-- another await.
local function check_children(list, what)
  stats.combinators = stats.combinators + 1
  for _, c in ipairs(list or {}) do
    local st = c:status()
    if st ~= "running" and not settled(c) then fail("%s returned with a child still %s", what, st) end
    if st == "cancelled" or st == "running" then R.stopped[c] = true end
  end
end

P = {}

function P.enter(owner)
  local me = task.current()
  R.tasks[#R.tasks + 1] = me
  stats.tasks = stats.tasks + 1
  if owner then -- a combinator's or a scope's child: its watcher awaits it
    R.children[owner] = R.children[owner] or {}
    table.insert(R.children[owner], me)
    use(me)
  end
  return me
end

function P.ok(id)
  local me = task.current()
  if R.stopped[me] then fail("await %d returned normally in a cancelled task", id) end
end

function P.spawn(fn) return task.spawn(fn) end

-- A wait with no user code inside it (an await of a task, a channel
-- send or receive) that task.cancel interrupts must raise the
-- cancellation error, not return and not raise anything else.
local function leaf_wait(what, fn, ...)
  local me = task.current()
  R.waiting[me] = what
  local r = table.pack(pcall(fn, ...))
  R.waiting[me] = nil
  local hit = R.cancel_hit[me]
  R.cancel_hit[me] = nil
  if hit and not (not r[1] and task.is_cancelled(r[2])) then
    fail("a cancelled %s %s", what, r[1] and "returned" or "raised " .. tostring(r[2]))
  end
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function P.await(t)
  use(t)
  return leaf_wait("task.await", task.await, t)
end

function P.cancel(t)
  stats.cancels = stats.cancels + 1
  if t:status() == "suspended" and R.waiting[t] then R.cancel_hit[t] = true end
  local ok, err = pcall(task.cancel, t)
  local st = t:status()
  if st ~= "running" and not settled(t) then fail("task.cancel returned with the task %s", st) end
  if st == "cancelled" then R.stopped[t] = true end
  if not ok then error(err, 0) end -- the caller cancelled itself
end

function P.closer(id, action)
  R.declared[id] = (R.declared[id] or 0) + 1
  return setmetatable({}, {__close = function(_, err)
    R.closed[id] = (R.closed[id] or 0) + 1
    stats.closes = stats.closes + 1
    local ok, e = pcall(action, err)
    if not ok then
      -- A __close handler that raises replaces the error unwinding (stock
      -- Lua, inside a pcall): that one may then reach no one.
      if err ~= nil then R.superseded[err] = true end
      error(e, 0)
    end
  end})
end

function P.close_error(err, id) error(P.err(id)) end

function P.err(id)
  local e = setmetatable({id = id}, {__tostring = function() return "E" .. id end})
  R.created[#R.created + 1] = e
  return e
end

function P.try(fn)
  local ok, err = pcall(fn)
  if not ok then
    if type(err) == "table" and err.violation then error(err, 0) end
    delivered(err)
  end
end

function P.channel(cap)
  local ch = task.channel(cap)
  R.channels[#R.channels + 1] = ch
  return ch
end

-- Values are the ids of the send sites, each run at most once, so every
-- value can be followed: received at most once, and only if it was sent;
-- received (or left in a buffer) whenever its send returned.
local function received(v)
  if v == nil then return end
  if not R.sent[v] then fail("received %s, which no send offered", tostring(v)) end
  R.received[v] = (R.received[v] or 0) + 1
  if R.received[v] > 1 then fail("value %s was received %d times", tostring(v), R.received[v]) end
end

function P.send(ch, v)
  R.sent[v] = "offered"
  leaf_wait("send", ch.send, ch, v)
  R.sent[v] = "sent"
end
function P.receive(ch)
  local v = leaf_wait("receive", ch.receive, ch)
  received(v)
  return v
end
function P.drain(ch)
  while true do
    local v = ch:receive()
    if v == nil then break end
    received(v)
  end
end

function P.combine(id, name, ...)
  for i = 1, select("#", ...) do
    local x = select(i, ...)
    if type(x) ~= "function" then use(x) end
  end
  local r = table.pack(pcall(task[name], ...))
  check_children(R.children[id], name)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function P.timeout(id, seconds, x)
  if type(x) ~= "function" then use(x) end
  local r = table.pack(pcall(task.timeout, seconds, x))
  check_children(R.children[id], "timeout")
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function P.scope(id, fn)
  local r = table.pack(pcall(task.scope, fn))
  check_children(R.children[id], "scope")
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

function P.scope_spawn(id, s, fn)
  return s:spawn(fn)
end

-- One run ------------------------------------------------------------------

local function check_run(main)
  if testhost.task_count() ~= 0 then
    fail("the run did not end: %d task(s) alive after %d frames", testhost.task_count(), MAX_FRAMES)
  end
  for _, t in ipairs(R.tasks) do
    if not settled(t) then fail("a task ended %s", t:status()) end
  end
  for id, n in pairs(R.declared) do
    if R.closed[id] ~= n then
      fail("<close> variable c%d declared %d time(s), closed %d", id, n, R.closed[id] or 0)
    end
  end
  for id, n in pairs(R.closed) do
    if R.declared[id] == nil then fail("<close> variable c%d closed undeclared %d time(s)", id, n) end
  end
  -- Failures given to several places by the rules themselves.
  local loose = {}
  for t in pairs(R.shared) do
    local e = failure_of(t)
    if e ~= nil then loose[e] = true end
  end
  for e in pairs(R.superseded) do loose[e] = true end
  for _, e in ipairs(R.created) do
    local n = R.delivered[e] or 0
    if n == 0 and not loose[e] then fail("error %s was neither caught nor reported", tostring(e)) end
    if n > 1 and not loose[e] then fail("error %s reached %d places", tostring(e), n) end
  end
  for e, n in pairs(R.delivered) do
    if type(e) == "table" and n > 1 and not loose[e] then
      fail("error %s reached %d places", tostring(e), n)
    end
  end
  for _, t in ipairs(R.tasks) do
    local e = failure_of(t)
    if e ~= nil and not R.delivered[e] and not loose[e] then
      fail("the failure of a task (%s) was neither caught nor reported", tostring(e))
    end
  end
  for _, ch in ipairs(R.channels) do ch:close(); P.drain(ch) end -- what is left buffered
  for v, st in pairs(R.sent) do
    if st == "sent" and not R.received[v] then fail("value %s was sent and lost", tostring(v)) end
  end
  if failure_of(main) == nil and main:status() ~= "done" and main:status() ~= "cancelled" then
    fail("main ended %s", main:status())
  end
end

local function run_program(src)
  R = {tasks = {}, children = {}, uses = {}, shared = {}, delivered = {}, created = {},
    stopped = {}, declared = {}, closed = {}, superseded = {}, channels = {},
    waiting = {}, cancel_hit = {}, sent = {}, received = {}}
  local env = setmetatable({P = P}, {__index = _G})
  local chunk = assert(load(src, "=program", "t", env))
  task.on_error(function(err) delivered(err) end)
  local ok, err = pcall(function()
    local main = task.spawn(chunk())
    local frame = 0
    while testhost.task_count() > 0 and frame < MAX_FRAMES do
      frame = frame + 1
      if frame == CLOSE_AT then
        for _, ch in ipairs(R.channels) do ch:close() end
      end
      task.step(DT)
    end
    check_run(main)
  end)
  task.on_error(nil)
  testhost.reset()
  if not ok then
    return type(err) == "table" and err.violation or ("the driver raised: " .. tostring(err))
  end
  -- A violation raised inside the program (by a probe) surfaces as a
  -- reported or caught error value: look for one.
  for e in pairs(R.delivered) do
    if type(e) == "table" and e.violation then return e.violation end
  end
  return nil
end

local started = os.clock()
for i = 1, PROGRAMS do
  local seed = SEED + i - 1
  local src = generate(seed)
  local violation = run_program(src)
  if violation then
    io.stderr:write(("program with seed %d broke a rule: %s\n"):format(seed, violation))
    io.stderr:write(("replay: LUNA_PROPERTY_SEED=%d LUNA_PROPERTY_PROGRAMS=1 LUNA_PROPERTY_SIZE=%d\n"):format(seed, SIZE))
    io.stderr:write(src, "\n")
    os.exit(1, true)
  end
end
print(("%d programs from seed %d: every rule held (%.1f s): %d tasks, %d combinator calls, "
  .. "%d cancels, %d failures caught or reported, %d <close> handlers"):format(PROGRAMS, SEED,
  os.clock() - started, stats.tasks, stats.combinators, stats.cancels, stats.failures, stats.closes))
