-- Finishes after a few frames with no error: exit status 0.
task.yield()
task.delay_frame(2)
print("done", task.frame())
