/* gpu_test.h — what the GPU tests share. defines: the one failure counter (expect.h's failures and
 * checks, with EXPECT), gpu_scale_err (the one relative error for a tensor against its reference)
 * and gpu_test_end (the verdict and exit status). */
#ifndef MNT_GPU_TEST_H
#define MNT_GPU_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "tests/expect.h"

/* The error of got against the reference want relative to the tensor's scale:
 *   max_i |got[i] - want[i]|  /  max_i |want[i]|
 * (the scale 1 where want is all zeros, below 1e-30: then the error is absolute). A NaN on one side
 * only is an infinite error; a NaN on both sides is 0 when nan_match (an op that must propagate
 * NaN), else infinite too (a tensor that must be finite). *worst: the index of the largest error. */
static inline double gpu_scale_err(const float *got, const float *want, size_t n, int nan_match, size_t *worst) {
  double scale = 0, e = -1;
  *worst = 0;
  for (size_t i = 0; i < n; i++)
    if (!isnan(want[i])) scale = fmax(scale, fabs((double)want[i]));
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    if (isnan(got[i]) || isnan(want[i])) d = nan_match && isnan(got[i]) && isnan(want[i]) ? 0 : INFINITY;
    if (d > e) {
      e = d;
      *worst = i;
    }
  }
  return n ? e / (scale > 1e-30 ? scale : 1.0) : 0;
}

/* the end of a GPU test: "NAME: ok" and 0, or the number of failures on stderr and 1 */
static inline int gpu_test_end(const char *name) {
  if (failures) {
    if (check_rank >= 0) fprintf(stderr, "rank %d: ", check_rank);
    if (checks) fprintf(stderr, "%s: %d of %d checks failed\n", name, failures, checks);
    else fprintf(stderr, "%s: %d failures\n", name, failures);
    return 1;
  }
  if (checks) printf("%s: ok (%d checks)\n", name, checks);
  else printf("%s: ok\n", name);
  return 0;
}

#endif
