/*
** escape.h: one escaping function for text that untrusted code controls on
** its way to the host's output (a mod's prints, the reports that quote its
** errors, task and chunk names in the task lists). The binding uses it for
** its own reports; src/mods for everything it prints on a mod's behalf.
*/
#ifndef LUNA_LUA_ESCAPE_H
#define LUNA_LUA_ESCAPE_H

#include <stddef.h>

#define LUNA__ESC_KEEP_TAB 1u       /* tabs pass (print's separator) */
#define LUNA__ESC_KEEP_TRACEBACK 2u /* a newline before a tab or "stack traceback:" passes */
/* Copies src[0..len) into dst (cap > 0 bytes, NUL-terminated) with the
   control characters, C1 controls and invalid UTF-8 escaped (escape.c says
   how); stops before an escape or a character that would not fit. Returns
   the bytes written (without the NUL); *used (may be NULL) gets the bytes
   of src consumed. */
size_t luna__escape(char *dst, size_t cap, const char *src, size_t len, unsigned flags,
                    size_t *used);
/* Escapes the NUL-terminated text in buf (cap bytes) in place. */
void luna__escape_in_place(char *buf, size_t cap, unsigned flags);

#endif
