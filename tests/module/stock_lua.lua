-- stock_lua.lua: the module loaded by a stock lua5.4 (LUA_CPATH points at
-- the built lunaloop.so), driving frames itself with task.step and task.run.
-- A library that captured the stock coroutine functions before the module
-- loaded keeps them (the module guards the coroutine table from then on).
local stock_resume, stock_close = coroutine.resume, coroutine.close
local task = require "lunaloop"
assert(require "lunaloop" == task, "require returns the same table")
local failures = 0
local function check(cond, what)
  if not cond then failures = failures + 1; io.stderr:write("FAIL: ", what, "\n") end
end

check(task.frame() == 0, "frame 0 before any step")
local log = {}
task.spawn(function()
  task.delay(0.5)
  log[#log + 1] = task.frame()
end)
check(task.step(0.25) == 1, "step returns the frame")
check(task.step(0.25) == 2, "second step")
check(log[1] == 2, "delay(0.5) at dt 0.25 resumes in frame 2")

-- task.run{fast=true}: frames back to back at 1/hz until nothing is alive.
local done_at
task.spawn(function() task.delay(1); done_at = task.frame() end)
local start = task.frame()
check(task.run{fast = true, hz = 10} == 0, "run returns 0")
check(done_at == start + 10, "delay(1) at 10 Hz takes 10 frames, got " .. tostring(done_at and done_at - start))

-- task.exit inside run: the code comes back, remaining tasks are cancelled.
local closed = false
task.spawn(function()
  local r <close> = setmetatable({}, {__close = function() closed = true end})
  task.delay(100)
end)
task.spawn(function() task.delay(0.2); task.exit(3) end)
check(task.run{fast = true} == 3, "run returns the exit code")
check(closed, "remaining task cancelled, to-be-closed ran")

-- run with a frame limit
task.spawn(function() while true do task.yield() end end)
check(task.run{fast = true, frames = 5} == 0, "frames limit")

-- options are checked before any frame runs, with the option named
local function run_error(opts)
  local ok, err = pcall(task.run, opts)
  return not ok and err or "no error"
end
local frame0 = task.frame()
for _, c in ipairs{
  {{frames = -1}, "bad argument #1 to 'lunaloop.run' (opts.frames: expected a whole number >= 0, got -1)"},
  {{frames = 1.5}, "opts.frames: expected a whole number >= 0, got 1.5)"},
  {{frames = 0 / 0}, "opts.frames: expected a whole number >= 0, got nan)"},
  {{frames = math.huge}, "opts.frames: expected a whole number >= 0, got inf)"},
  {{frames = "5"}, "opts.frames: expected a number, got string)"},
  {{hz = 0}, "opts.hz: expected a positive number, got 0)"},
  {{hz = true}, "opts.hz: expected a number, got boolean)"},
  {{fast = 1}, "bad argument #1 to 'lunaloop.run' (opts.fast: expected a boolean, got number)"},
  {{Fast = true}, "bad argument #1 to 'lunaloop.run' (unknown option 'Fast' (expected: hz, frames, fast))"},
} do
  local err = run_error(c[1])
  check(err:find(c[2], 1, true), "run error: expected " .. c[2] .. ", got " .. err)
end
check(task.frame() == frame0, "no frame ran for a bad option")
task.spawn(function() while true do task.yield() end end)
check(task.run{fast = true, frames = 0} == 0 and task.frame() == frame0, "frames = 0 runs none")

-- The clocks stop at 2^61 ns (about 73 years): a dt past that is a bad
-- argument; one that would carry a clock past it fails the frame with the
-- reason (both said "invalid argument" before).
local ok, err = pcall(task.step, 4e9)
check(not ok and err:find("bad argument #1 to 'lunaloop.step' (expected at most 2305843009", 1, true),
  "a dt past the clocks: " .. tostring(err))
task.time_scale(1e6)
ok, err = pcall(task.step, 4611)
check(not ok and err:find("frame failed: a clock would pass its limit", 1, true),
  "a frame past the clocks: " .. tostring(err))
task.time_scale(1)

-- task.run ends a stuck run at once, as lunaloop run does (the report goes
-- to stderr): every task waits on another task or a channel and nothing
-- else can wake one. It used to run frames for ever.
local stuck_closed = false
local ch = task.channel()
local rx = task.spawn(function()
  local r <close> = setmetatable({}, {__close = function() stuck_closed = true end})
  local v = ch:receive()
  return v
end)
task.spawn(function() local v = task.await(rx); return v end)
check(task.run{fast = true} == 3, "a stuck run returns 3")
check(stuck_closed and rx:status() == "cancelled", "the stuck tasks were cancelled")

-- driving from inside a task is refused
task.spawn(function()
  local ok, err = pcall(task.step)
  check(not ok and err:find("cannot drive the loop from inside a task"), "step inside a task")
end)

-- A task's coroutine is the scheduler's. The coroutine table's resume
-- raises at the call; a resume captured before the module loaded gets
-- (true, the same message) and the task is untouched (it crashed the
-- interpreter: the await took a timer's deadline for a count of values).
do
  local MSG = "cannot resume a task's coroutine; the scheduler resumes it"
  local co, got
  local t = task.spawn(function() co = coroutine.running(); got = task.delay(0.1) or "woke" end)
  local ok, err = pcall(coroutine.resume, co, "forged")
  check(not ok and err:find(MSG, 1, true), "guarded resume of a task: " .. tostring(err))
  local r = table.pack(stock_resume(co, "forged", "values"))
  check(r.n == 2 and r[1] == true and r[2]:find(MSG, 1, true), "captured resume of a task: " .. tostring(r[2]))
  check(t:status() == "suspended" and coroutine.status(co) == "suspended", "the task is untouched")
  for _ = 1, 10 do task.step(0.05) end
  check(t:status() == "done" and got == "woke", "the task woke as usual: " .. tostring(got))

  -- A captured close runs the __close handlers with no error (nothing can
  -- change that), and the task ends cancelled at its next wake-up instead
  -- of failing with "cannot resume dead coroutine" (or reading below its
  -- stack when it had been woken with values).
  local closed
  local sleeper = task.spawn(function()
    co = coroutine.running()
    local c <close> = setmetatable({}, {__close = function(_, e) closed = tostring(e) end})
    task.delay(0.1)
  end)
  local ch = task.channel()
  local rco
  local receiver = task.spawn(function() rco = coroutine.running(); return ch:receive() end)
  task.spawn(function() ch:send("v"); stock_close(rco) end) -- woken, then closed
  local awaited
  task.spawn(function() awaited = select(2, pcall(task.await, sleeper)) end)
  check(stock_close(co) == true and closed == "nil", "captured close ran the handler")
  for _ = 1, 10 do task.step(0.05) end
  check(sleeper:status() == "cancelled" and task.is_cancelled(awaited), "closed task ends cancelled")
  check(receiver:status() == "cancelled", "woken then closed: " .. receiver:status())
end

-- require "lunaloop.roblox": Lua's all-in-one loader finds
-- luaopen_lunaloop_roblox in lunaloop.so; one table per state.
do
  local R = require "lunaloop.roblox"
  check(R == require "lunaloop.roblox" and R.signal == task.signal, "lunaloop.roblox: one table over the module")
  local waited
  R.spawn(function() waited = R.wait(0.5) end)
  task.step(0.25); task.step(0.25)
  check(waited == 0.5, "lunaloop.roblox: wait returns the time waited: " .. tostring(waited))
end

do
  -- task.workers in a stock lua5.4: the worker states are made with the
  -- interpreter's own Lua library, the job module found on package.path.
  local dir = os.tmpname()
  os.remove(dir)
  local f = assert(io.open(dir .. "_job.lua", "w"))
  f:write("return {add = function(a, b) return a + b, task.worker.id end,\n",
    "  open = function() return pcall(require, 'lunaloop') end}\n")
  f:close()
  local name = dir:match("([^/]+)$") .. "_job"
  package.path = dir:match("^(.*/)") .. "?.lua;" .. package.path
  local pool = task.workers{threads = 2}
  local m = pool:open(name)
  local got
  task.spawn(function() got = {task.await(m:call("add", 40, 2))} end)
  for _ = 1, 1000000 do if got then break end task.step() end
  check(got and got[1] == 42 and (got[2] == 1 or got[2] == 2), "a worker job in stock Lua")
  -- the worker's package.cpath finds lunaloop.so too: opening it there is
  -- refused (the worker state's extra space is its worker's), and the
  -- worker goes on
  got = nil
  task.spawn(function() got = {task.await(m:call("open"))} end)
  for _ = 1, 1000000 do if got then break end task.step() end
  check(got and got[1] == false and tostring(got[2]):find("cannot be opened in a worker state", 1, true),
    "require 'lunaloop' in a worker is refused: " .. tostring(got and got[2]))
  got = nil
  task.spawn(function() got = {task.await(m:call("add", 1, 2))} end)
  for _ = 1, 1000000 do if got then break end task.step() end
  check(got and got[1] == 3, "the worker goes on after the refusal")
  pool:close()
  task.step()
  os.remove(dir .. "_job.lua")
end

print(failures == 0 and "1 passed, 0 failed" or "0 passed, 1 failed")
os.exit(failures == 0 and 0 or 1)
