/*
** topics.c: the host's index of subscriptions by topic, so that delivering
** a message costs a hash lookup and the matching subscribers, never a walk
** over every subscription of every mod.
**
** The index is a chained hash table of nodes, one per (topic, mod) pair
** with at least one active subscription, each holding its own copy of the
** topic and the number of the mod's active subscriptions to it. The nodes
** of one topic sit next to each other in their chain, ordered by the mods'
** places in the set (load order), so luna__topics_match lists the
** receiving mods in delivery order by reading one run of a chain. The
** subscriptions themselves (their functions, in the order they were made)
** live in the mod's own state (modlib.c); the index only says which mods to
** visit.
**
** Memory: each node is host memory kept for its mod, so it is charged to
** that mod's cap (luna__mod_charge): its size with malloc's overhead, its
** topic, and four bucket pointers (the table doubles when the nodes
** outnumber the buckets and halves when they fall below a quarter, so it
** has at most four buckets per node past its MIN_BUCKETS). A mod at its
** cap cannot subscribe to a new topic.
**
** The hash is FNV-1a from a per-set seed, so a mod cannot choose topics
** that it knows collide; a chain is also bounded by the caps of the mods
** whose nodes are in it.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mods.h"

struct luna__topic_node {
  luna__topic_node *next;
  luna__mod *mod;
  size_t count; /* the mod's active subscriptions to the topic */
  size_t charge; /* bytes charged to the mod */
  uint64_t hash;
  size_t len;
  char topic[]; /* len bytes and a NUL */
};

#define MIN_BUCKETS 64

static uint64_t hash_of(const luna_mods *set, const char *s, size_t len) {
  uint64_t h = set->topic_seed;
  size_t i;
  for (i = 0; i < len; i++) {
    h ^= (unsigned char)s[i];
    h *= UINT64_C(0x100000001b3);
  }
  return h;
}

static bool same_topic(const luna__topic_node *n, uint64_t hash, const char *s, size_t len) {
  return n->hash == hash && n->len == len && memcmp(n->topic, s, len) == 0;
}

/* Moves every node into a table of `nb` buckets, keeping the order of each
   chain (so the nodes of a topic stay together, in load order). false
   when out of memory (the old table is kept). */
static bool resize(luna_mods *set, size_t nb) {
  luna__topic_node **b = (luna__topic_node **)calloc(nb, sizeof *b);
  size_t i;
  if (b == NULL)
    return false;
  for (i = 0; i < set->nbuckets; i++) {
    luna__topic_node *n = set->buckets[i], *next;
    for (; n != NULL; n = next) {
      luna__topic_node **tail = &b[n->hash & (nb - 1)];
      next = n->next;
      while (*tail != NULL)
        tail = &(*tail)->next;
      n->next = NULL;
      *tail = n;
    }
  }
  free(set->buckets);
  set->buckets = b;
  set->nbuckets = nb;
  return true;
}

/* Where the node of (topic, m) is or would go: the link to change. *found
   gets the node when it exists. */
static luna__topic_node **place(luna_mods *set, const luna__mod *m, uint64_t hash,
                                const char *s, size_t len, luna__topic_node **found) {
  luna__topic_node **link = &set->buckets[hash & (set->nbuckets - 1)];
  bool in_run = false;
  *found = NULL;
  for (; *link != NULL; link = &(*link)->next) {
    luna__topic_node *n = *link;
    if (same_topic(n, hash, s, len)) {
      in_run = true;
      if (n->mod == m) {
        *found = n;
        return link;
      }
      if (n->mod->index > m->index)
        return link; /* before the first later mod of the run */
    } else if (in_run) {
      return link; /* after the run */
    }
  }
  return link;
}

bool luna__topics_add(luna_mods *set, luna__mod *m, const char *topic, size_t len,
                      const char **why) {
  uint64_t hash;
  luna__topic_node **link, *n;
  size_t charge = sizeof *n + len + 1 + LUNA__MALLOC_OVERHEAD + 4 * sizeof(luna__topic_node *);
  *why = "out of memory";
  if (set->nbuckets == 0 && !resize(set, MIN_BUCKETS))
    return false;
  hash = hash_of(set, topic, len);
  link = place(set, m, hash, topic, len, &n);
  if (n != NULL) {
    n->count++;
    return true;
  }
  if (!luna__mod_charge(m, charge)) {
    *why = LUNA__CAP_REACHED;
    return false;
  }
  n = (luna__topic_node *)malloc(sizeof *n + len + 1);
  if (n == NULL) {
    luna__mod_uncharge(m, charge);
    return false;
  }
  n->mod = m;
  n->count = 1;
  n->charge = charge;
  n->hash = hash;
  n->len = len;
  memcpy(n->topic, topic, len);
  n->topic[len] = '\0';
  n->next = *link;
  *link = n;
  if (++set->nnodes > set->nbuckets)
    resize(set, set->nbuckets * 2); /* out of memory: longer chains, still right */
  return true;
}

static void unlink_node(luna_mods *set, luna__topic_node **link) {
  luna__topic_node *n = *link;
  *link = n->next;
  luna__mod_uncharge(n->mod, n->charge);
  free(n);
  set->nnodes--;
}

static void maybe_shrink(luna_mods *set) {
  while (set->nbuckets > MIN_BUCKETS && set->nnodes < set->nbuckets / 4)
    if (!resize(set, set->nbuckets / 2))
      break;
}

void luna__topics_remove(luna_mods *set, luna__mod *m, const char *topic, size_t len) {
  luna__topic_node **link, *n;
  if (set->nbuckets == 0)
    return;
  link = place(set, m, hash_of(set, topic, len), topic, len, &n);
  if (n == NULL || --n->count > 0)
    return;
  unlink_node(set, link);
  maybe_shrink(set);
}

size_t luna__topics_count(luna_mods *set, const luna__mod *m, const char *topic, size_t len) {
  luna__topic_node *n;
  if (set->nbuckets == 0)
    return 0;
  place(set, m, hash_of(set, topic, len), topic, len, &n);
  return n != NULL ? n->count : 0;
}

void luna__topics_forget(luna_mods *set, luna__mod *m) {
  size_t i;
  for (i = 0; i < set->nbuckets; i++) {
    luna__topic_node **link = &set->buckets[i];
    while (*link != NULL) {
      if ((*link)->mod == m)
        unlink_node(set, link);
      else
        link = &(*link)->next;
    }
  }
  maybe_shrink(set);
}

size_t luna__topics_match(luna_mods *set, const char *topic, size_t len, luna__mod **out,
                          size_t cap) {
  uint64_t hash;
  luna__topic_node *n;
  size_t k = 0;
  if (set->nbuckets == 0)
    return 0;
  hash = hash_of(set, topic, len);
  for (n = set->buckets[hash & (set->nbuckets - 1)]; n != NULL; n = n->next) {
    if (same_topic(n, hash, topic, len)) {
      if (k < cap)
        out[k++] = n->mod;
    } else if (k > 0) {
      break; /* the run is over */
    }
  }
  return k;
}

void luna__topics_init(luna_mods *set) {
  uintptr_t a = (uintptr_t)set;
  set->topic_seed = UINT64_C(0xcbf29ce484222325) ^ ((uint64_t)a * UINT64_C(0x9e3779b97f4a7c15)) ^
                    (uint64_t)time(NULL);
}

void luna__topics_free(luna_mods *set) {
  size_t i;
  for (i = 0; i < set->nbuckets; i++) {
    luna__topic_node *n = set->buckets[i], *next;
    for (; n != NULL; n = next) {
      next = n->next; /* (its mod is gone: luna_mods_free frees the mods first) */
      free(n);
    }
  }
  free(set->buckets);
  set->buckets = NULL;
  set->nbuckets = set->nnodes = 0;
}
