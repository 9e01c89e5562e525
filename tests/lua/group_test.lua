-- group_test.lua: task.group, lifetime and clock groups (docs/groups.md).
-- Exact on the virtual clock: frames of 0.1 s unless a case says otherwise.
local H = require "harness"

local function closer(log, tag)
  return setmetatable({}, {__close = function() log[#log + 1] = tag end})
end

-- ---- clocks: pause and scale ------------------------------------------------

-- The pause menu's rule: while the game's group is paused its delays do not
-- advance, and a UI delay on the unscaled clock outside it fires on time.
H.case("paused_group_delays_do_not_advance_while_an_unscaled_ui_delay_fires", function()
  local g = task.group{name = "game"}
  local f0 = task.frame()
  local log = {}
  g:spawn(function() g:delay(0.3); log[#log + 1] = {"game", task.frame() - f0, g:time()} end)
  H.frames(1, 0.1)
  g:pause()
  task.spawn(function()
    task.delay(0.2, "Update", "unscaled")
    log[#log + 1] = {"ui", task.frame() - f0, g:time()}
  end)
  H.frames(5, 0.1)                 -- frames 2..6: the game's clock stays at 0.1
  H.eq(g:time(), 0.1, "paused clock")
  H.eq(g:frame(), 1, "paused frame count")
  g:resume()
  H.frames(3, 0.1)                 -- 0.2 more: frames 7 and 8
  H.eq(log, {{"ui", 3, 0.1}, {"game", 8, 0.3}})
  g:cancel()
end)

-- time_scale(0.5) exactly doubles the frames of the group's delays, and the
-- unscaled clock and the global scaled clock are unaffected.
H.case("half_time_scale_exactly_doubles_the_frames_of_a_delay", function()
  local function frames_for(scale)
    local g = task.group{time_scale = scale}
    local f0, done = task.frame(), nil
    g:spawn(function() g:delay(1); done = task.frame() - f0 end)
    local plain
    task.spawn(function() task.delay(1); plain = task.frame() - f0 end)
    while done == nil or plain == nil do H.frames(1, 1 / 60) end
    g:cancel()
    return done, plain
  end
  local d1, p1 = frames_for(1)
  local d2, p2 = frames_for(0.5)
  H.eq({d1, d2, p1, p2}, {60, 120, 60, 60})
end)

-- Nesting: the effective scale is the product of the ancestors'; a paused
-- ancestor pauses it; a change of an ancestor's scale midway applies from
-- then on (the time already run is kept).
H.case("nested_groups_multiply_scales_and_inherit_pauses", function()
  local outer = task.group{time_scale = 2, name = "outer"}
  local inner = task.group{time_scale = 0.25, parent = outer}
  H.eq({inner:time_scale(), inner:effective_scale(), inner:parent() == outer},
    {0.25, 0.5, true})
  local f0, woke = task.frame(), nil
  inner:spawn(function() inner:delay(1); woke = task.frame() - f0 end)
  H.frames(4, 0.1)                 -- inner at 0.2
  outer:pause()
  H.eq({inner:paused(), outer:paused()}, {true, true})
  H.frames(10, 0.1)
  H.eq(inner:time(), 0.2, "inner stopped with its parent")
  outer:resume()
  H.frames(6, 0.1)                 -- inner at 0.5
  outer:time_scale(4)              -- inner at 1 per second from now
  H.frames(4, 0.1)
  H.eq(woke, nil, "0.9 of 1")
  H.frames(1, 0.1)
  H.eq(woke, 25)
  -- the inner group's own pause does not pause its parent
  inner:pause()
  H.eq({inner:paused(), outer:paused()}, {true, false})
  outer:cancel()
end)

-- The global time scale applies to a group's clock as to the scaled one.
H.case("global_time_scale_applies_to_group_clocks", function()
  local g = task.group{time_scale = 2}
  local t0 = task.time()
  task.time_scale(0.5)
  H.frames(10, 0.1)                -- 1 s unscaled, 0.5 s scaled, 1 s on g
  H.eq({g:time(), math.floor((task.time() - t0) * 1e9 + 0.5)}, {1.0, 500000000})
  task.time_scale(1)
  g:cancel()
end)

-- Frame waits count the group's frames, which stop while it is paused; a
-- g:yield waits for the next run at which the group is not paused.
H.case("frame_waits_and_yields_count_frames_only_while_running", function()
  local g = task.group()
  local f0 = task.frame()
  local log = {}
  g:spawn(function()
    g:delay_frame(3); log[#log + 1] = {"delay_frame", task.frame() - f0}
    g:next_frame(); log[#log + 1] = {"next_frame", task.frame() - f0}
    g:yield(); log[#log + 1] = {"yield", task.frame() - f0, testhost.timing()}
  end)
  H.frames(1)
  g:pause()
  H.frames(4)                      -- frames 2..5 do not count
  g:resume()
  H.frames(3)                      -- 6, 7: the third frame; 8: next_frame
  g:pause()                        -- the yield from frame 8's Update waits
  H.frames(2)
  g:resume()
  H.frames(1)                      -- 11: the yield
  H.eq(log, {{"delay_frame", 7}, {"next_frame", 8}, {"yield", 11, "Update"}})
  g:cancel()
end)

-- A group's waits are timers of its clock: in a run they resume after the
-- tasks task.yield queued for it, in creation order among themselves.
H.case("group_yields_resume_after_plain_yields_in_creation_order", function()
  local g = task.group()
  local log = {}
  g:spawn(function() g:yield(); log[#log + 1] = "group 1" end)
  task.spawn(function() task.yield(); log[#log + 1] = "plain" end)
  g:spawn(function() g:yield(); log[#log + 1] = "group 2" end)
  H.frames(1)
  H.eq(log, {"plain", "group 1", "group 2"})
  g:cancel()
end)

-- A member that pauses its group as it wakes stops the others due in the
-- same run: they wake after the resume.
H.case("a_pause_from_a_waking_member_stops_the_rest_of_the_run", function()
  local g = task.group()
  local f0, log = task.frame(), {}
  g:spawn(function() g:delay(0.1); log[#log + 1] = {"first", task.frame() - f0}; g:pause() end)
  g:spawn(function() g:delay(0.1); log[#log + 1] = {"second", task.frame() - f0} end)
  g:spawn(function() g:delay(0.1); log[#log + 1] = {"third", task.frame() - f0} end)
  H.frames(3, 0.1)
  H.eq(log, {{"first", 1}})
  g:resume()
  H.frames(1, 0.1)
  H.eq(log, {{"first", 1}, {"second", 4}, {"third", 4}})
  g:cancel()
end)

-- Introspection: a task waiting on a group's clock says so.
H.case("info_of_a_task_waiting_on_a_group", function()
  local g = task.group{name = "g"}
  local t = g:spawn(function() g:delay(1, "PreLateUpdate") end)
  local i = t:info()
  H.eq({i.wait, i.timing, i.waits_on == g}, {"group timer", "PreLateUpdate", true})
  g:cancel()
end)

-- A deferred start waits for a run at which the group is not paused.
H.case("defer_into_a_paused_group_starts_after_resume", function()
  local g = task.group{paused = true}
  local f0, started = task.frame(), nil
  local t = g:defer(function() started = task.frame() - f0 end)
  H.eq(t:status(), "suspended")
  H.frames(3)
  H.eq(started, nil)
  g:resume()
  H.frames(1)
  H.eq(started, 4)
  g:cancel()
end)

-- Callbacks: g:on is not called while the group is paused (its handle
-- stays active) and gets the group's dt; g:every runs on the group's clock.
H.case("group_callbacks_stop_while_paused_and_follow_its_scale", function()
  local g = task.group{time_scale = 0.5}
  local dts, ticks = {}, {}
  local h = g:on(function(dt) dts[#dts + 1] = dt end)
  local e = g:every(0.1, function(n) ticks[#ticks + 1] = {task.frame(), n} end)
  local f0 = task.frame()
  H.frames(2, 0.1)
  g:pause()
  H.frames(3, 0.1)
  H.eq({h:active(), e:active()}, {true, true}, "handles stay while paused")
  g:resume()
  H.frames(2, 0.1)
  H.eq(#dts, 4, "on calls")
  for _, dt in ipairs(dts) do H.truthy(math.abs(dt - 0.05) < 1e-12, "dt " .. dt) end
  H.eq(#ticks, 2, "every: 0.2 s of group time")
  H.eq({ticks[1][1] - f0, ticks[2][1] - f0}, {2, 7})
  g:cancel()
  H.eq({h:active(), e:active()}, {false, false}, "cancel removes them")
end)

-- ---- membership and cancellation ----------------------------------------------

-- A task spawned (or deferred) from a member joins its group; task.ungrouped
-- escapes it; a task spawned from a group's callback joins no group.
H.case("tasks_spawned_by_members_join_their_group", function()
  local g = task.group()
  local child, deferred, outside
  local parent = g:spawn(function()
    child = task.spawn(function() g:delay(10) end)
    deferred = task.defer(function() g:delay(10) end)
    outside = task.ungrouped(function() task.delay(10) end)
    g:delay(10)
  end)
  H.eq({task.group_of(parent) == g, task.group_of(child) == g,
        task.group_of(deferred) == g, task.group_of(outside)},
       {true, true, true, nil})
  H.eq(g:count(), 3)
  H.eq(#g:members(), 3)
  g:cancel()
  H.eq({parent:status(), child:status(), deferred:status(), outside:status()},
       {"cancelled", "cancelled", "cancelled", "suspended"})
  outside:cancel()
end)

-- The children of combinators and scopes started by a member join its
-- group, and a group made by a member nests under its group.
H.case("combinator_children_and_groups_made_by_members_join", function()
  local g = task.group{name = "boss"}
  local kids, sub = {}, nil
  g:spawn(function()
    task.when_all(function() kids[1] = task.current(); g:delay(9) end,
                  function() kids[2] = task.current(); g:delay(9) end)
  end)
  g:spawn(function()
    task.scope(function(s) s:spawn(function() kids[3] = task.current(); g:delay(9) end) end)
  end)
  g:spawn(function() sub = task.group{name = "minion"}; local root = task.group{parent = false}
    H.eq(root:parent(), nil); root:cancel() end)
  H.eq({task.group_of(kids[1]) == g, task.group_of(kids[2]) == g, task.group_of(kids[3]) == g},
       {true, true, true})
  H.eq({sub:parent() == g, sub.name, g.name}, {true, "minion", "boss"})
  H.has(tostring(g), "Group(boss, running)")
  g:pause()
  H.has(tostring(g), "Group(boss, paused)")
  g:cancel()
  H.eq({kids[1]:status(), kids[3]:status(), sub:cancelled()}, {"cancelled", "cancelled", true})
end)

-- One call cancels 10,000 members: each one's to-be-closed variable runs,
-- nothing of theirs is left on the loop.
H.case("cancel_of_a_group_with_10000_members_in_one_call", function()
  local g = task.group()
  local closed = 0
  local counter = setmetatable({}, {__close = function() closed = closed + 1 end})
  for i = 1, 10000 do
    g:spawn(function()
      local c <close> = counter
      if i % 2 == 0 then g:delay(100) else g:yield() end
    end)
  end
  H.eq(g:count(), 10000)
  local before = testhost.task_count()
  H.eq(g:cancel(), 10000)
  H.eq({closed, testhost.task_count(), g:count(), before}, {10000, 0, 0, 10000})
  H.eq(g:cancel(), 0, "a second cancel does nothing")
  H.frames(2)
end)

-- A task in two nested groups stops when either is cancelled.
H.case("a_task_in_nested_groups_stops_when_either_is_cancelled", function()
  for _, which in ipairs({"inner", "outer"}) do
    local outer = task.group{name = "outer"}
    local inner = task.group{parent = outer}
    local t = inner:spawn(function() inner:delay(100) end)
    local sibling = outer:spawn(function() outer:delay(100) end)
    H.eq({outer:has(t), inner:has(t), inner:has(sibling)}, {true, true, false})
    if which == "inner" then
      inner:cancel()
      H.eq({t:status(), sibling:status(), outer:cancelled()}, {"cancelled", "suspended", false})
      outer:cancel()
    else
      outer:cancel()
      H.eq({t:status(), sibling:status(), inner:cancelled()}, {"cancelled", "cancelled", true})
    end
  end
end)

-- To-be-closed variables run in the members' creation order, across the
-- groups below the one cancelled and the tasks the members spawned.
H.case("to_be_closed_variables_run_in_creation_order", function()
  local log = {}
  local outer = task.group()
  local inner = task.group{parent = outer}
  outer:spawn(function() local c <close> = closer(log, "a"); outer:delay(9) end)
  inner:spawn(function()
    local c <close> = closer(log, "b")
    task.spawn(function() local d <close> = closer(log, "c"); inner:delay(9) end)
    inner:delay(9)
  end)
  outer:spawn(function() local c <close> = closer(log, "d"); task.delay(9) end)
  inner:spawn(function() local c <close> = closer(log, "e"); task.yield() end)
  outer:cancel()
  H.eq(log, {"a", "b", "c", "d", "e"})
end)

-- A group in a <close> variable is cancelled at the end of its scope.
H.case("a_group_in_a_close_variable_is_cancelled_at_scope_exit", function()
  local log, t, g0 = {}, nil, nil
  do
    local g <close> = task.group()
    g0 = g
    t = g:spawn(function() local c <close> = closer(log, "member"); g:delay(5) end)
  end
  H.eq({log, t:status(), g0:cancelled()}, {{"member"}, "cancelled", true})
end)

-- A closed group takes no new work; what may be asked of it is answered.
H.case("spawning_into_a_cancelled_group_raises", function()
  local g = task.group()
  g:cancel()
  local fn = function() end
  H.raises(function() g:spawn(fn) end, "g:spawn: the group is cancelled")
  H.raises(function() g:defer(fn) end, "g:defer: the group is cancelled")
  H.raises(function() g:spawn_at("LateUpdate", fn) end, "g:spawn_at: the group is cancelled")
  H.raises(function() g:on(fn) end, "g:on: the group is cancelled")
  H.raises(function() g:every(1, fn) end, "g:every: the group is cancelled")
  H.raises(function() g:pause() end, "g:pause: the group is cancelled")
  H.raises(function() task.group{parent = g} end, "parent group is cancelled")
  local out = H.run_task(function() g:delay(1) end)
  H.eq(out.values[1], false)
  H.has(out.values[2], "g:delay: the group is cancelled")
  H.eq({g:cancelled(), g:paused(), g:count()}, {true, false, 0})
  H.has(tostring(g), "Group(cancelled)")
end)

-- A member that cancels its own group unwinds as the call returns (as with
-- t:cancel() of the running task); the others are cancelled by the call.
H.case("a_member_cancelling_its_own_group_unwinds_after_the_call", function()
  local g = task.group()
  local log = {}
  local other = g:spawn(function() local c <close> = closer(log, "other"); g:delay(9) end)
  local boss = g:spawn(function()
    local c <close> = closer(log, "boss")
    g:delay(0.1)
    local n = g:cancel()
    log[#log + 1] = "cancel returned " .. n
    task.yield()
    log[#log + 1] = "never"
  end)
  H.frames(1, 0.1)
  H.eq(log, {"other", "boss"})
  H.eq({boss:status(), other:status()}, {"cancelled", "cancelled"})
end)

-- A member whose cancellation is pending when it reaches an await of its
-- own (cancelled) group: it caught the error of its own g:cancel(), or a
-- host function cancelled the group under it (luna_lua_group_cancel,
-- which returns normally). The group's awaits raised "g:delay: the group
-- is cancelled", a failure that was reported although the task ended
-- "cancelled"; they raise the cancellation error, as the plain awaits do,
-- and nothing is reported.
H.case("a_member_with_a_pending_cancellation_unwinds_at_its_groups_await", function()
  local reports, restore = H.capture_errors()
  local log = {}
  local tasks = {}
  for i, await in ipairs{
    function(g) g:delay(1) end, function(g) g:yield() end,
    function(g) g:next_frame() end, function(g) g:delay_frame(2) end,
  } do
    local g = task.group()
    tasks[i] = g:spawn(function()
      local c <close> = closer(log, "closed " .. i)
      g:delay(0.1)
      local ok, err = pcall(g.cancel, g)
      log[#log + 1] = i .. " caught " .. tostring(task.is_cancelled(err) and not ok)
      await(g)
      log[#log + 1] = "never"
    end)
  end
  H.frames(1, 0.1)
  restore()
  H.eq(log, {"1 caught true", "closed 1", "2 caught true", "closed 2",
             "3 caught true", "closed 3", "4 caught true", "closed 4"})
  for i = 1, 4 do H.eq(tasks[i]:status(), "cancelled") end
  H.eq(#reports, 0)
end)

-- A task outside the group that waits on its clock gets the cancellation
-- error at its await when the group is cancelled.
H.case("a_non_member_waiting_on_a_cancelled_groups_clock_is_woken_with_cancellation", function()
  local g = task.group()
  local out = H.run_task(function() g:delay(5) end)
  g:cancel()
  H.frames(1)
  H.eq(out.values[1], false)
  H.truthy(task.is_cancelled(out.values[2]), "the cancellation error")
end)

-- g:wait() awaits every member, those joining meanwhile included; a
-- member's failure is raised there; a member may not wait for its group.
H.case("wait_awaits_all_members", function()
  local g = task.group()
  local f0 = task.frame()
  g:spawn(function() g:delay(0.2) end)
  g:spawn(function() g:delay(0.1); task.spawn(function() g:delay(0.4) end) end)
  local waited
  task.spawn(function() g:wait(); waited = task.frame() - f0 end)
  H.frames(6, 0.1)
  H.eq(waited, 5)
  H.eq(g:count(), 0)
  -- a failure
  local reports, restore = H.capture_errors()
  g:spawn(function() g:delay(0.1); error("boss exploded") end)
  local out = H.run_task(function() g:wait() end)
  H.frames(2, 0.1)
  restore()
  H.eq(out.values[1], false)
  H.has(tostring(out.values[2]), "boss exploded")
  H.eq(#reports, 0, "the waiter got the failure")
  -- from a member
  reports, restore = H.capture_errors()
  local inside = g:spawn(function() g:wait() end)
  restore()
  H.has(select(2, inside:result()), "called from a member of the group")
  H.eq(#reports, 1)
  -- cancelled members do not fail the wait
  g:spawn(function() g:delay(9) end)
  local w = H.run_task(function() g:wait(); return "done" end)
  g:cancel()
  H.frames(1)
  H.eq({w.values[1], w.values[2]}, {true, "done"})
end)

-- Cancels from awkward places: a group's own callback (g:on, and g:every,
-- whose firing is under way on the group's clock), and a member's cleanup
-- that cancels another group while this one unwinds.
H.case("cancel_from_its_own_callbacks_and_from_cleanup", function()
  local g = task.group()
  local log = {}
  g:spawn(function() local c <close> = closer(log, "member"); g:delay(9) end)
  local n = 0
  local h = g:on(function() n = n + 1; g:cancel(); log[#log + 1] = "after cancel" end)
  H.frames(2)
  H.eq({log, n, h:active(), g:cancelled()}, {{"member", "after cancel"}, 1, false, true})

  local e = task.group()
  local calls = 0
  e:every(0.1, function() calls = calls + 1; e:cancel() end)
  e:every(0.1, function() calls = calls + 1 end)  -- due in the same firing: removed first
  e:spawn(function() e:delay(0.1); log[#log + 1] = "never" end)
  H.frames(3, 0.1)
  H.eq({calls, e:cancelled()}, {1, true})

  local a, other = task.group(), task.group()
  local order = {}
  a:spawn(function()
    local c <close> = setmetatable({}, {__close = function() order[#order + 1] = "a"; other:cancel() end})
    a:delay(9)
  end)
  other:spawn(function() local c <close> = closer(order, "other"); other:delay(9) end)
  a:spawn(function() local c <close> = closer(order, "a2"); a:delay(9) end)
  a:cancel()
  -- a cancellation asked for during another one's cleanup runs when that
  -- one has unwound (as t:cancel() in a __close handler): before a2
  H.eq({order, other:cancelled()}, {{"a", "other", "a2"}, true})
  H.eq(log[3], nil)
end)

-- Removed handles do not pile up in a long-lived group.
H.case("removed_handles_of_a_group_are_collected", function()
  local g = task.group()
  local weak = setmetatable({}, {__mode = "v"})
  for i = 1, 100 do
    local h = g:every(1, function() end)
    h:remove()
    weak[i] = h
  end
  local kept = g:on(function() end)
  collectgarbage(); collectgarbage()
  H.eq(next(weak), nil)
  g:cancel()
  H.eq(kept:active(), false)
end)

-- A group nobody holds, with nothing waiting on its clock, is collected.
H.case("an_unreferenced_group_is_collected", function()
  local weak = setmetatable({}, {__mode = "v"})
  do
    local g = task.group{name = "gone"}
    g:spawn(function() g:delay(0.1) end)
    weak[1] = g
  end
  H.frames(2, 0.1)
  collectgarbage(); collectgarbage()
  H.eq(weak[1], nil)
  -- while a member waits on it, it stays
  do
    local g = task.group{name = "kept"}
    g:spawn(function() g:delay(1) end)
    weak[2] = g
  end
  collectgarbage(); collectgarbage()
  H.truthy(weak[2] ~= nil, "kept alive by its waiting member")
  weak[2]:cancel()
end)

-- ---- hostile arguments --------------------------------------------------------

H.case("hostile_arguments_raise_clear_errors_at_the_call", function()
  H.raises(function() task.group{time_scale = -1} end, "opts.time_scale: expected a number from 0 to 1e6, got -1")
  H.raises(function() task.group{time_scale = 0 / 0} end, "got nan")
  H.raises(function() task.group{time_scale = "fast"} end, "opts.time_scale: expected a number from 0 to 1e6, got string")
  H.raises(function() task.group{paused = 1} end, "opts.paused: expected a boolean")
  H.raises(function() task.group{name = 7} end, "opts.name: expected a string")
  H.raises(function() task.group{parent = {}} end, "opts.parent: expected a Group or false, got table")
  H.raises(function() task.group{scale = 2} end, "unknown option 'scale'")
  H.raises(function() task.group(5) end, "table expected")
  local g = task.group()
  H.raises(function() g:time_scale(-0.5) end, "expected a time scale from 0 to 1e6, got -0.5")
  H.raises(function() g:time_scale(0 / 0) end, "got nan")
  H.raises(function() g:time_scale("slow") end, "expected a time scale (a number from 0 to 1e6), got string")
  H.raises(function() g:time_scale(1e7) end, "expected a time scale from 0 to 1e6")
  H.eq(g:time_scale(), 1, "unchanged")
  H.raises(function() g:delay(1) end, "g:delay: not inside a task")
  H.raises(function() g:yield() end, "g:yield: not inside a task")
  H.raises(function() g.delay(5, 1) end, "Group expected, got number")
  H.raises(function() g.spawn({}, print) end, "Group expected, got table")
  H.raises(function() g:spawn(42) end, "function expected, got number")
  local out = H.run_task(function() g:delay(-1) end)
  H.has(out.values[2], "expected a finite, non-negative number of seconds")
  out = H.run_task(function() g:delay(1, "Sometime") end)
  H.has(out.values[2], "unknown timing 'Sometime'")
  out = H.run_task(function() g:delay(1, "Update", "unscaled") end)
  H.has(out.values[2], "g:delay waits on the group's clock only")
  out = H.run_task(function() g:delay_frame(-2) end)
  H.has(out.values[2], "expected a non-negative frame count")
  H.raises(function() g:every(0, print) end, "expected a finite interval")
  H.raises(function() g:every(1, print, {clock = "unscaled"}) end, "unknown option 'clock'")
  -- nesting is bounded (every walk over descendants recurses a level)
  local deep, chain = task.group(), {}
  chain[1] = deep
  for i = 2, 100 do chain[i] = task.group{parent = chain[i - 1]} end
  H.raises(function() task.group{parent = chain[100]} end, "groups nest at most 100 deep")
  chain[100]:spawn(function() chain[100]:delay(1) end)
  H.eq({deep:count(), chain[100]:effective_scale()}, {1, 1})
  deep:pause()
  H.truthy(chain[100]:paused(), "pause reaches the deepest")
  H.eq(deep:cancel(), 1)
  H.truthy(chain[100]:cancelled(), "cancel reaches the deepest")
  -- awaiting from a group callback is refused like any callback's
  local reports, restore = H.capture_errors()
  local h = g:on(function() g:delay(1) end)
  H.frames(1)
  restore()
  H.eq(#reports, 1)
  H.has(tostring(reports[1].err), "called from a task.on or task.every callback")
  H.eq(h:active(), false)
  g:cancel()
end)

-- ---- property: random programs ------------------------------------------------

-- Random programs of spawn, pause, resume, scale and cancel over a tree of
-- groups (members pausing groups as they wake, too), checked against the
-- rules: a member sleeping on its group's clock
-- wakes at the first frame at which that clock reached its deadline (never
-- while it is paused); clocks never run backwards and stand still while
-- paused; after a cancel no member of the group or its descendants is
-- alive and none wakes again; each to-be-closed variable runs once.
H.case("random_programs_keep_the_group_rules", function()
  for seed = 1, 200 do
    math.randomseed(seed)
    local root = task.group{name = "root"}
    local groups = {root}
    local parent_of = {}
    for i = 2, 5 do
      local p = groups[math.random(#groups)]
      groups[i] = task.group{parent = p, time_scale = math.random(0, 4) / 2}
      parent_of[groups[i]] = p
    end
    local times = {}       -- times[frame][g] = g:time() during that frame (ns)
    local paused_at = {[task.frame()] = {}} -- paused_at[frame][g]: g was paused then
    local wakes = {}       -- {g, target, frame}
    local closes, members = 0, {}
    local dead = {}        -- cancelled groups
    local function ns(x) return math.floor(x * 1e9 + 0.5) end
    local function record()
      local row = {}
      for _, g in ipairs(groups) do
        if not g:cancelled() then row[g] = ns(g:time()); paused_at[task.frame()][g] = g:paused() end
      end
      times[task.frame()] = row
      paused_at[task.frame() + 1] = {}
    end
    record()
    for step = 1, 60 do
      local g = groups[math.random(#groups)]
      local op = math.random(10)
      if not g:cancelled() then
        if op <= 4 then
          local d = math.random(0, 6) / 10
          members[#members + 1] = g:spawn(function()
            local c <close> = setmetatable({}, {__close = function() closes = closes + 1 end})
            while true do
              local target, armed = ns(g:time()) + ns(d), task.frame()
              g:delay(d)
              wakes[#wakes + 1] = {g, target, task.frame(), armed, g:paused()}
              -- now and then a waking member pauses a group in mid-run
              local victim = groups[math.random(#groups)]
              if math.random(8) == 1 and not victim:cancelled() then victim:pause() end
            end
          end)
        elseif op <= 6 then
          g:pause()
        elseif op <= 8 then
          g:resume()
        elseif op == 9 then
          g:time_scale(math.random(0, 6) / 2)
        elseif step > 20 then
          g:cancel()
          dead[g] = true
        end
      end
      H.frames(1, 0.1)
      record()
    end
    for _, w in ipairs(wakes) do
      local g, target, f, armed, paused = w[1], w[2], w[3], w[4], w[5]
      H.eq(paused, false, ("seed %d: woke while paused"):format(seed))
      H.truthy(times[f][g] >= target, ("seed %d: woke before its deadline"):format(seed))
      -- the first frame after the one it was armed in at which it was due
      -- and its group was running
      for fr = armed + 1, f - 1 do
        H.truthy(times[fr][g] < target or paused_at[fr][g],
          ("seed %d: due at frame %d (%s >= %s), woke at %d (armed %d)"):format(seed, fr, times[fr][g], target, f, armed))
      end
    end
    for f = 1, #times do
      for g, t in pairs(times[f]) do
        local prev = times[f - 1] and times[f - 1][g]
        if prev then H.truthy(t >= prev, ("seed %d: clock ran backwards"):format(seed)) end
      end
    end
    local cancelled_members = 0
    for _, t in ipairs(members) do
      local g = task.group_of(t)
      local in_dead = false
      while g do
        if dead[g] then in_dead = true end
        g = parent_of[g]
      end
      if in_dead then
        H.eq(t:status(), "cancelled", ("seed %d: member of a cancelled group"):format(seed))
        cancelled_members = cancelled_members + 1
      end
    end
    root:cancel()
    for _, t in ipairs(members) do H.eq(t:status(), "cancelled") end
    H.eq(closes, #members, ("seed %d: each close ran once"):format(seed))
  end
end)

H.run()
