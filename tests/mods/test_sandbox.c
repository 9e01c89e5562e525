/*
** test_sandbox.c: every rule of the mod sandbox (src/mods/sandbox.c,
** docs/modding.md "The sandbox"), each escape tried from a mod's code. A
** case is a mod.lua that checks with assert and prints "ok" at the end; the
** test wants that "ok" and no report.
*/
#include "mods_util.h"

/* Runs `code` as mod "s" (extra files from `files`: name, text, ...) for
   two frames; fails unless it printed "ok" and nothing was reported. */
static void expect_ok(const char *code, const char *const *files) {
  fixture *f = fx_new(NULL);
  fx_write(f, "s/mod.lua", code);
  for (; files != NULL && files[0] != NULL; files += 2)
    fx_write(f, files[0], files[1]);
  luna_mods_load_dir(f->set, f->dir);
  fx_frames(f, 2);
  if (f->replen > 0)
    fail_msg("reported:\n%s", f->rep);
  assert_has(f->out, "[s] ok\n");
  fx_free(f);
}

static void no_io(void **state) {
  (void)state;
  expect_ok("assert(io == nil)\n"
            "assert(require == nil or not pcall(require, 'io'))\n"
            "print('ok')", NULL);
}

static void os_has_only_time_clock_date_difftime(void **state) {
  (void)state;
  expect_ok("for _, k in ipairs{'execute', 'exit', 'getenv', 'remove', 'rename', 'tmpname',\n"
            "                   'setlocale'} do assert(os[k] == nil, k) end\n"
            "local n = 0; for k in pairs(os) do n = n + 1 end\n"
            "assert(n == 4 and os.time() and os.clock() and os.date('%Y') and os.difftime(2, 1) == 1)\n"
            "print('ok')", NULL);
}

static void no_debug(void **state) {
  (void)state;
  expect_ok("assert(debug == nil)\n"
            "assert(not pcall(require, 'debug'))\n"
            "print('ok')", NULL);
}

static void no_package_or_loadlib(void **state) {
  (void)state;
  expect_ok("assert(package == nil)\n"
            "assert(not pcall(require, 'package'))\n"
            "local ok, err = pcall(require, 'socket.core')\n"
            "assert(not ok and err:find('cannot open'), err)\n"
            "print('ok')", NULL);
}

/* The whole global table is the whitelist (docs/modding.md lists it). */
static void globals_are_the_whitelist(void **state) {
  (void)state;
  expect_ok("local want = {}\n"
            "for k in ('assert error ipairs next pairs pcall xpcall rawequal rawget rawset rawlen '..\n"
            "  'select tonumber tostring type _VERSION _G print load loadfile dofile require '..\n"
            "  'setmetatable getmetatable collectgarbage string table math utf8 os coroutine '..\n"
            "  'task mods'):gmatch('%S+') do want[k] = true end\n"
            "for k in pairs(_G) do assert(want[k], 'unexpected global ' .. k) end\n"
            "for k in pairs(want) do assert(_G[k] ~= nil, 'missing global ' .. k) end\n"
            "print('ok')", NULL);
}

/* No binary chunks: load with mode "b", a bytecode string, loadfile of a
   binary file. */
static void load_refuses_binary_chunks(void **state) {
  static const char *const files[] = {"s/bin.luac", "\x1bLua\x54\x00garbage", NULL};
  (void)state;
  expect_ok("local bytecode = '\\27Lua\\84\\0\\25\\147\\13\\10\\26\\10'\n"
            "local f, err = load(bytecode, 'x', 'b')\n"
            "assert(f == nil and err:find('binary chunk'), err)\n"
            "f, err = load(bytecode)\n"
            "assert(f == nil and err:find('binary chunk'), err)\n"
            "local parts = {bytecode}\n"
            "f, err = load(function() return table.remove(parts, 1) end, 'r', 'bt')\n"
            "assert(f == nil and err:find('binary chunk'), err)\n"
            "local ok, e = pcall(loadfile, 'bin.luac', 'b')\n"
            "assert(not ok and e:find('binary chunk'), e)\n"
            "assert(not pcall(dofile, 'bin.luac'))\n"
            "assert(load('return 1 + 1', 'x', 'b')() == 2)\n" /* text still loads */
            "print('ok')", files);
}

/* string.dump is gone, also through the string metatable; the string
   methods that remain work. */
static void string_dump_is_gone_and_strings_work(void **state) {
  (void)state;
  expect_ok("assert(string.dump == nil and (''). dump == nil)\n"
            "assert(getmetatable('').__index == string)\n"
            "assert(getmetatable('').__index.dump == nil)\n"
            "assert(('ab'):rep(3) == 'ababab' and ('x'):upper() == 'X')\n"
            "assert(('%d'):format(7) == '7' and ('a,b'):find(',') == 2)\n"
            "print('ok')", NULL);
}

/* Changing the string metatable only changes this mod's own state. */
static void string_metatable_tricks_stay_inside_the_mod(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "getmetatable('').__index = function(s, k) return function() return 'pwned' end end\n"
           "getmetatable('').__gc = function() while true do end end\n"
           "assert(('x'):upper() == 'pwned')\n"
           "print('ok')");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua", "assert(('x'):upper() == 'X'); print('ok')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_string_equal(f->out, "[a] ok\n[b] ok\n");
  assert_int_equal(f->replen, 0);
  fx_free(f);
}

/* load, loadfile and dofile give chunks the sandbox, not the original
   globals; an explicit env is kept. */
static void load_gives_the_sandbox_environment(void **state) {
  static const char *const files[] = {"s/chunk.lua", "x = (x or 0) + 1; return io, _G", NULL};
  (void)state;
  expect_ok("assert(load('return io')() == nil)\n"
            "assert(load('return _G')() == _G)\n"
            "load('y = 5')(); assert(y == 5)\n"
            "local env = {}; load('z = 1', 'c', 't', env)(); assert(env.z == 1 and z == nil)\n"
            "local io_, g = dofile('chunk.lua'); assert(io_ == nil and g == _G and x == 1)\n"
            "local env2 = {}; loadfile('chunk.lua', 't', env2)(); assert(env2.x == 1 and x == 1)\n"
            "print('ok')", files);
}

/* require and the file functions reach only the mod's own folder. */
static void files_only_from_the_mods_folder(void **state) {
  static const char *const files[] = {
      "s/lib/util.lua", "return {name = 'util', n = (n or 0)}",
      "s/pkg/init.lua", "return 'pkg init'",
      "outside.lua", "return 'outside'",
      NULL};
  (void)state;
  expect_ok("assert(require('lib.util').name == 'util')\n"
            "assert(require('lib.util') == require('lib.util'))\n"
            "assert(require('pkg') == 'pkg init')\n"
            "assert(require('lunaloop') == task and require('mods') == mods)\n"
            "for _, name in ipairs{'../outside', '..outside', '/etc/passwd', 'lib/util',\n"
            "                      '.hidden', 'a..b', 'x\\0y', 'C:\\\\x'} do\n"
            "  local ok, err = pcall(require, name)\n"
            "  assert(not ok and err:find('bad module name'), name .. ': ' .. tostring(err))\n"
            "end\n"
            "for _, path in ipairs{'../outside.lua', '/etc/passwd', 'lib/../../outside.lua',\n"
            "                      'lib/../lib/util.lua'} do\n"
            "  local ok, err = pcall(loadfile, path)\n"
            "  assert(not ok and err:find('not a path inside'), path .. ': ' .. tostring(err))\n"
            "  ok, err = pcall(dofile, path)\n"
            "  assert(not ok and err:find('not a path inside'), path)\n"
            "end\n"
            /* A NUL cut the path short: 'lib/util.lua\0x' loaded lib/util.lua. */
            "for _, f in ipairs{loadfile, dofile} do\n"
            "  local ok, err = pcall(f, 'lib/util.lua\\0x')\n"
            "  assert(not ok and err:find('a path without NUL bytes expected'), tostring(err))\n"
            "end\n"
            "print('ok')", files);
}

/* A module that fails is not cached (as with the stock require): each
   require raises its real error again, not "loop in the modules required";
   a missing module names every path tried; a real cycle is still caught. */
static void require_does_not_cache_failures(void **state) {
  static const char *const files[] = {
      "s/bad.lua", "error('broken module')",
      "s/syntax.lua", "return {",
      "s/uses_bad.lua", "return require('bad')",
      "s/flaky.lua", "tries = (tries or 0) + 1\n"
                     "if tries == 1 then error('first try fails') end\n"
                     "return {tries = tries}",
      "s/loop_a.lua", "return require('loop_b')",
      "s/loop_b.lua", "return require('loop_a')",
      NULL};
  (void)state;
  expect_ok("for i = 1, 2 do\n"
            "  local ok, err = pcall(require, 'bad')\n"
            "  assert(not ok and err:find('bad.lua:1: broken module', 1, true), err)\n"
            "  ok, err = pcall(require, 'syntax')\n"
            "  assert(not ok and err:find('syntax.lua:1:', 1, true) and not err:find('loop'), err)\n"
            "  ok, err = pcall(require, 'uses_bad')\n"
            "  assert(not ok and err:find('broken module', 1, true), err)\n"
            "  ok, err = pcall(require, 'no.such')\n"
            "  assert(not ok and err:find(\"cannot open module 'no.such'\", 1, true), err)\n"
            "  assert(err:find(\"no file 'no/such.lua'\", 1, true), err)\n"
            "  assert(err:find(\"no file 'no/such/init.lua'\", 1, true), err)\n"
            "  ok, err = pcall(require, 'loop_a')\n"
            "  assert(not ok and err:find(\"loop in the modules required by 'loop_a'\", 1, true), err)\n"
            "end\n"
            "local ok, err = pcall(require, 'flaky')\n"
            "assert(not ok and err:find('first try fails', 1, true), err)\n"
            "local m = require('flaky')\n"
            "assert(m.tries == 2 and require('flaky') == m and tries == 2)\n"
            "print('ok')", files);
}

/* A symbolic link inside the folder cannot lead out of it. */
static void symlinks_cannot_lead_out(void **state) {
  fixture *f = fx_new(NULL);
  char target[512], link[512];
  (void)state;
  fx_write(f, "outside.lua", "return 'outside'");
  fx_write(f, "s/mod.lua",
           "local ok, err = pcall(require, 'escape')\n"
           "assert(not ok and err:find('leads out'), err)\n"
           "ok, err = pcall(dofile, 'escape.lua')\n"
           "assert(not ok and err:find('leads out'), err)\n"
           "print('ok')");
  snprintf(target, sizeof target, "%s/outside.lua", f->dir);
  snprintf(link, sizeof link, "%s/s/escape.lua", f->dir);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  if (f->replen > 0)
    fail_msg("reported:\n%s", f->rep);
  assert_has(f->out, "[s] ok\n");
  fx_free(f);
}

/* __gc metamethods would run with hooks off (no budget): refused. */
static void setmetatable_refuses_gc(void **state) {
  (void)state;
  expect_ok("local ok, err = pcall(setmetatable, {}, {__gc = function() end})\n"
            "assert(not ok and err:find('__gc'), err)\n"
            "local mt = {}; local t = setmetatable({}, mt)\n"
            "mt.__gc = function() while true do end end\n" /* too late: never called */
            "t = nil; for _ = 1, 100 do collectgarbage('step') end\n"
            "assert(getmetatable(t2 or setmetatable({}, {__index = {a = 1}})).__index.a == 1)\n"
            "local p = setmetatable({}, {__metatable = 'locked'})\n"
            "assert(getmetatable(p) == 'locked' and not pcall(setmetatable, p, {}))\n"
            "print('ok')", NULL);
}

/* Every object the binding hands a mod has a protected metatable (its
   name is all getmetatable gives) and methods that no index reaches. The
   Channel and Scope metatables used to be their own __index, so
   task.channel().__index was the raw metatable: a __gc written there marked
   every later channel for finalization, and finalizers run with hooks off,
   where no budget stops them. */
static void binding_objects_have_protected_metatables(void **state) {
  (void)state;
  expect_ok("task.spawn(function()\n"
            "  local objs = {Task = task.current(), Handle = task.on(function() end),\n"
            "                Channel = task.channel(), Subscription = mods.subscribe('x', print),\n"
            "                Signal = task.signal(), Connection = task.signal():connect(print),\n"
            "                Group = task.group{name = 'g'}}\n"
            "  task.scope(function(s) objs.Scope = s end)\n"
            "  objs.Timeout = select(2, pcall(task.timeout, 0.001, function() task.delay(1) end))\n"
            "  local t = task.defer(function() end); t:cancel()\n"
            "  objs.Cancelled = select(2, t:result())\n"
            "  for name, x in pairs(objs) do\n"
            "    assert(getmetatable(x) == 'lunaloop.' .. name or\n"
            "           getmetatable(x) == 'lunaloop.mods.' .. name, name)\n"
            "    for _, k in ipairs{'__index', '__gc', '__metatable', '__name', '__close',\n"
            "                       '__newindex', '__tostring', '__mode'} do\n"
            "      local ok, v = pcall(function() return x[k] end)\n"
            "      assert(not ok or v == nil, name .. '.' .. k)\n"
            "    end\n"
            "    if type(x) == 'table' then\n"
            "      assert(not pcall(setmetatable, x, {}), name)\n"
            "      assert(not pcall(setmetatable, x, nil), name)\n"
            "    end\n"
            "  end\n"
            "  assert(objs.Channel.send and objs.Scope.spawn and objs.Handle.remove)\n"
            "  assert(objs.Signal.fire and objs.Connection.disconnect)\n"
            "  assert(task.is_cancelled(objs.Cancelled) and task.is_timeout(objs.Timeout))\n"
            "  objs.Handle:remove(); objs.Subscription:remove()\n"
            "  print('ok')\n"
            "end)", NULL);
}

/* The binding's own Lua code (the combinators, scopes, channels) captured
   what it calls when it loaded: a mod that rewrites string, table, math,
   the string metatable or its task table breaks only its own calls. */
static void rewriting_the_libraries_changes_nothing_in_the_binding(void **state) {
  (void)state;
  expect_ok("local delay = task.delay\n"
            "string.format = function() error('pwned format') end\n"
            "math.type = function() return 'float' end\n"
            "table.unpack = function() return 'pwned' end\n"
            "table.pack = function() return {n = 0} end\n"
            "task.delay = function() error('pwned delay') end\n"
            "getmetatable('').__index = function() error('pwned string') end\n"
            "task.spawn(function()\n"
            "  local ch = task.channel(1)\n"
            "  task.spawn(function() ch:send(5) end)\n"
            "  assert(ch:receive() == 5)\n"
            "  local a, b = task.when_all(function() return 1 end, function() return 2 end)\n"
            "  assert(a == 1 and b == 2)\n"
            "  local i, v = task.when_any(function() delay(1) end, function() return 'w' end)\n"
            "  assert(i == 2 and v == 'w')\n"
            "  local ok, err = pcall(task.timeout, 0.001, function() while true do task.yield() end end)\n"
            "  assert(not ok and task.is_timeout(err))\n"
            "  assert(task.scope(function(s) return tostring(s) end) == 'Scope(0 children, open)')\n"
            "  assert(tostring(ch) == 'Channel(0 buffered)')\n"
            "  ok, err = pcall(task.channel, -1)\n"
            "  assert(not ok and err == \"bad argument #1 to 'channel' (expected a non-negative \"\n"
            "    .. 'integer capacity, got -1)', err)\n"
            "  print('ok')\n"
            "end)", NULL);
}

/* A mod being unloaded reaches neither the loop nor the bus: a __close
   handler run by the cancellations at unload cannot start tasks or
   callbacks, send or subscribe (each is refused with an error), so nothing
   of the dying state outlives it or runs without its budget. */
static void an_unloading_mod_reaches_no_loop_or_bus(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "local function try(what, fn, ...)\n"
           "  local ok, err = pcall(fn, ...)\n"
           "  print(what, ok, (tostring(err):gsub('^.-: ', '', 1)))\n"
           "end\n"
           "task.spawn(function()\n"
           "  local x <close> = setmetatable({}, {__close = function()\n"
           "    try('spawn', task.spawn, function() end)\n"
           "    try('defer', task.defer, function() end)\n"
           "    try('on', task.on, function() end)\n"
           "    try('every', task.every, 1, function() end)\n"
           "    try('send', mods.send, 'late', 1)\n"
           "    try('subscribe', mods.subscribe, 'late', print)\n"
           "  end})\n"
           "  task.delay(100)\n"
           "end)\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua", "mods.subscribe('late', function() print('got') end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_int_equal(luna_mods_unload(f->set, "a"), 0);
  fx_frames(f, 2);
  assert_string_equal(f->out,
                      "[a] spawn\tfalse\tthe Lua state is closing (no new tasks or callbacks)\n"
                      "[a] defer\tfalse\tthe Lua state is closing (no new tasks or callbacks)\n"
                      "[a] on\tfalse\tthe Lua state is closing (no new tasks or callbacks)\n"
                      "[a] every\tfalse\tthe Lua state is closing (no new tasks or callbacks)\n"
                      "[a] send\tfalse\tthe mod is being unloaded\n"
                      "[a] subscribe\tfalse\tthe mod is being unloaded\n");
  fx_free(f);
}

/* Every key of every table a mod can reach, from its globals down (and the
   string metatable, the only metatable getmetatable gives it that it did
   not set), is one of this list: the sandbox's lists in sandbox.c and the
   task module's allowed list. A field the binding or Lua adds later fails
   here until it is listed (and documented in docs/modding.md). */
static void everything_a_mod_can_reach_is_listed(void **state) {
  static const char want[] =
      "[s] _G _VERSION assert collectgarbage coroutine coroutine.close coroutine.create "
      "coroutine.isyieldable coroutine.resume coroutine.running coroutine.status "
      "coroutine.wrap coroutine.yield dofile error getmetatable ipairs load loadfile math "
      "math.abs math.acos math.asin math.atan math.atan2 math.ceil math.cos math.cosh "
      "math.deg math.exp math.floor math.fmod math.frexp math.huge math.ldexp math.log "
      "math.log10 math.max math.maxinteger math.min math.mininteger math.modf math.pi "
      "math.pow math.rad math.random math.randomseed math.sin math.sinh math.sqrt math.tan "
      "math.tanh math.tointeger math.type math.ult mods mods.is_loaded mods.list mods.name "
      "mods.on_load mods.on_unload mods.send mods.stats mods.subscribe mods.version next os "
      "os.clock os.date os.difftime os.time pairs pcall print rawequal rawget rawlen rawset "
      "require select setmetatable string string.byte string.char string.find "
      "string.format string.gmatch string.gsub string.len string.lower string.match "
      "string.pack string.packsize string.rep string.reverse string.sub string.unpack "
      "string.upper table table.concat table.insert table.move table.pack table.remove "
      "table.sort table.unpack task task.await task.cancel task.channel task.current "
      "task.defer task.delay task.delay_frame task.delta_time task.every task.frame "
      "task.group task.group_of task.is_cancelled task.is_timeout task.list task.next_frame task.on task.on_error "
      "task.scope task.signal task.spawn task.spawn_at task.stats task.time task.time_scale "
      "task.timeout task.timings task.timings.1 task.timings.10 task.timings.11 "
      "task.timings.12 task.timings.13 task.timings.14 task.timings.15 task.timings.16 "
      "task.timings.2 task.timings.3 task.timings.4 task.timings.5 task.timings.6 "
      "task.timings.7 task.timings.8 task.timings.9 task.ungrouped task.version task.wait_until "
      "task.wait_while task.when_all task.when_any task.yield tonumber tostring type utf8 "
      "utf8.char utf8.charpattern utf8.codepoint utf8.codes utf8.len utf8.offset xpcall "
      "(string).__add (string).__div (string).__idiv (string).__index (string).__mod "
      "(string).__mul (string).__pow (string).__sub (string).__unm\n";
  fixture *f = fx_new(NULL);
  (void)state;
  /* Lua 5.4 built without LUA_COMPAT_MATHLIB has no math.pow, math.atan2... */
  fx_write(f, "s/mod.lua",
           "local seen, out = {}, {}\n"
           "local function walk(prefix, t)\n"
           "  if seen[t] then return end\n"
           "  seen[t] = true\n"
           "  local keys = {}\n"
           "  for k in pairs(t) do keys[#keys + 1] = tostring(k) end\n"
           "  table.sort(keys)\n"
           "  for _, k in ipairs(keys) do\n"
           "    out[#out + 1] = prefix .. k\n"
           "    local v = rawget(t, k) or rawget(t, tonumber(k))\n"
           "    if type(v) == 'table' then walk(prefix .. k .. '.', v) end\n"
           "  end\n"
           "end\n"
           "walk('', _G)\n"
           "walk('(string).', getmetatable(''))\n"
           "print(table.concat(out, ' '))\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  if (strstr(f->out, "math.pow") == NULL) { /* a build without the compat functions */
    fx_free(f);
    skip();
  }
  assert_string_equal(f->out, want);
  fx_free(f);
}

/* Only what cannot stall: a step of a given size costs time in proportion
   to the heap inside one C call, where no budget reaches; one basic step
   is bounded, and a full collection (the default "collect") is only asked
   for, returning 0 at once. */
static void collectgarbage_allows_only_what_cannot_stall(void **state) {
  (void)state;
  expect_ok("assert(type(collectgarbage('count')) == 'number')\n"
            "collectgarbage('step'); collectgarbage('step', 0)\n"
            "assert(collectgarbage('isrunning') == true)\n"
            "local ok, err = pcall(collectgarbage, 'step', 100000)\n"
            "assert(not ok and err:find('one basic step only'), err)\n"
            "assert(collectgarbage() == 0 and collectgarbage('collect') == 0)\n"
            "for _, opt in ipairs{'stop', 'restart', 'incremental', 'generational',\n"
            "                     'setpause', 'setstepmul'} do\n"
            "  ok, err = pcall(collectgarbage, opt)\n"
            "  assert(not ok and err:find('not allowed'), opt)\n"
            "end\n"
            "print('ok')", NULL);
}

/* A mod's full collection is a request, not a stall: the call returns at
   once and the loop's collector pacer completes the cycle at the end of
   later frames, in steps, with no full collection (tests/lua/test_gc.c
   shows the slices under a fake clock). */
static void a_mods_collect_is_served_by_the_pacer_after_the_call(void **state) {
  fixture *f = fx_new(NULL);
  luna_lua_gc_stats st;
  int frames = 0;
  (void)state;
  fx_write(f, "s/mod.lua",
           "local g = {} for i = 1, 50000 do g[i] = {i} end g = nil\n"
           "assert(collectgarbage('collect') == 0)\n"
           "print('ok')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_has(f->out, "[s] ok\n");
  assert_int_equal(luna_lua_gc_loop_stats(f->loop, &st), 0);
  assert_int_equal(st.steps, 0); /* nothing ran inside the call */
  while (st.cycles == 0 && frames++ < 100) {
    fx_frames(f, 1);
    assert_int_equal(luna_lua_gc_loop_stats(f->loop, &st), 0);
  }
  assert_int_equal(st.cycles, 1);
  assert_true(st.steps >= 1);
  assert_int_equal(st.full_collections, 0);
  fx_frames(f, 5);
  assert_int_equal(luna_lua_gc_loop_stats(f->loop, &st), 0);
  assert_int_equal(st.cycles, 1); /* served once */
  fx_free(f);
}

/* Single calls that looped for ever without allocating: string.rep of an
   empty string, table.move over a range of nils. The sort is the stock
   one with a comparator of the sandbox's in between. */
static void calls_that_could_loop_for_ever_are_bounded(void **state) {
  (void)state;
  expect_ok("assert(string.rep('', math.maxinteger) == '' and ('').rep('', 1e15, '') == '')\n"
            "assert(('ab'):rep(3, ',') == 'ab,ab,ab')\n"
            "local ok, err = pcall(table.move, {}, 1, 1 << 53, 2)\n"
            "assert(not ok and err:find('too many elements'), err)\n"
            "assert(table.concat(table.move({1, 2, 3}, 1, 3, 2), ',') == '1,1,2,3')\n"
            "local t = {3, 1, 2}; table.sort(t); assert(table.concat(t) == '123')\n"
            "table.sort(t, function(a, b) return a > b end); assert(table.concat(t) == '321')\n"
            "ok, err = pcall(table.sort, t, 1)\n"
            "assert(not ok and err:find('function expected'), err)\n"
            "print('ok')", NULL);
}

/* string.find(("a"):rep(2000), ".-.-.-x") did not return in a minute:
   in a mod it raises "pattern too complex" after the budget's worth of
   steps, by the library and through the string metatable alike, and a
   loop of such calls is stopped by the instruction budget they are
   charged to. */
static void pathological_pattern_ends_with_an_error(void **state) {
  (void)state;
  expect_ok("local s = ('a'):rep(2000)\n"
            "local ok, err = pcall(string.find, s, '.-.-.-x')\n"
            "assert(not ok and err:find('pattern too complex'), err)\n"
            "ok, err = pcall(function() return s:find('.-.-.-x') end)\n"
            "assert(not ok and err:find('pattern too complex'), err)\n"
            "ok, err = pcall(string.gsub, s, '(.-)(.-)(.-)x', '')\n"
            "assert(not ok and err:find('pattern too complex'), err)\n"
            "assert(('hello world'):gsub('o', '0') == 'hell0 w0rld')\n"
            "print('ok')", NULL);
}

/* A task's coroutine belongs to the scheduler: a mod's resume of it raises
   and closing it cancels the task, as outside mods; its own coroutines
   work as in stock Lua. */
static void coroutine_resume_refuses_task_coroutines(void **state) {
  (void)state;
  expect_ok("local t = task.spawn(function() task.yield() end)\n"
            "local co, seen\n"
            "local u = task.spawn(function()\n"
            "  co = coroutine.running()\n"
            "  local c <close> = setmetatable({}, {__close = function(_, e) seen = e end})\n"
            "  task.yield()\n"
            "end)\n"
            "local ok, err = pcall(coroutine.resume, co)\n"
            "assert(not ok and err:find(\"cannot resume a task's coroutine\"), err)\n"
            "assert(u:status() == 'suspended')\n"
            "assert(coroutine.close(co) == true and u:status() == 'cancelled')\n"
            "assert(task.is_cancelled(seen))\n"
            "ok, err = coroutine.resume(coroutine.running())\n"
            "assert(not ok and err == 'cannot resume non-suspended coroutine', err)\n"
            /* a settled task's coroutine is dead, as outside mods; one not
               started is the scheduler's */
            "local s = task.spawn(function() return 1 end)\n"
            "assert(coroutine.status(s) == 'dead' and coroutine.close(s) == true and s:status() == 'done')\n"
            "ok, err = coroutine.resume(s)\n"
            "assert(not ok and err == 'cannot resume dead coroutine', err)\n"
            "local d = task.defer(function() end)\n"
            "ok, err = pcall(coroutine.resume, d)\n"
            "assert(not ok and err:find(\"cannot resume a task's coroutine\"), err)\n"
            "assert(coroutine.close(d) == true and d:status() == 'cancelled')\n"

            "local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)\n"
            "assert(gen() == 1 and gen() == 2 and gen() == 3)\n"
            "local c = coroutine.create(function(a) local b = coroutine.yield(a + 1); return b * 2 end)\n"
            "assert(select(2, coroutine.resume(c, 1)) == 2)\n"
            "assert(select(2, coroutine.resume(c, 5)) == 10 and coroutine.status(c) == 'dead')\n"
            "local w = coroutine.wrap(function() error('inner') end)\n"
            "local ok2, e2 = pcall(w); assert(not ok2 and e2:find('inner'))\n"
            "print('ok')", NULL);
}

/* A thread that is neither the mod's own coroutine nor a task's, such
   as the one a callback runs on, stays out of coroutine.resume/close. */
static void coroutine_resume_refuses_other_threads(void **state) {
  (void)state;
  expect_ok("local th\n"
            "local h = task.on('Update', function() th = th or coroutine.running() end)\n"
            "task.spawn(function()\n"
            "  task.wait_until(function() return th ~= nil end)\n"
            "  h:remove()\n"
            "  for _, f in ipairs{coroutine.resume, coroutine.close} do\n"
            "    local ok, err = pcall(f, th)\n"
            "    assert(not ok and err:find('only coroutines made by coroutine.create', 1, true), err)\n"
            "  end\n"
            "  print('ok')\n"
            "end)\n", NULL);
}

/* The loop and its budgets belong to the host, and so do worker states
   (their threads run unsandboxed Lua with the whole standard library);
   groups and signals are the mod's own (a group is made of the mod's
   tasks and clocks, in its state). */
static void task_module_has_no_loop_control(void **state) {
  (void)state;
  expect_ok("assert(task.step == nil and task.run == nil and task.exit == nil)\n"
            "assert(task.set_budget == nil and task.debug == nil)\n"
            "assert(task.workers == nil)\n"
            "assert(task.time_scale() == 1)\n"
            "local ok, err = pcall(task.time_scale, 0)\n"
            "assert(not ok and err:find('not set it'), err)\n"
            "assert(type(task.spawn) == 'function' and task.version)\n"
            "assert(type(task.signal) == 'function')\n"
            "local g = task.group{name = 'mine'}\n"
            "local closed = false\n"
            "g:spawn(function()\n"
            "  local c <close> = setmetatable({}, {__close = function() closed = true end})\n"
            "  g:delay(1)\n"
            "end)\n"
            "g:pause(); assert(g:paused() and g:count() == 1)\n"
            "g:cancel(); assert(closed and g:count() == 0)\n"
            "assert(not pcall(g.spawn, g, print))\n"
            "print('ok')", NULL);
}

/* Each mod has its own globals: one mod replacing _G entries, print or
   string functions changes nothing for another. */
static void globals_are_per_mod(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = 'a', load_order = 1}");
  fx_write(f, "a/mod.lua",
           "print('a sets')\n"
           "shared = 'from a'; _G.print = nil; string.upper = nil; task.spawn = nil\n"
           "mods.send('g', _VERSION)\n");
  fx_write(f, "b/manifest.lua", "return {name = 'b', load_order = 2}");
  fx_write(f, "b/mod.lua",
           "assert(shared == nil and ('x'):upper() == 'X' and task.spawn)\n"
           "print('ok')\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  fx_frames(f, 1);
  assert_string_equal(f->out, "[a] a sets\n[b] ok\n");
  assert_int_equal(f->replen, 0);
  fx_free(f);
}

/* print goes through the set with the mod's name; tostring metamethods work. */
static void print_is_prefixed_with_the_mod_name(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "s/mod.lua",
           "print('a', 1, nil, true, setmetatable({}, {__tostring = function() return 'T' end}))");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_string_equal(f->out, "[s] a\t1\tnil\ttrue\tT\n");
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(no_io),
      cmocka_unit_test(os_has_only_time_clock_date_difftime),
      cmocka_unit_test(no_debug),
      cmocka_unit_test(no_package_or_loadlib),
      cmocka_unit_test(globals_are_the_whitelist),
      cmocka_unit_test(load_refuses_binary_chunks),
      cmocka_unit_test(string_dump_is_gone_and_strings_work),
      cmocka_unit_test(string_metatable_tricks_stay_inside_the_mod),
      cmocka_unit_test(load_gives_the_sandbox_environment),
      cmocka_unit_test(files_only_from_the_mods_folder),
      cmocka_unit_test(require_does_not_cache_failures),
      cmocka_unit_test(symlinks_cannot_lead_out),
      cmocka_unit_test(setmetatable_refuses_gc),
      cmocka_unit_test(binding_objects_have_protected_metatables),
      cmocka_unit_test(rewriting_the_libraries_changes_nothing_in_the_binding),
      cmocka_unit_test(an_unloading_mod_reaches_no_loop_or_bus),
      cmocka_unit_test(everything_a_mod_can_reach_is_listed),
      cmocka_unit_test(collectgarbage_allows_only_what_cannot_stall),
      cmocka_unit_test(a_mods_collect_is_served_by_the_pacer_after_the_call),
      cmocka_unit_test(calls_that_could_loop_for_ever_are_bounded),
      cmocka_unit_test(pathological_pattern_ends_with_an_error),
      cmocka_unit_test(coroutine_resume_refuses_task_coroutines),
      cmocka_unit_test(coroutine_resume_refuses_other_threads),
      cmocka_unit_test(task_module_has_no_loop_control),
      cmocka_unit_test(globals_are_per_mod),
      cmocka_unit_test(print_is_prefixed_with_the_mod_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
