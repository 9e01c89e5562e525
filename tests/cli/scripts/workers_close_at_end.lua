-- workers_close_at_end.lua: a script that closes a pool with calls still
-- queued and ends at once: the completions the close posts are delivered
-- (releasing their promises and jobs) before the loop is freed, so an
-- ASan build's LeakSanitizer finds nothing at exit.
local pool = task.workers{threads = 1, queue = 8}
local m = pool:open("workers_det_job")
for i = 1, 3 do m:call("work", i) end
pool:close()
print("closed with " .. pool:stats().dropped .. " dropped")
