/*
** copy.h: values copied between Lua states as bytes (copy.c). The mods bus
** copies each message with it, a reload the carried state; any two states
** of one process may use it (the bytes never leave the process). It is the
** binding's second seam for the layers above it (with guard.h): src/mods
** and any other layer that moves values between states include it.
**
** What crosses: nil, booleans, integers, floats, strings, and tables whose
** keys are strings, numbers or booleans and whose values are any of these.
** Functions, userdata, threads and table keys of other types are refused;
** so are cycles (a table inside itself), values nested more than 100
** levels and values larger than the caller's limit, each with an error
** naming the caller (`what`) and the path to the value ("value.a[2]"). A
** table reached twice (not a cycle) is copied twice; metatables are not
** copied. Includes only Lua.
*/
#ifndef LUNA_LUA_COPY_H
#define LUNA_LUA_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include <lua.h>

/* Who pays for the host memory a copy takes while it grows: charge(ud, n)
   asks for n more bytes (false refuses, and the copy fails with
   `refused`, after "<what>: "); everything charged is given back with
   uncharge(ud, total) when the copy is done, so the caller charges what it
   keeps. */
typedef struct luna__copy_payer {
  bool (*charge)(void *ud, size_t n);
  void (*uncharge)(void *ud, size_t n);
  void *ud;
  const char *refused;
} luna__copy_payer;

/* Encodes the value at idx of L into a malloc'ed buffer (*data, *len
   bytes) of at most `limit` bytes, in a protected call on L; `payer` may
   be NULL (the host pays). Returns LUA_OK, or the Lua status with the
   error message on top of L and nothing allocated. Loop thread of L. */
int luna__copy_encode(lua_State *L, int idx, size_t limit, const char *what,
                      const luna__copy_payer *payer, char **data, size_t *len);

/* The encoding of the string s[0..len) (len at most UINT32_MAX), in a
   malloc'ed buffer of *out_len bytes; NULL when out of memory. */
char *luna__copy_encode_string(const char *s, size_t len, size_t *out_len);

/* Pushes the value that data (made by luna__copy_encode) holds onto L.
   May raise (out of memory). */
void luna__copy_decode(lua_State *L, const char *data, size_t len);

#endif
