-- roblox.lua: the Roblox-style task library, `require "lunaloop.roblox"`
-- (and the global `task` of `lunaloop run --roblox`): Roblox's names and,
-- where its creator documentation says what they do, its semantics, on
-- lunaloop's tasks. docs/roblox.md has the table of every place where the
-- two models differ. Written on the module's functions, the internals and
-- the prelude, captured when this chunk loads (prelude.lua says why); the
-- table is built once per state and handed out by luaopen_lunaloop_roblox
-- (lifecycle.c), through I.keep.
--
-- Threads: a lunaloop task is its coroutine, so the thread Roblox's
-- functions return is the task's. A plain coroutine given to spawn, defer
-- or delay is driven by a task of ours (a driver): the driver resumes it,
-- and a task.wait inside it asks the driver to wait (a coroutine.yield of
-- a request only this library makes). When the coroutine yields anything
-- else (a plain coroutine.yield), the driver lets it go: it stays
-- suspended until someone resumes it, with task.spawn(co, ...) say.
local M, I, P = ...

local spawn, cancel, current, await = M.spawn, M.cancel, M.current, M.await
local delay, time, group_of = M.delay, M.time, M.group_of
local is_task, new_task, start, suspend, wake = I.is_task, I.new_task, I.start, I.suspend, I.wake
local is_pending, check_await = I.is_pending, I.check_await
local argerror, number_text = P.argerror, P.number_text
local type, error, select, setmetatable = type, error, select, setmetatable
local pack, unpack = table.pack, table.unpack
local co_resume, co_status, co_yield, co_running, co_close =
  coroutine.resume, coroutine.status, coroutine.yield, coroutine.running, coroutine.close
local huge = math.huge

local R = {}
-- Names Roblox's library does not have fall through to lunaloop's module,
-- so a ported script can still reach task.signal, task.yield, ...
setmetatable(R, {__index = M})

-- The plain coroutines our drivers run now: co -> the driver task.
local drivers = setmetatable({}, {__mode = "k"})
-- What a driven coroutine yields to ask its driver for a wait.
local WAIT = {}

local function check_seconds(fname, n, s, default)
  if s == nil and default ~= nil then return default end
  if type(s) ~= "number" then
    argerror(fname, n, "number expected, got " .. (s == nil and "no value" or type(s)), 3)
  end
  if s ~= s or s < 0 or s == huge then
    argerror(fname, n, "expected a finite, non-negative number of seconds, got " .. number_text(s), 3)
  end
  return s
end

-- The wait of task.wait, in a task: the seconds that passed on the clock
-- it waits on, the scaled clock, or the clock of the task's group when it
-- is a member of one (so pausing or slowing the group pauses or slows a
-- ported script, docs/groups.md).
local function wait_here(seconds)
  local g = group_of and group_of(current())
  if g ~= nil then
    local t0 = g:time()
    g:delay(seconds)
    return g:time() - t0
  end
  local t0 = time()
  delay(seconds)
  return time() - t0
end

-- Resumes the driven coroutine co until it ends (its results are the
-- driver's), fails (the driver fails with its error) or yields something
-- that is not a wait request (it is let go).
local function drive(co, ...)
  local me = current()
  drivers[co] = me
  local guard <close> = setmetatable({}, {__close = function(_, err)
    if drivers[co] == me then drivers[co] = nil end
    -- The driver was cancelled while co waited: co is cancelled too
    -- (its to-be-closed variables run), as a Roblox task.cancel would.
    if err ~= nil and co_status(co) == "suspended" then co_close(co) end
  end})
  local r = pack(co_resume(co, ...))
  while true do
    if not r[1] then error(r[2], 0) end
    if co_status(co) == "dead" then return unpack(r, 2, r.n) end
    if r[2] ~= WAIT then return end -- a plain yield: co is its resumer's again
    r = pack(co_resume(co, wait_here(r[3])))
  end
end

-- Refuses a suspended plain coroutine that one of our drivers holds
-- (waiting in task.wait, or given to a defer or delay not run yet): a
-- second driver would resume it early and the first again later. The
-- coroutine running now may hand itself over (the idiom
-- `task.delay(s, coroutine.running()); coroutine.yield()`).
local function check_not_held(fname, n, co, level)
  if drivers[co] and co_status(co) == "suspended" then
    argerror(fname, n, "cannot resume a coroutine that task.wait, task.delay or task.defer holds", level)
  end
end

-- What spawn does with a thread: a task not started yet starts now; a
-- plain coroutine is driven. Returns the thread.
local function run_thread(fname, co, ...)
  if is_task(co) then
    if not is_pending(co) then
      argerror(fname, 1, "cannot resume a task that has started (it resumes itself; " ..
        "task.cancel stops it)", 3)
    end
    start(co)
    return co
  end
  local st = co_status(co)
  if st ~= "suspended" then
    argerror(fname, 1, "cannot resume a " .. st .. " coroutine", 3)
  end
  check_not_held(fname, 1, co, 4)
  spawn(drive, co, ...)
  return co
end

local function check_target(fname, n, x)
  local tx = type(x)
  if tx ~= "function" and tx ~= "thread" then
    argerror(fname, n, "function or thread expected, got " .. (x == nil and "no value" or tx), 3)
  end
  return tx
end

--- task.spawn(functionOrThread, ...) -> thread: runs it now, with the
-- arguments, until it first waits; returns its thread.
function R.spawn(x, ...)
  if check_target("spawn", 1, x) == "function" then return spawn(x, ...) end
  return run_thread("spawn", x, ...)
end

-- The body of a deferred task: waits to be woken by defer's wake, then runs.
local function deferred(x, ...)
  suspend("task.defer")
  if type(x) == "function" then return x(...) end
  return drive(x, ...)
end

--- task.defer(functionOrThread, ...) -> thread: runs it once the code that
-- is running now has waited or ended (in the same run of the same timing:
-- lunaloop's ready queue), before anything the loop does next.
function R.defer(x, ...)
  local tx = check_target("defer", 1, x)
  if tx == "thread" then
    if is_task(x) then
      if not is_pending(x) then argerror("defer", 1, "cannot resume a task that has started", 2) end
      R.defer(start, x)
      return x
    end
    local st = co_status(x)
    if st ~= "suspended" then argerror("defer", 1, "cannot resume a " .. st .. " coroutine", 2) end
    check_not_held("defer", 1, x, 3)
  end
  local t = new_task(deferred, x, ...)
  if tx == "thread" then drivers[x] = t end -- task.cancel(x) calls it off
  start(t) -- runs to its suspend
  wake(t)  -- queued behind the running code (now when nothing runs)
  return tx == "thread" and x or t
end

-- The body of a delayed task.
local function delayed(seconds, x, ...)
  wait_here(seconds)
  if type(x) == "function" then return x(...) end
  return drive(x, ...)
end

--- task.delay(seconds, functionOrThread, ...) -> thread: runs it at the
-- first Update at which `seconds` have passed on the scaled clock. Returns
-- the thread that will run it (cancel it to call the whole thing off).
function R.delay(seconds, x, ...)
  seconds = check_seconds("delay", 1, seconds) -- required, as in Roblox
  local tx = check_target("delay", 2, x)
  if tx == "thread" and is_task(x) then
    argerror("delay", 2, "expected a function or a plain coroutine (a task resumes itself)", 2)
  end
  if tx == "thread" then
    local st = co_status(x)
    if st == "dead" or st == "normal" then argerror("delay", 2, "cannot resume a " .. st .. " coroutine", 2) end
    check_not_held("delay", 2, x, 3)
  end
  local t = spawn(delayed, seconds, x, ...)
  if tx == "thread" then drivers[x] = t; return x end
  return t
end

--- task.wait([seconds]) -> seconds waited: suspends the calling task until
-- the first Update at which `seconds` (default 0: the next Update) have
-- passed on the scaled clock; returns the scaled time that passed since
-- the call.
function R.wait(seconds)
  seconds = check_seconds("wait", 1, seconds, 0)
  local co = co_running()
  if drivers[co] and not is_task(co) then return co_yield(WAIT, seconds) end
  check_await("task.wait", 2)
  return wait_here(seconds)
end

--- task.cancel(thread): a task is cancelled (lunaloop's task.cancel: its
-- to-be-closed variables run, its awaiters get the cancellation error); a
-- plain coroutine is closed, and the wait or delay our driver does for it
-- is called off. The running thread cannot be cancelled (as in Roblox).
function R.cancel(co)
  if type(co) ~= "thread" then
    argerror("cancel", 1, "thread expected, got " .. (co == nil and "no value" or type(co)), 2)
  end
  if co == co_running() then
    argerror("cancel", 1, "cannot cancel the running thread (return from it, or error)", 2)
  end
  if is_task(co) then return cancel(co) end
  if co_status(co) == "normal" then -- it resumed the code running now: refused, nothing changed
    argerror("cancel", 1, "cannot cancel a normal coroutine", 2)
  end
  local d = drivers[co]
  if d ~= nil then
    drivers[co] = nil
    cancel(d)
  end
  if co_status(co) == "suspended" then
    local ok, err = co_close(co)
    if not ok then error(err, 2) end
  elseif co_status(co) ~= "dead" then
    argerror("cancel", 1, "cannot cancel a " .. co_status(co) .. " coroutine", 2)
  end
end

--- task.synchronize() / task.desynchronize(): no-ops. Roblox switches a
-- script between serial and parallel execution (Actors); lunaloop runs all
-- of a state's code on one thread, always "serial".
function R.synchronize() end
function R.desynchronize() end

I.keep("roblox", R)
