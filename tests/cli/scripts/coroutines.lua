-- lunaloop run replaces coroutine.resume and coroutine.wrap (so that Ctrl-C
-- reaches a plain coroutine, luna_lua_guard_interrupts): they must behave
-- as the base library's. Each check prints a line; the test compares them.
local function show(...)
  local t = table.pack(...)
  for i = 1, t.n do t[i] = tostring(t[i]):gsub("0x%x+", "ADDR") end
  print(table.concat(t, " ", 1, t.n))
end
local co = coroutine.create(function(a, b)
  local c = coroutine.yield(a + b)
  local d, e = coroutine.yield(c * 2)
  return d, e, "end"
end)
show(coroutine.resume(co, 1, 2))
show(coroutine.resume(co, 10))
show(coroutine.resume(co, "x", "y"))
show(coroutine.resume(co))
show(pcall(coroutine.resume))
show(coroutine.resume(coroutine.create(function() error("boom") end)))
show(coroutine.resume(coroutine.running()))
local gen = coroutine.wrap(function(a)
  for i = 1, 3 do a = coroutine.yield(i + a) end
  return "done"
end)
show(gen(10), gen(20), gen(30), gen(40))
show(pcall(gen))
show(pcall(coroutine.wrap(function() error("werr") end)))
show(pcall(coroutine.wrap(function() error({}) end)))
show(pcall(coroutine.wrap, 5))
local closed
show(pcall(coroutine.wrap(function()
  local c <close> = setmetatable({}, {__close = function(_, e) closed = e end})
  error("in wrap")
end)))
show("closed with", closed)
show(select("#", coroutine.resume(coroutine.create(function() return nil, nil end))))
local w = coroutine.wrap(function(...) return select("#", ...), ... end)
show(w(nil, nil, 3))
