-- bench/w7_jobs.lua: the jobs of W7 (bench/workers.lua), loaded in every
-- worker state by task.workers.open("w7_jobs"), and on the loop thread for
-- the serial baseline.
local M = {}

-- The pure-Lua kernel: k rounds of integer arithmetic (k is calibrated to
-- about 1 ms on the loop thread).
function M.kernel(k)
  local x = 0
  for i = 1, k do x = (x + i * 7) % 1000003 end
  return x
end

function M.echo(t) return t end
function M.size(t) return #t end
function M.empty() end

return M
