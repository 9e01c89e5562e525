-- --fixed-hz sets the fixed step: over one second of --fast frames at 60 Hz
-- (1.00000002 s) FixedUpdate runs floor(1e9 / fixed_dt) times.
local steps = 0
local handle <close> = task.on("FixedUpdate", function() steps = steps + 1 end)
task.delay(1)
print("fixed steps", steps, task.time("fixed"))
