/* expect.h — the tests' assertion. defines: failures and checks (counters per test program),
 * check_rank (a multi-rank test sets its rank, which failures then name) and EXPECT(cond, fmt,
 * ...), which counts and reports a failed condition with file:line. */
#ifndef MNT_TEST_EXPECT_H
#define MNT_TEST_EXPECT_H

#include <stdio.h>

static int failures, checks, check_rank = -1;
#define EXPECT(cond, ...)                                                           \
  do {                                                                              \
    checks++;                                                                       \
    if (!(cond)) {                                                                  \
      failures++;                                                                   \
      fprintf(stderr, "FAIL ");                                                     \
      if (check_rank >= 0) fprintf(stderr, "rank %d ", check_rank);                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                               \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fprintf(stderr, "\n");                                                        \
    }                                                                               \
  } while (0)

#endif
