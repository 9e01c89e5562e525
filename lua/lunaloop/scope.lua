-- scope.lua: structured concurrency, task.scope and its Scope objects,
-- written on the binding's primitives and on prelude.lua. May use the
-- module's functions, the internals and the prelude it is run with,
-- captured when it loads (prelude.lua says why).
local M, I, P = ...

local await, current, is_cancelled = M.await, M.current, M.is_cancelled
local wake, new_task, start, awaits = I.wake, I.new_task, I.start, I.awaits
local metatable = I.metatable -- getmetatable without __metatable
local pack, unpack, type, error, pcall = table.pack, table.unpack, type, error, pcall
local setmetatable, ipairs, format = setmetatable, ipairs, string.format
local argerror, report_failure = P.argerror, P.report_failure
local begin, declare, wait_for = P.begin, P.declare, P.wait_for

local ScopeMethods = {}
local Scope = {__index = ScopeMethods, __name = "lunaloop.Scope", __metatable = "lunaloop.Scope"}

local function cancel_children(s)
  -- in creation order; cancelling wakes their watchers, which count down.
  -- I.cancel: a child's __close handler that cancels the task running
  -- this loop does not stop it (see finish in prelude.lua).
  for _, c in ipairs(s.order) do
    if s.children[c] then I.cancel(c) end
  end
end

-- The calling task is cancelled instead of raising the scope's failure:
-- that failure (of a child, or of the body) reaches no one else, so it is
-- reported. An await cycle the scope found is no task's failure.
local function report_lost(s)
  if s.failing and s.err_from then report_failure(s.err_from, s.err) end
end

local function scope_watch(s, child)
  local ok, err = pcall(await, child)
  s.children[child] = nil
  s.count = s.count - 1
  if not ok and not is_cancelled(err) then
    if not s.open then
      -- The scope ended (its caller was cancelled) before it heard of this
      -- failure: no one else will raise it.
      I.report(err, child:traceback(), child)
    elseif not s.failing then
      s.failing, s.err, s.err_from = true, err, child
      cancel_children(s)
      if s.in_body then I.interrupt(s.owner) end
    else
      -- a second failure while the scope is already failing: not lost
      I.report(err, child:traceback(), child)
    end
  end
  if s.count == 0 and s.waiting then wake(s.owner) end
end

-- Lists a child and makes its watcher (not started), or raises (out of
-- memory) having made no watcher: the caller counts the child only once
-- its watcher exists, so no count is left that nothing would bring down.
local function scope_add(s, child)
  s.children[child] = true
  s.order[#s.order + 1] = child
  return new_task(scope_watch, s, child)
end

--- scope:spawn(fn, ...) -> Task: starts a child of the scope. Any task may
-- call it while the scope is open; it raises once the scope failed or ended.
function ScopeMethods:spawn(fn, ...)
  if metatable(self) ~= Scope then argerror("spawn", 1, "expected a Scope") end
  if type(fn) ~= "function" then argerror("spawn", 2, "expected a function, got " .. type(fn)) end
  if not self.open then error("scope:spawn: the scope has ended", 2) end
  if self.failing then error("scope:spawn: the scope has failed", 2) end
  local child = new_task(fn, ...)
  local ok, w = pcall(scope_add, self, child)
  if not ok then
    I.cancel(child) -- created, never to start
    error(w, 0)
  end
  self.count = self.count + 1
  start(w)
  if self.declared then I.depend_one(self.owner, child) end
  start(child)
  return child
end

function Scope:__tostring()
  return format("Scope(%d children, %s)", self.count,
    not self.open and "ended" or self.failing and "failing" or "open")
end

-- True once every child of scope s ended.
local function ended(s) return s.count == 0 end

--- task.scope(fn, ...) -> fn's results.
-- Calls fn(scope, ...) in the calling task; children started with
-- scope:spawn belong to the scope. Returns after the body and every child
-- ended. The first child failure cancels the other children and the body
-- (at its current or next await) and is raised from task.scope; a cancelled
-- child is not a failure; cancelling the calling task cancels them all.
function M.scope(fn, ...)
  if type(fn) ~= "function" then argerror("scope", 1, "expected a function, got " .. type(fn)) end
  I.check_await("task.scope", 2)
  local me = current()
  local s = setmetatable({open = true, failing = false, err = nil, children = {},
    order = {}, count = 0, waiting = false, in_body = true, owner = me}, Scope)
  local res = pack(pcall(fn, s, ...))
  s.in_body = false
  I.clear_interrupt(me)
  if not res[1] then
    local e = res[2]
    if I.cancel_requested(me) then
      s.open = false
      cancel_children(s)
      report_lost(s)
      error(e, 0)
    elseif s.failing and is_cancelled(e) then
      -- the body was interrupted by a child's failure
    elseif not s.failing then
      s.failing, s.err, s.err_from = true, e, me
      cancel_children(s)
    else
      I.report(e, nil, me)
    end
  end
  -- A child already waiting on this task would never end: that fails the
  -- scope, as a child's error does.
  for _, c in ipairs(s.order) do
    if not s.failing and s.children[c] and awaits(c, me) then
      s.failing, s.err = true, "task.scope: await cycle: a child of the scope is (indirectly) awaiting its owner"
      cancel_children(s)
    end
  end
  local waits <close> = begin(me, {})
  declare(waits, s.order, false)
  s.declared = true
  local ok, err = wait_for(s, ended, "task.scope")
  s.declared = false
  s.open = false
  -- The body caught its task's cancellation and nothing was left to wait
  -- for: task.scope is an await all the same, and raises it.
  if ok and I.cancel_requested(me) then ok, err = false, I.cancel_error() end
  if not ok then
    cancel_children(s)
    report_lost(s)
    error(err, 0)
  end
  if s.failing then error(s.err, 0) end
  return unpack(res, 2, res.n)
end

