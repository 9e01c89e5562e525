-- The jobs of workers_det.lua: each takes a random time (its worker's own
-- random seed, different on every run) and returns what it was given.
local M = {}
function M.work(i, n)
  local stop = os.clock() + math.random() * 0.02
  local x = 0
  while os.clock() < stop do x = x + 1 end
  return i, n * n
end
return M
