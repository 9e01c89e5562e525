-- group.lua: g:wait() of task.group (src/lua/group.c has the rest), on
-- the module's functions and the internals, captured when it loads.
local M, I = ...

local methods = M.__group_methods
M.__group_methods = nil

local await, current, is_cancelled = M.await, M.current, M.is_cancelled
local check_await = I.check_await
local pcall, error = pcall, error
local has, next_live = methods.has, methods._next_live
methods._next_live = nil

-- g:wait(): returns once every member of g (and of the groups below it)
-- has settled, members that join meanwhile included. A member that failed
-- raises its error here (as task.await would); cancelled members do not.
-- A member of g cannot wait for g (it would wait for itself).
function methods.wait(g)
  check_await("g:wait", 2)
  local me = current()
  if has(g, me) then
    error("g:wait: called from a member of the group, which would wait for itself", 2)
  end
  while true do
    local t = next_live(g)
    if t == nil then return end
    local ok, err = pcall(await, t)
    if not ok and not (is_cancelled(err) and t:status() == "cancelled") then
      error(err, 0)
    end
  end
end
