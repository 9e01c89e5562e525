-- A task.on callback that raises is removed and reported: the run ends (no
-- callback is left) with status 1.
task.on("Update", function() error("callback boom") end)
