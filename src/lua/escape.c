/*
** escape.c: the one escaping function for text a mod controls on its way to
** the host's output (what it prints, the reports that quote its errors,
** topics, names or folders, the last_error strings a host may print, and
** the task and chunk names of the task lists).
**
** A mod must not be able to write a terminal control sequence or a line
** that looks like one of the host's own: so every byte below 0x20, DEL
** (0x7f), the C1 controls (U+0080-U+009F, which some terminals obey as
** ESC sequences) and every byte that is not part of valid UTF-8 is written
** as an escape: \n, \r, \t, \\x1b ("\x" and two hex digits) for bytes, and
** \u{85} for a C1 control. Valid UTF-8 otherwise passes unchanged, so
** "café" stays readable. A backslash is not doubled: the result is for
** reading, not for decoding, and escaping it again changes nothing.
**
** Two exceptions, asked for by flags: print keeps tabs (its separator),
** and reports keep the line breaks of a Lua traceback, that is a newline
** followed by a tab or by "stack traceback:", and the tabs of such lines
** (Lua writes "...\t(skipping N levels)"). A line kept that way starts
** with a tab or with "stack traceback:", never with "lunaloop:" or two
** spaces, so it cannot pass for a report or a summary line.
*/
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"

static const char traceback_head[] = "stack traceback:";

/* The length of the valid UTF-8 sequence at s (1-4), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t len, i;
  unsigned c = s[0];
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf)
    len = 2;
  else if (c >= 0xe0 && c <= 0xef)
    len = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    len = 4;
  else
    return 0;
  if (n < len)
    return 0;
  for (i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) || /* overlong, surrogate */
      (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))   /* overlong, > U+10FFFF */
    return 0;
  return len;
}

/* True when the newline at s[i] is a line break of a traceback. */
static bool traceback_break(const char *s, size_t i, size_t n) {
  size_t rest = n - i - 1, head = sizeof traceback_head - 1;
  return rest > 0 && (s[i + 1] == '\t' ||
                      (rest >= head && memcmp(s + i + 1, traceback_head, head) == 0));
}

size_t luna__escape(char *dst, size_t cap, const char *src, size_t len, unsigned flags,
                    size_t *used) {
  const unsigned char *s = (const unsigned char *)src;
  size_t i = 0, out = 0;
  bool kept_line = false; /* a kept line break came before: its tabs stay */
  if (cap == 0) {
    if (used != NULL)
      *used = 0;
    return 0;
  }
  while (i < len) {
    char esc[12];
    const char *piece = esc;
    size_t n, take = 1;
    unsigned c = s[i];
    bool keep = (c == '\t' && ((flags & LUNA__ESC_KEEP_TAB) || kept_line)) ||
                (c == '\n' && (flags & LUNA__ESC_KEEP_TRACEBACK) && traceback_break(src, i, len));
    if (keep) {
      piece = src + i;
      n = 1;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      esc[0] = '\\';
      esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
      n = 2;
    } else if (c < 0x20 || c == 0x7f) {
      n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
    } else if ((take = utf8_len(s + i, len - i)) == 0) {
      take = 1;
      n = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
    } else if (take == 2 && c == 0xc2 && s[i + 1] < 0xa0) { /* C1 control */
      n = (size_t)snprintf(esc, sizeof esc, "\\u{%x}", (unsigned)s[i + 1]);
    } else {
      piece = src + i;
      n = take;
    }
    if (out + n >= cap) /* never split an escape or a character */
      break;
    memcpy(dst + out, piece, n);
    out += n;
    i += take;
    kept_line = kept_line || (keep && c == '\n');
  }
  dst[out] = '\0';
  if (used != NULL)
    *used = i;
  return out;
}

void luna__escape_in_place(char *buf, size_t cap, unsigned flags) {
  char tmp[4096];
  size_t n = strlen(buf);
  if (n >= sizeof tmp)
    n = sizeof tmp - 1;
  memcpy(tmp, buf, n);
  luna__escape(buf, cap, tmp, n, flags, NULL);
}
