/*
** test_hostile_files.c: what a hostile mod's folder and names can do to the
** host before (and beside) any of its Lua code: files that lead out of the
** folder or would block a read, folders that would make the watcher walk
** for ever, names that race another mod's, and control characters that
** would forge report lines or reach the terminal. Every test here ends by
** freeing the set and the loop; ASan checks that nothing leaked. An alarm
** guards the tests whose failure mode is a host that never returns.
*/
#include "mods_util.h"

/* A test that hangs is killed by SIGALRM, so ctest reports a failure. */
#define GUARD_SECONDS 60

static void fx_symlink(fixture *f, const char *target, const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", f->dir, rel);
  assert_int_equal(symlink(target, path), 0);
}

static void fx_mkfifo(fixture *f, const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", f->dir, rel);
  assert_int_equal(mkfifo(path, 0644), 0);
}

static void fx_mkdir(fixture *f, const char *rel) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", f->dir, rel);
  assert_int_equal(mkdir(path, 0755), 0);
}

static int count(const char *buf, const char *text) {
  int n = 0;
  while ((buf = strstr(buf, text)) != NULL) {
    n++;
    buf += strlen(text);
  }
  return n;
}

/* ---- files ---------------------------------------------------------------------------- */

/* manifest.lua was read with a plain fopen, without the containment that
   mod.lua had: as a symbolic link it read any file, so an outside Lua file
   was accepted as the manifest, and a parse error quoted the content of
   whatever it pointed at. Now every file of a mod's folder is read through
   the same check: a link leading out is refused before a byte is read. */
static void manifest_symlink_out_of_the_folder_is_refused(void **state) {
  fixture *f = fx_new(NULL);
  char outside[512];
  (void)state;
  fx_write(f, "outside/manifest.lua", "return {name = 'stolen'}");
  fx_write(f, "outside/secret.txt", "hunter2 token");
  fx_mkdir(f, "m");
  fx_mkdir(f, "s");
  fx_mkdir(f, "ok");
  snprintf(outside, sizeof outside, "%s/outside/manifest.lua", f->dir);
  fx_symlink(f, outside, "m/manifest.lua");
  fx_write(f, "m/mod.lua", "print('m runs')");
  snprintf(outside, sizeof outside, "%s/outside/secret.txt", f->dir);
  fx_symlink(f, outside, "s/manifest.lua");
  fx_write(f, "s/mod.lua", "print('s runs')");
  fx_write(f, "ok/real.lua", "return {name = 'inside'}");
  fx_symlink(f, "real.lua", "ok/manifest.lua"); /* a link inside the folder is fine */
  fx_write(f, "ok/mod.lua", "print('inside runs')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_int_equal(luna_mods_find(f->set, "stolen", NULL), LUNA_ENOENT);
  assert_int_equal(fx_info(f, "m").state, LUNA_MOD_FAILED);
  assert_int_equal(fx_info(f, "s").state, LUNA_MOD_FAILED);
  assert_has(f->rep, "m: not loaded: cannot read manifest.lua: it leads out of the mod's folder or to nothing\n");
  assert_has(f->rep, "s: not loaded: cannot read manifest.lua: it leads out of the mod's folder or to nothing\n");
  assert_lacks(f->rep, "hunter2");
  assert_string_equal(f->out, "[inside] inside runs\n");
  fx_free(f);
}

/* require checked whether a module's file exists with stat, which follows
   links: a link in the folder to an outside path gave "module not found"
   when nothing was there and "leads out" when a file was (and the reader
   itself said "a symbolic link to nothing"), so a mod could probe the
   host's file system. Both are now the same refusal. */
static void require_does_not_tell_whether_an_outside_file_exists(void **state) {
  fixture *f = fx_new(NULL);
  char outside[512];
  (void)state;
  fx_write(f, "outside/there.lua", "return 1");
  fx_mkdir(f, "p");
  snprintf(outside, sizeof outside, "%s/outside/there.lua", f->dir);
  fx_symlink(f, outside, "p/there.lua");
  snprintf(outside, sizeof outside, "%s/outside/missing.lua", f->dir);
  fx_symlink(f, outside, "p/missing.lua");
  fx_write(f, "p/mod.lua",
           "local _, a = pcall(require, 'there')\n"
           "local _, b = pcall(require, 'missing')\n"
           "print((a:gsub('there', 'X')) == (b:gsub('missing', 'X')), a)");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  luna_loop_frame_ns(f->loop, 1000000);
  assert_has(f->out, "[p] true\trequire: cannot read 'there.lua': it leads out of the mod's "
                    "folder or to nothing\n");
  assert_lacks(f->out, "not found");
  fx_free(f);
}

/* A FIFO named manifest.lua or mod.lua, a module that is a FIFO, and a
   manifest that links to /dev/stdin each blocked the host at load, before
   any budget applied. Files are now opened without blocking and must be
   regular files: each such mod fails with a reason, the others load. */
static void fifo_or_device_files_do_not_block_the_host(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  alarm(GUARD_SECONDS);
  fx_mkdir(f, "a");
  fx_mkfifo(f, "a/manifest.lua");
  fx_write(f, "a/mod.lua", "print('a runs')");
  fx_mkdir(f, "b");
  fx_mkfifo(f, "b/mod.lua");
  fx_write(f, "c/mod.lua", "print(pcall(require, 'm'))");
  fx_mkfifo(f, "c/m.lua");
  fx_mkdir(f, "d");
  fx_symlink(f, "/dev/stdin", "d/manifest.lua");
  fx_write(f, "d/mod.lua", "print('d runs')");
  fx_write(f, "e/mod.lua", "print(pcall(dofile, 'zero.lua'))");
  fx_symlink(f, "/dev/zero", "e/zero.lua");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  alarm(0);
  assert_has(f->rep, "a: not loaded: cannot read manifest.lua: not a regular file\n");
  assert_has(f->rep, "b: failed to load: mod.lua: cannot read 'mod.lua': not a regular file");
  assert_has(f->out, "[c] false\trequire: cannot read 'm.lua': not a regular file\n");
  assert_has(f->rep, "d: not loaded: cannot read manifest.lua: it leads out of the mod's folder or to nothing\n");
  assert_has(f->out, "[e] false\tdofile: cannot read 'zero.lua': it leads out of the mod's folder or to nothing\n");
  assert_int_equal(fx_info(f, "c").state, LUNA_MOD_LOADED);
  fx_free(f);
}

/* The watcher followed symbolic links to folders, so a folder of k links
   to "." (and no file) was walked k^8 times: k = 12 never finished
   loading. It no
   longer follows them, and it bounds what it looks at (8 levels, 1024
   folders, 4096 files) with a report when a mod's folder is beyond that;
   changes inside the bounds are still seen. */
static void symlink_loop_folder_is_walked_once_and_bounds_are_reported(void **state) {
  fixture *f = fx_new(NULL);
  char rel[256];
  int i;
  (void)state;
  alarm(GUARD_SECONDS);
  fx_write(f, "loop/mod.lua", "print('loop runs')");
  fx_mkdir(f, "loop/sub"); /* no file in it: only the walk's bounds could stop it */
  for (i = 0; i < 12; i++) {
    snprintf(rel, sizeof rel, "loop/sub/l%d", i);
    fx_symlink(f, ".", rel);
  }
  strcpy(rel, "deep/mod.lua");
  fx_write(f, rel, "print('deep runs')");
  strcpy(rel, "deep");
  for (i = 0; i < 10; i++) {
    strcat(rel, "/d");
    fx_mkdir(f, rel);
  }
  strcat(rel, "/x.lua");
  fx_write(f, rel, "return 1");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), 0);
  assert_int_equal(fx_poll(f), 0);
  alarm(0);
  assert_has(f->out, "[loop] loop runs\n");
  assert_has(f->rep, "deep: its folder is larger than the watcher looks at (8 levels, 1024 "
                     "folders, 4096 files, 16384 entries): changes past that are not seen\n");
  assert_lacks(f->rep, "loop: its folder is larger");
  /* reported once, not at every check */
  assert_int_equal(count(f->rep, "its folder is larger"), 1);
  /* a size change is seen whatever the clock's resolution */
  fx_write(f, "loop/mod.lua", "print('loop again')");
  assert_int_equal(fx_poll(f), 1);
  assert_has(f->out, "[loop] loop again\n");
  fx_free(f);
}

/* ---- names ------------------------------------------------------------------------------ */

/* Two mods that declared the same name raced: the folder listed first
   won, and the dependents of the real one then ran against the impostor
   or failed. Now every mod that claims a taken name is refused, with a
   message naming both folders, and so are its dependents; renaming one of
   them brings both back at the next check. */
static void duplicate_names_are_refused_for_every_claimant(void **state) {
  fixture *f = fx_new(NULL);
  char want[1024];
  (void)state;
  fx_write(f, "core/manifest.lua", "return {name = 'core'}");
  fx_write(f, "core/mod.lua", "print('the real core')");
  fx_write(f, "fake/manifest.lua", "return {name = 'core'}");
  fx_write(f, "fake/mod.lua", "print('the fake core')");
  fx_write(f, "hud/manifest.lua", "return {name = 'hud', depends = {'core'}}");
  fx_write(f, "hud/mod.lua", "print('hud')");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_string_equal(f->out, "");
  snprintf(want, sizeof want,
           "core: not loaded: the name 'core' is claimed by the mods in %s/core and in %s/fake: "
           "rename all but one\n", f->dir, f->dir);
  assert_has(f->rep, want);
  snprintf(want, sizeof want,
           "core: not loaded: the name 'core' is claimed by the mods in %s/fake and in %s/core: "
           "rename all but one\n", f->dir, f->dir);
  assert_has(f->rep, want);
  assert_has(f->rep, "hud: not loaded: it depends on 'core', which failed to load\n");
  /* a third claimant loaded on its own is refused too */
  fx_write(f, "third/manifest.lua", "return {name = 'core'}");
  fx_write(f, "third/mod.lua", "print('third')");
  snprintf(want, sizeof want, "%s/third", f->dir);
  assert_int_equal(luna_mods_load(f->set, want), LUNA_EINVAL);
  assert_int_equal(luna_mods_reload(f->set, "core"), LUNA_EINVAL);
  assert_string_equal(f->out, "");
  /* renaming the impostors brings the real core back, then its dependent */
  fx_write(f, "fake/manifest.lua", "return {name = 'fake'}");
  fx_write(f, "third/manifest.lua", "return {name = 'third'}");
  fx_poll(f);
  fx_poll(f);
  assert_has(f->out, "[core] the real core\n");
  assert_has(f->out, "[fake] the fake core\n");
  assert_has(f->out, "[hud] hud\n");
  fx_free(f);
}

/* A name or a version could hold anything: ".." was accepted as a name (a
   host that keeps a file per mod name would write outside its folder) and
   a version with a newline forged a line of the summary. Names are 1-64
   letters, digits, '_', '-', '.', starting with a letter, a digit or '_',
   and not "host" (the sender of the host's messages); versions are 1-64
   letters, digits, '.', '-', '+', '_', '~'. */
static void names_and_versions_are_checked(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "a/manifest.lua", "return {name = '..'}");
  fx_write(f, "b/manifest.lua", "return {name = 'host'}");
  fx_write(f, "c/manifest.lua", "return {name = 'x/y'}");
  fx_write(f, "d/manifest.lua", "return {name = 'd', version = '1.0\\n  core 1.0.0: loaded'}");
  fx_write(f, "e/manifest.lua", "return {name = 'e', depends = {'.'}}");
  fx_write(f, "f/manifest.lua", "return {name = 'f', version = '1.0.0-rc.1+build~2_x'}");
  fx_write(f, "-g/mod.lua", "print('g')");
  fx_write(f, "a/mod.lua", "print('a')");
  fx_write(f, "b/mod.lua", "print('b')");
  fx_write(f, "c/mod.lua", "print('c')");
  fx_write(f, "d/mod.lua", "print('d')");
  fx_write(f, "e/mod.lua", "print('e')");
  fx_write(f, "f/mod.lua", "print(mods.version)");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_string_equal(f->out, "[f] 1.0.0-rc.1+build~2_x\n");
  assert_has(f->rep, "a: not loaded: manifest.lua: name must be 1-64 letters, digits, '_', '-' "
                     "or '.', starting with a letter, a digit or '_', and not 'host'\n");
  assert_has(f->rep, "b: not loaded: manifest.lua: name must be");
  assert_has(f->rep, "c: not loaded: manifest.lua: name must be");
  assert_has(f->rep, "d: not loaded: manifest.lua: version must be 1-64 letters, digits, '.', "
                     "'-', '+', '_' or '~'\n");
  assert_has(f->rep, "e: not loaded: manifest.lua: depends[1] must be a mod name\n");
  assert_has(f->rep, "-g: not loaded: the folder name is not a valid mod name");
  fx_free(f);
}

/* Folder names, error messages and prints with newlines or ESC forged
   report lines ("lunaloop: mod 'core': ...") and sent terminal escapes.
   What a mod prints and what a report quotes from it now passes one
   escaping function: control characters become \n, \t, \x1b..., C1
   controls \u{9b}, invalid UTF-8 \xff; tabs stay in print, the line breaks
   of a traceback stay in reports, valid UTF-8 stays as it is. */
static void control_characters_are_escaped_in_reports_and_print(void **state) {
  fixture *f = fx_new(NULL);
  (void)state;
  fx_write(f, "bad\nlunaloop: mod 'core': disabled\x1b[2J/mod.lua", "print('never')");
  fx_write(f, "p/mod.lua",
           "print('a\\nb', 'c\\27[31md\\r', 'caf\\u{e9}', '\\u{9b}x', '\\xff', '\\0end')\n"
           "task.spawn(function() error('x\\nlunaloop: mod \\'core\\': forged\\27[0m', 0) end)\n"
           "task.spawn(function() error('deep') end)\n");
  assert_int_equal(luna_mods_load_dir(f->set, f->dir), LUNA_EINVAL);
  assert_string_equal(f->out,
                      "[p] a\\nb\tc\\x1b[31md\\r\tcaf\xc3\xa9\t\\u{9b}x\t\\xff\t\\x00end\n");
  assert_has(f->rep, "bad\\nlunaloop: mod 'core': disabled\\x1b[2J: not loaded: the folder name "
                     "is not a valid mod name");
  assert_has(f->rep, "p: task p/mod.lua:2 failed: x\\nlunaloop: mod 'core': forged\\x1b[0m\n");
  /* a traceback keeps its lines */
  assert_has(f->rep, "p: task p/mod.lua:3 failed: p/mod.lua:3: deep\nstack traceback:\n\t");
  assert_null(strchr(f->rep, '\x1b'));
  assert_null(strchr(f->out, '\x1b'));
  assert_lacks(f->rep, "\nlunaloop:");
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(manifest_symlink_out_of_the_folder_is_refused),
      cmocka_unit_test(require_does_not_tell_whether_an_outside_file_exists),
      cmocka_unit_test(fifo_or_device_files_do_not_block_the_host),
      cmocka_unit_test(symlink_loop_folder_is_walked_once_and_bounds_are_reported),
      cmocka_unit_test(duplicate_names_are_refused_for_every_claimant),
      cmocka_unit_test(names_and_versions_are_checked),
      cmocka_unit_test(control_characters_are_escaped_in_reports_and_print),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
