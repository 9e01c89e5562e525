/*
** loop_fixture.h: the cmocka fixture most core tests share: a loop on a
** counting allocator, created before each test and freed after it, with a
** check that nothing leaked. Tests reach it as `fixture *f = *state`.
*/
#ifndef LUNA_TEST_LOOP_FIXTURE_H
#define LUNA_TEST_LOOP_FIXTURE_H

#include "counting_alloc.h"
#include "lunaloop.h"
#include "test_log.h"

typedef struct fixture {
  counting_alloc ca;
  luna_loop *loop;
} fixture;

/* The fixture with `realtime` (may be NULL) as the loop's realtime source. */
static int setup_with_realtime(void **state, luna_time_fn realtime) {
  static fixture f;
  luna_config c;
  counting_init(&f.ca);
  c = counting_config(&f.ca);
  c.realtime = realtime;
  if (luna_loop_new(&c, &f.loop) != 0)
    return -1;
  log_clear();
  *state = &f;
  return 0;
}

static inline int setup(void **state) {
  return setup_with_realtime(state, NULL);
}

static int teardown(void **state) {
  fixture *f = *state;
  luna_loop_free(f->loop);
  ASSERT_NO_LEAKS(&f->ca);
  return 0;
}

#endif
