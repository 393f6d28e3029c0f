/* test_grad_compare.c — the tensor-by-tensor comparison the GPU step test uses (tests/grad_compare.h),
 * on the CPU: one ResNet-18 step's gradients against themselves pass; the same with one small
 * tensor's gradient wrong by half (fc.bias, a BN beta) fail, naming that tensor and no other, where
 * a comparison against the largest value of the whole slab (what the GPU test did before) passes. */
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/log.h"
#include "src/model/resnet.h"
#include "tests/expect.h"
#include "tests/grad_compare.h"

/* the error of the whole slab against its largest value */
static double slab_err(const float *got, const float *want, size_t n) {
  double scale = 0, e = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i])), e = fmax(e, fabs((double)got[i] - want[i]));
  return e / scale;
}

static void wrong_by_half(const mnt_resnet *r, const float *g, const char *name) {
  const mnt_param *p = mnt_resnet_find(r, name, NULL);
  EXPECT(p != NULL, "no tensor %s", name);
  if (!p) return;
  float *bad = malloc(r->nw * sizeof *bad);
  memcpy(bad, g, r->nw * sizeof *bad);
  for (size_t j = 0; j < p->n; j++) bad[p->off + j] *= 1.5f;
  const double tol = 1e-2; /* the GPU test's fp32 gradient tolerance */
  grad_cmp c = grad_compare(bad, g, r->params, r->nparams, tol, -1, name, NULL);
  EXPECT(c.bad == 1 && !strcmp(r->params[c.worst].name, name),
         "%s's gradient wrong by half: %d tensors fail, the worst %s (want 1: %s)", name, c.bad,
         r->params[c.worst].name, name);
  double whole = slab_err(bad, g, r->nw);
  EXPECT(whole <= 5 * tol, "%s: the whole-slab comparison was expected to miss it (error %.3g of the slab's scale)",
         name, whole);
  printf("%s wrong by half: caught tensor by tensor (error %.3g of its scale); the whole slab's error %.3g "
         "(under %.3g: missed)\n", name, c.max_err, whole, 5 * tol);
  free(bad);
}

int main(void) {
  mnt_backend *be;
  mnt_resnet *r;
  const int size = 32, batch = 4;
  if (mnt_backend_create("cpu", NULL, &be) != MNT_OK) return 1;
  if (mnt_resnet_create(be, "resnet18", 10, size, batch, 7, 0, &r) != MNT_OK) return 1;
  size_t nx = (size_t)batch * 3 * size * size;
  float *x = malloc(nx * sizeof *x);
  int32_t y[4] = {1, 3, 5, 7};
  uint64_t s = 5;
  for (size_t i = 0; i < nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  EXPECT(mnt_resnet_forward(r, x, 1) == MNT_OK && mnt_resnet_loss(r, y, batch, 1) == MNT_OK &&
             mnt_resnet_backward(r) == MNT_OK,
         "a training step failed: %s", mnt_last_error());
  float *g = malloc(r->nw * sizeof *g);
  memcpy(g, r->g, r->nw * sizeof *g);
  grad_cmp same = grad_compare(g, g, r->params, r->nparams, 0, 0, "itself", stderr);
  EXPECT(same.bad == 0 && same.max_err == 0 && same.max_l2 == 0, "a gradient against itself: %d tensors fail", same.bad);
  wrong_by_half(r, g, "fc.bias");
  wrong_by_half(r, g, "layer3.1.bn2.bias");
  free(g);
  free(x);
  mnt_resnet_destroy(r);
  mnt_backend_destroy(be);
  if (failures) {
    fprintf(stderr, "test_grad_compare: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("test_grad_compare: ok (%d checks)\n", checks);
  return 0;
}
