/* test_determinism.c — the same seed, data and thread count give bit-identical weights after a
 * few training steps (DESIGN: deterministic by default on CPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"
#include "model/resnet.h"
#include "optim.h"

static int train(mnt_backend *be, float **w_out, size_t *n_out) {
  mnt_resnet *r;
  int batch = 8, size = 32;
  if (mnt_resnet_create(be, "resnet8", 10, size, batch, 7, 0, &r)) return 1;
  size_t nx = (size_t)batch * 3 * size * size;
  float *x = malloc(nx * sizeof *x);
  int32_t y[8];
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  for (int i = 0; i < batch; i++) y[i] = i % 10;
  mnt_sgd_cfg cfg = {.base_lr = 0.1, .global_batch = 256, .epochs = 1, .momentum = 0.9, .weight_decay = 1e-4};
  for (int k = 0; k < 3; k++) {
    if (mnt_resnet_forward(r, x, 1)) return 1;
    mnt_resnet_loss(r, y, NULL, NULL);
    if (mnt_resnet_backward(r)) return 1;
    mnt_sgd_update(r, &cfg, 0.05, k == 0);
  }
  *n_out = r->nw;
  *w_out = malloc(r->nw * sizeof(float));
  memcpy(*w_out, r->w, r->nw * sizeof(float));
  mnt_resnet_destroy(r);
  free(x);
  return 0;
}

int main(void) {
  mnt_backend *be;
  if (mnt_backend_create(&be)) return 1;
  float *a, *b;
  size_t na, nb;
  if (train(be, &a, &na) || train(be, &b, &nb)) return 1;
  int same = na == nb && memcmp(a, b, na * sizeof(float)) == 0;
  /* and training changed something: the comparison is not of two untouched copies */
  mnt_resnet *r0;
  if (mnt_resnet_create(be, "resnet8", 10, 32, 8, 7, 0, &r0)) return 1;
  int moved = memcmp(a, r0->w, na * sizeof(float)) != 0;
  mnt_resnet_destroy(r0);
  mnt_backend_destroy(be);
  free(a);
  free(b);
  if (!same || !moved) {
    fprintf(stderr, "FAIL: %s\n", !same ? "two identical runs gave different weights" : "training did not change the weights");
    return 1;
  }
  printf("test_determinism: ok (bit-identical after 3 steps)\n");
  return 0;
}
