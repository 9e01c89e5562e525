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
#include <stdint.h>

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

/* The encoder with all its options, for the simulation's snapshots
   (sim.c) and any caller that encodes often. In: limit, what, payer (as
   luna__copy_encode); root, the start of the paths in messages (NULL: the
   paths start with the first key, "ships[3].x", and read "value" at the
   top); context, how messages say where the value was being copied
   (NULL: "between mods"); classes, 0 or the stack index of a table mapping
   metatables to class numbers 1..255: a table with one of them is encoded
   with its number, and luna__copy_decode_classes and luna__copy_restore
   give it that metatable back; buf and cap, a buffer (or NULL, 0) that the
   encoder reuses and grows. Out: buf and cap (the caller frees buf, even
   after an error), len (the bytes of the value at the start of buf) and
   checksum, a 64-bit hash of the value that does not depend on the order
   lua_next visits pairs in (two equal values have equal checksums however
   their tables were built). Returns LUA_OK or the status with the message
   on top of L. Loop thread of L. */
typedef struct luna__copy_opts {
  size_t limit;
  const char *what;
  const luna__copy_payer *payer;
  const char *root;
  const char *context;
  int classes;
  char *buf;
  size_t cap, len;
  uint64_t checksum;
} luna__copy_opts;

int luna__copy_encode_opts(lua_State *L, int idx, luna__copy_opts *o);

/* Pushes the value that data (made by luna__copy_encode) holds onto L.
   May raise (out of memory). */
void luna__copy_decode(lua_State *L, const char *data, size_t len);

/* luna__copy_decode, giving class tables their metatables from the table
   at `classes` (class number -> metatable; 0: none). May raise. */
void luna__copy_decode_classes(lua_State *L, const char *data, size_t len, int classes);

/* Restores the table that data holds into the table at idx in place: the
   table at idx and every table under it that the snapshot has a table for
   at the same key keep their identity (references scripts hold stay
   valid) and their metatables (class tables get their class's); keys the
   snapshot lacks are removed, other values replaced. A live table reached
   a second time (the same table at two keys, or under itself) is refilled
   once: a later key keeps it when the snapshot has the same bytes there
   (the table was shared when the snapshot was taken), else gets a new
   table, so the result equals the snapshot however the live tables were
   rearranged. Returns 0, or -1 when
   data holds no table or idx is not one. May raise (out of memory). */
int luna__copy_restore(lua_State *L, int idx, const char *data, size_t len, int classes);

/* True when data[0..len) is exactly one well-formed encoded value (a
   table when `table`): bytes from elsewhere, such as an imported
   snapshot, are checked with it before they are decoded. */
bool luna__copy_valid(const char *data, size_t len, bool table);


#endif
