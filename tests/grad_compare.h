/* grad_compare.h — a slab of parameters (weights or their gradients) against a reference, tensor by
 * tensor: each tensor's error relative to its own largest value and its relative L2 error, so that
 * a wrong gradient of a small tensor (a BN beta, the fc bias, a downsample) is not hidden by the
 * largest values of the whole slab. Used by the GPU step test and checked on the CPU by
 * tests/unit/test_grad_compare.c.
 * defines: grad_cmp (the result), grad_compare. */
#ifndef MNT_TEST_GRAD_COMPARE_H
#define MNT_TEST_GRAD_COMPARE_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "src/model/resnet.h"

typedef struct grad_cmp {
  int bad;                 /* tensors over a tolerance */
  int worst, worst_l2;     /* the tensors with the largest errors of each kind */
  double max_err, max_l2;  /* those errors */
} grad_cmp;

/* got against want over the np tensors ps (offsets into both slabs). A tensor fails when
 *   max |got - want| / max |want|  > tol_max   (tol_max < 0: not checked), or
 *   ||got - want||_2 / ||want||_2  > tol_l2    (tol_l2 < 0: not checked);
 * a NaN anywhere fails. Each failing tensor is named on f (NULL: silent), prefixed with what. */
static inline grad_cmp grad_compare(const float *got, const float *want, const mnt_param *ps, int np, double tol_max,
                                    double tol_l2, const char *what, FILE *f) {
  grad_cmp r = {0, 0, 0, -1, -1};
  for (int i = 0; i < np; i++) {
    const float *g = got + ps[i].off, *w = want + ps[i].off;
    double scale = 0, e = 0, d2 = 0, w2 = 0;
    size_t at = 0;
    int nan = 0;
    for (size_t j = 0; j < ps[i].n; j++) {
      double d = fabs((double)g[j] - (double)w[j]);
      if (isnan(g[j]) || isnan(w[j])) nan = 1;
      scale = fmax(scale, fabs((double)w[j]));
      if (d > e) e = d, at = j;
      d2 += d * d, w2 += (double)w[j] * w[j];
    }
    double rel = nan ? INFINITY : e / (scale > 1e-30 ? scale : 1.0);
    double l2 = nan ? INFINITY : sqrt(d2 / (w2 > 1e-60 ? w2 : 1.0));
    if (!(rel <= r.max_err)) r.max_err = rel, r.worst = i;
    if (!(l2 <= r.max_l2)) r.max_l2 = l2, r.worst_l2 = i;
    int fail = (tol_max >= 0 && !(rel <= tol_max)) || (tol_l2 >= 0 && !(l2 <= tol_l2));
    if (fail) {
      r.bad++;
      if (f)
        fprintf(f, "FAIL: %s: %s: error %.3g of the tensor's scale (tolerance %.3g), relative L2 %.3g (tolerance %.3g); "
                   "element %zu: %g, reference %g\n",
                what, ps[i].name, rel, tol_max, l2, tol_l2, at, (double)g[at], (double)w[at]);
    }
  }
  return r;
}

#endif
