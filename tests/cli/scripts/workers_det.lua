-- Two workers, jobs of random duration, results delivered 2 frames after
-- each call ({deliver_frame = 2}): with --fast every run prints the same
-- lines in the same frames.
local pool = task.workers{threads = 2}
local m = pool:open("workers_det_job", {deliver_frame = 2})
for t = 1, 4 do
  task.spawn(function()
    for k = 1, 5 do
      local i, sq = task.await(m:call("work", t * 10 + k, k + t))
      print(string.format("task %d job %d -> %d %d at frame %d", t, k, i, sq, task.frame()))
      if k % 2 == 0 then task.yield() end
    end
  end)
end
