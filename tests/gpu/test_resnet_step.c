/* test_resnet_step.c — one whole ResNet-18 training step on the GPU against the CPU backend: the
 * same weights (same seed), the same input and labels; logits, loss, every parameter's gradient,
 * the weights after SGD and the BN running statistics must agree, in fp32 and in bf16 (with a
 * tolerance for bf16's 8-bit mantissa). Also ghost batch norm (two BN groups) in fp32.
 * Exit 77 when no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/device.h"
#include "log.h"
#include "model/resnet.h"
#include "train/optim.h"

#include "tests/gpu/gpu_test.h"

typedef struct run_out {
  float *logits, *g, *w, *bn, loss[3];
  size_t nl, nw, nbn;
} run_out;

/* one step on device dev at precision p; everything copied back to the host */
static int step(const char *dev, mnt_precision p, int batch, int bn_group, const float *x, const int32_t *y, run_out *o) {
  mnt_backend_opts bo = {.precision = p, .device = -1};
  mnt_backend *be;
  mnt_resnet *r;
  int size = 32, classes = 10;
  if (mnt_backend_create(dev, &bo, &be)) return 1;
  if (mnt_resnet_create_ex(be, "resnet18", classes, size, batch, bn_group, 3, 0, &r)) return 1;
  mnt_sgd_cfg cfg = {.base_lr = 0.1, .global_batch = batch, .epochs = 1, .momentum = 0.9, .weight_decay = 1e-4};
  int st = mnt_resnet_forward(r, x, 1);
  o->nl = (size_t)batch * classes;
  o->nw = r->nw;
  o->nbn = r->nbn;
  o->logits = malloc(o->nl * sizeof(float));
  o->g = malloc(r->nw * sizeof(float));
  o->w = malloc(r->nw * sizeof(float));
  o->bn = malloc(r->nbn * sizeof(float));
  if (!st) st = mnt_act_download(be, mnt_resnet_logits(r), o->logits, batch, classes, 1, 1);
  if (!st) st = mnt_resnet_loss(r, y, batch, 1);
  if (!st) st = mnt_resnet_read_loss(r, o->loss);
  if (!st) st = mnt_resnet_backward(r);
  if (!st) st = mnt_be_copy(be, o->g, r->g, r->nw * sizeof(float), MNT_COPY_D2H);
  if (!st) st = mnt_sgd_update(r, &cfg, 0.1, 1);
  if (!st) st = mnt_be_copy(be, o->w, r->w, r->nw * sizeof(float), MNT_COPY_D2H);
  if (!st) st = mnt_be_copy(be, o->bn, r->bn, r->nbn * sizeof(float), MNT_COPY_D2H);
  mnt_resnet_destroy(r);
  mnt_backend_destroy(be);
  return st != MNT_OK;
}

static void compare(const char *what, const char *t, const float *gpu, const float *cpu, size_t n, double tol) {
  size_t worst = 0;
  double e = gpu_scale_err(gpu, cpu, n, 0, &worst); /* a NaN anywhere fails */
  if (!(e <= tol)) {
    fprintf(stderr, "FAIL: %s %s: error %.3g of the tensor's scale > %.3g (element %zu: gpu %g, cpu %g)\n", what, t, e,
            tol, worst, (double)gpu[worst], (double)cpu[worst]);
    failures++;
  } else {
    printf("  %-6s %-22s ok (error %.2g of scale, tolerance %.2g)\n", what, t, e, tol);
  }
}

static void one(mnt_precision p, int batch, int bn_group, double tol) {
  size_t nx = (size_t)batch * 3 * 32 * 32;
  float *x = malloc(nx * sizeof *x);
  int32_t *y = malloc((size_t)batch * sizeof *y);
  uint64_t s = 99;
  for (size_t i = 0; i < nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  for (int i = 0; i < batch; i++) y[i] = (i * 7 + 3) % 10;
  run_out c = {0}, g = {0};
  char what[32];
  snprintf(what, sizeof what, "%s", mnt_precision_name(p));
  if (step("cpu", MNT_PREC_FP32, batch, bn_group, x, y, &c) || step("cuda", p, batch, bn_group, x, y, &g)) {
    fprintf(stderr, "FAIL: %s: a step failed: %s\n", what, mnt_last_error());
    failures++;
  } else {
    char t[64];
    snprintf(t, sizeof t, "logits (bn group %d)", bn_group);
    compare(what, t, g.logits, c.logits, c.nl, tol);
    compare(what, "loss", g.loss, c.loss, 1, tol);
    compare(what, "gradients", g.g, c.g, c.nw, 5 * tol);
    compare(what, "weights after SGD", g.w, c.w, c.nw, tol);
    compare(what, "BN running stats", g.bn, c.bn, c.nbn, tol);
  }
  free(c.logits); free(c.g); free(c.w); free(c.bn);
  free(g.logits); free(g.g); free(g.w); free(g.bn);
  free(x);
  free(y);
}

int main(void) {
  if (mnt_cuda_device_count() == 0) {
    printf("SKIP: no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)\n",
           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return 77;
  }
  /* fp32: cuDNN's algorithms sum in other orders than oneDNN's (and may use TF32 where allowed) */
  one(MNT_PREC_FP32, 8, 8, 2e-3);
  one(MNT_PREC_FP32, 8, 4, 2e-3);
  one(MNT_PREC_BF16, 8, 8, 5e-2);
  return gpu_test_end("test_resnet_step");
}
