-- hog: a badly behaved mod that allocates without end. Its allocator refuses
-- past the memory cap, so its task fails with "not enough memory"; after
-- max_overruns overruns the mod is disabled and its memory freed.
local function hog()
  local t = {}
  while true do
    t[#t + 1] = string.rep("x", 64 * 1024) .. #t
    if #t % 64 == 0 then task.yield() end
  end
end

while true do
  task.defer(hog)
  task.delay(0.1)
end
