-- task_coroutine_test.lua: a task's own coroutine driven from plain Lua.
--
-- A task's coroutine is reachable from its own code (coroutine.running())
-- and so from anything it hands it to. coroutine.resume on one suspended in
-- task.delay or task.await crashed the process (the await's continuation
-- returned a count that shares memory with the timer deadline); on
-- next_frame it returned stale stack values, on a channel receive or a
-- when_all the task was stuck for ever. coroutine.close ran its __close
-- handlers with no error and left the task "suspended" for ever. Now the
-- resume raises at the call and leaves the task as it was, for every wait
-- kind; the close is a cancellation of the task.
local H = require "harness"

local MSG = "cannot resume a task's coroutine; the scheduler resumes it"

-- Each wait kind: a function that suspends the calling task once and
-- returns what the await gave; `wake` makes it go on (nil: by time alone).
local function kinds()
  local ch = task.channel()
  local full = task.channel(1)
  local blocker
  return {
    {"yield", function() return task.yield() end},
    {"next_frame", function() return task.next_frame() end},
    {"delay", function() return task.delay(0.05) end},
    {"delay_frame", function() return task.delay_frame(2) end},
    {"wait_until", function() local n = 0; return task.wait_until(function() n = n + 1; return n > 1 end) end},
    {"await", function()
      return task.await(task.spawn(function() task.yield(); return "child" end))
    end},
    {"receive", function() return ch:receive() end, function() ch:send("sent") end},
    {"send", function() full:send(1); full:send(2); return "sent" end, function() full:receive() end},
    {"when_all", function()
      return task.when_all(function() task.yield(); return "a" end, function() return "b" end)
    end},
    {"when_any", function() return task.when_any(function() task.delay_frame(1); return "w" end) end},
    {"timeout", function() return task.timeout(1, function() task.yield(); return "t" end) end},
    {"scope", function()
      return task.scope(function(s) s:spawn(function() task.yield() end); return "scoped" end)
    end},
  }
end

H.case("resuming_a_suspended_task_s_coroutine_raises_at_the_call_for_every_wait_kind", function()
  for _, k in ipairs(kinds()) do
    local name, wait, wake = k[1], k[2], k[3]
    local co, got
    local t = task.spawn(function()
      co = coroutine.running()
      got = table.pack(wait())
      return "finished"
    end)
    H.eq(t:status(), "suspended", name)
    local err = H.raises(function() coroutine.resume(co, "forged", "values") end, MSG, name)
    H.has(err, "task_coroutine_test.lua:", name .. ": the error names the caller's line")
    H.eq(coroutine.status(co), "suspended", name)
    H.eq(t:status(), "suspended", name .. ": the task is untouched")
    -- Closing a wrap of it is not a thing: wrap makes a new coroutine.
    if wake then wake() end
    H.frames(4)
    H.eq(t:status(), "done", name)
    H.eq(select(2, t:result()), "finished", name)
    H.truthy(got[1] ~= "forged", name .. ": the await gave no forged value")
  end
end)

H.case("a_woken_task_not_yet_resumed_is_refused_too_and_keeps_its_values", function()
  local ch = task.channel()
  local co, got
  local t = task.spawn(function() co = coroutine.running(); got = ch:receive() end)
  task.spawn(function()
    ch:send("value")            -- t is woken: resumed after this task suspends
    H.raises(function() coroutine.resume(co, "forged") end, MSG)
    task.yield()
  end)
  H.frames(2)
  H.eq({t:status(), got}, {"done", "value"})
end)

H.case("closing_a_suspended_task_s_coroutine_cancels_the_task", function()
  local log = {}
  local co
  local t = task.spawn(function()
    co = coroutine.running()
    local r <close> = setmetatable({}, {__close = function(_, e)
      log[#log + 1] = "close: " .. tostring(e)
    end})
    task.delay(10)
    log[#log + 1] = "not reached"
  end)
  local awaiter = task.spawn(function()
    local ok, err = pcall(task.await, t)
    log[#log + 1] = "awaiter: " .. tostring(ok) .. " " .. tostring(task.is_cancelled(err))
  end)
  H.eq(table.pack(coroutine.close(co)), {n = 1, true})
  -- As task.cancel: returns once the task unwound and its awaiter was told.
  H.eq(log, {"close: task cancelled", "awaiter: false true"})
  H.eq(t:status(), "cancelled")
  H.eq(awaiter:status(), "done")
  -- Closed again, it is a dead coroutine's close: nothing happens.
  H.eq(coroutine.close(co), true)
end)

H.case("a_running_task_s_own_coroutine_keeps_stock_lua_s_answers", function()
  local got = {}
  local t = task.spawn(function()
    local co, main = coroutine.running()
    got.main = main
    got.status = coroutine.status(co)
    got.yieldable = coroutine.isyieldable()
    got.close = select(2, pcall(coroutine.close, co))
    got.resume = table.pack(coroutine.resume(co))
    local inner = coroutine.wrap(function() return coroutine.status(co) end)
    got.normal = inner()
    got.close_normal = select(2, pcall(coroutine.wrap(function() return coroutine.close(co) end)))
  end)
  H.eq(t:status(), "done")
  H.eq(got.main, false)
  H.eq(got.status, "running")
  H.eq(got.yieldable, true)
  H.has(got.close, "cannot close a running coroutine")
  H.eq(got.resume, {n = 2, false, "cannot resume non-suspended coroutine"})
  H.eq(got.normal, "normal")
  H.has(got.close_normal, "cannot close a normal coroutine")
end)

H.case("an_ended_task_s_coroutine_is_a_dead_one_and_keeps_the_results", function()
  -- It holds the task's results, so the stock functions took it for a
  -- coroutine not started yet: resume called its last result, close wiped
  -- the results that t:result() and later awaits return.
  local co, fco
  local reports, restore = H.capture_errors()
  local t = task.spawn(function() co = coroutine.running(); return print, "x" end)
  local f = task.spawn(function() fco = coroutine.running(); error("failed", 0) end)
  restore()
  H.eq(#reports, 1)
  H.eq(table.pack(coroutine.resume(co, 1)), {n = 2, false, "cannot resume dead coroutine"})
  H.eq(coroutine.close(co), true)
  H.eq(coroutine.close(fco), true)
  H.eq(table.pack(coroutine.resume(fco)), {n = 2, false, "cannot resume dead coroutine"})
  H.eq(table.pack(t:result()), {n = 3, true, print, "x"})
  H.eq(table.pack(f:result()), {n = 2, false, "failed"})
  local got
  task.spawn(function() got = table.pack(task.await(t)) end)
  H.eq(got, {n = 2, print, "x"})
end)

H.case("plain_coroutines_resume_and_close_as_before", function()
  local co = coroutine.create(function(a) local b = coroutine.yield(a + 1); return b * 2 end)
  H.eq({coroutine.resume(co, 1)}, {true, 2})
  H.eq({coroutine.resume(co, 5)}, {true, 10})
  H.eq({coroutine.resume(co)}, {false, "cannot resume dead coroutine"})
  local closed
  local c2 = coroutine.create(function()
    local r <close> = setmetatable({}, {__close = function(_, e) closed = tostring(e) end})
    coroutine.yield()
  end)
  coroutine.resume(c2)
  H.eq(coroutine.close(c2), true)
  H.eq(closed, "nil")
end)

H.run()
