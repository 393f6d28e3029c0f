/* test_resnet_step.c — one whole ResNet-18 training step on the GPU against the CPU backend: the
 * same weights (same seed), the same input and labels; logits, loss, every parameter's gradient,
 * the weights after SGD and the BN running statistics must agree. Tensors of the slab are compared
 * one by one (tests/grad_compare.h), so that a small tensor's wrong gradient is not hidden.
 *
 * fp32 (and ghost batch norm, two BN groups): each tensor within 1e-2 (gradients) or 2e-3 of its own
 * largest value.
 * bf16: the reference is the CPU's fp32 step on the same input and weights rounded to bf16, and each
 * tensor must be within 0.8 of it in relative L2 (a tensor zeroed, doubled or of the wrong sign is
 * 1 or more). The bound is loose because this step's gradient is not a smooth function of its
 * input at bf16's resolution: rounding only the input and the weights to bf16, both computed in
 * fp32 on the CPU, moves each tensor's gradient by up to 0.44 (32 px, batch 8) and 0.36 (64 px,
 * batch 16) in relative L2, and 1 ulp of the input alone moves it by 0.6% (ReLU masks that flip
 * change a block's gradient at once); bf16 rounds every activation besides. The ops themselves are
 * held to 2e-2 one by one in test_backend_ops.
 * Exit 77 when no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/backend/cuda/device.h"
#include "src/dtype.h"
#include "src/log.h"
#include "src/model/resnet.h"
#include "src/train/optim.h"

#include "tests/gpu/gpu_test.h"
#include "tests/grad_compare.h"

typedef struct run_out {
  float *logits, *g, *w, *bn, loss[3];
  size_t nl, nw, nbn;
  mnt_param *params; /* the slab's tensors */
  int nparams;
} run_out;

/* one step on device dev at precision p; everything copied back to the host */
static float bf16_round(float v) { return mnt_bf16_to_f32(mnt_f32_to_bf16(v)); }

/* round_bf16 (cpu): the input and the weights rounded to bf16 values first, as the GPU's bf16 step
 * sees them */
static int step(const char *dev, mnt_precision p, int round_bf16, int size, int batch, int bn_group, const float *x,
                const int32_t *y, run_out *o) {
  mnt_backend_opts bo = {.precision = p, .device = -1};
  mnt_backend *be;
  mnt_resnet *r;
  int classes = 10;
  if (mnt_backend_create(dev, &bo, &be)) return 1;
  if (mnt_resnet_create_ex(be, "resnet18", classes, size, batch, bn_group, 3, 0, &r)) return 1;
  float *xr = NULL;
  if (round_bf16) {
    size_t nx = (size_t)batch * 3 * size * size;
    if (!be->host_visible || !(xr = malloc(nx * sizeof *xr))) return 1;
    for (size_t i = 0; i < nx; i++) xr[i] = bf16_round(x[i]);
    for (size_t i = 0; i < r->nw; i++) r->w[i] = bf16_round(r->w[i]);
    x = xr;
  }
  mnt_optim_cfg cfg = {.base_lr = 0.1, .global_batch = batch, .epochs = 1, .momentum = 0.9, .weight_decay = 1e-4};
  int st = mnt_resnet_forward(r, x, 1);
  o->nl = (size_t)batch * classes;
  o->nw = r->nw;
  o->nbn = r->nbn;
  o->logits = malloc(o->nl * sizeof(float));
  o->g = malloc(r->nw * sizeof(float));
  o->w = malloc(r->nw * sizeof(float));
  o->bn = malloc(r->nbn * sizeof(float));
  o->nparams = r->nparams;
  o->params = malloc((size_t)r->nparams * sizeof *o->params);
  memcpy(o->params, r->params, (size_t)r->nparams * sizeof *o->params);
  if (!st) st = mnt_act_download(be, mnt_resnet_logits(r), o->logits, batch, classes, 1, 1);
  if (!st) st = mnt_resnet_loss(r, y, batch, 1);
  if (!st) st = mnt_resnet_read_loss(r, o->loss);
  if (!st) st = mnt_resnet_backward(r);
  if (!st) st = mnt_be_copy(be, o->g, r->g, r->nw * sizeof(float), MNT_COPY_D2H);
  const mnt_step_hp hp = {.lr = 0.1f};
  mnt_step_hp *hp_dev = NULL; /* the step's scalars in backend memory, as the trainer's */
  if (!st) st = mnt_be_alloc(be, sizeof hp, (void **)&hp_dev);
  if (!st) st = mnt_be_copy(be, hp_dev, &hp, sizeof hp, MNT_COPY_H2D);
  if (!st) st = mnt_sgd_update(r, &cfg, hp_dev, 1, NULL);
  if (!st) st = mnt_be_copy(be, o->w, r->w, r->nw * sizeof(float), MNT_COPY_D2H);
  if (!st) st = mnt_be_copy(be, o->bn, r->bn, r->nbn * sizeof(float), MNT_COPY_D2H);
  mnt_be_free(be, hp_dev);
  mnt_resnet_destroy(r);
  mnt_backend_destroy(be);
  free(xr);
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

/* the slab tensor by tensor (grad_compare.h): tol_max against each tensor's largest value, tol_l2
 * its relative L2 error (< 0: not checked) */
static void compare_tensors(const char *what, const char *t, const float *gpu, const float *cpu, const mnt_param *ps,
                            int np, double tol_max, double tol_l2) {
  char tag[64];
  snprintf(tag, sizeof tag, "%s %s", what, t);
  grad_cmp c = grad_compare(gpu, cpu, ps, np, tol_max, tol_l2, tag, stderr);
  if (c.bad) failures++;
  printf("  %-6s %-22s %s (%d tensors; worst %s: error %.2g of its scale; worst relative L2 %s: %.2g; tolerances "
         "%.2g, %.2g)\n",
         what, t, c.bad ? "FAILED" : "ok", np, ps[c.worst].name, c.max_err, ps[c.worst_l2].name, c.max_l2, tol_max,
         tol_l2);
}

static void one(mnt_precision p, int size, int batch, int bn_group, double tol) {
  size_t nx = (size_t)batch * 3 * size * size;
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
  printf("%s: resnet18 at %d px, batch %d, batch norm over groups of %d\n", what, size, batch, bn_group);
  int bf16 = p == MNT_PREC_BF16;
  if (step("cpu", MNT_PREC_FP32, bf16, size, batch, bn_group, x, y, &c) ||
      step("cuda", p, 0, size, batch, bn_group, x, y, &g)) {
    fprintf(stderr, "FAIL: %s: a step failed: %s\n", what, mnt_last_error());
    failures++;
  } else {
    char t[64];
    snprintf(t, sizeof t, "logits (bn group %d)", bn_group);
    compare(what, t, g.logits, c.logits, c.nl, tol);
    compare(what, "loss", g.loss, c.loss, 1, tol);
    if (bf16) { /* relative L2 only: see the file's comment */
      compare_tensors(what, "gradients", g.g, c.g, c.params, c.nparams, -1, 0.8);
      compare_tensors(what, "weights after SGD", g.w, c.w, c.params, c.nparams, -1, 0.8);
    } else {
      compare_tensors(what, "gradients", g.g, c.g, c.params, c.nparams, 5 * tol, -1);
      compare_tensors(what, "weights after SGD", g.w, c.w, c.params, c.nparams, tol, -1);
    }
    compare(what, "BN running stats", g.bn, c.bn, c.nbn, tol);
  }
  free(c.logits); free(c.g); free(c.w); free(c.bn); free(c.params);
  free(g.logits); free(g.g); free(g.w); free(g.bn); free(g.params);
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
  one(MNT_PREC_FP32, 32, 8, 8, 2e-3);
  one(MNT_PREC_FP32, 32, 8, 4, 2e-3);
  one(MNT_PREC_BF16, 32, 8, 8, 5e-2);
  one(MNT_PREC_BF16, 64, 16, 16, 5e-2);
  return gpu_test_end("test_resnet_step");
}
