-- every_test.lua: task.every, periodic callbacks anchored to their start
-- (docs/update-layer.md, section 3).
local H = require "harness"
local NS = 1e9

-- task.every(0.1) over 10 s of 1/60 s frames runs exactly 100 times, call
-- k in the first frame at or after k * 0.1 s from its start. Due times
-- taken from when each call ran, rather than from the start, let each
-- call's lateness (up to a frame) add up into drift.
H.case("every_keeps_its_period_over_ten_seconds_without_drift", function()
  local dt_ns = 16666667          -- round(1e9 / 60), what task.step(1/60) uses
  local start = task.time()
  local times = {}
  local h = task.every(0.1, function() times[#times + 1] = task.time() - start end)
  H.frames(600, 1 / 60)            -- 10 s of frames
  h:remove()
  -- 600 frames of 16,666,667 ns reach 10.0000002 s: exactly 100 calls (the
  -- case allows ±1; integer nanoseconds make it exact)
  H.eq(#times, 100, "calls")
  for k, t in ipairs(times) do
    local ns = math.floor(t * NS + 0.5)
    H.truthy(ns >= k * 100000000, ("call %d at %d ns, before %d"):format(k, ns, k * 100000000))
    H.truthy(ns < k * 100000000 + dt_ns, ("call %d at %d ns, late by a frame or more"):format(k, ns))
  end
end)

H.case("every_passes_the_intervals_due_and_stays_anchored", function()
  local got = {}
  local start = task.time()
  local h = task.every(0.1, function(n) got[#got + 1] = {n, math.floor((task.time() - start) * 1000 + 0.5)} end)
  H.frames(1, 0.25)                -- 2.5 intervals in one frame: one call, n = 2
  H.frames(1, 0.05)                -- 0.30: the 3rd interval is due
  H.frames(1, 0.05)                -- 0.35: nothing due
  H.frames(1, 0.05)                -- 0.40: the 4th
  h:remove()
  H.eq(got, {{2, 250}, {1, 300}, {1, 400}})
end)

H.case("every_on_other_clock_and_timing", function()
  task.time_scale(0)
  local log = {}
  local h1 = task.every(0.1, function() log[#log + 1] = "scaled" end)
  local h2 = task.every(0.1, function() log[#log + 1] = "unscaled@" .. testhost.timing() end,
    {clock = "unscaled", timing = "LastUpdate"})
  H.frames(2, 0.1)
  h1:remove(); h2:remove()
  H.eq(log, {"unscaled@LastUpdate", "unscaled@LastUpdate"})
end)

H.case("every_removed_inside_its_call_and_errors_remove_it", function()
  local n = 0
  local h
  h = task.every(0.1, function() n = n + 1; if n == 2 then h:remove() end end)
  H.frames(5, 0.1)
  H.eq({n, h:active()}, {2, false})
  local reports, restore = H.capture_errors()
  local bad = task.every(0.1, function() error("tick failed") end)
  H.frames(3, 0.1)
  restore()
  H.eq({#reports, bad:active(), reports[1].task}, {1, false, nil})
  H.has(reports[1].err, "tick failed")
end)

H.case("every_argument_errors", function()
  local msg = "expected a finite interval of at least 1e-9 seconds, got "
  H.has(H.raises(function() task.every(0, print) end), msg .. "0.0")
  H.has(H.raises(function() task.every(-1, print) end), msg .. "-1.0")
  H.has(H.raises(function() task.every(1e-300, print) end), msg .. "1e-300")
  H.has(H.raises(function() task.every(0 / 0, print) end), msg .. "nan")
  H.has(H.raises(function() task.every(math.huge, print) end), msg .. "inf")
  H.has(H.raises(function() task.every(1, nil) end), "function expected")
  H.has(H.raises(function() task.every(1, print, {clock = "moon"}) end),
    "opts.clock: unknown clock 'moon'")
  H.has(H.raises(function() task.every(1, print, {timing = "Later"}) end),
    "bad argument #3 to 'every' (opts.timing: unknown timing 'Later'")
  H.has(H.raises(function() task.every(1, print, {timng = "Update"}) end),
    "unknown option 'timng' (expected: timing, clock, spread)")
  -- 0 and "yes" would read as true
  H.has(H.raises(function() task.every(1, print, {spread = 0}) end),
    "bad argument #3 to 'every' (opts.spread: expected a boolean, got number)")
  H.has(H.raises(function() task.every(1, print, {spread = "yes"}) end),
    "(opts.spread: expected a boolean, got string)")
  H.has(H.raises(function() task.on("Update", print, {prio = 1}) end),
    "unknown option 'prio' (expected: priority)")
  H.eq(testhost.callback_count(), 0)
end)

local function calls_per_frame(spread)
  local per = {}
  local frame0 = task.frame()
  local hs = {}
  for i = 1, 10000 do
    hs[i] = task.every(0.5, function()
      local f = task.frame() - frame0
      per[f] = (per[f] or 0) + 1
    end, {spread = spread})
  end
  H.frames(60, 1 / 60)               -- two full intervals
  for i = 1, 10000 do hs[i]:remove() end
  return per
end

H.case("every_spread_10000_callbacks_evenly_within_1_5x_average", function()
  local per = calls_per_frame(true)
  -- frames 1..30 hold the first round of 10,000 calls: 333.3 per frame on average
  local total, max = 0, 0
  for f = 1, 30 do
    total = total + (per[f] or 0)
    max = math.max(max, per[f] or 0)
  end
  H.eq(total, 10000, "each callback called once in the first interval")
  local avg = total / 30
  H.truthy(max <= 1.5 * avg, ("max %d per frame, average %.1f"):format(max, avg))
end)

H.case("every_without_spread_lands_all_in_one_frame", function()
  local per = calls_per_frame(false)
  local frames_with_calls = {}
  for f, n in pairs(per) do frames_with_calls[#frames_with_calls + 1] = {f, n} end
  table.sort(frames_with_calls, function(a, b) return a[1] < b[1] end)
  H.eq(frames_with_calls, {{30, 10000}, {60, 10000}})
end)

-- The timing is optional and may be written as nil, with the options
-- after it: task.every(0.1, fn, nil, {clock = "unscaled"}) ignored the
-- options table silently (the callback ran on the scaled clock, unknown
-- options passed); so did task.on(fn, nil, opts) and g:every, which took
-- opts.clock that way although a group's callbacks refuse it.
H.case("options_after_an_explicit_nil_timing_are_read", function()
  task.time_scale(0)
  local n = 0
  local h <close> = task.every(0.1, function() n = n + 1 end, nil, {clock = "unscaled"})
  H.frames(12)
  H.eq(n, 2)
  H.raises(function() task.every(0.1, print, nil, {bogus = 1}) end, "unknown option 'bogus'")
  local late <close> = task.every(0.1, print, nil, {timing = "PreLateUpdate"})
  H.has(tostring(late), "every PreLateUpdate")
  H.raises(function() task.on(print, nil, {priority = "bogus"}) end, "priority")
  local g <close> = task.group()
  H.raises(function() g:every(0.1, print, nil, {clock = "unscaled"}) end, "unknown option 'clock'")
  H.raises(function() g:on(print, nil, {bogus = true}) end, "unknown option 'bogus'")
end)

H.run()
