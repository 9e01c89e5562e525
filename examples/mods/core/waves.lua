-- waves.lua: required by mod.lua as require "waves" (modules come from the
-- mod's own folder only).
local waves = {}

-- The enemies of wave n: a list of plain tables, so it can cross the bus.
function waves.make(n)
  local list = {}
  for i = 1, n + 1 do
    list[i] = {id = n * 100 + i, hp = 10 * n}
  end
  return list
end

return waves
