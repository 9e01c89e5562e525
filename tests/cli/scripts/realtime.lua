-- Real-time pacing: delay(0.25) takes at least 0.25 s of wall time.
task.delay(0.25)
print("frames", task.frame())
