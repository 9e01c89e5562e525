-- compose.lua: the combinators task.when_all, task.when_any and
-- task.timeout, written on the binding's primitives and on prelude.lua.
-- May use the module's functions, the internals and the prelude it is run
-- with, captured when it loads (prelude.lua says why).
--
-- Every combinator runs inside the calling task. It watches its inputs
-- with small watcher tasks (each awaits one input and reports back), so the
-- caller is woken in the same run as the input settles. Combinators cancel
-- what they started (watchers, function inputs spawned as children), never
-- the Tasks or host Promises they were given: a watcher awaits a Promise
-- with await_promise, which unlike task.await does not give the promise up
-- when the watcher is cancelled.
local M, I, P = ...

local spawn, await, current = M.spawn, M.await, M.current
local delay, is_cancelled = M.delay, M.is_cancelled
local wake, new_task, start, is_task = I.wake, I.new_task, I.start, I.is_task
local is_promise, await_promise, is_signal = I.is_promise, I.await_promise, I.is_signal
local pack, unpack, select, type, error, pcall = table.pack, table.unpack, select, type, error, pcall
local ipairs, huge = ipairs, math.huge
local awaits = I.awaits
local CYCLE = I.CYCLE -- task.await's own message
local argerror, number_text, report_failure = P.argerror, P.number_text, P.report_failure
local begin, finish, declare, wait_for = P.begin, P.finish, P.declare, P.wait_for

-- Raises at the caller of the function that called the caller of
-- check_seconds (level 4: check_seconds, the collector, the combinator).
local function check_seconds(fname, n, s)
  if type(s) ~= "number" then
    argerror(fname, n, "number expected, got " .. (s == nil and "no value" or type(s)), 4)
  end
  if s ~= s or s < 0 or s == huge then
    argerror(fname, n, "expected a finite, non-negative number of seconds, got " .. number_text(s), 4)
  end
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

-- A kind's collector for when_all and when_any, called by the combinator
-- with the kind and the combinator's arguments. Checks the inputs (Tasks,
-- Promises or functions) and the await context, then turns functions into
-- children: created now (not started), started by the combinator once
-- watched, so no child can fail unwatched. Returns the inputs (children in
-- place of functions), the run (for the caller to close) that holds the
-- children and, as run.handled, the inputs already settled, and the count.
local function collect(kind, ...)
  local fname = kind.name
  local n = select("#", ...)
  local tasks, children = {...}, {}
  for i = 1, n do
    local x = tasks[i]
    if type(x) ~= "function" and not is_task(x) and not is_promise(x) and not is_signal(x) then
      argerror(fname, i, "expected a Task, a Promise, a Signal or a function, got " .. type(x), 3)
    end
  end
  if kind.needs_one and n == 0 then
    argerror(fname, 1, "expected at least one Task or function", 3)
  end
  I.check_await(kind.what, 3)
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
  local run = begin(me, children, handled) -- made before the children: it can fail
  local ok, err = pcall(make_children, tasks, children, n)
  if not ok then
    -- Out of memory: the children made so far must not stay created and
    -- never started. They replaced the function inputs in `tasks`.
    for i = 1, n do
      if type(select(i, ...)) == "function" and is_task(tasks[i]) then I.cancel(tasks[i]) end
    end
    error(err, 0)
  end
  return tasks, run, n
end

-- timeout's collector: the same returns as collect for the one input `fn`
-- (a child made of it, with the arguments, when it is a function), then
-- the seconds.
local function collect_timeout(kind, seconds, fn, ...)
  local fname = kind.name
  check_seconds(fname, 1, seconds)
  local own = type(fn) == "function"
  if not own and not is_task(fn) and not is_promise(fn) and not is_signal(fn) then
    argerror(fname, 2, "expected a function, a Task, a Promise or a Signal, got " .. type(fn), 3)
  end
  I.check_await(kind.what, 3)
  local me = current()
  if fn == me then argerror(fname, 2, "a task cannot await itself", 3) end
  if awaits(fn, me) then argerror(fname, 2, CYCLE, 3) end
  local child = own and new_task(fn, ...) or fn
  return {child}, begin(me, {own and child or nil}, {}), 1, seconds
end

-- Awaits an input: a Task, a Signal (its next fire: task.await), or a
-- Promise without giving it up if cancelled.
local function await_input(x)
  if is_promise(x) then return await_promise(x) end
  return await(x)
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

-- The combinator skeleton. One call keeps its state in one table, st:
--   waiting          whether the caller is suspended in its wait
--   run, kind        what the collector returned; the combinator's kind
--   count, values    when_all: inputs still to succeed, their results;
--                    when_any and timeout: the winner's results
--   index            the input that decided (0: timeout's limit)
--   failed, failure  the input whose failure is raised, and that error
-- What it costs per call: st (eight fields, so its constructor makes one
-- hash of eight slots: what else a call needs lives in the run, or is
-- passed as arguments), the inputs, the run, and a watcher task per
-- input; no function of its own. A watcher's call chain is no deeper than
-- a hand-written one's: notify tail-calls settle, which tail-calls
-- settled.
-- A kind is a table made when this chunk loads: name, what (the name of
-- the wait, for the introspection), collect (its collector), gathers
-- (values starts as a table), needs_one (no inputs is an error), and
--   decided(st)               true once the outcome is known
--   settle(st, x, i, ok, ...) records what input x (argument i) got from
--                             pcall; ends with `return settled(st, decided)`
--   results(st, n, seconds)   the combinator's returns (or raises)

-- Hands input x's outcome (pcall's results) to the call's kind. Once the
-- outcome is decided (or the run finished), a failure is reported instead.
local function notify(st, x, i, ok, ...)
  local kind = st.kind
  if st.run.done or kind.decided(st) then return report_ignored(x, ok, (...), st.run.handled) end
  return kind.settle(st, x, i, ok, ...)
end

-- How every settle ends: wakes the caller once the outcome is decided.
local function settled(st, decided)
  if st.waiting and decided(st) then wake(st.run.me) end
end

-- A watcher awaits input x (argument i) and hands the outcome to notify.
local function watcher(st, x, i) notify(st, x, i, pcall(await_input, x)) end

-- timeout's second watcher: the limit is input 0, which never fails.
local function limit(st, seconds)
  delay(seconds)
  notify(st, nil, 0, true)
end

-- combinator(kind) -> the combinator of that kind (called once per kind,
-- when this chunk loads).
local function combinator(kind)
  local decided, collect_inputs, what = kind.decided, kind.collect, kind.what
  return function(...)
    local inputs, made, n, seconds = collect_inputs(kind, ...)
    local run <close> = made -- nothing allocated since collect made it
    local st = {waiting = false, run = run, kind = kind, count = n,
      values = kind.gathers and {} or nil, index = nil, failed = nil, failure = nil}
    for i = 1, n do run.watchers[i] = spawn(watcher, st, inputs[i], i) end
    if seconds then run.watchers[n + 1] = spawn(limit, st, seconds) end
    declare(run, inputs, decided(st))
    for _, c in ipairs(run.children) do start(c) end
    local ok, err = wait_for(st, decided, what)
    finish(run)
    raise_instead(run, ok, err, st.failed, st.failure)
    if st.failed ~= nil then error(st.failure, 0) end
    return kind.results(st, n, seconds)
  end
end

-- when_all: decided when every input succeeded or one failed.
local ALL = {name = "when_all", what = "task.when_all", collect = collect, gathers = true}
function ALL.decided(st) return st.count == 0 or st.failed ~= nil end
function ALL.settle(st, x, i, ok, v)
  if ok then
    st.values[i] = v
    st.count = st.count - 1
  else
    st.failed, st.failure = x, v
    st.run.handled[x] = true
  end
  return settled(st, ALL.decided)
end
function ALL.results(st, n) return unpack(st.values, 1, n) end

-- when_any: decided by the first input to settle, success or failure.
local ANY = {name = "when_any", what = "task.when_any", collect = collect, needs_one = true}
function ANY.decided(st) return st.index ~= nil end
function ANY.settle(st, x, i, ok, ...)
  st.index, st.values = i, pack(...)
  if not ok then st.failed, st.failure = x, (...) end
  st.run.handled[x] = true
  return settled(st, ANY.decided)
end
function ANY.results(st) return st.index, unpack(st.values, 1, st.values.n) end

-- timeout: when_any of its one input and its limit.
local TIMEOUT = {name = "timeout", what = "task.timeout", collect = collect_timeout,
  decided = ANY.decided}
function TIMEOUT.settle(st, x, i, ...)
  if i ~= 0 then return ANY.settle(st, x, i, ...) end
  st.index = 0
  return settled(st, ANY.decided)
end
function TIMEOUT.results(st, _, seconds)
  if st.index == 0 then error(I.timeout_error(seconds), 0) end
  return unpack(st.values, 1, st.values.n)
end

--- task.when_all(...) -> first result of each input, in argument order.
-- Inputs are Tasks, Promises or functions (spawned as children). Raises the first
-- error as soon as it happens (a cancelled input raises the cancellation
-- error); then cancels the children it started, never the Tasks it was given.
M.when_all = combinator(ALL)

--- task.when_any(...) -> index, results of the first input to finish.
-- A failure that finishes first is raised. The children it started are
-- cancelled when it returns; the Tasks it was given are left running.
M.when_any = combinator(ANY)

--- task.timeout(seconds, fn, ...) -> fn's results.
-- Runs fn(...) as a child task (or waits for a given Task or Promise). If it has not
-- finished when `seconds` have passed on the scaled clock (checked at
-- Update), the child is cancelled (its to-be-closed variables see the
-- cancellation error) and a timeout error is raised: task.is_timeout(err)
-- is true, task.is_cancelled(err) false. A given Task is not cancelled, nor
-- a given Promise (to abort the job on timeout, await it in a function:
-- timeout(s, function() return task.await(p) end) cancels that child, and
-- so gives the promise up).
M.timeout = combinator(TIMEOUT)
