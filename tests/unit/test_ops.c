/* test_ops.c — every backward of the CPU backend against central finite differences of its
 * forward, on tiny shapes: loss = sum(y * r) for a fixed random r, so dL/dy = r. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/log.h"

#include "tests/expect.h"

static unsigned long long seed = 88172645463325252ull;
static float frand(void) {
  seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
  return (float)((seed >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *rnd(size_t n) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = frand();
  return p;
}
static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

static mnt_backend *g_be;
/* the mean loss over 3 samples of 4 classes, top-1/top-5 hits */
static float xent(const float *x, const int32_t *lab, float *dx, float eps, int *t1, int *t5) {
  float o[3];
  EXPECT(mnt_softmax_xent(g_be, x, lab, dx, 3, 4, eps, o) == MNT_OK, "mnt_softmax_xent");
  if (t1) *t1 = (int)o[1];
  if (t5) *t5 = (int)o[2];
  return o[0] / 3;
}

typedef double (*lossfn)(void *ctx);
/* compare analytic grad g of parameter p (n values) with finite differences of f */
static void check(const char *what, lossfn f, void *ctx, float *p, const float *g, size_t n, double tol) {
  double worst = 0;
  size_t stride = n > 40 ? n / 40 : 1;
  for (size_t i = 0; i < n; i += stride) {
    float keep = p[i], h = 1e-2f * (fabsf(keep) > 1 ? fabsf(keep) : 1);
    p[i] = keep + h;
    double lp = f(ctx);
    p[i] = keep - h;
    double lm = f(ctx);
    p[i] = keep;
    double fd = (lp - lm) / (2.0 * h);
    double err = fabs(fd - g[i]) / (fabs(fd) + fabs(g[i]) + 1e-2);
    if (err > worst) worst = err;
  }
  EXPECT(worst <= tol, "%s: finite differences disagree (relative error %.3g > %.3g)", what, worst, tol);
  if (worst <= tol) printf("  %-28s ok (worst relative error %.2g)\n", what, worst);
}

/* ---- conv ---- */
typedef struct { mnt_conv *c; float *x, *w, *y, *r; size_t ny; } conv_ctx;
static double conv_loss(void *v) {
  conv_ctx *c = v;
  EXPECT(mnt_conv_forward(c->c, c->x, c->w, c->y) == MNT_OK, "mnt_conv_forward");
  return dot(c->y, c->r, c->ny);
}
static void test_conv_hw(mnt_backend *b, int H, int W, int s, int p, int R, int C, int K) {
  int N = 2, OH, OW;
  conv_ctx c;
  if (mnt_conv_create(b, N, C, H, W, K, R, s, p, 1, &c.c) != MNT_OK) { failures++; return; }
  int slow;
  const char *impl = mnt_conv_impl(c.c, &slow);
  printf("  conv%dx%d/s%d/p%d %d->%d on %dx%d runs: %s\n", R, R, s, p, C, K, H, W, impl);
  EXPECT(!slow, "conv%dx%d %d->%d on %dx%d runs a reference implementation: %s", R, R, C, K, H, W, impl);
  mnt_conv_out_hw(c.c, &OH, &OW);
  size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * R;
  c.ny = (size_t)N * K * OH * OW;
  c.x = rnd(nx); c.w = rnd(nw); c.y = malloc(c.ny * 4); c.r = rnd(c.ny);
  float *dx = malloc(nx * 4), *dw = malloc(nw * 4);
  EXPECT(mnt_conv_forward(c.c, c.x, c.w, c.y) == MNT_OK, "mnt_conv_forward");
  EXPECT(mnt_conv_backward(c.c, c.x, c.w, c.r, dx, dw) == MNT_OK, "mnt_conv_backward");
  char name[80];
  snprintf(name, sizeof name, "conv%dx%d/s%d/p%d %d->%d %dx%d dx", R, R, s, p, C, K, H, W);
  check(name, conv_loss, &c, c.x, dx, nx, 2e-2);
  snprintf(name, sizeof name, "conv%dx%d/s%d/p%d %d->%d %dx%d dw", R, R, s, p, C, K, H, W);
  check(name, conv_loss, &c, c.w, dw, nw, 2e-2);
  free(c.x); free(c.w); free(c.y); free(c.r); free(dx); free(dw);
  mnt_conv_destroy(c.c);
}
static void test_conv(mnt_backend *b, int s, int p, int R, int C, int K) { test_conv_hw(b, 7, 6, s, p, R, C, K); }

/* a first layer (need_dx 0): dw without dx, as before; asking it for dx is an error, not a crash */
static void test_conv_no_dx(mnt_backend *b) {
  int N = 2, C = 3, H = 8, W = 8, K = 16, R = 3, s = 1, p = 1;
  mnt_conv *c1, *c0;
  if (mnt_conv_create(b, N, C, H, W, K, R, s, p, 1, &c1) != MNT_OK ||
      mnt_conv_create(b, N, C, H, W, K, R, s, p, 0, &c0) != MNT_OK) {
    failures++;
    return;
  }
  size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * R, ny = (size_t)N * K * H * W;
  float *x = rnd(nx), *w = rnd(nw), *dy = rnd(ny), *dx = malloc(nx * 4), *dw1 = malloc(nw * 4), *dw0 = malloc(nw * 4);
  EXPECT(mnt_conv_backward(c1, x, w, dy, dx, dw1) == MNT_OK, "conv backward with dx");
  EXPECT(mnt_conv_backward(c0, x, w, dy, NULL, dw0) == MNT_OK, "conv backward without dx (need_dx 0)");
  EXPECT(!memcmp(dw0, dw1, nw * 4), "need_dx 0 changed dw");
  EXPECT(mnt_conv_backward(c0, x, w, dy, dx, dw0) == MNT_EARG, "dx from a need_dx 0 convolution was not refused");
  EXPECT(!strstr(mnt_conv_impl(c0, NULL), "bwd-data"), "need_dx 0 still prepares bwd-data: %s", mnt_conv_impl(c0, NULL));
  printf("  conv without dx (first layer) ok: %s\n", mnt_conv_impl(c0, NULL));
  free(x); free(w); free(dy); free(dx); free(dw1); free(dw0);
  mnt_conv_destroy(c1);
  mnt_conv_destroy(c0);
}

/* ---- batch norm ---- */
typedef struct { mnt_bn *bn; float *x, *g, *be, *y, *r, mean[8], var[8], rm[8], rv[8]; size_t n; } bn_ctx;
static double bn_loss(void *v) {
  bn_ctx *c = v;
  EXPECT(mnt_bn_forward_train(c->bn, c->x, c->g, c->be, c->y, c->mean, c->var, c->rm, c->rv, 0.1f) == MNT_OK, "mnt_bn_forward_train");
  return dot(c->y, c->r, c->n);
}
static void test_bn(mnt_backend *b, int relu) {
  int N = 3, C = 4, H = 3, W = 2;
  bn_ctx c;
  memset(&c, 0, sizeof c);
  if (mnt_bn_create(b, N, C, H, W, 1e-5f, relu, &c.bn) != MNT_OK) { failures++; return; }
  c.n = (size_t)N * C * H * W;
  c.x = rnd(c.n); c.g = rnd(C); c.be = rnd(C); c.y = malloc(c.n * 4); c.r = rnd(c.n);
  float *dx = malloc(c.n * 4), dg[8], db[8];
  bn_loss(&c);
  EXPECT(mnt_bn_backward(c.bn, c.x, c.r, c.g, c.mean, c.var, dx, dg, db) == MNT_OK, "mnt_bn_backward");
  check(relu ? "batchnorm+relu dx" : "batchnorm dx", bn_loss, &c, c.x, dx, c.n, 2e-2);
  check(relu ? "batchnorm+relu dgamma" : "batchnorm dgamma", bn_loss, &c, c.g, dg, (size_t)C, 2e-2);
  check(relu ? "batchnorm+relu dbeta" : "batchnorm dbeta", bn_loss, &c, c.be, db, (size_t)C, 2e-2);
  if (relu) {
    int clipped = 0;
    for (size_t i = 0; i < c.n; i++) clipped += c.y[i] == 0.0f;
    EXPECT(clipped && clipped != (int)c.n, "batchnorm+relu: %d of %zu clipped", clipped, c.n);
  }
  /* running statistics as PyTorch: mean and unbiased variance with momentum 0.1 */
  float rm[4] = {0}, rv[4] = {1, 1, 1, 1};
  EXPECT(mnt_bn_forward_train(c.bn, c.x, c.g, c.be, c.y, c.mean, c.var, rm, rv, 0.1f) == MNT_OK, "mnt_bn_forward_train");
  for (int ch = 0; ch < C; ch++) {
    double s = 0, s2 = 0;
    int m = N * H * W;
    for (int n = 0; n < N; n++)
      for (int i = 0; i < H * W; i++) {
        double v = c.x[((size_t)n * C + ch) * H * W + i];
        s += v; s2 += v * v;
      }
    double mean = s / m, uvar = (s2 - m * mean * mean) / (m - 1);
    EXPECT(fabs(rm[ch] - 0.1 * mean) <= 1e-5 && fabs(rv[ch] - (0.9 + 0.1 * uvar)) <= 1e-4,
           "batchnorm running stats of channel %d: %g %g, want %g %g", ch, rm[ch], rv[ch], 0.1 * mean,
           0.9 + 0.1 * uvar);
  }
  free(c.x); free(c.g); free(c.be); free(c.y); free(c.r); free(dx);
  mnt_bn_destroy(c.bn);
}

/* ---- max pool ---- */
typedef struct { mnt_pool *p; float *x, *y, *r; size_t ny; } pool_ctx;
static double pool_loss(void *v) {
  pool_ctx *c = v;
  EXPECT(mnt_pool_forward(c->p, c->x, c->y) == MNT_OK, "mnt_pool_forward");
  return dot(c->y, c->r, c->ny);
}
static void test_pool(mnt_backend *b) {
  int N = 2, C = 2, H = 7, W = 7, OH, OW;
  pool_ctx c;
  if (mnt_pool_create(b, N, C, H, W, 3, 2, 1, &c.p) != MNT_OK) { failures++; return; }
  mnt_pool_out_hw(c.p, &OH, &OW);
  size_t nx = (size_t)N * C * H * W;
  c.ny = (size_t)N * C * OH * OW;
  c.x = malloc(nx * 4);
  for (size_t i = 0; i < nx; i++) c.x[i] = (float)((i * 37) % 101) / 10.0f; /* distinct: no ties */
  c.y = malloc(c.ny * 4); c.r = rnd(c.ny);
  float *dx = malloc(nx * 4);
  pool_loss(&c);
  EXPECT(mnt_pool_backward(c.p, c.r, dx) == MNT_OK, "mnt_pool_backward");
  check("maxpool3x3/s2/p1 dx", pool_loss, &c, c.x, dx, nx, 1e-3);
  free(c.x); free(c.y); free(c.r); free(dx);
  mnt_pool_destroy(c.p);
}

/* ---- fully connected, gap, relu, softmax ---- */
typedef struct { float *x, *w, *bias, *y, *r; int N, I, O; } fc_ctx;
static double fc_loss(void *v) {
  fc_ctx *c = v;
  EXPECT(mnt_fc_forward(g_be, c->x, c->w, c->bias, c->y, c->N, c->I, c->O) == MNT_OK, "mnt_fc_forward");
  return dot(c->y, c->r, (size_t)c->N * c->O);
}
static void test_fc(void) {
  fc_ctx c = {.N = 3, .I = 5, .O = 4};
  c.x = rnd(15); c.w = rnd(20); c.bias = rnd(4); c.y = malloc(12 * 4); c.r = rnd(12);
  float dx[15], dw[20], db[4];
  fc_loss(&c);
  EXPECT(mnt_fc_backward(g_be, c.x, c.w, c.r, dx, dw, db, c.N, c.I, c.O) == MNT_OK, "mnt_fc_backward");
  check("fc dx", fc_loss, &c, c.x, dx, 15, 1e-3);
  check("fc dw", fc_loss, &c, c.w, dw, 20, 1e-3);
  check("fc dbias", fc_loss, &c, c.bias, db, 4, 1e-3);
  free(c.x); free(c.w); free(c.bias); free(c.y); free(c.r);
}

typedef struct { float *x, *y, *r; int n; int kind; int32_t lab[3]; float eps; } ew_ctx;
static double ew_loss(void *v) {
  ew_ctx *c = v;
  if (c->kind == 0) { mnt_relu_forward(g_be, c->x, c->y, (size_t)c->n); return dot(c->y, c->r, (size_t)c->n); }
  if (c->kind == 1) { mnt_gap_forward(g_be, c->x, c->y, 2, 3, 4); return dot(c->y, c->r, 6); }
  return xent(c->x, c->lab, NULL, c->eps, NULL, NULL);
}
static void test_small(void) {
  ew_ctx c = {.n = 24, .kind = 0};
  c.x = rnd(24); c.y = malloc(24 * 4); c.r = rnd(24);
  for (int i = 0; i < 24; i++) if (fabsf(c.x[i]) < 0.05f) c.x[i] = 0.3f; /* away from the kink */
  float dx[24];
  ew_loss(&c);
  mnt_relu_backward(g_be, c.y, c.r, dx, 24);
  check("relu dx", ew_loss, &c, c.x, dx, 24, 1e-3);
  c.kind = 1;
  mnt_gap_backward(g_be, c.r, dx, 2, 3, 4);
  check("global avg pool dx", ew_loss, &c, c.x, dx, 24, 1e-3);
  c.kind = 2;
  c.lab[0] = 1; c.lab[1] = 3; c.lab[2] = 0;
  int t1, t5;
  xent(c.x, c.lab, dx, 0, &t1, &t5);
  check("softmax cross-entropy dlogits", ew_loss, &c, c.x, dx, 12, 1e-3);
  EXPECT(t5 == 3, "top-5 of 4 classes must always hit (%d)", t5);
  c.eps = 0.1f; /* label smoothing: the gradient, and the value against its definition */
  float ls = xent(c.x, c.lab, dx, c.eps, NULL, NULL);
  check("label-smoothed cross-entropy dlogits", ew_loss, &c, c.x, dx, 12, 1e-3);
  double want = 0;
  for (int n = 0; n < 3; n++) {
    const float *z = c.x + 4 * n;
    double s = 0;
    for (int k = 0; k < 4; k++) s += exp((double)z[k]);
    for (int k = 0; k < 4; k++) want += ((k == c.lab[n]) * 0.9 + 0.1 / 4) * (log(s) - z[k]) / 3;
  }
  EXPECT(fabs(ls - want) <= 1e-5 * fabs(want), "label-smoothed loss %g, want %g", ls, want);
  int32_t bad[3] = {0, 4, 1};
  EXPECT(isnan(xent(c.x, bad, dx, 0, &t1, &t5)), "label 4 of 4 classes accepted");
  free(c.x); free(c.y); free(c.r);
}

static void test_sgd(void) {
  /* PyTorch: first step m = g + wd*w; then m = mu*m + g + wd*w; w -= lr*m */
  float w[2] = {1, -2}, g[2] = {0.5f, 0.25f}, m[2];
  const mnt_step_hp hp = {.lr = 0.1f}; /* the step's scalars: host memory is the cpu backend's */
  mnt_sgd_step(g_be, w, g, m, 2, &hp, 0.9f, 0.01f, 1, NULL);
  float w1 = 1 - 0.1f * (0.5f + 0.01f * 1);
  mnt_sgd_step(g_be, w, g, m, 2, &hp, 0.9f, 0.01f, 0, NULL);
  float m2 = 0.9f * (0.5f + 0.01f) + 0.5f + 0.01f * w1;
  float w2 = w1 - 0.1f * m2;
  EXPECT(fabsf(w[0] - w2) <= 1e-6f, "sgd: %g want %g", w[0], w2);
  if (fabsf(w[0] - w2) <= 1e-6f) printf("  %-28s ok\n", "sgd momentum + weight decay");
  /* the non-finite flag read where the update runs: set, nothing moves; clear, the step is made */
  {
    float w0[2] = {w[0], w[1]}, m0[2] = {m[0], m[1]}, acc[2] = {1, 2};
    int32_t set = 1, clear = 0;
    mnt_lars_seg seg = {.off = 0, .n = 2, .adapt = 1};
    mnt_sgd_step(g_be, w, g, m, 2, &hp, 0.9f, 0.01f, 0, &set);
    mnt_lars_step(g_be, w, g, m, &seg, 1, &hp, 0.9f, 0.01f, 0.001f, 0, &set);
    mnt_f32_acc_unless(g_be, acc, g, 2, &set);
    int same = !memcmp(w, w0, sizeof w0) && !memcmp(m, m0, sizeof m0) && acc[0] == 1 && acc[1] == 2;
    EXPECT(same, "sgd/lars/acc with the skip flag set changed w %g (was %g), m %g (was %g), acc %g", w[0], w0[0], m[0],
           m0[0], acc[0]);
    mnt_sgd_step(g_be, w, g, m, 2, &hp, 0.9f, 0.01f, 0, &clear);
    mnt_f32_acc_unless(g_be, acc, g, 2, &clear);
    EXPECT(w[0] != w0[0] && m[0] != m0[0] && acc[0] == 1.5f, "sgd/acc with the skip flag clear: no step taken");
    if (same) printf("  %-28s ok\n", "skip flag (sgd, lars, acc)");
  }
  /* the non-finite check finds one NaN or infinity anywhere, and nothing in finite data */
  size_t n = 100000;
  float *v = rnd(n);
  int32_t flag = -1;
  EXPECT(mnt_nonfinite(g_be, v, n, &flag) == MNT_OK && flag == 0, "nonfinite: finite data flagged (%d)", flag);
  v[n - 3] = INFINITY;
  EXPECT(mnt_nonfinite(g_be, v, n, &flag) == MNT_OK && flag == 1, "nonfinite: an infinity missed");
  v[n - 3] = 0;
  v[7] = NAN;
  EXPECT(mnt_nonfinite(g_be, v, n, &flag) == MNT_OK && flag == 1, "nonfinite: a NaN missed");
  /* the poison: every element NaN when any flag is set, untouched when none is */
  int32_t flags[2] = {0, 0};
  v[7] = 0.5f;
  EXPECT(mnt_f32_poison(g_be, v, 3, flags, 2) == MNT_OK && v[0] == v[0] && v[7] == 0.5f, "poison: flags clear, x changed");
  flags[1] = 1;
  EXPECT(mnt_f32_poison(g_be, v, 3, flags, 2) == MNT_OK && isnan(v[0]) && isnan(v[2]) && !isnan(v[3]),
         "poison: the second flag set, x[0..3) not NaN or x[3] touched");
  free(v);
}

/* a synchronous copy (the CUDA module's mem_copy, which bench allreduce checks results through)
 * waits for the device after cudaMemcpy from the host and between devices: without it a check may
 * reduce data still in flight and report a false #wrong */
static void test_copy_waits(void) {
  EXPECT(mnt_copy_waits_after(MNT_COPY_H2D), "a host-to-device copy must wait for the device");
  EXPECT(mnt_copy_waits_after(MNT_COPY_D2D), "a device-to-device copy must wait for the device");
  EXPECT(!mnt_copy_waits_after(MNT_COPY_D2H), "a device-to-host cudaMemcpy returns complete: no extra wait");
}

/* a captured step (backend.h: mnt_be_capture_begin) refuses what a replayed graph cannot hold, on the
 * CPU as on a GPU: host copies either way, waits, allocations; a copy on the backend and an op run */
static void test_capture(mnt_backend *b) {
  float *x = NULL, *y = NULL, h[4] = {1, 2, 3, 4};
  void *g = (void *)1, *p = NULL;
  EXPECT(mnt_be_alloc(b, sizeof h, (void **)&x) == MNT_OK && mnt_be_alloc(b, sizeof h, (void **)&y) == MNT_OK, "alloc");
  EXPECT(mnt_be_copy(b, x, h, sizeof h, MNT_COPY_H2D) == MNT_OK, "a copy before the capture");
  EXPECT(mnt_be_capture_begin(b) == MNT_OK && b->capturing, "capture begins");
  EXPECT(mnt_be_capture_begin(b) == MNT_EARG, "a capture inside a capture is refused");
  EXPECT(mnt_be_copy(b, h, x, sizeof h, MNT_COPY_D2H) == MNT_EARG, "a copy to the host inside a capture");
  EXPECT(mnt_be_copy(b, x, h, sizeof h, MNT_COPY_H2D) == MNT_EARG, "a copy from the host inside a capture");
  EXPECT(strstr(mnt_last_error(), "inside a captured step") != NULL, "the refusal says why: %s", mnt_last_error());
  EXPECT(mnt_be_sync(b) == MNT_EARG, "a wait for the stream inside a capture");
  EXPECT(mnt_be_alloc(b, 16, &p) == MNT_EARG && !p, "an allocation inside a capture");
  EXPECT(mnt_act_download(b, x, h, 1, 4, 1, 1) == MNT_EARG, "a download of activations inside a capture");
  EXPECT(mnt_be_copy(b, y, x, sizeof h, MNT_COPY_D2D) == MNT_OK, "a copy on the backend inside a capture");
  EXPECT(mnt_f32_scale(b, y, 2.0f, 4) == MNT_OK, "an op inside a capture");
  EXPECT(mnt_be_capture_end(b, &g) == MNT_OK && !g && !b->capturing, "the cpu backend does not replay: no graph");
  EXPECT(!mnt_be_can_replay(b), "the cpu backend says it does not replay");
  EXPECT(mnt_be_capture_end(b, &g) == MNT_EARG, "an end without a beginning is refused");
  float back[4] = {0};
  EXPECT(mnt_be_copy(b, back, y, sizeof back, MNT_COPY_D2H) == MNT_OK && back[3] == 8.0f, "after it: %g", back[3]);
  mnt_be_free(b, x), mnt_be_free(b, y);
  printf("  %-28s ok\n", "capture rules (cpu)");
}

int main(void) {
  mnt_backend *b;
  if (mnt_backend_create("cpu", NULL, &b) != MNT_OK) return 1;
  g_be = b;
  test_conv(b, 1, 1, 3, 3, 4);
  test_conv(b, 2, 1, 3, 3, 4);
  test_conv(b, 2, 0, 1, 3, 4);
  test_conv(b, 2, 3, 7, 3, 4);
  test_conv(b, 1, 1, 3, 16, 16); /* blocked activations in and out */
  test_conv(b, 2, 0, 1, 16, 32);
  test_conv(b, 1, 1, 3, 3, 16);  /* plain in, blocked out: the stem */
  /* 3x3 on 2x2 and 1x1 inputs (ResNet-18's layer4 at 32-64 px): no jit:avx2 backward-weights there,
   * so that pass runs in another layout with the activations reordered around it */
  test_conv_hw(b, 2, 2, 1, 1, 3, 16, 16);
  test_conv_hw(b, 1, 1, 1, 1, 3, 16, 16);
  test_conv_hw(b, 4, 4, 2, 1, 3, 16, 32);
  test_conv_hw(b, 3, 3, 2, 1, 3, 8, 16);
  test_conv_no_dx(b);
  test_bn(b, 0);
  test_bn(b, 1);
  test_pool(b);
  test_fc();
  test_small();
  test_sgd();
  test_copy_waits();
  test_capture(b);
  mnt_backend_destroy(b);
  if (failures) {
    fprintf(stderr, "test_ops: %d failures\n", failures);
    return 1;
  }
  printf("test_ops: ok\n");
  return 0;
}
