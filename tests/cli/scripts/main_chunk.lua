-- The main chunk runs as the task "main" before the first frame: frame() is
-- 0, the script's arguments are `...` and arg[1..], arg[0] is the script and
-- the words before it are at negative indices, as with the stock lua.
print("frame", task.frame())
print("args", select("#", ...), ...)
print("arg0", (arg[0]:match("[^/]*$")))
print("arg", arg[1], arg[2], #arg)
print("arg-1", arg[-1])
print("arg-2", arg[-2])
print("task", type(task.spawn), task == require("lunaloop"))
task.yield()
print("frame", task.frame())
