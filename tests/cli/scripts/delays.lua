-- At --fast --hz 60, dt is 16,666,667 ns: delay(0.5) takes exactly 30 frames
-- and delay(1) 60 (twice as many at --time-scale 0.5). The realtime clock
-- follows the unscaled one under --fast.
local f = task.frame()
task.delay(0.5)
print("delay(0.5)", task.frame() - f)
f = task.frame()
task.delay(1)
print("delay(1)", task.frame() - f)
print("realtime", task.time("realtime") == task.time("unscaled"))
