-- workers.lua: task.workers, worker Lua states seen from the loop's side
-- (docs/workers.md): pools, the Module handles of task.workers.open, and
-- call / post / map with back-pressure, written on the primitives of
-- src/lua/workers.c (workers_new, workers_default, workers_job_for,
-- workers_submit, workers_share) and on prelude.lua.
local M, I, P = ...

local new_pool, default_pool = I.workers_new, I.workers_default
local job_for, submit, make_share = I.workers_job_for, I.workers_submit, I.workers_share
local metatable = I.metatable
local await = M.await
local type, error, pairs, setmetatable, tostring = type, error, pairs, setmetatable, tostring
local tointeger, format, ceil, next = math.tointeger, string.format, math.ceil, next
local argerror, number_text = P.argerror, P.number_text

local Methods = {}
local Module = {__index = Methods, __name = "lunaloop.WorkerModule",
  __metatable = "lunaloop.WorkerModule"}
function Module.__tostring(m) return format("WorkerModule (%s)", m.name) end
-- post and map's C paths (src/lua/workers.c, l_workers_job); call's is
-- Methods.call itself (below)
local post, map = job_for(Module, "post"), job_for(Module, "map")

local function describe(v)
  return type(v) == "number" and number_text(v) or type(v)
end

local function check_module(m, fname, level)
  if metatable(m) ~= Module then
    argerror(fname, 1, "expected a worker module (use ai:" .. fname .. ")", level or 3)
  end
end

-- v as an integer (a float of integral value, 1e6, is one), or nil when v
-- is not a number of integral value.
local function integer(v)
  return type(v) == "number" and tointeger(v) or nil
end

-- An optional count: nil, or v as an integer >= min; raises at `level`
-- (argerror's) naming `what` otherwise.
local function check_count(v, fname, n, what, min, level)
  if v == nil then return nil end
  local i = integer(v)
  if i == nil or i < min then
    argerror(fname, n, format("%s must be an integer >= %d, got %s", what, min, describe(v)), level or 3)
  end
  return i
end

-- task.workers{...}: the options checked where the user wrote them (the C
-- primitive checks them again) and copied with integral floats as
-- integers. The least value of each; threads at most MAX_THREADS
-- (src/lua/workers.c).
local known_pool = {threads = 1, queue = 0, memory = 0, instructions = 0}
local MAX_THREADS = 256
local function pool_options(opts)
  if opts == nil then return nil end
  if type(opts) ~= "table" then
    argerror("task.workers", 1, "expected an options table, got " .. type(opts), 3)
  end
  local out = {}
  for k, v in pairs(opts) do
    local min = known_pool[k]
    if min == nil then
      argerror("task.workers", 1, "unknown option '" .. tostring(k) ..
        "' (expected: threads, queue, memory, instructions)", 3)
    end
    local i = integer(v)
    if i == nil or i < min or (k == "threads" and i > MAX_THREADS) then
      error(format("task.workers: option '%s' must be %s, got %s", k,
        k == "threads" and "an integer 1.." .. MAX_THREADS or "a non-negative integer", describe(v)), 3)
    end
    out[k] = i
  end
  return out
end

local known_open = {deliver_frame = true, instructions = true}

-- pool:open(name [, opts]) -> Module; task.workers.open uses the default
-- pool. Both tail-call it, so the user's line is 1 level up (argerror's
-- level 2; check_count's default 3).
local function open(pool, name, opts, fname)
  if type(name) ~= "string" then
    argerror(fname, 1, "expected a module name (string), got " .. type(name), 2)
  end
  if opts ~= nil then
    if type(opts) ~= "table" then
      argerror(fname, 2, "expected an options table, got " .. type(opts), 2)
    end
    for k in pairs(opts) do
      if not known_open[k] then
        argerror(fname, 2, "unknown option '" .. tostring(k) .. "'", 2)
      end
    end
  end
  if pool:stats().closed then error("task.workers: the worker pool is closed", 2) end
  return setmetatable({pool = pool, name = name,
    deliver_frame = opts and check_count(opts.deliver_frame, fname, 2, "deliver_frame", 1),
    instructions = opts and check_count(opts.instructions, fname, 2, "instructions", 0)}, Module)
end

-- Awaits room while the queue is full and hands the job over again (a
-- caller that cannot await queues past the limit instead): p, room, job
-- are what the C path (job_of) returned; a refusal meanwhile (the pool was
-- closed) is raised at `level` (1: hand_over's caller).
local function hand_over(level, p, room, job)
  while p == false do
    await(room)
    p, room, job = submit(job)
    if p == nil then error(room, level + 1) end
  end
  return p
end

-- Copies the arguments and hands the job over through `job` (call, post
-- or map): its results, a refusal raised at `level` (1: job_of's caller).
local function job_of(job, kind, fn, level, m, ...)
  local p, room, j = job(m, fn, ...)
  if p == nil then
    if room == nil then
      argerror(kind, 2, "expected a function name (string), got " .. type(fn), level + 1)
    end
    error(room, level + 1)
  end
  return p, room, j
end

-- What ai:call does when its C path did not return a Promise: p, room,
-- job are what the C path returned. Called from that C function, so the
-- user's line is 3 levels up.
local function call_slow(m, fn, p, room, job)
  if p == false then
    p = hand_over(3, p, room, job) -- not a tail call: the levels count this function
    return p
  end
  if room ~= nil then error(room, 3) end
  -- not a Module, or fn not a string
  check_module(m, "call", 4)
  argerror("call", 2, "expected a function name (string), got " .. type(fn), 3)
end

--- ai:call(fn, ...) -> Promise: runs module.fn(...) on a worker with copies
-- of the arguments; the Promise resolves with copies of its results or
-- rejects with its error and the worker's traceback. (The C function
-- l_module_call; call_slow above for back-pressure and errors.)
Methods.call = job_for(Module, "call", call_slow)

--- ai:post(fn, ...): as call, one-way: nothing to await; an error is
-- reported (task.on_error) instead.
function Methods.post(m, fn, ...)
  check_module(m, "post")
  hand_over(2, job_of(post, "post", fn, 2, m, ...))
end

local known_map = {chunk = true}

--- ai:map(fn, items [, {chunk = n} [, ...]]) -> results: fork-join over
-- the list `items`: module.fn(item, index, ...) for each item, chunk items
-- per job (64 by default), in parallel over the workers; the values after
-- the options (a Share of what every item reads, say) are copied once per
-- chunk. Returns the list of the first results in order. Awaits (a task
-- only); the first error cancels the other chunks and is raised, naming
-- the item it came from.
function Methods.map(m, fn, items, opts, ...)
  check_module(m, "map")
  if type(fn) ~= "string" then
    argerror("map", 2, "expected a function name (string), got " .. type(fn))
  end
  if type(items) ~= "table" then
    argerror("map", 3, "expected a list of items, got " .. type(items))
  end
  local chunk = 64
  if opts ~= nil then
    if type(opts) ~= "table" then argerror("map", 4, "expected an options table, got " .. type(opts)) end
    for k in pairs(opts) do
      if not known_map[k] then argerror("map", 4, "unknown option '" .. tostring(k) .. "'") end
    end
    chunk = check_count(opts.chunk, "map", 4, "chunk", 1) or chunk
  end
  local n = #items
  if n == 0 and next(items) ~= nil then
    argerror("map", 3, "expected a list of items (keys 1..n), got a table without item 1")
  end
  I.check_await("ai:map", 2)
  local promises, nchunks = {}, ceil(n / chunk)
  local _ <close> = setmetatable({}, {__close = function()
    for i = 1, nchunks do
      local p = promises[i]
      if p ~= nil and p:status() == "pending" then p:cancel() end
    end
  end})
  for c = 1, nchunks do
    local first = (c - 1) * chunk + 1
    local part = {}
    for i = first, first + chunk - 1 > n and n or first + chunk - 1 do
      part[#part + 1] = items[i]
    end
    promises[c] = hand_over(2, job_of(map, "map", fn, 2, m, part, first, ...))
  end
  local out = {}
  for c = 1, nchunks do
    local part = await(promises[c])
    local first = (c - 1) * chunk
    for i = 1, #part do out[first + i] = part[i] end
  end
  return out
end

local W = {}

--- task.workers.open(name [, opts]) -> Module, on the state's default pool
-- (made with the defaults on first use).
function W.open(name, opts)
  local pool = default_pool() or new_pool()
  return open(pool, name, opts, "open")
end

--- task.workers.share(value) -> Share: a read-only snapshot copied once.
function W.share(value)
  local s, err = make_share(value)
  if not s then error(err, 2) end
  return s
end

--- task.workers.pool() -> Pool | nil: the state's default pool.
function W.pool() return default_pool() end

setmetatable(W, {__call = function(_, opts) return new_pool(pool_options(opts)) end,
  __name = "lunaloop.workers", __metatable = false})

-- Pool methods written here: pool:open(name [, opts]).
local pool_methods = I.workers_pool_methods()
function pool_methods.open(pool, name, opts) return open(pool, name, opts, "open") end

M.workers = W
