-- fixed_cap_test.lua: the max_fixed_steps cap, in its own file so the
-- fixed-step accumulator starts at zero and the dropped count is exact.
local H = require "harness"

H.case("max_fixed_steps_caps_a_slow_frame_and_drops_the_rest", function()
  testhost.fixed_dt(0.01)
  local steps = 0
  local h = task.on("FixedUpdate", function() steps = steps + 1 end)
  local before = task.stats().dropped_fixed_steps
  H.frames(1, 1.0)                        -- 100 steps due, 8 run (the default cap)
  h:remove()
  testhost.fixed_dt(0.02)
  H.eq({steps, task.stats().dropped_fixed_steps - before}, {8, 92})
end)

H.run()
