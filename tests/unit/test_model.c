/* test_model.c — the model around the ops: the same seed, data and thread count give
 * bit-identical weights after a few steps; backward reports every gradient range exactly once, in
 * decreasing slab offsets (the overlap hook); zero_init_residual zeroes the last BN of each branch;
 * the learning-rate schedule; bad shapes are refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/log.h"
#include "src/model/resnet.h"
#include "src/train/optim.h"

static int train(mnt_backend *be, float **w_out, size_t *n_out) {
  mnt_resnet *r;
  int batch = 8, size = 32;
  if (mnt_resnet_create(be, "resnet8", 10, size, batch, 7, 0, &r)) return 1;
  size_t nx = (size_t)batch * 3 * size * size;
  float *x = malloc(nx * sizeof *x);
  int32_t y[8];
  for (size_t i = 0; i < nx; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  for (int i = 0; i < batch; i++) y[i] = i % 10;
  mnt_optim_cfg cfg = {.base_lr = 0.1, .global_batch = 256, .epochs = 1, .momentum = 0.9, .weight_decay = 1e-4};
  const mnt_step_hp hp = {.lr = 0.05f}; /* host memory is the cpu backend's */
  for (int k = 0; k < 3; k++) {
    if (mnt_resnet_forward(r, x, 1)) return 1;
    if (mnt_resnet_loss(r, y, batch, 1)) return 1;
    if (mnt_resnet_backward(r)) return 1;
    if (mnt_sgd_update(r, &cfg, &hp, k == 0, NULL)) return 1;
  }
  *n_out = r->nw;
  *w_out = malloc(r->nw * sizeof(float));
  memcpy(*w_out, r->w, r->nw * sizeof(float));
  mnt_resnet_destroy(r);
  free(x);
  return 0;
}

typedef struct { size_t last_off, covered; int calls, order_ok; } hook_state;
static void hook(void *ctx, size_t off, size_t n) {
  hook_state *h = ctx;
  if (h->calls++ && off >= h->last_off) h->order_ok = 0;
  h->last_off = off;
  h->covered += n;
}

#include "tests/expect.h"

static void other_checks(mnt_backend *be) {
  mnt_resnet *r;
  if (mnt_resnet_create(be, "resnet18", 10, 32, 2, 1, 1, &r)) { failures++; return; }
  hook_state h = {.order_ok = 1};
  r->grad_ready = hook;
  r->grad_ctx = &h;
  float *x = calloc(2 * 3 * 32 * 32, sizeof(float));
  int32_t y[2] = {1, 2};
  EXPECT(mnt_resnet_forward(r, x, 1) == MNT_OK, "forward");
  float l3[3] = {NAN, 0, 0};
  EXPECT(mnt_resnet_loss(r, y, 2, 1) == MNT_OK && mnt_resnet_read_loss(r, l3) == MNT_OK && isfinite(l3[0]),
         "a finite loss");
  EXPECT(mnt_resnet_backward(r) == MNT_OK, "backward");
  size_t total = 0;
  for (int i = 0; i < r->nparams; i++) total += r->params[i].n;
  EXPECT(h.calls == r->nparams, "grad_ready called %d times for %d parameters", h.calls, r->nparams);
  EXPECT(h.covered == total, "grad_ready covered %zu of %zu values", h.covered, total);
  EXPECT(h.order_ok, "grad_ready ranges are not in decreasing slab order");
  int zeroed = 0, ones = 0;
  for (int i = 0; i < r->nparams; i++) {
    const mnt_param *p = &r->params[i];
    if (strstr(p->name, ".bn2.weight")) zeroed += r->w[p->off] == 0.0f;
    if (!strcmp(p->name, "layer1.0.bn1.weight")) ones += r->w[p->off] == 1.0f;
  }
  EXPECT(zeroed == 8 && ones == 1, "zero_init_residual: %d of 8 bn2 weights zero, bn1 one: %d", zeroed, ones);
  EXPECT(!strcmp(r->params[0].name, "conv1.weight") && !strcmp(r->params[r->nparams - 1].name, "fc.bias"),
         "slab order is not torchvision's state_dict order (%s ... %s)", r->params[0].name, r->params[r->nparams - 1].name);
  for (int i = 0; i < r->nparams; i++) EXPECT(r->params[i].off % 64 == 0, "%s not 256-byte aligned", r->params[i].name);
  mnt_resnet_destroy(r);
  free(x);
  /* the memory plan: at least the slabs and activations the model allocates, without allocating */
  mnt_resnet *m8;
  size_t plan = 0, big = 0;
  if (mnt_resnet_create(be, "resnet18", 10, 64, 8, 1, 0, &m8) == MNT_OK) {
    size_t acts = 0;
    for (int i = 1; i < m8->nact; i++) acts += m8->act_n[i];
    EXPECT(mnt_resnet_plan_bytes("resnet18", 10, 64, 8, 8, 4, &plan) == MNT_OK &&
               plan >= (3 * m8->nw + m8->nbn + acts) * sizeof(float),
           "plan %zu bytes < slabs and activations %zu", plan, (3 * m8->nw + m8->nbn + acts) * sizeof(float));
    mnt_resnet_destroy(m8);
  } else {
    EXPECT(0, "resnet18 for the plan check");
  }
  EXPECT(mnt_resnet_plan_bytes("resnet50", 1000, 224, 4096, 4096, 4, &big) == MNT_OK && big > (size_t)400 << 30,
         "resnet50 at 224 px, batch 4096: planned %zu bytes", big);
  EXPECT(mnt_resnet_plan_bytes("resnet7", 10, 32, 2, 2, 4, &plan) == MNT_EARG, "plan: unknown arch accepted");
  mnt_resnet *bad;
  EXPECT(mnt_resnet_create(be, "resnet7", 10, 32, 2, 1, 0, &bad) == MNT_EARG, "unknown arch accepted");
  EXPECT(mnt_resnet_create(be, "resnet50", 10, 16, 2, 1, 0, &bad) == MNT_EARG, "16 px accepted for resnet50");
  EXPECT(mnt_resnet_create(be, "resnet8", 0, 32, 2, 1, 0, &bad) == MNT_EARG, "0 classes accepted");
  EXPECT(mnt_resnet_create(be, "resnet8", 10, 32, 0, 1, 0, &bad) == MNT_EARG, "batch 0 accepted");
  /* schedule: linear scaling, warm-up, step decay at 1/3, 2/3, 8/9; cosine to zero */
  mnt_optim_cfg c = {.base_lr = 0.1, .global_batch = 1024, .warmup_epochs = 5, .epochs = 90};
  EXPECT(fabs(mnt_lr_at(&c, 0) - 0.1) < 1e-12, "warm-up starts at base_lr: %g", mnt_lr_at(&c, 0));
  EXPECT(fabs(mnt_lr_at(&c, 5) - 0.4) < 1e-12, "peak = 0.1 * 1024/256: %g", mnt_lr_at(&c, 5));
  EXPECT(fabs(mnt_lr_at(&c, 2.5) - 0.25) < 1e-12, "linear warm-up: %g", mnt_lr_at(&c, 2.5));
  EXPECT(fabs(mnt_lr_at(&c, 29.9) - 0.4) < 1e-12 && fabs(mnt_lr_at(&c, 30) - 0.04) < 1e-12 &&
             fabs(mnt_lr_at(&c, 60) - 0.004) < 1e-12 && fabs(mnt_lr_at(&c, 80) - 0.0004) < 1e-12,
         "step decay at 30/60/80 of 90");
  c.schedule = MNT_SCHED_SLOW_START; /* Akiba et al.: 0.5, 0.075, 0.01, 0.001 of the peak for 40, 30, 15, 5 of 90 */
  EXPECT(fabs(mnt_lr_at(&c, 39.9) - 0.2) < 1e-12 && fabs(mnt_lr_at(&c, 40) - 0.03) < 1e-12 &&
             fabs(mnt_lr_at(&c, 70) - 0.004) < 1e-12 && fabs(mnt_lr_at(&c, 85) - 0.0004) < 1e-12 &&
             fabs(mnt_lr_at(&c, 2.5) - 0.25) < 1e-12,
         "slow-start: %g %g %g %g", mnt_lr_at(&c, 39.9), mnt_lr_at(&c, 40), mnt_lr_at(&c, 70), mnt_lr_at(&c, 85));
  c.schedule = MNT_SCHED_COSINE;
  EXPECT(fabs(mnt_lr_at(&c, 47.5) - 0.2) < 1e-12 && mnt_lr_at(&c, 90) < 1e-12, "cosine: %g %g", mnt_lr_at(&c, 47.5),
         mnt_lr_at(&c, 90));
}

int main(void) {
  mnt_backend *be;
  if (mnt_backend_create("cpu", NULL, &be)) return 1;
  other_checks(be);
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
  EXPECT(same, "two identical runs gave different weights");
  EXPECT(moved, "training did not change the weights");
  if (failures) return 1;
  printf("test_model: ok (bit-identical after 3 steps)\n");
  return 0;
}
