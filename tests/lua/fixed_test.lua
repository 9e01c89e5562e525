-- fixed_test.lua: fixed steps seen from a task, in its own file so the
-- fixed-step accumulator starts at zero.
local H = require "harness"

-- A task waiting on FixedUpdate is resumed once per fixed step, not once
-- per frame, and inside the step task.delta_time() is the fixed step (1/60 s
-- rounded to whole nanoseconds), not the frame's delta. A 0.05 s frame holds
-- three 1/60 s steps less one nanosecond: counting steps in floating point,
-- or dropping the nanoseconds left over, gives the wrong count of steps in
-- the first frame or in every later one.
H.case("fixed_update_waits_run_once_per_fixed_step_with_the_fixed_delta", function()
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
