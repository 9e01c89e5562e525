-- compose.lua: composition and structured concurrency, written on the
-- binding's primitives. Compiled into the module; run once per Lua state
-- with (module, internals).
--
-- Every combinator here runs inside the calling task. It watches its inputs
-- with small watcher tasks (each awaits one input and reports back), so the
-- caller is woken in the same run as the input settles. Combinators cancel
-- what they started (watchers, function inputs spawned as children), never
-- the Tasks or host Promises they were given: a watcher awaits a Promise
-- with await_promise, which unlike task.await does not give the promise up
-- when the watcher is cancelled.
--
-- Every function this code calls is captured here, when it loads: the
-- libraries (string, table, math) and the module table are shared with the
-- state's own code (a mod's, in a sandbox), which may replace their fields;
-- that must not change how a combinator, a scope or a channel behaves. The
-- objects made here (Scope, Channel) have protected metatables whose
-- __index is a methods table that nothing hands out.
local M, I = ...

local spawn, await, current = M.spawn, M.await, M.current
local delay, is_cancelled = M.delay, M.is_cancelled
local suspend, wake = I.suspend, I.wake
local new_task, start, is_task = I.new_task, I.start, I.is_task
local is_promise, await_promise = I.is_promise, I.await_promise
local pack, unpack, select, type, error, pcall = table.pack, table.unpack, select, type, error, pcall
local setmetatable, tostring, ipairs = setmetatable, tostring, ipairs
local format, math_type, huge = string.format, math.type, math.huge
local metatable = I.metatable -- getmetatable without __metatable

local getinfo = debug and debug.getinfo
local awaits = I.awaits
local CYCLE = I.CYCLE -- task.await's own message

-- Raises "bad argument #n to 'fname' (msg)" at the caller of the function
-- `level` calls up (2: the one calling argerror). Called as a method
-- (scope:spawn(x)), self is not counted, as luaL_argerror does.
local function argerror(fname, n, msg, level)
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
local function number_text(x)
  return x ~= x and "nan" or tostring(x)
end

local function check_seconds(fname, n, s)
  if type(s) ~= "number" then
    argerror(fname, n, "number expected, got " .. (s == nil and "no value" or type(s)), 3)
  end
  if s ~= s or s < 0 or s == huge then
    argerror(fname, n, "expected a finite, non-negative number of seconds, got " .. number_text(s), 3)
  end
end

-- A combinator's run: the watchers and children it started, and what the
-- calling task waits on meanwhile (declare). finish() undoes it all; the
-- run is also closed on every way out (a raising start or wait,
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
local Run = {__close = finish}

local function begin(me, children)
  return setmetatable({me = me, watchers = {}, children = children, done = false}, Run)
end

-- Declares, for the await-cycle search (cycles.c), that the caller waits
-- on `waits_on`: after the watchers were spawned and before any child
-- runs, so a child that awaits the caller at once closes a cycle. Not when
-- the watchers already decided the outcome (a settled Task given): the
-- caller will not wait, and its children are only started to be
-- cancelled.
local function declare(r, waits_on, decided)
  if not decided then I.depend(r.me, waits_on) end
end

-- Replaces the function inputs by tasks made of them (not started).
local function make_children(tasks, children, n)
  for i = 1, n do
    if type(tasks[i]) == "function" then
      local c = new_task(tasks[i])
      tasks[i] = c
      children[#children + 1] = c
    end
  end
end

-- Checks the inputs (Tasks, Promises or functions) and the await context, then turns
-- functions into children: created now (not started), started by the
-- caller once watched, so no child can fail unwatched. Returns the inputs
-- (children in place of functions), the run that holds the children (for
-- the caller to close), the count and the inputs already settled.
local function collect(fname, ...)
  local n = select("#", ...)
  local tasks, children = {...}, {}
  for i = 1, n do
    local x = tasks[i]
    if type(x) ~= "function" and not is_task(x) and not is_promise(x) then
      argerror(fname, i, "expected a Task, a Promise or a function, got " .. type(x), 3)
    end
  end
  if fname == "when_any" and n == 0 then
    argerror(fname, 1, "expected at least one Task or function", 3)
  end
  I.check_await("task." .. fname, 3)
  -- Inputs already settled: their failure went where it goes (reported, or
  -- to another awaiter) before we saw it, so it must not be reported again.
  local handled, me = {}, current()
  for i = 1, n do
    local x = tasks[i]
    if x == me then argerror(fname, i, "a task cannot await itself", 3) end
    if awaits(x, me) then argerror(fname, i, CYCLE, 3) end
    if is_task(x) then
      local st = x:status()
      if st == "done" or st == "failed" or st == "cancelled" then handled[x] = true end
    end
  end
  local run = begin(me, children) -- made before the children: it can fail
  local ok, err = pcall(make_children, tasks, children, n)
  if not ok then
    -- Out of memory: the children made so far must not stay created and
    -- never started. They replaced the function inputs in `tasks`.
    for i = 1, n do
      if type(select(i, ...)) == "function" and is_task(tasks[i]) then I.cancel(tasks[i]) end
    end
    error(err, 0)
  end
  return tasks, run, n, handled
end

-- Awaits an input: a Task, or a Promise without giving it up if cancelled.
local function await_input(x)
  if is_promise(x) then return await_promise(x) end
  return await(x)
end

-- Reports err, a failure of input x (a Task or a Promise) that reaches no
-- one else.
local function report_failure(x, err)
  if is_task(x) then I.report(err, x:traceback(), x) else I.report(err, nil, nil) end
end

-- A failure of input x that the combinator does not raise, because another
-- input already decided its outcome. Our watcher was its only awaiter, so
-- unreported it would be lost.
-- `handled` holds the inputs whose failure is already accounted for (settled
-- before the combinator began, raised by it, or reported once), so a Task
-- given twice or failed earlier is never reported a second time.
local function report_ignored(x, ok, err, handled)
  if ok or is_cancelled(err) or handled[x] then return end
  handled[x] = true
  report_failure(x, err)
end

-- A watcher awaits one input and hands the outcome to `notify`.
local function watcher(x, i, notify) notify(i, pcall(await_input, x)) end

-- Starts watching `tasks`, then starts the run's children; done() tells
-- whether the watchers decided at once.
local function watch_all(run, tasks, n, notify, done)
  for i = 1, n do run.watchers[i] = spawn(watcher, tasks[i], i, notify) end
  declare(run, tasks, done())
  for _, c in ipairs(run.children) do start(c) end
end

-- Suspends the calling task until done() is true; a raising wait (the task
-- was cancelled) is returned as false, err.
local function wait_for(state, done)
  while not done() do
    state.waiting = true
    local ok, err = pcall(suspend, state.what)
    state.waiting = false
    if not ok then return false, err end
  end
  return true
end

-- After finish(run): what the caller raises instead of the combinator's
-- outcome, if anything. The wait raised (err: the caller was cancelled or
-- interrupted), or the caller was cancelled while the run was finished (a
-- child's __close handler did it): that is raised, and a failure of
-- `input` the combinator had decided to raise then reaches no one, so it
-- is reported.
local function raise_instead(run, ok, err, input, failure)
  if ok and not I.cancel_requested(run.me) then return end
  if input ~= nil and not is_cancelled(failure) then report_failure(input, failure) end
  error(ok and I.cancel_error() or err, 0)
end

--- task.when_all(...) -> first result of each input, in argument order.
-- Inputs are Tasks, Promises or functions (spawned as children). Raises the first
-- error as soon as it happens (a cancelled input raises the cancellation
-- error); then cancels the children it started, never the Tasks it was given.
function M.when_all(...)
  local tasks, made, n, handled = collect("when_all", ...)
  local run <close> = made -- nothing allocated since collect made it
  local me = current()
  local state = {what = "task.when_all", waiting = false}
  local results, remaining, failed, err_value = {}, n, nil, nil
  local function notify(i, ok, v)
    if run.done or failed then return report_ignored(tasks[i], ok, v, handled) end
    if ok then
      results[i] = v
      remaining = remaining - 1
    else
      failed, err_value = tasks[i], v
      handled[tasks[i]] = true
    end
    if state.waiting and (remaining == 0 or failed) then wake(me) end
  end
  local function done() return remaining == 0 or failed ~= nil end
  watch_all(run, tasks, n, notify, done)
  local ok, err = wait_for(state, done)
  finish(run)
  raise_instead(run, ok, err, failed, err_value)
  if failed then error(err_value, 0) end
  return unpack(results, 1, n)
end

--- task.when_any(...) -> index, results of the first input to finish.
-- A failure that finishes first is raised. The children it started are
-- cancelled when it returns; the Tasks it was given are left running.
function M.when_any(...)
  local tasks, made, n, handled = collect("when_any", ...)
  local run <close> = made -- nothing allocated since collect made it
  local me = current()
  local state = {what = "task.when_any", waiting = false}
  local winner, outcome = nil, nil
  local function notify(i, ...)
    if run.done or winner then return report_ignored(tasks[i], select(1, ...), select(2, ...), handled) end
    winner, outcome = i, pack(...)
    handled[tasks[i]] = true
    if state.waiting then wake(me) end
  end
  local function done() return winner ~= nil end
  watch_all(run, tasks, n, notify, done)
  local ok, err = wait_for(state, done)
  finish(run)
  local failed = winner and not outcome[1]
  raise_instead(run, ok, err, failed and tasks[winner] or nil, failed and outcome[2])
  if failed then error(outcome[2], 0) end
  return winner, unpack(outcome, 2, outcome.n)
end

--- task.timeout(seconds, fn, ...) -> fn's results.
-- Runs fn(...) as a child task (or waits for a given Task or Promise). If it has not
-- finished when `seconds` have passed on the scaled clock (checked at
-- Update), the child is cancelled (its to-be-closed variables see the
-- cancellation error) and a timeout error is raised: task.is_timeout(err)
-- is true, task.is_cancelled(err) false. A given Task is not cancelled, nor
-- a given Promise (to abort the job on timeout, await it in a function:
-- timeout(s, function() return task.await(p) end) cancels that child, and
-- so gives the promise up).
function M.timeout(seconds, fn, ...)
  check_seconds("timeout", 1, seconds)
  local own = type(fn) == "function"
  if not own and not is_task(fn) and not is_promise(fn) then
    argerror("timeout", 2, "expected a function, a Task or a Promise, got " .. type(fn))
  end
  I.check_await("task.timeout", 2)
  local me = current()
  if fn == me then argerror("timeout", 2, "a task cannot await itself") end
  if awaits(fn, me) then argerror("timeout", 2, CYCLE) end
  local child = own and new_task(fn, ...) or fn
  local state = {what = "task.timeout", waiting = false}
  local outcome = nil
  local run <close> = begin(me, {own and child or nil})
  local function settle(v)
    if not run.done and outcome == nil then
      outcome = v
      if state.waiting then wake(me) end
    elseif v ~= "timeout" then
      report_ignored(child, v[1], v[2], {})
    end
  end
  run.watchers[1] = spawn(function() settle(pack(pcall(await_input, child))) end)
  run.watchers[2] = spawn(function() delay(seconds); settle("timeout") end)
  declare(run, {child}, outcome ~= nil)
  if own then start(child) end
  local ok, err = wait_for(state, function() return outcome ~= nil end)
  finish(run)
  local failed = outcome ~= nil and outcome ~= "timeout" and not outcome[1]
  raise_instead(run, ok, err, failed and child or nil, failed and outcome[2])
  if outcome == "timeout" then error(I.timeout_error(seconds), 0) end
  if failed then error(outcome[2], 0) end
  return unpack(outcome, 2, outcome.n)
end

-- Scopes -----------------------------------------------------------------

local ScopeMethods = {}
local Scope = {__index = ScopeMethods, __name = "lunaloop.Scope", __metatable = "lunaloop.Scope"}

local function cancel_children(s)
  -- in creation order; cancelling wakes their watchers, which count down.
  -- I.cancel: a child's __close handler that cancels the task running
  -- this loop does not stop it (see finish).
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
    order = {}, count = 0, waiting = false, in_body = true, owner = me,
    what = "task.scope"}, Scope)
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
  local ok, err = wait_for(s, function() return s.count == 0 end)
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

-- Channels ---------------------------------------------------------------

-- A FIFO of records with removal by marking (cancelled waiters are skipped).
local function queue() return {first = 1, last = 0} end
local function push(q, v) q.last = q.last + 1; q[q.last] = v end
local function unshift(q, v) q.first = q.first - 1; q[q.first] = v end
local function shift(q)
  if q.first > q.last then return nil end
  local v = q[q.first]
  q[q.first] = nil
  q.first = q.first + 1
  return v
end
local function qlen(q) return q.last - q.first + 1 end
-- The next record still waiting, or nil.
local function next_waiting(q)
  while true do
    local r = shift(q)
    if r == nil or r.state == "waiting" then return r end
  end
end

local ChannelMethods = {}
local Channel = {__index = ChannelMethods, __name = "lunaloop.Channel",
  __metatable = "lunaloop.Channel"}

--- task.channel([capacity]) -> Channel: a FIFO between tasks. No capacity:
-- unbounded; 0: a rendezvous (send waits for a receiver).
function M.channel(capacity)
  if capacity ~= nil then
    if math_type(capacity) ~= "integer" or capacity < 0 then
      local got = type(capacity) == "number" and number_text(capacity) or type(capacity)
      argerror("channel", 1, "expected a non-negative integer capacity, got " .. got)
    end
  else
    capacity = huge
  end
  return setmetatable({cap = capacity, buf = queue(), recvq = queue(), sendq = queue(),
    closed = false}, Channel)
end

local function check_channel(ch, fname)
  if metatable(ch) ~= Channel then argerror(fname, 1, "expected a Channel (use ch:" .. fname .. ")", 3) end
end

-- Hands v to the first waiting receiver; false when none waits.
local function deliver(ch, v)
  local r = next_waiting(ch.recvq)
  if r == nil then return false end
  r.state, r.value = "delivered", v
  wake(r.task)
  return true
end

--- ch:send(v): puts v in the channel; awaits while a bounded channel is full
-- (a rendezvous waits for a receiver). Raises on a closed channel, also when
-- the channel is closed while waiting. v must not be nil.
function ChannelMethods:send(v)
  check_channel(self, "send")
  if v == nil then argerror("send", 2, "channel values cannot be nil") end
  if self.closed then error("send on a closed channel", 2) end
  if deliver(self, v) then return end
  if qlen(self.buf) < self.cap then push(self.buf, v); return end
  I.check_await("channel:send", 2)
  local rec = {task = current(), value = v, state = "waiting"}
  push(self.sendq, rec)
  local ok, err = pcall(suspend, "channel:send")
  if rec.state == "taken" then
    if not ok then error(err, 0) end
    return
  end
  -- Cancelled (or interrupted) after the channel was closed, before it
  -- resumed: the cancellation wins, as it does over a value taken.
  if ok and rec.state == "closed" then error("send on a closed channel", 2) end
  rec.state = "cancelled"
  error(err, 0)
end

--- ch:receive() -> v | nil, "closed": takes the oldest value; awaits while
-- the channel is empty. Once closed and drained it returns nil, "closed".
function ChannelMethods:receive()
  check_channel(self, "receive")
  if qlen(self.buf) > 0 then
    local v = shift(self.buf)
    local s = next_waiting(self.sendq)
    if s then
      push(self.buf, s.value)
      s.state = "taken"
      wake(s.task)
    end
    return v
  end
  local s = next_waiting(self.sendq)
  if s then
    s.state = "taken"
    wake(s.task)
    return s.value
  end
  if self.closed then return nil, "closed" end
  I.check_await("channel:receive", 2)
  local rec = {task = current(), state = "waiting"}
  push(self.recvq, rec)
  local ok, err = pcall(suspend, "channel:receive")
  if ok and rec.state == "delivered" then return rec.value end
  if ok and rec.state == "closed" then return nil, "closed" end
  if rec.state == "delivered" then
    -- A value was handed to us but we were cancelled before we resumed:
    -- it goes to the next receiver, or back to the front of the buffer.
    local v = rec.value
    rec.value = nil
    if not deliver(self, v) then unshift(self.buf, v) end
  end
  rec.state = "cancelled"
  error(err, 0)
end

--- ch:close(): no more sends. Waiting receivers get nil, "closed"; waiting
-- senders raise. Buffered values can still be received.
function ChannelMethods:close()
  check_channel(self, "close")
  if self.closed then return end
  self.closed = true
  for _, q in ipairs({self.recvq, self.sendq}) do
    while true do
      local r = next_waiting(q)
      if r == nil then break end
      r.state = "closed"
      wake(r.task)
    end
  end
end

--- ch:len() -> values buffered; ch:is_closed() -> boolean.
function ChannelMethods:len()
  check_channel(self, "len")
  return qlen(self.buf)
end
function ChannelMethods:is_closed()
  check_channel(self, "is_closed")
  return self.closed
end
function Channel:__tostring()
  return format("Channel(%d buffered%s)", qlen(self.buf), self.closed and ", closed" or "")
end
