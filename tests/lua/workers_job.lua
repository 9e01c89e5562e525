-- workers_job.lua: the worker module of workers_test.lua (loaded in every
-- worker state by task.workers.open("workers_job")).
local M = {}

function M.add(a, b) return a + b, "sum" end
function M.echo(...) return ... end
function M.pack(...) return table.pack(...) end
function M.len(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n, #t end
function M.boom(msg) local function inner() error(msg) end inner() end
function M.boom_table() error(setmetatable({}, {__tostring = function() return "a table error" end})) end
function M.square(x, i) return {x = x * x, i = i} end
function M.fail_at(x) if x == 7 then error("item 7 is bad") end return x end
-- map's values after the options: a factor and a Share read by every item
function M.scaled(x, i, k, sh) return x * k + i + sh.bias end
function M.id() return task.worker.id end
-- Spins until the job is given up, then says how it ended.
function M.until_cancelled(limit)
  local n = 0
  while not task.worker.cancelled() do
    n = n + 1
    if n > limit then return "not cancelled" end
  end
  return "cancelled"
end
function M.spin(n) local x = 0 for i = 1, n do x = x + i end return x end
function M.forever() local ok while true do ok = pcall(function() end) end end
function M.hog(mb)
  local t = {}
  for i = 1, mb * 1024 do t[i] = string.rep("x", 1024) .. i end
  return #t
end
function M.count_shared(s) return s.name, #s.list, s.list[3], s.nested.deep end
function M.write_shared(s) s.list[1] = 5 end
function M.return_shared(s) return s.nested end
function M.give_function() return print end
function M.nothing() end
function M.sleep_then(ms, v)
  local t = os.clock() + ms / 1000
  while os.clock() < t do end
  return v
end
-- A string of n bytes that differs along its length (large results):
-- "c0,c1,c2," then the digits 0-9 over and over, then the length.
function M.big(n, c)
  local head, tail = c .. "0," .. c .. "1," .. c .. "2,", "#" .. n
  return head .. string.rep("0123456789", (n - #head - #tail) // 10 + 1):sub(1, n - #head - #tail) .. tail
end
-- Catches a failed allocation, then returns a large result (n bytes).
function M.caught_oom_then_big(n)
  local ok = pcall(string.rep, "x", 1 << 30)
  return M.big(n, "o"), ok
end
function M.reverse(s) return s:reverse() end
function M.alloc(n) return #string.rep("x", n) end
function M.ends(s) return #s, s:sub(1, 8), s:sub(-8) end
local posted = 0
function M.post_add(n) posted = posted + n end
function M.posted() return posted end
function M.post_boom() error("posted job failed") end
return M
