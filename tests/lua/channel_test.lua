-- channel_test.lua: task.channel (docs/composition.md, section 7).
local H = require "harness"

H.case("unbounded_channel_is_fifo_and_send_never_waits", function()
  local ch = task.channel()
  for i = 1, 5 do ch:send(i) end   -- from the main thread: no wait needed
  H.eq(ch:len(), 5)
  local got = {}
  task.spawn(function() for _ = 1, 5 do got[#got + 1] = ch:receive() end end)
  H.eq(got, {1, 2, 3, 4, 5})
end)

H.case("receive_waits_while_empty_and_hand_off_is_in_the_same_run", function()
  local ch = task.channel()
  local log = {}
  task.spawn(function() local v = ch:receive(); log[#log + 1] = "got " .. v .. "@" .. testhost.timing() end)
  task.spawn(function() task.yield("PreUpdate"); ch:send("x"); log[#log + 1] = "sent" end)
  H.frames(1)
  H.eq(log, {"sent", "got x@PreUpdate"})
end)

H.case("bounded_send_waits_while_full", function()
  local ch = task.channel(2)
  local log = {}
  task.spawn(function()
    for i = 1, 4 do ch:send(i); log[#log + 1] = "sent " .. i end
  end)
  H.eq(log, {"sent 1", "sent 2"})
  local got = {}
  task.spawn(function() for _ = 1, 4 do got[#got + 1] = ch:receive(); task.yield() end end)
  H.frames(4)
  H.eq(got, {1, 2, 3, 4})
  H.eq(log, {"sent 1", "sent 2", "sent 3", "sent 4"})
end)

H.case("rendezvous_channel_send_waits_for_a_receiver", function()
  local ch = task.channel(0)
  local log = {}
  task.spawn(function() ch:send("a"); log[#log + 1] = "send returned@" .. task.frame() end)
  H.eq(log, {})
  local F = task.frame()
  task.spawn(function() task.delay_frame(2); log[#log + 1] = "received " .. ch:receive() end)
  H.frames(3)
  H.eq(log, {"received a", "send returned@" .. (F + 2)})
end)

H.case("closed_channel_drains_then_returns_nil_closed_and_send_raises", function()
  local ch = task.channel()
  ch:send(1)
  ch:close()
  H.has(H.raises(function() ch:send(2) end), "send on a closed channel")
  local got = {}
  task.spawn(function()
    got[1] = table.pack(ch:receive())
    got[2] = table.pack(ch:receive())
  end)
  H.eq(got, {{n = 1, 1}, {n = 2, nil, "closed"}})
  H.truthy(ch:is_closed())
end)

H.case("close_wakes_waiting_receivers_and_raises_in_waiting_senders", function()
  local rch, sch = task.channel(), task.channel(0)
  local got = {}
  task.spawn(function() got.r = table.pack(rch:receive()) end)
  task.spawn(function() got.s = table.pack(pcall(sch.send, sch, "v")) end)
  rch:close(); sch:close()
  H.eq(got.r, {n = 2, nil, "closed"})
  H.eq(got.s[1], false); H.has(got.s[2], "send on a closed channel")
end)

H.case("waiters_are_served_in_arrival_order", function()
  local ch = task.channel()
  local got = {}
  for i = 1, 3 do task.spawn(function() local v = ch:receive(); got[#got + 1] = i .. ":" .. v end) end
  ch:send("a"); ch:send("b"); ch:send("c")
  H.eq(got, {"1:a", "2:b", "3:c"})
  local sch = task.channel(0)
  local order = {}
  for i = 1, 3 do task.spawn(function() sch:send(i); order[#order + 1] = "s" .. i end) end
  task.spawn(function() for _ = 1, 3 do local v = sch:receive(); order[#order + 1] = "r" .. v end end)
  H.eq(order, {"r1", "r2", "r3", "s1", "s2", "s3"})
end)

H.case("a_value_handed_to_a_cancelled_receiver_goes_to_the_next_one", function()
  local ch = task.channel()
  local got = {}
  local r1 = task.spawn(function() local v = ch:receive(); got[#got + 1] = "r1:" .. v end)
  local r2 = task.spawn(function() local v = ch:receive(); got[#got + 1] = "r2:" .. v end)
  task.spawn(function()
    ch:send("precious")    -- handed to r1 (woken, not yet resumed)
    r1:cancel()            -- cancelled before it resumes
  end)
  H.eq(got, {"r2:precious"})
  H.eq(r1:status(), "cancelled")
  -- with no other receiver, it goes back to the buffer
  local r3 = task.spawn(function() ch:receive() end)
  task.spawn(function() ch:send("kept"); r3:cancel() end)
  H.eq(ch:len(), 1)
  task.spawn(function() local v = ch:receive(); got[#got + 1] = v end)
  H.eq(got, {"r2:precious", "kept"})
end)

H.case("a_cancelled_waiter_gives_its_place_to_the_next", function()
  local ch = task.channel()
  local got = {}
  local r1 = task.spawn(function() local v = ch:receive(); got[#got + 1] = "r1:" .. v end)
  task.spawn(function() local v = ch:receive(); got[#got + 1] = "r2:" .. v end)
  r1:cancel()
  ch:send("v")
  H.eq(got, {"r2:v"})
end)

H.case("channel_argument_errors", function()
  H.has(H.raises(function() task.channel(-1) end), "non-negative integer capacity, got -1")
  H.has(H.raises(function() task.channel("x") end), "non-negative integer capacity, got string")
  H.has(H.raises(function() task.channel(1.5) end), "non-negative integer capacity")
  H.has(H.raises(function() task.channel(0 / 0) end), "non-negative integer capacity, got nan)")
  local ch = task.channel()
  -- Called as a method, self is not counted (as luaL_argerror does).
  H.has(H.raises(function() ch:send(nil) end), "bad argument #1 to 'send' (channel values cannot be nil)")
  H.has(H.raises(function() ch.send(ch, nil) end), "bad argument #2 to 'send' (channel values cannot be nil)")
  H.has(H.raises(function() ch.send({}, 1) end), "expected a Channel")
  -- len and is_closed check self too (they indexed it, or read nil)
  H.has(H.raises(function() ch.len(nil) end), "bad argument #1 to 'len' (expected a Channel (use ch:len))")
  H.has(H.raises(function() ch.len({}) end), "bad argument #1 to 'len' (expected a Channel")
  H.has(H.raises(function() ch.is_closed(1) end), "bad argument #1 to 'is_closed' (expected a Channel")
  H.has(H.raises(function() ch.is_closed({}) end), "bad argument #1 to 'is_closed' (expected a Channel")
  H.eq({ch:len(), ch:is_closed()}, {0, false})
  -- await errors point at the caller's line, not into the library
  local at = "channel_test.lua:" .. (debug.getinfo(1, "l").currentline + 1) .. ": channel:receive: not inside a task"
  H.has(H.raises(function() ch:receive() end), at)
  local rendezvous = task.channel(0)
  at = "channel_test.lua:" .. (debug.getinfo(1, "l").currentline + 1) .. ": channel:send: not inside a task"
  H.has(H.raises(function() rendezvous:send(1) end), at)
end)

H.case("tasks_passing_values_for_ever_let_each_frame_end", function()
  -- A send wakes the receiver in the same run, so these two tasks took
  -- turns for ever inside one run: the frame never ended, whatever the
  -- budgets (each turn is a resume of its own). A drain of the ready ring
  -- now makes at most 100,000 resumes; the rest wait for the next run of
  -- the timing. Here a drain of 100,000 resumes is 150,000 values (the
  -- receiver takes the one handed over and then the buffered one; the
  -- spawns' own drain, before the first frame, is one too).
  local ch = task.channel(1)
  local n = 0
  local s = task.spawn(function() while true do ch:send(1) end end)
  local r = task.spawn(function() while true do ch:receive(); n = n + 1 end end)
  local seen = {n}
  for _ = 1, 3 do
    H.frames(1)
    seen[#seen + 1] = n
  end
  H.eq(seen, {150002, 300002, 450002, 600002})
  H.eq({s:status(), r:status()}, {"suspended", "suspended"})
  s:cancel()
  r:cancel()
end)

H.run()
