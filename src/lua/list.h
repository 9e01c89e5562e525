/*
** list.h: intrusive doubly linked lists, threaded through `prev` and
** `next` fields of their nodes (the registered task.on/every handles,
** callbacks.c; the pending promises of a state, promise.c). Macros, since
** the nodes are of different types; each is a few pointer writes.
**
** Includes only <stddef.h> (for NULL).
*/
#ifndef LUNA_LUA_LIST_H
#define LUNA_LUA_LIST_H

#include <stddef.h>

/* Unlinks `node` from the list whose first node is *first_p and, when
   last_p is not NULL, whose last node is *last_p (a list kept without its
   last node passes NULL). The node's own links are cleared. */
#define LUNA__LIST_UNLINK(first_p, last_p, node)                               \
  do {                                                                         \
    if ((node)->prev != NULL)                                                  \
      (node)->prev->next = (node)->next;                                       \
    else                                                                       \
      *(first_p) = (node)->next;                                               \
    if ((node)->next != NULL)                                                  \
      (node)->next->prev = (node)->prev;                                       \
    else if ((last_p) != NULL)                                                 \
      *(last_p) = (node)->prev;                                                \
    (node)->prev = (node)->next = NULL;                                        \
  } while (0)

#endif
