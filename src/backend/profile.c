/* profile.c — the op profiler (see profile.h): a copy of the backend's ops table whose ops wait for
 * the stream, call the backend's own op, wait again and add the wall time to a row. Layer ops are
 * named by the shape their create call was given, the rest by the op alone. */
#include "src/backend/profile.h"

#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/log.h"

enum { MNT_PROF_ROWS = 512, MNT_PROF_LAYERS = 1024 };

typedef struct prof_row {
  const char *op;
  char layer[48];
  double s;
  long calls;
} prof_row;

typedef struct prof_layer {
  const void *h;
  char name[48];
} prof_layer;

static mnt_backend *prof_be;
static const mnt_backend_ops *prof_orig;
static mnt_backend_ops prof_ops;
static prof_row prof_rows[MNT_PROF_ROWS];
static int prof_nrows;
static prof_layer prof_layers[MNT_PROF_LAYERS];
static int prof_nlayers;
static int prof_overflow;

static const char *layer_name(const void *h) {
  for (int i = 0; i < prof_nlayers; i++)
    if (prof_layers[i].h == h) return prof_layers[i].name;
  return "?";
}

static void name_layer(const void *h, const char *name) {
  if (prof_nlayers < MNT_PROF_LAYERS) {
    prof_layers[prof_nlayers].h = h;
    snprintf(prof_layers[prof_nlayers].name, sizeof prof_layers[0].name, "%s", name);
    prof_nlayers++;
  }
}

static prof_row *row_of(const char *op, const char *layer) {
  for (int i = 0; i < prof_nrows; i++)
    if (!strcmp(prof_rows[i].op, op) && !strcmp(prof_rows[i].layer, layer)) return &prof_rows[i];
  if (prof_nrows == MNT_PROF_ROWS) {
    prof_overflow = 1;
    return NULL;
  }
  prof_row *r = &prof_rows[prof_nrows++];
  *r = (prof_row){.op = op};
  snprintf(r->layer, sizeof r->layer, "%s", layer);
  return r;
}

/* the stream drained: what came before is not charged to the op that follows */
static double t_begin(void) {
  if (prof_orig->sync(prof_be) != MNT_OK) MNT_WARN("profile: a stream wait failed");
  return mnt_now();
}

static int t_end(const char *op, const char *layer, double t0, int rc) {
  if (prof_orig->sync(prof_be) != MNT_OK) MNT_WARN("profile: a stream wait failed");
  prof_row *r = row_of(op, layer);
  if (r) r->s += mnt_now() - t0, r->calls++;
  return rc;
}

#define TIMED(op, layer, call)         \
  do {                                 \
    double t0_ = t_begin();            \
    int rc_ = (call);                  \
    return t_end(op, layer, t0_, rc_); \
  } while (0)

/* ---- the wrapped ops --------------------------------------------------------------------------- */
static int p_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                         void **h) {
  int rc = prof_orig->conv_create(b, N, C, H, W, K, R, s, p, need_dx, h);
  if (rc == MNT_OK) {
    char name[48];
    snprintf(name, sizeof name, "conv %dx%d/%d %d->%d %dx%d", R, R, s, C, K, H, W);
    name_layer(*h, name);
  }
  return rc;
}
static int p_conv_forward(void *h, const void *x, const float *w, void *y) {
  TIMED("conv fwd", layer_name(h), prof_orig->conv_forward(h, x, w, y));
}
static int p_conv_backward(void *h, const void *x, const float *w, const void *dy, void *dx, float *dw) {
  TIMED(dx ? "conv bwd (dw+dx)" : "conv bwd (dw)", layer_name(h), prof_orig->conv_backward(h, x, w, dy, dx, dw));
}
static int p_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, void **h) {
  int rc = prof_orig->bn_create(b, N, C, H, W, eps, fuse_relu, h);
  if (rc == MNT_OK) {
    char name[48];
    snprintf(name, sizeof name, "bn%s %d %dx%d", fuse_relu ? "+relu" : "", C, H, W);
    name_layer(*h, name);
  }
  return rc;
}
static int p_bn_forward_train(void *h, const void *x, const float *gamma, const float *beta, void *y, float *save_mean,
                              float *save_var, float *run_mean, float *run_var, float momentum) {
  TIMED("bn fwd", layer_name(h),
        prof_orig->bn_forward_train(h, x, gamma, beta, y, save_mean, save_var, run_mean, run_var, momentum));
}
static int p_bn_forward_infer(void *h, const void *x, const float *gamma, const float *beta, void *y,
                              const float *run_mean, const float *run_var) {
  TIMED("bn infer", layer_name(h), prof_orig->bn_forward_infer(h, x, gamma, beta, y, run_mean, run_var));
}
static int p_bn_backward(void *h, const void *x, const void *dy, const float *gamma, const float *save_mean,
                         const float *save_var, void *dx, float *dgamma, float *dbeta) {
  TIMED("bn bwd", layer_name(h), prof_orig->bn_backward(h, x, dy, gamma, save_mean, save_var, dx, dgamma, dbeta));
}
static int p_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, void **h) {
  int rc = prof_orig->pool_create(b, N, C, H, W, R, s, p, h);
  if (rc == MNT_OK) {
    char name[48];
    snprintf(name, sizeof name, "maxpool %dx%d/%d %d %dx%d", R, R, s, C, H, W);
    name_layer(*h, name);
  }
  return rc;
}
static int p_pool_forward(void *h, const void *x, void *y) {
  TIMED("pool fwd", layer_name(h), prof_orig->pool_forward(h, x, y));
}
static int p_pool_backward(void *h, const void *dy, void *dx) {
  TIMED("pool bwd", layer_name(h), prof_orig->pool_backward(h, dy, dx));
}
static int p_copy(mnt_backend *b, void *dst, const void *src, size_t bytes, mnt_copy_kind k) {
  static const char *const names[] = {"copy h2d", "copy d2h", "copy d2d"};
  TIMED(names[k == MNT_COPY_H2D ? 0 : k == MNT_COPY_D2H ? 1 : 2], "", prof_orig->copy(b, dst, src, bytes, k));
}
static int p_memset0(mnt_backend *b, void *p, size_t bytes) { TIMED("memset", "", prof_orig->memset0(b, p, bytes)); }
static int p_relu_forward(mnt_backend *b, const void *x, void *y, size_t n) {
  TIMED("relu fwd", "", prof_orig->relu_forward(b, x, y, n));
}
static int p_relu_backward(mnt_backend *b, const void *y, const void *dy, void *dx, size_t n) {
  TIMED("relu bwd", "", prof_orig->relu_backward(b, y, dy, dx, n));
}
static int p_add_forward(mnt_backend *b, const void *x1, const void *x2, void *y, size_t n) {
  TIMED("add", "", prof_orig->add_forward(b, x1, x2, y, n));
}
static int p_act_acc(mnt_backend *b, void *y, const void *x, size_t n) {
  TIMED("act acc", "", prof_orig->act_acc(b, y, x, n));
}
static int p_gap_forward(mnt_backend *b, const void *x, void *y, int N, int C, int HW) {
  TIMED("avgpool fwd", "", prof_orig->gap_forward(b, x, y, N, C, HW));
}
static int p_gap_backward(mnt_backend *b, const void *dy, void *dx, int N, int C, int HW) {
  TIMED("avgpool bwd", "", prof_orig->gap_backward(b, dy, dx, N, C, HW));
}
static int p_fc_forward(mnt_backend *b, const void *x, const float *w, const float *bias, void *y, int N, int I,
                        int O) {
  TIMED("fc fwd", "", prof_orig->fc_forward(b, x, w, bias, y, N, I, O));
}
static int p_fc_backward(mnt_backend *b, const void *x, const float *w, const void *dy, void *dx, float *dw,
                         float *dbias, int N, int I, int O) {
  TIMED("fc bwd", "", prof_orig->fc_backward(b, x, w, dy, dx, dw, dbias, N, I, O));
}
static int p_softmax_xent(mnt_backend *b, const void *logits, const int32_t *labels, void *dlogits, int N, int classes,
                          float smoothing, float *out3) {
  TIMED("softmax xent", "", prof_orig->softmax_xent(b, logits, labels, dlogits, N, classes, smoothing, out3));
}
static int p_f32_acc(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip) {
  TIMED("f32 acc", "", prof_orig->f32_acc(b, y, x, n, skip));
}
static int p_f32_scale(mnt_backend *b, float *y, float a, size_t n) {
  TIMED("f32 scale", "", prof_orig->f32_scale(b, y, a, n));
}
static int p_sgd_step(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp, float mu,
                      float wd, int first, const int32_t *skip) {
  TIMED("sgd", "", prof_orig->sgd_step(b, w, g, m, n, hp, mu, wd, first, skip));
}
static int p_lars_step(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                       const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip) {
  TIMED("lars", "", prof_orig->lars_step(b, w, g, m, seg, nseg, hp, mu, wd, eta, first, skip));
}
static int p_rmsw_step(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n, const mnt_step_hp *hp,
                       const mnt_rmsw_hp *c, int first, const int32_t *skip) {
  TIMED("rmsprop-warmup", "", prof_orig->rmsw_step(b, w, g, m, v, n, hp, c, first, skip));
}
static int p_nonfinite(mnt_backend *b, const float *x, size_t n, int32_t *flag) {
  TIMED("nonfinite", "", prof_orig->nonfinite(b, x, n, flag));
}
static int p_f32_poison(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags) {
  TIMED("f32 poison", "", prof_orig->f32_poison(b, x, n, flags, nflags));
}
static int p_cast_from_f32(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n) {
  TIMED("cast from f32", "", prof_orig->cast_from_f32(b, t, src, dst, n));
}
static int p_cast_to_f32(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n) {
  TIMED("cast to f32", "", prof_orig->cast_to_f32(b, t, src, dst, n));
}
static int p_augment_u8(mnt_backend *b, const uint8_t *src, int n, int S, int C, const float *boxes, int pad, int out,
                        int outC, const float *mean, const float *std, void *act) {
  TIMED("augment", "", prof_orig->augment_u8(b, src, n, S, C, boxes, pad, out, outC, mean, std, act));
}

int mnt_backend_profile_start(mnt_backend *b) {
  if (prof_be) {
    MNT_ERR("profile: one backend per process (the %s backend is profiled already)", prof_be->name);
    return MNT_EARG;
  }
  prof_be = b;
  prof_orig = b->ops;
  prof_ops = *b->ops; /* what is not wrapped (memory, impl texts, destroy) stays the backend's own */
#define WRAP(f) \
  if (prof_ops.f) prof_ops.f = p_##f
  WRAP(conv_create);
  WRAP(conv_forward);
  WRAP(conv_backward);
  WRAP(bn_create);
  WRAP(bn_forward_train);
  WRAP(bn_forward_infer);
  WRAP(bn_backward);
  WRAP(pool_create);
  WRAP(pool_forward);
  WRAP(pool_backward);
  WRAP(copy);
  WRAP(memset0);
  WRAP(relu_forward);
  WRAP(relu_backward);
  WRAP(add_forward);
  WRAP(act_acc);
  WRAP(gap_forward);
  WRAP(gap_backward);
  WRAP(fc_forward);
  WRAP(fc_backward);
  WRAP(softmax_xent);
  WRAP(f32_acc);
  WRAP(f32_scale);
  WRAP(sgd_step);
  WRAP(lars_step);
  WRAP(rmsw_step);
  WRAP(nonfinite);
  WRAP(f32_poison);
  WRAP(cast_from_f32);
  WRAP(cast_to_f32);
  WRAP(augment_u8);
#undef WRAP
  b->ops = &prof_ops;
  return MNT_OK;
}

void mnt_backend_profile_reset(void) {
  prof_nrows = 0;
  prof_overflow = 0;
}

static int by_time(const void *a, const void *b) {
  double x = ((const prof_row *)a)->s, y = ((const prof_row *)b)->s;
  return (x < y) - (x > y);
}

void mnt_backend_profile_print(FILE *f, int steps, double step_s) {
  if (steps < 1) return;
  double total = 0;
  for (int i = 0; i < prof_nrows; i++) total += prof_rows[i].s;
  if (prof_nrows > 1) qsort(prof_rows, (size_t)prof_nrows, sizeof *prof_rows, by_time);
  double ms = 1e3 / steps;
  fprintf(f, "# profile: %d steps of %.2f ms (with a stream wait around every op); the ops' own time %.2f ms per step\n",
          steps, step_s * 1e3, total * ms);
  fprintf(f, "# %-18s %-30s %8s %12s %7s\n", "op", "layer", "calls", "ms/step", "share");
  double rest = 0;
  int nrest = 0;
  for (int i = 0; i < prof_nrows; i++) {
    const prof_row *r = &prof_rows[i];
    if (total > 0 && r->s / total < 0.005) {
      rest += r->s, nrest++;
      continue;
    }
    fprintf(f, "  %-18s %-30s %8.1f %12.3f %6.1f%%\n", r->op, r->layer[0] ? r->layer : "-", (double)r->calls / steps,
            r->s * ms, total > 0 ? 100 * r->s / total : 0);
  }
  if (nrest) fprintf(f, "  %-18s %-30s %8s %12.3f %6.1f%%\n", "(the rest)", "", "", rest * ms, 100 * rest / total);
  /* per op kind */
  const char *kinds[64];
  double ks[64];
  int nk = 0;
  for (int i = 0; i < prof_nrows; i++) {
    int k = 0;
    while (k < nk && strcmp(kinds[k], prof_rows[i].op)) k++;
    if (k == nk) {
      if (nk == 64) continue;
      kinds[nk] = prof_rows[i].op, ks[nk++] = 0;
    }
    ks[k] += prof_rows[i].s;
  }
  fprintf(f, "# by op:");
  for (int done = 0; done < nk; done++) { /* largest first */
    int m = -1;
    for (int k = 0; k < nk; k++)
      if (kinds[k] && (m < 0 || ks[k] > ks[m])) m = k;
    fprintf(f, "%s %s %.2f ms", done ? "," : "", kinds[m], ks[m] * ms);
    kinds[m] = NULL;
  }
  fprintf(f, "\n");
  if (prof_overflow) fprintf(f, "# profile: more than %d rows; later ones not counted\n", MNT_PROF_ROWS);
}
