/*
** host.c: the host's side of the bus (luna_mods_send, luna_mods_send_string
** of lunaloop_mods.h): a value of any Lua state, or a string, copied and
** posted with sender "host". The host's share of the queue is bus.c's;
** refusals go to the set's last_error. Includes mods.h and copy.h.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "mods.h"

/* luna__bus_post from the host: a refusal's reason goes to last_error. */
static int host_post(luna_mods *set, const char *topic, char *data, size_t len) {
  const char *why;
  int rc = luna__bus_post(set, NULL, topic, strlen(topic), data, len, &why);
  if (rc != 0)
    snprintf(set->last_error, sizeof set->last_error, "%s", why);
  return rc;
}

/* The checks both host posts make before copying anything: 0, or the
   error with last_error set. */
static int host_check(luna_mods *set, const char *fname, const char *topic) {
  char buf[96];
  const char *bad = luna__bus_bad_topic(topic, strlen(topic), buf, sizeof buf), *full;
  if (bad != NULL) {
    snprintf(set->last_error, sizeof set->last_error, "%s: %s", fname, bad);
    return LUNA_EINVAL;
  }
  if ((full = luna__bus_full(set, NULL, 0)) != NULL) {
    snprintf(set->last_error, sizeof set->last_error, "%s", full);
    return LUNA_ENOMEM;
  }
  return 0;
}

LUNA_API int luna_mods_send(luna_mods *set, const char *topic, lua_State *L, int idx) {
  char *data = NULL;
  size_t len;
  int st;
  if (set == NULL || topic == NULL || L == NULL)
    return LUNA_EINVAL;
  if (lua_type(L, idx) == LUA_TNONE) {
    snprintf(set->last_error, sizeof set->last_error, "luna_mods_send: no value at index %d",
             idx);
    return LUNA_EINVAL;
  }
  if ((st = host_check(set, "luna_mods_send", topic)) != 0)
    return st;
  st = luna__copy_encode(L, idx, set->cfg.message_limit, "luna_mods_send", NULL, &data, &len);
  if (st != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    snprintf(set->last_error, sizeof set->last_error, "%s", msg != NULL ? msg : "error");
    lua_pop(L, 1);
    return st == LUA_ERRMEM ? LUNA_ENOMEM : LUNA_EINVAL;
  }
  return host_post(set, topic, data, len);
}

LUNA_API int luna_mods_send_string(luna_mods *set, const char *topic, const char *s, size_t len) {
  char *data;
  size_t size;
  int rc;
  if (set == NULL || topic == NULL || (s == NULL && len > 0))
    return LUNA_EINVAL;
  if (len > set->cfg.message_limit || len > UINT32_MAX) {
    snprintf(set->last_error, sizeof set->last_error,
             "luna_mods_send_string: the value is larger than the limit");
    return LUNA_EINVAL;
  }
  if ((rc = host_check(set, "luna_mods_send_string", topic)) != 0)
    return rc;
  data = luna__copy_encode_string(s, len, &size);
  if (data == NULL)
    return LUNA_ENOMEM;
  return host_post(set, topic, data, size);
}
