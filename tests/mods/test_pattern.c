/*
** test_pattern.c: the bounded pattern matcher of mods (src/mods/pattern.c).
** A pathological pattern ran for minutes inside one string.find call,
** where no budget could stop it; the mods' matcher counts its steps. It is
** written from the manual's rules, so a differential test checks it
** against the stock string functions on random patterns and subjects
** (results and error messages alike). test_sandbox.c checks that the
** bounded functions are the ones a mod reaches, also through the string
** metatable.
*/
#include "mods_util.h"

#include "mods.h"

/* Random patterns (atoms, quantifiers, anchors, captures, sets, %b, %f,
   back references, malformed ones) and subjects over a small alphabet;
   every call made through pcall on both sides, results compared. */
static const char differential_lua[] =
    "local stock, bounded, seed, rounds = ...\n"
    "math.randomseed(seed)\n"
    "local atoms = {'a', 'b', '.', '%a', '%d', '%s', '%w', '%A', '%%', '%.', '[ab]',\n"
    "  '[^a]', '[a-c]', '[%d_]', '[]]', '[^]a]', '[a-]', '%b()', '%bab', '%f[%w]',\n"
    "  '%f[%W]', '(', ')', '()', '%1', '%2', '%0', 'x', '-', '^', '$', '%', '[', '%b',\n"
    "  '%f', '%fa', '[%', '(a)', '(.-)', '(%a+)'}\n"
    "local quants = {'', '', '', '*', '+', '-', '?'}\n"
    "local chars = {'a', 'b', 'c', '(', ')', ' ', '1', '_', 'x', '-', '%', ']', '^', '$', '\\0'}\n"
    "local function pattern()\n"
    "  local t = {}\n"
    "  if math.random() < 0.2 then t[#t + 1] = '^' end\n"
    "  for _ = 1, math.random(0, 6) do\n"
    "    t[#t + 1] = atoms[math.random(#atoms)] .. quants[math.random(#quants)]\n"
    "  end\n"
    "  if math.random() < 0.2 then t[#t + 1] = '$' end\n"
    "  return table.concat(t)\n"
    "end\n"
    "local function subject()\n"
    "  local t = {}\n"
    "  for _ = 1, math.random(0, 14) do t[#t + 1] = chars[math.random(#chars)] end\n"
    "  return table.concat(t)\n"
    "end\n"
    "local function show(r)\n"
    "  local t = {}\n"
    "  for i = 1, r.n do t[i] = math.type(r[i]) and math.type(r[i]) .. ':' .. tostring(r[i])\n"
    "                       or type(r[i]) .. ':' .. tostring(r[i]) end\n"
    "  return table.concat(t, ' | ')\n"
    "end\n"
    "local function all(gmatch, s, p, init)\n"
    "  local out = {}\n"
    "  for a, b, c in gmatch(s, p, init) do\n"
    "    out[#out + 1] = tostring(a) .. ',' .. tostring(b) .. ',' .. tostring(c)\n"
    "    if #out > 40 then break end\n"
    "  end\n"
    "  return table.concat(out, ';')\n"
    "end\n"
    "local repls = {'<%0>', '%1', '%%', '[%2]', 'x%', '%x', 7, {a = 'A', ab = false, ['('] = 3},\n"
    "  function(...) return select('#', ...) .. (...) end, function() return false end}\n"
    "local checked = 0\n"
    "local function same(what, f1, f2, ...)\n"
    "  local r1 = table.pack(pcall(f1, ...))\n"
    "  local r2 = table.pack(pcall(f2, ...))\n"
    "  local a, b = show(r1), show(r2)\n"
    "  if a ~= b then\n"
    "    error(string.format('%s(%q, %q, %s, %s):\\n  stock:   %s\\n  bounded: %s', what,\n"
    "      (...), (select(2, ...)), tostring((select(3, ...))), tostring((select(4, ...))), a, b), 0)\n"
    "  end\n"
    "  checked = checked + 1\n"
    "end\n"
    "for _ = 1, rounds do\n"
    "  local s, p, init = subject(), pattern(), math.random(-16, 16)\n"
    "  same('find', stock.find, bounded.find, s, p)\n"
    "  same('find', stock.find, bounded.find, s, p, init)\n"
    "  same('find', stock.find, bounded.find, s, p, init, true)\n"
    "  same('match', stock.match, bounded.match, s, p, init)\n"
    "  same('gmatch', function(...) return all(stock.gmatch, ...) end,\n"
    "       function(...) return all(bounded.gmatch, ...) end, s, p, init)\n"
    "  local r = repls[math.random(#repls)]\n"
    "  same('gsub', stock.gsub, bounded.gsub, s, p, r)\n"
    "  same('gsub', stock.gsub, bounded.gsub, s, p, r, math.random(-1, 3))\n"
    "end\n"
    "return checked\n";

static void matcher_agrees_with_the_stock_string_functions(void **state) {
  lua_State *L = luaL_newstate();
  (void)state;
  luaL_openlibs(L);
  assert_int_equal(luaL_loadstring(L, differential_lua), LUA_OK);
  lua_getglobal(L, "string");
  lua_newtable(L);
  luna__pattern_install(L, NULL);
  lua_pushinteger(L, 20260101);
  lua_pushinteger(L, 20000);
  if (lua_pcall(L, 4, 1, 0) != LUA_OK)
    fail_msg("%s", lua_tostring(L, -1));
  assert_int_equal(lua_tointeger(L, -1), 7 * 20000);
  lua_close(L);
}

/* The steps of the matcher are charged to the run's instruction count:
   a loop of calls that each cost thousands of steps and a few
   instructions is stopped by the instruction budget. */
static void pattern_steps_count_against_the_instruction_budget(void **state) {
  luna_mods_config c;
  fixture *f;
  (void)state;
  c = fx_config();
  c.instruction_limit = 100000;
  f = fx_new(&c);
  /* Each call takes about 10,000 steps (two at each of 5,000 places) and
     a few instructions: ten of them are the budget's worth. */
  fx_write(f, "p/mod.lua", "local s = ('a'):rep(5000)\n"
                           "for i = 1, 1000 do s:find('[b]') end\n");
  luna_mods_load_dir(f->set, f->dir);
  fx_frames(f, 1);
  assert_has(f->rep, "p: task main failed: p/mod.lua:2: instruction budget exceeded");
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matcher_agrees_with_the_stock_string_functions),
      cmocka_unit_test(pattern_steps_count_against_the_instruction_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
