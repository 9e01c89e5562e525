/*
** tsan_lua.c: linked into the tests that run Lua under ThreadSanitizer.
**
** Debian's liblua5.4 is built with _FORTIFY_SOURCE, so every Lua error and
** every yield across a C function leaves through __longjmp_chk, which the
** TSan runtime (GCC 12) does not intercept. TSan then never sees the jump:
** its shadow call stack keeps the frames of the instrumented functions the
** jump left (task.await, luaL_error callers, ...), grows with every await,
** and the allocation stacks it records grow with it, until the process runs
** out of memory within seconds. Defining __longjmp_chk in the executable
** (liblua's reference binds to it) and forwarding to longjmp, which TSan
** does intercept, keeps its shadow stack in step with the real one. The
** only thing lost is glibc's check that the jump goes up the stack.
*/
#include <setjmp.h>

/* Default visibility: the build hides symbols, and this one must be in the
   executable's dynamic symbol table for liblua's reference to bind to it. */
__attribute__((visibility("default"))) void __longjmp_chk(jmp_buf env, int val);
void __longjmp_chk(jmp_buf env, int val) {
  longjmp(env, val);
}
