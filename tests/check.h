/* check.h — the unit tests' assertion. defines: failures (a counter per test program) and
 * EXPECT(cond, fmt, ...), which counts and reports a failed condition with file:line. */
#ifndef MNT_TEST_CHECK_H
#define MNT_TEST_CHECK_H

#include <stdio.h>

static int failures;
#define EXPECT(cond, ...)                                  \
  do {                                                     \
    if (!(cond)) {                                         \
      failures++;                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
    }                                                      \
  } while (0)

#endif
