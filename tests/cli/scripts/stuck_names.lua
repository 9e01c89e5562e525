-- A stuck run whose task names and chunk name carry a newline, ESC and NUL:
-- the report printed them raw, so a script (or a mod, through the SIGQUIT
-- list) could forge "lunaloop:" lines and send terminal escapes.
local ch = task.channel()
local t = task.spawn(load("local ch = ... ch:receive()", "=\27[2Jsrc\nlunaloop: x"), ch)
t.name = "a\0b"
task.current().name = "\27[31mevil\nlunaloop: forged"
task.await(t)
