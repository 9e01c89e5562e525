/*
** bus.c: the message bus: the queue of messages waiting, each sender's
** share of it, and their delivery in order. What a message holds is made
** by copy.c; the calls into a receiving mod's subscribers are the `mods`
** module's (modlib.c). Includes mods.h (and through it guard.h).
**
** Delivery: the set's item calls luna__bus_deliver at each run of its
** timing. The messages queued before that moment are delivered in the order
** they were sent; for each message, mods in load order, and within a mod
** its subscriptions in the order they were made. Each subscriber call gets
** its own copy of the value and its own instruction budget; an error in it
** is reported like a failing callback and does not stop the others.
** Messages sent during a delivery wait for the next one. A subscriber call
** also counts toward the mod's time budget of the frame; once a receiving
** mod has spent it (luna__mod_held), the delivery stops at that mod and
** goes on from it at the next frame, so its messages wait for it rather
** than fail.
**
** What a delivery costs: the receiving mods come from the topic index
** (topics.c), so a message costs a hash lookup plus its subscribers,
** whatever other subscriptions exist. A frame does at most LUNA__BUS_STEPS
** steps (taking a message off the queue is one, visiting a subscription
** another); the rest waits for the next frame, in order, from the very
** subscription where it stopped, so a fan-out to more subscribers than
** that spans frames and nothing is dropped. deliver_message is the one
** place that calls into a receiving mod.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mods.h"

#define MAX_QUEUE 65536 /* messages of one sender waiting; past this its send raises */
/* Bytes of one sender waiting, as a multiple of the message limit (64 MiB
   by default): the host has no cap of its own, and a mod's waiting copies
   also count against its cap. */
#define MAX_QUEUE_MESSAGES_OF_LIMIT 64

/* ---- topics -------------------------------------------------------------------------- */

/* Topics are copied into host memory for every message and every
   subscribed mod, so they are short; a NUL would cut the C copy (a send to
   "a\0b" would reach the subscribers of "a"), so it is refused. */
const char *luna__bus_bad_topic(const char *topic, size_t len, char *buf, size_t buflen) {
  const char *nul;
  if (len > LUNA__MAX_TOPIC) {
    snprintf(buf, buflen, "the topic is %zu bytes long (at most %d)", len, LUNA__MAX_TOPIC);
    return buf;
  }
  if ((nul = (const char *)memchr(topic, '\0', len)) != NULL) {
    snprintf(buf, buflen, "the topic has a NUL byte (at byte %zu)", (size_t)(nul - topic) + 1);
    return buf;
  }
  return NULL;
}

/* ---- the queue --------------------------------------------------------------------------- */

/* The queue is a ring of messages in the order they were sent, shared by
   every sender, but each sender (each mod, and the host) has its own
   share: at most MAX_QUEUE messages and MAX_QUEUE_MESSAGES_OF_LIMIT times
   message_limit bytes of its own may wait, so one mod's flood fills only
   its own share and every other sender's posts still succeed. A mod's
   waiting messages (their copies, topics, sender names and ring slots)
   are also charged to its memory cap (luna__mod_charge) until they are
   delivered. */

/* The bytes one message costs the host: its value, its topic and sender
   name (two allocations, with malloc's overhead), and four ring slots: the
   ring doubles when full and is cut back after each delivery to at most
   four slots per waiting message (ring_fit). */
static size_t message_charge(size_t topic_len, size_t from_len, size_t len) {
  return 4 * sizeof(luna__message) + 2 * LUNA__MALLOC_OVERHEAD + topic_len + 1 + from_len + 1 +
         len;
}

const char *luna__bus_full(const luna_mods *set, const luna__mod *sender, size_t len) {
  size_t max_bytes = set->cfg.message_limit * MAX_QUEUE_MESSAGES_OF_LIMIT;
  size_t queued = sender != NULL ? sender->queued : set->host_queued;
  size_t bytes = sender != NULL ? sender->queued_bytes : set->host_queued_bytes;
  if (queued >= MAX_QUEUE)
    return "the bus is full (65536 messages of this sender waiting)";
  if (len > max_bytes || bytes > max_bytes - len)
    return "the bus is full (64 times the message limit in bytes of this sender waiting)";
  return NULL;
}

/* Frees `data`; *why says why the post failed (a static string). */
static int refuse_post(char *data, const char **why, const char *reason) {
  free(data);
  *why = reason;
  return LUNA_ENOMEM;
}

/* Moves the ring into `cap` slots (at least nqueue), one run from slot 0. */
static bool ring_resize(luna_mods *set, size_t cap) {
  luna__message *q = (luna__message *)malloc(cap * sizeof *q);
  size_t i;
  if (q == NULL)
    return false;
  for (i = 0; i < set->nqueue; i++)
    q[i] = set->queue[(set->qhead + i) % set->capqueue];
  free(set->queue);
  set->queue = q;
  set->capqueue = cap;
  set->qhead = 0;
  return true;
}

static bool ring_grow(luna_mods *set) {
  return ring_resize(set, set->capqueue ? set->capqueue * 2 : 16);
}

/* After a delivery: a ring more than four times its use (past a floor of
   RING_KEEP slots, the host's own) is cut to twice its use, so what a
   flood leaves behind is never more than its messages were charged. */
#define RING_KEEP 1024
static void ring_fit(luna_mods *set) {
  size_t cap = 16;
  if (set->capqueue <= RING_KEEP || set->nqueue >= set->capqueue / 4)
    return;
  if (set->nqueue == 0) {
    free(set->queue);
    set->queue = NULL;
    set->qhead = set->capqueue = 0;
    return;
  }
  while (cap < 2 * set->nqueue)
    cap *= 2;
  ring_resize(set, cap); /* out of memory: keep the larger ring */
}

int luna__bus_post(luna_mods *set, luna__mod *sender, const char *topic, size_t topic_len,
                   char *data, size_t len, const char **why) {
  luna__message *msg;
  const char *from = sender != NULL ? sender->man.name : "host";
  size_t from_len = strlen(from), charge = message_charge(topic_len, from_len, len);
  const char *full = luna__bus_full(set, sender, len);
  char *block;
  if (full != NULL)
    return refuse_post(data, why, full);
  if (set->nqueue == set->capqueue && !ring_grow(set))
    return refuse_post(data, why, "out of memory");
  if (sender != NULL && !luna__mod_charge(sender, charge))
    return refuse_post(data, why, LUNA__CAP_REACHED);
  block = (char *)malloc(topic_len + 1 + from_len + 1);
  if (block == NULL) {
    if (sender != NULL)
      luna__mod_uncharge(sender, charge);
    return refuse_post(data, why, "out of memory");
  }
  memcpy(block, topic, topic_len);
  block[topic_len] = '\0';
  memcpy(block + topic_len + 1, from, from_len + 1);
  msg = &set->queue[(set->qhead + set->nqueue) % set->capqueue];
  msg->sender = sender;
  msg->topic = block;
  msg->topic_len = topic_len;
  msg->from = block + topic_len + 1;
  msg->data = data;
  msg->len = len;
  msg->charge = charge;
  set->nqueue++;
  if (sender != NULL) {
    sender->queued++;
    sender->queued_bytes += len;
  } else {
    set->host_queued++;
    set->host_queued_bytes += len;
  }
  return 0;
}

/* Frees a message taken off the queue and gives its sender's share and
   charge back. */
static void release(luna_mods *set, luna__message *msg) {
  if (msg->sender != NULL) {
    msg->sender->queued--;
    msg->sender->queued_bytes -= msg->len;
    luna__mod_uncharge(msg->sender, msg->charge);
  } else {
    set->host_queued--;
    set->host_queued_bytes -= msg->len;
  }
  free(msg->topic); /* and the sender's name, in the same block */
  free(msg->data);
}

void luna__bus_clear(luna_mods *set) {
  while (set->nqueue > 0) {
    release(set, &set->queue[set->qhead]);
    set->qhead = (set->qhead + 1) % set->capqueue;
    set->nqueue--;
  }
  free(set->queue);
  set->queue = NULL;
  set->qhead = set->capqueue = 0;
  set->cursor.active = false;
  free(set->match);
  set->match = NULL;
  set->capmatch = 0;
}

/* ---- delivery ----------------------------------------------------------------------------- */

/* Delivers the message to the mods that subscribe to its topic, in load
   order, from where the last frame's delivery stopped. false when the
   frame's steps ran out first (the cursor says where to go on). */
static bool deliver_message(luna_mods *set, const luna__message *msg, size_t *steps) {
  size_t j, k;
  if (!set->cursor.active) {
    (*steps)++; /* taking the message is a step, whoever receives it */
    set->cursor.active = true;
    set->cursor.index = 0;
    set->cursor.resume = false;
  }
  /* The receivers, collected before any of them runs (a subscriber may
     subscribe or remove, changing the index). */
  k = luna__topics_match(set, msg->topic, msg->topic_len, set->match, set->capmatch);
  for (j = 0; j < k; j++) {
    luna__mod *m = set->match[j];
    luna__delivery c;
    if (m->index < set->cursor.index)
      continue; /* delivered in an earlier frame */
    if (luna__mod_held(m)) {
      /* Its time for the frame is spent: the message waits for it, from
         this very mod on (and the later messages wait for every mod). */
      if (m->index != set->cursor.index)
        set->cursor.resume = false;
      set->cursor.index = m->index;
      return false;
    }
    memset(&c, 0, sizeof c);
    c.msg = msg;
    c.steps = steps;
    if (set->cursor.resume && m->index == set->cursor.index) {
      set->cursor.resume = false;
      if (m->loads != set->cursor.loads)
        continue; /* the instance it was delivered to is gone */
      c.resume = true;
      c.pos = set->cursor.pos;
      c.n = set->cursor.n;
    }
    set->cursor.resume = false;
    if (m->state != LUNA_MOD_LOADED || m->L == NULL || m->disable_pending)
      continue;
    if (!luna__mod_pcall(m, luna__deliver_to_subscribers, &c, false))
      luna__mods_report(set, m->man.name, "message '%s' from '%s' not delivered: %s",
                        msg->topic, msg->from, m->last_error);
    else if (c.paused) {
      set->cursor.index = m->index;
      set->cursor.loads = m->loads;
      set->cursor.pos = c.pos;
      set->cursor.n = c.n;
      set->cursor.resume = true;
      return false;
    }
    set->cursor.index = m->index + 1;
  }
  set->cursor.active = false;
  return true;
}

void luna__bus_deliver(luna_mods *set) {
  size_t steps = 0, todo = set->nqueue; /* messages sent meanwhile wait */
  if (set->capmatch < set->nmods) {
    luna__mod **p = (luna__mod **)realloc(set->match, set->nmods * sizeof *p);
    if (p == NULL)
      return; /* out of memory: the messages wait for the next frame */
    set->match = p;
    set->capmatch = set->nmods;
  }
  while (todo > 0 && steps < LUNA__BUS_STEPS) {
    luna__message msg = set->queue[set->qhead]; /* the ring may grow (move) meanwhile */
    if (!deliver_message(set, &msg, &steps))
      break;
    set->qhead = (set->qhead + 1) % set->capqueue;
    set->nqueue--;
    todo--;
    release(set, &msg);
  }
  ring_fit(set);
}
