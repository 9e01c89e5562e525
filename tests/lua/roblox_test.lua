-- roblox_test.lua: require "lunaloop.roblox", Roblox's task library on
-- lunaloop's tasks (docs/roblox.md): spawn, defer, delay, wait, cancel and
-- the synchronize pair, through the real binding on the virtual clock (the
-- harness steps frames of 1/60 s).
local H = require "harness"
local R = require "lunaloop.roblox"

local FRAME = 16666667 / 1e9 -- a frame of 1/60 s on the loop's clocks (whole ns)

-- Equal to the nanosecond rounding of the clocks (the scaled clock rounds
-- each frame's scaled delta to whole ns).
local function near(a, b, what)
  if type(a) ~= "number" or math.abs(a - b) > 1e-8 then
    error(string.format("%s: expected %.9f, got %s", what or "value", b, tostring(a)), 2)
  end
end

H.case("the_library_is_the_same_table_each_require_and_falls_through_to_the_module", function()
  H.eq(require "lunaloop.roblox", R)
  H.eq(R.signal, task.signal)
  H.eq(R.yield, task.yield)
  H.truthy(R.spawn ~= task.spawn and R.delay ~= task.delay and R.defer ~= task.defer)
end)

H.case("spawn_runs_a_function_now_with_its_arguments_and_returns_its_thread", function()
  local log = {}
  local th = R.spawn(function(a, b) log[#log + 1] = a .. b; R.wait(); log[#log + 1] = "resumed" end, "x", "y")
  log[#log + 1] = "returned"
  H.eq(type(th), "thread")
  H.eq(th:status(), "suspended")
  H.eq(log, {"xy", "returned"})
  H.frames(1)
  H.eq(log, {"xy", "returned", "resumed"})
end)

H.case("spawn_of_a_plain_coroutine_resumes_it_and_task_wait_works_inside", function()
  local log = {}
  local f0 = task.frame() -- frames count on across the cases (the harness resets the loop)
  local co = coroutine.create(function(a)
    log[#log + 1] = "start " .. a
    local waited = R.wait(0.05)
    log[#log + 1] = string.format("waited %.4f at %d", waited, task.frame() - f0)
    return "done"
  end)
  H.eq(R.spawn(co, "A"), co)
  H.eq(coroutine.status(co), "suspended")
  H.frames(3)
  H.eq(log, {"start A", "waited 0.0500 at 3"})
  H.eq(coroutine.status(co), "dead")
  H.raises(function() R.spawn(co) end, "cannot resume a dead coroutine")
end)

H.case("a_plain_yield_lets_the_coroutine_go_and_spawn_resumes_it_again", function()
  local got = {}
  local co = coroutine.create(function()
    got[#got + 1] = coroutine.yield("paused")
    got[#got + 1] = R.wait()
  end)
  R.spawn(co)
  H.eq(coroutine.status(co), "suspended")
  R.spawn(co, "value") -- the Roblox way of resuming a yielded thread
  H.eq(got, {"value"})
  H.frames(1)
  near(got[2], FRAME, "wait() in the resumed coroutine")
end)

H.case("spawn_starts_a_task_not_started_yet_and_refuses_one_that_runs", function()
  local log = {}
  local t = task.defer(function(v) log[#log + 1] = "ran " .. tostring(v) end, 7)
  H.eq(R.spawn(t), t)
  H.eq(log, {"ran 7"})
  local w = R.spawn(function() R.wait(1) end)
  H.raises(function() R.spawn(w) end, "cannot resume a task that has started")
  R.cancel(w)
end)

H.case("defer_runs_once_the_running_task_waits_in_the_same_run", function()
  local log = {}
  local th
  local f0 = task.frame()
  local t = task.spawn(function()
    task.yield("PreUpdate")
    th = R.defer(function(v) log[#log + 1] = "deferred " .. v .. "@" .. testhost.timing() .. task.frame() - f0 end, 1)
    log[#log + 1] = "after defer"
    task.yield("Update")
    log[#log + 1] = "task resumed@" .. testhost.timing()
  end)
  H.frames(1)
  H.eq(log, {"after defer", "deferred 1@PreUpdate1", "task resumed@Update"})
  H.eq(type(th), "thread")
  H.eq(th:status(), "done")
  H.eq(t:status(), "done")
  -- outside any task nothing is running: it runs at once
  R.defer(function() log[#log + 1] = "now" end)
  H.eq(log[4], "now")
end)

H.case("defer_of_a_thread_and_cancel_before_it_runs", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local co = coroutine.create(function(v) log[#log + 1] = "co " .. v end)
  task.spawn(function()
    H.eq(R.defer(co, "v"), co)
    local th = R.defer(function() log[#log + 1] = "never" end)
    R.cancel(th)
    H.eq(th:status(), "cancelled")
    local co2 = coroutine.create(function() log[#log + 1] = "never either" end)
    R.defer(co2)
    H.raises(function() R.spawn(co2) end, "cannot resume a coroutine that task.wait, task.delay or task.defer holds")
    R.cancel(co2) -- called off before it ran: no error later
    H.eq(coroutine.status(co2), "dead")
    log[#log + 1] = "spawner"
  end)
  H.frames(1)
  restore()
  H.eq(log, {"spawner", "co v"})
  H.eq(#reports, 0)
end)

H.case("delay_runs_at_the_first_update_after_the_seconds_and_returns_the_thread", function()
  local log = {}
  local f0 = task.frame()
  local th = R.delay(0.05, function(a, b) log[#log + 1] = a .. b .. "@" .. task.frame() - f0 end, "p", "q")
  local off = R.delay(0.05, function() log[#log + 1] = "cancelled one" end)
  H.eq(type(th), "thread")
  R.cancel(off)
  H.frames(2)
  H.eq(log, {})
  H.frames(1)
  H.eq(log, {"pq@3"})
  -- a plain coroutine, delayed and then cancelled through the coroutine itself
  local closed = false
  local co = coroutine.create(function() log[#log + 1] = "never" end)
  H.eq(R.delay(1, co), co)
  R.cancel(co)
  H.frames(70)
  H.eq(log, {"pq@3"})
  H.eq(coroutine.status(co), "dead")
  H.eq(closed, false)
end)

H.case("wait_returns_the_time_waited_measured_from_the_call", function()
  local out = {}
  local f0 = task.frame()
  task.spawn(function()
    out[1] = R.wait(0.1)   -- from before the first frame: 6 frames
    out[2] = R.wait()      -- the next Update
    out[3] = R.wait(0)
    task.yield("PreUpdate")
    out[4] = R.wait()      -- called before Update in a frame: that frame's Update
    out[5] = task.frame() - f0
  end)
  H.frames(12)
  near(out[1], 6 * FRAME, "wait(0.1)")
  near(out[2], FRAME, "wait()")
  near(out[3], FRAME, "wait(0)")
  near(out[4], 0, "wait() before Update")
  H.eq(out[5], 9)
end)

H.case("wait_follows_the_scaled_clock", function()
  local out = {}
  task.time_scale(0.5)
  local f0 = task.frame()
  task.spawn(function() out[1] = R.wait(0.05); out[2] = task.frame() - f0 end)
  H.frames(6)
  near(out[1], 6 * FRAME * 0.5, "scaled wait")
  H.eq(out[2], 6)
end)

H.case("in_a_group_wait_and_delay_run_on_the_group_clock", function()
  local g = task.group{name = "ported"}
  local out = {}
  local f0 = task.frame()
  g:spawn(function()
    R.delay(0.05, function() out.delayed = task.frame() - f0 end)
    out.waited = R.wait(0.05)
    out.at = task.frame() - f0
  end)
  H.frames(1)
  g:pause()
  H.frames(10) -- paused: the group's clock stands still
  H.eq(out, {})
  g:resume()
  H.frames(2)
  near(out.waited, 3 * FRAME, "group time waited")
  H.eq(out.at, 13)
  H.eq(out.delayed, 13)
  g:cancel()
end)

H.case("cancel_of_a_suspended_thread_unwinds_it", function()
  local closed
  local th = R.spawn(function()
    local x <close> = setmetatable({}, {__close = function(_, e) closed = task.is_cancelled(e) end})
    R.wait(10)
  end)
  R.cancel(th)
  H.eq(closed, true)
  H.eq(th:status(), "cancelled")
  -- a plain coroutine waiting through our driver: closed, its wait called off
  local closed2
  local co = coroutine.create(function()
    local x <close> = setmetatable({}, {__close = function() closed2 = true end})
    R.wait(10)
  end)
  R.spawn(co)
  R.cancel(co)
  H.eq(closed2, true)
  H.eq(coroutine.status(co), "dead")
  R.cancel(co) -- a dead coroutine: nothing
end)

H.case("an_error_in_a_spawned_function_is_reported_and_spawn_returns", function()
  local reports, restore = H.capture_errors()
  local th = R.spawn(function() error("oops", 0) end)
  local co = coroutine.create(function() R.wait(); error("in co", 0) end)
  R.spawn(co)
  H.frames(1)
  restore()
  H.eq(th:status(), "failed")
  H.eq(#reports, 2)
  H.eq(reports[1].err, "oops")
  H.eq(reports[2].err, "in co")
end)

H.case("synchronize_and_desynchronize_are_no_ops", function()
  H.eq(select("#", R.synchronize()), 0)
  H.eq(select("#", R.desynchronize()), 0)
end)

H.case("hostile_arguments_raise_clear_errors_at_the_call", function()
  H.raises(function() R.spawn() end, "bad argument #1 to 'spawn' (function or thread expected, got no value)")
  H.raises(function() R.spawn(5) end, "bad argument #1 to 'spawn' (function or thread expected, got number)")
  H.raises(function() R.defer({}) end, "bad argument #1 to 'defer' (function or thread expected, got table)")
  H.raises(function() R.delay("soon", print) end, "bad argument #1 to 'delay' (number expected, got string)")
  H.raises(function() R.delay(-1, print) end, "bad argument #1 to 'delay' (expected a finite, non-negative number of seconds, got -1)")
  H.raises(function() R.delay(nil, print) end, "bad argument #1 to 'delay' (number expected, got no value)")
  H.raises(function() R.delay(1, nil) end, "bad argument #2 to 'delay' (function or thread expected, got no value)")
  H.raises(function() R.delay(1 / 0, print) end, "got inf")
  H.raises(function() R.wait(-0.5) end, "bad argument #1 to 'wait'")
  H.raises(function() R.wait() end, "task.wait: not inside a task")
  H.raises(function() R.cancel() end, "bad argument #1 to 'cancel' (thread expected, got no value)")
  H.raises(function() R.cancel(print) end, "bad argument #1 to 'cancel' (thread expected, got function)")
  local t = task.spawn(function() task.yield() end)
  H.raises(function() R.delay(1, t) end, "a task resumes itself")
  task.cancel(t)
  local out = H.run_task(function() R.cancel(task.current()) end)
  H.has(out.values[2], "bad argument #1 to 'cancel' (cannot cancel the running thread")
  local co = coroutine.create(function() R.cancel(coroutine.running()) end)
  local ok, err = coroutine.resume(co)
  H.eq(ok, false)
  H.has(err, "cannot cancel the running thread")
end)

-- defer and delay of a plain coroutine that our driver holds in a
-- task.wait were accepted: a second driver then resumed the coroutine
-- early (cutting its wait short) and the first one later resumed it again
-- (or found it dead and failed inside roblox.lua, reported against the
-- library's own line). They are refused as spawn refuses it, and the wait
-- goes on untouched.
H.case("defer_and_delay_refuse_a_coroutine_held_in_task_wait", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local co = coroutine.create(function()
    log[#log + 1] = string.format("waited %.3f", R.wait(0.1))
    return "done"
  end)
  R.spawn(co)
  H.raises(function() R.defer(co) end, "bad argument #1 to 'defer' (cannot resume a coroutine that task.wait, task.delay or task.defer holds)")
  H.raises(function() R.delay(0, co) end, "bad argument #2 to 'delay' (cannot resume a coroutine that task.wait, task.delay or task.defer holds)")
  H.frames(3)
  H.eq(log, {})
  H.frames(3)
  H.eq(log, {"waited 0.100"})
  H.eq(coroutine.status(co), "dead")
  -- the coroutine running now may still hand itself to delay (a Roblox idiom)
  local idiom = coroutine.create(function()
    R.delay(0.05, coroutine.running())
    coroutine.yield()
    log[#log + 1] = "idiom"
  end)
  R.spawn(idiom)
  H.frames(3)
  H.eq(log, {"waited 0.100", "idiom"})
  H.raises(function() R.delay(1, idiom) end, "bad argument #2 to 'delay' (cannot resume a dead coroutine)")
  restore()
  H.eq(#reports, 0)
end)

-- task.cancel of a plain coroutine that is resuming another (status
-- "normal") cancelled the driver task that ran it (the caller's own task,
-- which then unwound) before it raised. Roblox refuses it; so does this,
-- changing nothing.
H.case("cancel_of_a_coroutine_resuming_another_raises_and_changes_nothing", function()
  local log = {}
  local outer
  outer = coroutine.create(function()
    local inner = coroutine.create(function()
      local ok, err = pcall(R.cancel, outer)
      log[#log + 1] = tostring(ok) .. " " .. tostring(err)
    end)
    coroutine.resume(inner)
    log[#log + 1] = string.format("waited %.3f", R.wait(0.05))
  end)
  R.spawn(outer)
  H.frames(4)
  H.eq(log, {"false bad argument #1 to 'cancel' (cannot cancel a normal coroutine)", "waited 0.050"})
  H.eq(coroutine.status(outer), "dead")
end)

H.run()
