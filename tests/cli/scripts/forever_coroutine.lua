-- Ctrl-C must stop a loop inside a plain coroutine, which runs on a thread
-- of its own that the interrupt did not reach (regression: only the
-- killing second Ctrl-C ended it), wherever the coroutine's code runs:
-- its body, or a __close handler that wrap or coroutine.close runs. The
-- task is cancelled (not failed), its to-be-closed variable runs, and so
-- do the coroutine's own.
local r <close> = setmetatable({}, {__close = function() print("closed") end})
local function loop() while true do end end
local function closes(f) return setmetatable({}, {__close = f}) end
local modes = {
  wrap = function() coroutine.wrap(loop)() end,
  resume = function() while true do coroutine.resume(coroutine.create(loop)) end end,
  -- wrap closes a coroutine that raised: its handler loops
  wrap_close = function()
    pcall(coroutine.wrap(function() local x <close> = closes(loop) error("E") end))
  end,
  close = function()
    local co = coroutine.create(function() local x <close> = closes(loop) coroutine.yield() end)
    coroutine.resume(co)
    coroutine.close(co)
  end,
  -- the interrupt lands in a coroutine that a closing handler resumes;
  -- the task must not go on as if an ordinary error had been caught
  close_via_wrap = function()
    pcall(coroutine.wrap(function()
      local x <close> = closes(function() coroutine.wrap(loop)() end)
      error("E")
    end))
    loop()
  end,
  -- the interrupt stops the handler of a closing coroutine it lands in;
  -- the coroutine's next handler still runs
  close_two = function()
    local co = coroutine.create(function()
      local a <close> = closes(function() print("r1 closed") end)
      local b <close> = closes(loop)
      coroutine.yield()
    end)
    coroutine.resume(co)
    coroutine.close(co)
  end,
  -- the interrupted coroutine's own to-be-closed variables run
  tbc = function()
    coroutine.wrap(function()
      local y <close> = closes(function() print("co closed") end)
      loop()
    end)()
  end,
}
print("looping")
io.stdout:flush()
modes[...]()
