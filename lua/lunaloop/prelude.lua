-- prelude.lua: what the module's Lua chunks share: argument errors, the
-- run of an awaiting primitive (what it started, what its caller waits on)
-- and the wait itself. The chunks of lua/lunaloop/ (prelude, compose,
-- scope, channel: the list is LUNA_LUA_CHUNKS in CMakeLists.txt) are
-- compiled into the module and run once per Lua state, in that order, with
-- (module, internals, prelude): internals are the binding's primitives
-- (src/lua/internal.c), handed to these chunks only; prelude is the table
-- this chunk fills for the others.
--
-- Every function these chunks call is captured when they load: the
-- libraries (string, table, math) and the module table are shared with the
-- state's own code (a mod's, in a sandbox), which may replace their fields;
-- that must not change how a combinator, a scope or a channel behaves. The
-- objects made here (Scope, Channel) have protected metatables whose
-- __index is a methods table that nothing hands out.
local _, I, P = ...

local error, ipairs, pcall, setmetatable, tostring = error, ipairs, pcall, setmetatable, tostring
local format = string.format
local getinfo = debug and debug.getinfo
local suspend = I.suspend

-- Raises "bad argument #n to 'fname' (msg)" at the caller of the function
-- `level` calls up (2: the one calling argerror). Called as a method
-- (scope:spawn(x)), self is not counted, as luaL_argerror does.
function P.argerror(fname, n, msg, level)
  level = level or 2
  local ar = getinfo and getinfo(level, "n")
  if ar and ar.namewhat == "method" then
    n = n - 1
    if n == 0 then
      error(format("calling '%s' on bad self (%s)", fname, msg), level + 1)
    end
  end
  error(format("bad argument #%d to '%s' (%s)", n, fname, msg), level + 1)
end

-- A number as messages show it: NaN reads "nan" whatever its sign bit
-- (tostring gives "-nan" for 0/0 on glibc), as in the C functions' messages.
function P.number_text(x)
  return x ~= x and "nan" or tostring(x)
end

-- A run: the watchers and children a combinator or a scope started, and
-- what the calling task waits on meanwhile (declare). finish() undoes it
-- all; the run is also closed on every way out (a raising start or wait,
-- cancellation included). It cancels with I.cancel, which never raises
-- the caller's own cancellation: a child's __close handler may cancel the
-- caller, and every other child must still be cancelled.
local function finish(r)
  if r.done then return end
  r.done = true
  for _, t in ipairs(r.watchers) do I.cancel(t) end
  for _, t in ipairs(r.children) do I.cancel(t) end
  I.undepend(r.me)
end
P.finish = finish
local Run = {__close = finish}

-- begin(me, children, [handled]) -> a run of task `me`, to be closed;
-- `handled` is a combinator's set of inputs whose failure is accounted for.
function P.begin(me, children, handled)
  return setmetatable({me = me, watchers = {}, children = children, done = false,
    handled = handled}, Run)
end

-- Declares, for the await-cycle search (cycles.c), that the caller waits
-- on `waits_on`: after the watchers were spawned and before any child
-- runs, so a child that awaits the caller at once closes a cycle. Not when
-- the watchers already decided the outcome (a settled Task given): the
-- caller will not wait, and its children are only started to be
-- cancelled.
function P.declare(r, waits_on, decided)
  if not decided then I.depend(r.me, waits_on) end
end

-- Suspends the calling task until done(state) is true; a raising wait (the
-- task was cancelled) is returned as false, err. `what` names the wait for
-- the introspection ("task.when_all"); state.waiting tells a waker that the
-- task is suspended here.
function P.wait_for(state, done, what)
  while not done(state) do
    state.waiting = true
    local ok, err = pcall(suspend, what)
    state.waiting = false
    if not ok then return false, err end
  end
  return true
end

-- Reports err, a failure of input x (a Task or a Promise) that reaches no
-- one else.
function P.report_failure(x, err)
  if I.is_task(x) then I.report(err, x:traceback(), x) else I.report(err, nil, nil) end
end
