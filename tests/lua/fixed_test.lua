-- fixed_test.lua: fixed steps seen from a task (case c10). First in its own
-- file so the fixed-step accumulator starts at zero.
local H = require "harness"

H.case("case_c10_yield_fixed_update_logs_three_times_a_frame", function()
  testhost.fixed_dt(1 / 60)               -- round(1e9 / 60) = 16,666,667 ns
  local per_frame = {}
  local t = task.spawn(function()
    while true do
      task.yield("FixedUpdate")
      local f = task.frame()
      per_frame[f] = (per_frame[f] or 0) + 1
      H.eq(task.delta_time(), 16666667 / 1e9, "delta_time inside a fixed step")
    end
  end)
  H.frames(6, 0.05)
  t:cancel()
  testhost.fixed_dt(0.02)
  -- 0.05 s is 3 steps less one nanosecond: the first frame holds 2 whole
  -- steps; the nanoseconds left over make every later frame hold 3.
  H.eq(per_frame, {2, 3, 3, 3, 3, 3})
end)

H.run()
