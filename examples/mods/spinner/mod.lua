-- spinner: a badly behaved mod. Every frame it starts a task that keeps
-- resuming a plain coroutine which never ends. Its budgets (time
-- per frame, instructions per run) stop each such task; after max_overruns
-- overruns the mod is disabled. The other mods never notice.
local function spin()
  local co = coroutine.wrap(function()
    local n = 0
    while true do
      n = n + 1
      if n % 1000 == 0 then coroutine.yield(n) end
    end
  end)
  while true do co() end
end

while true do
  task.defer(spin)
  task.yield()
end
