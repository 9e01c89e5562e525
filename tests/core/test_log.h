/*
** test_log.h: a log of small integer events, for asserting exact orders in
** the core tests. Loop thread only.
*/
#ifndef TEST_LOG_H
#define TEST_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define LOG_MAX 4096

typedef struct test_log {
  long v[LOG_MAX];
  size_t n;
} test_log;

static test_log g_log;

static inline void log_clear(void) { g_log.n = 0; }

static inline void log_push(long v) {
  if (g_log.n < LOG_MAX)
    g_log.v[g_log.n++] = v;
}

/* Asserts the log holds exactly the n values of `want`, in order. */
#define ASSERT_LOG(...)                                                        \
  do {                                                                         \
    long want_[] = {__VA_ARGS__};                                              \
    size_t wn_ = sizeof want_ / sizeof want_[0], i_;                           \
    if (g_log.n != wn_) {                                                      \
      fprintf(stderr, "log:");                                                 \
      for (i_ = 0; i_ < g_log.n; i_++)                                         \
        fprintf(stderr, " %ld", g_log.v[i_]);                                  \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
    assert_int_equal(g_log.n, wn_);                                            \
    for (i_ = 0; i_ < wn_; i_++)                                               \
      assert_int_equal(g_log.v[i_], want_[i_]);                                \
  } while (0)

#define ASSERT_LOG_EMPTY() assert_int_equal(g_log.n, 0)

/* A luna_fn that logs its arg (an integer cast to a pointer). */
static inline void log_fn(luna_loop *loop, void *arg) {
  (void)loop;
  log_push((long)(intptr_t)arg);
}

#define I2P(i) ((void *)(intptr_t)(i))

#endif
