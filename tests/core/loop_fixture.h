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

static int setup(void **state) {
  static fixture f;
  luna_config c;
  counting_init(&f.ca);
  c = counting_config(&f.ca);
  if (luna_loop_new(&c, &f.loop) != 0)
    return -1;
  log_clear();
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  luna_loop_free(f->loop);
  ASSERT_NO_LEAKS(&f->ca);
  return 0;
}

#endif
