-- callbacks_test.lua: task.on, the per-tick runner (DESIGN §3, §6).
local H = require "harness"

H.case("on_calls_in_registration_order_with_dt_from_next_run", function()
  local log = {}
  local hs = {}
  for i = 1, 3 do hs[i] = task.on("Update", function(dt) log[#log + 1] = {i, dt} end) end
  H.eq(#log, 0, "not called synchronously")
  H.frames(2, 0.25)
  H.eq(log, {{1, 0.25}, {2, 0.25}, {3, 0.25}, {1, 0.25}, {2, 0.25}, {3, 0.25}})
  for i = 1, 3 do hs[i]:remove() end
end)

H.case("remove_during_the_run_is_safe_and_keeps_order", function()
  local log = {}
  local hs = {}
  for i = 1, 5 do
    hs[i] = task.on("Update", function()
      log[#log + 1] = i
      if i == 2 then hs[2]:remove(); hs[4]:remove() end
    end)
  end
  H.frames(2)
  H.eq(log, {1, 2, 3, 5, 1, 3, 5})
  for i = 1, 5 do hs[i]:remove() end
  H.eq(testhost.callback_count(), 0)
end)

H.case("a_raising_callback_is_removed_and_reported_with_nil_task", function()
  local reports, restore = H.capture_errors()
  local calls, others = 0, 0
  local bad = task.on("Update", function() calls = calls + 1; error("cb boom") end)
  local good = task.on("Update", function() others = others + 1 end)
  H.frames(3)
  restore()
  H.eq({calls, others, #reports, bad:active(), good:active()}, {1, 3, 1, false, true})
  H.has(reports[1].err, "cb boom")
  H.eq(reports[1].task, nil)
  H.has(reports[1].tb, "stack traceback:")
  good:remove()
end)

H.case("on_fixed_update_gets_fixed_dt", function()
  testhost.fixed_dt(0.02)
  local dts = {}
  local h = task.on("FixedUpdate", function(dt) dts[#dts + 1] = dt end)
  local u = task.on("Update", function(dt) dts[#dts + 1] = -dt end)
  H.frames(1, 0.05)
  h:remove(); u:remove()
  -- a 0.05 s frame holds two 0.02 s steps (plus whatever the accumulator kept)
  H.truthy(#dts == 3 or #dts == 4, "2 or 3 steps then Update")
  H.eq(dts[1], 0.02); H.eq(dts[#dts], -0.05)
end)

H.case("close_handle_removes_the_callback", function()
  local n = 0
  do
    local h <close> = task.on("Update", function() n = n + 1 end)
    H.frames(2)
  end
  H.frames(2)
  H.eq(n, 2)
  H.eq(testhost.callback_count(), 0)
end)

H.case("return_values_of_callbacks_are_ignored", function()
  local n = 0
  local h = task.on("Update", function() n = n + 1; return false end)
  H.frames(3)
  h:remove()
  h:remove() -- a second remove does nothing
  H.eq(n, 3)
end)

H.case("delta_time_inside_and_outside_fixed_step", function()
  testhost.fixed_dt(0.01)
  local inside, outside
  task.spawn(function()
    task.yield("FixedUpdate"); inside = task.delta_time()
    task.yield("Update"); outside = task.delta_time()
  end)
  task.time_scale(0.5)
  H.frames(2, 0.1)
  H.eq({inside, outside}, {0.01, 0.05})
  testhost.fixed_dt(0.02)
end)

H.run()
