-- With --fast and --seed, everything printed here is the same on every run.
for _ = 1, 3 do print(math.random(1, 1000000)) end
for i = 1, 5 do
  task.spawn(function()
    task.delay(math.random())
    print("task", i, task.frame(), task.time())
  end)
end
