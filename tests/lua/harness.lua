-- harness.lua: a small test harness for Lua behaviour tests run by
-- tests/lua/runner.c. Cases run in order; after each one the loop is reset
-- and the harness checks that the case left no task alive.
local H = {}
local cases = {}

-- H.case(name, fn): registers a case.
function H.case(name, fn) cases[#cases + 1] = {name = name, fn = fn} end

local function show(v, depth)
  depth = depth or 0
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" or depth > 3 then return tostring(v) end
  local keys, parts = {}, {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local n = #v
  for i = 1, n do parts[#parts + 1] = show(v[i], depth + 1) end
  for _, k in ipairs(keys) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then
      parts[#parts + 1] = "[" .. show(k) .. "]=" .. show(v[k], depth + 1)
    end
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
H.show = show

local function same(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- H.eq(actual, expected, [what]): deep equality or an error naming both.
function H.eq(actual, expected, what)
  if not same(actual, expected) then
    error(string.format("%s: expected %s, got %s", what or "value",
      show(expected), show(actual)), 2)
  end
end

-- H.truthy(v, [what])
function H.truthy(v, what)
  if not v then error((what or "value") .. ": expected a true value, got " .. show(v), 2) end
end

-- H.has(s, needle, [what]): s is a string containing `needle` (plain).
function H.has(s, needle, what)
  if type(s) ~= "string" or not s:find(needle, 1, true) then
    error(string.format("%s: expected a string containing %q, got %s",
      what or "value", needle, show(s)), 2)
  end
end

-- H.raises(fn, needle): fn must raise an error whose text contains needle;
-- returns the error value.
function H.raises(fn, needle, what)
  local ok, err = pcall(fn)
  if ok then error((what or "call") .. ": expected an error containing " .. show(needle) .. ", got none", 2) end
  if needle and not tostring(err):find(needle, 1, true) then
    error(string.format("%s: expected an error containing %q, got %s", what or "call", needle, show(tostring(err))), 2)
  end
  return err
end

-- H.frames(n, [dt]): runs n frames of dt seconds (default 1/60).
function H.frames(n, dt)
  for _ = 1, n do task.step(dt) end
end

-- H.run_task(fn) -> out, t: spawns a task t that calls fn protected; once
-- it ended, out.values holds pcall's results (table.pack: ok first).
function H.run_task(fn)
  local out = {}
  local t = task.spawn(function() out.values = table.pack(pcall(fn)) end)
  return out, t
end

-- H.log(): a log table and a function that appends "<tag>@<frame>" (with
-- the running timing when `with_timing` is true).
function H.log(with_timing)
  local log = {}
  return log, function(tag)
    if with_timing then
      log[#log + 1] = string.format("%s@%d:%s", tag, task.frame(), testhost.timing() or "-")
    else
      log[#log + 1] = string.format("%s@%d", tag, task.frame())
    end
  end
end

-- H.capture_errors(): installs an error handler that records reports;
-- returns the list ({err=, tb=, task=, what=, frame=}, ...) and a function
-- restoring the previous handler.
function H.capture_errors()
  local reports = {}
  local prev = task.on_error(function(err, tb, t, what)
    reports[#reports + 1] = {err = err, tb = tb, task = t, what = what, frame = task.frame()}
  end)
  return reports, function() task.on_error(prev) end
end

-- H.run(): runs every case; prints one line per case and the summary.
function H.run()
  local passed, failed = 0, 0
  for _, c in ipairs(cases) do
    local ok, err = xpcall(c.fn, debug.traceback)
    task.on_error(nil)
    if ok and testhost.task_count() ~= 0 then
      ok, err = false, string.format("left %d task(s) alive", testhost.task_count())
    end
    testhost.reset()
    task.time_scale(1)
    if ok then
      passed = passed + 1
      print("ok - " .. c.name)
    else
      failed = failed + 1
      print("not ok - " .. c.name .. "\n" .. tostring(err))
    end
  end
  print(string.format("%d passed, %d failed", passed, failed))
  if failed > 0 then os.exit(1, true) end
end

return H
