/* test_ops_bf16.c — every op of the CPU backend in bf16 (--precision bf16) against the same op in
 * fp32, on inputs that bf16 holds exactly (every input rounded to bf16 first, the weights too): the
 * two then differ only by the bf16 result's one rounding and the order of fp32 sums, so each output
 * must agree within bf16's rounding, |bf16 - fp32| <= 2^-8 |fp32| + 2^-10 rms(fp32) per element
 * (2^-9 is bf16's half-ulp; twice it, for an input gradient a pass computes from a bf16 tensor it
 * rounded itself, as batch norm's backward from its own saved output; the rms term covers sums that
 * cancel to near zero). Outputs that stay fp32 (weight gradients, BN statistics, the loss) are held
 * to 2^-12. Run under MNT_CPU_LAYOUT=nhwc as well (CTest); below AVX-512 the bf16 backend must
 * be refused with the ISA named (exit 77 otherwise would hide the check: the test asserts it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/dtype.h"
#include "src/log.h"

#include "tests/expect.h"

static unsigned long long seed = 0x9e3779b97f4a7c15ull;
static float frand(void) {
  seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
  return (float)((seed >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
/* n random values that bf16 holds exactly, in [-a, a) */
static float *rnd(size_t n, float a) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = mnt_bf16_to_f32(mnt_f32_to_bf16(a * frand()));
  return p;
}

static mnt_backend *B[2]; /* [0] fp32, [1] bf16 */

/* an activation of n elements (N, C, HW) in backend k, from host fp32 (NULL: zeros) */
static void *act(int k, const float *host, int N, int C, int H, int W) {
  void *p = NULL;
  size_t n = (size_t)N * C * H * W;
  EXPECT(mnt_be_alloc(B[k], n * B[k]->act_bytes, &p) == MNT_OK, "alloc");
  if (host) EXPECT(mnt_act_upload(B[k], host, p, N, C, H, W) == MNT_OK, "upload");
  return p;
}
static float *down(int k, const void *a, int N, int C, int H, int W) {
  float *h = malloc((size_t)N * C * H * W * sizeof *h);
  EXPECT(mnt_act_download(B[k], a, h, N, C, H, W) == MNT_OK, "download");
  return h;
}

static double worst_seen;
/* bf16's result b against fp32's f (n values): per element within rel |f| + rms(f) / floor_div */
static void agree_floor(const char *what, const float *b, const float *f, size_t n, double rel, double floor_div) {
  double ss = 0, worst = 0;
  for (size_t i = 0; i < n; i++) ss += (double)f[i] * f[i];
  double rms = sqrt(ss / (double)n), floor = rms / floor_div;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)b[i] - f[i]) / (rel * fabs(f[i]) + floor + 1e-30);
    if (!(e <= worst)) worst = e, at = i; /* NaN counts as the worst */
  }
  EXPECT(worst <= 1.0 && rms > 0, "%s: bf16 and fp32 disagree beyond bf16's rounding at element %zu: %.7g vs %.7g "
         "(%.2f of the tolerance; rms %.3g)", what, at, (double)b[at], (double)f[at], worst, rms);
  if (worst > worst_seen) worst_seen = worst;
  if (worst <= 1.0) printf("  %-34s ok (%.2f of the tolerance)\n", what, worst);
}
static void agree(const char *what, const float *b, const float *f, size_t n, double rel) {
  agree_floor(what, b, f, n, rel, 1024);
}
static const double ACT = 1.0 / 256, F32 = 1.0 / 4096;

static void test_conv(int N, int C, int H, int K, int R, int s, int p, int need_dx) {
  char name[96];
  snprintf(name, sizeof name, "conv%dx%d/s%d %d->%d on %d px", R, R, s, C, K, H);
  int OH = (H + 2 * p - R) / s + 1;
  size_t nx = (size_t)N * C * H * H, nw = (size_t)K * C * R * R, ny = (size_t)N * K * OH * OH;
  float *x = rnd(nx, 1), *w = rnd(nw, 0.2f), *dy = rnd(ny, 1), *res[2][4];
  for (int k = 0; k < 2; k++) {
    mnt_conv *c;
    EXPECT(mnt_conv_create(B[k], N, C, H, H, K, R, s, p, need_dx, &c) == MNT_OK, "conv create");
    void *xa = act(k, x, N, C, H, H), *ya = act(k, NULL, N, K, OH, OH), *dya = act(k, dy, N, K, OH, OH);
    void *dxa = need_dx ? act(k, NULL, N, C, H, H) : NULL;
    float *dw = calloc(nw, sizeof *dw);
    EXPECT(mnt_conv_forward(c, xa, w, ya) == MNT_OK, "conv forward");
    EXPECT(mnt_conv_backward(c, xa, w, dya, dxa, dw) == MNT_OK, "conv backward");
    if (k) printf("  %s runs %s\n", name, mnt_conv_impl(c, NULL));
    res[k][0] = down(k, ya, N, K, OH, OH);
    res[k][1] = dw;
    res[k][2] = need_dx ? down(k, dxa, N, C, H, H) : NULL;
    mnt_be_free(B[k], xa), mnt_be_free(B[k], ya), mnt_be_free(B[k], dya), mnt_be_free(B[k], dxa);
    mnt_conv_destroy(c);
  }
  char what[128];
  snprintf(what, sizeof what, "%s y", name);
  agree(what, res[1][0], res[0][0], ny, ACT);
  snprintf(what, sizeof what, "%s dw (fp32)", name);
  agree(what, res[1][1], res[0][1], nw, F32);
  if (need_dx) {
    snprintf(what, sizeof what, "%s dx", name);
    agree(what, res[1][2], res[0][2], nx, ACT);
  }
  for (int k = 0; k < 2; k++) free(res[k][0]), free(res[k][1]), free(res[k][2]);
  free(x), free(w), free(dy);
}

static void test_bn(int relu) {
  int N = 4, C = 32, H = 5;
  size_t n = (size_t)N * C * H * H;
  float *x = rnd(n, 2), *dy = rnd(n, 1), *g = rnd((size_t)C, 1), *be = rnd((size_t)C, 0.5f);
  float *out[2][3], st[2][6][32];
  for (int k = 0; k < 2; k++) {
    mnt_bn *bn;
    EXPECT(mnt_bn_create(B[k], N, C, H, H, 1e-5f, relu, &bn) == MNT_OK, "bn create");
    void *xa = act(k, x, N, C, H, H), *ya = act(k, NULL, N, C, H, H), *dya = act(k, dy, N, C, H, H),
         *dxa = act(k, NULL, N, C, H, H), *yi = act(k, NULL, N, C, H, H);
    for (int c = 0; c < C; c++) st[k][2][c] = 0.1f, st[k][3][c] = 0.9f;
    EXPECT(mnt_bn_forward_train(bn, xa, g, be, ya, st[k][0], st[k][1], st[k][2], st[k][3], 0.1f) == MNT_OK, "bn fwd");
    EXPECT(mnt_bn_backward(bn, xa, dya, g, st[k][0], st[k][1], dxa, st[k][4], st[k][5]) == MNT_OK, "bn bwd");
    EXPECT(mnt_bn_forward_infer(bn, xa, g, be, yi, st[k][2], st[k][3]) == MNT_OK, "bn infer");
    out[k][0] = down(k, ya, N, C, H, H);
    out[k][1] = down(k, dxa, N, C, H, H);
    out[k][2] = down(k, yi, N, C, H, H);
    mnt_be_free(B[k], xa), mnt_be_free(B[k], ya), mnt_be_free(B[k], dya), mnt_be_free(B[k], dxa), mnt_be_free(B[k], yi);
    mnt_bn_destroy(bn);
  }
  const char *p = relu ? "batch norm+relu" : "batch norm";
  char w[64];
  snprintf(w, sizeof w, "%s y", p), agree(w, out[1][0], out[0][0], n, ACT);
  snprintf(w, sizeof w, "%s dx", p), agree(w, out[1][1], out[0][1], n, 2 * ACT);
  snprintf(w, sizeof w, "%s inference y", p), agree(w, out[1][2], out[0][2], n, ACT);
  static const char *const SN[6] = {"mean", "variance", "running mean", "running var", "dgamma", "dbeta"};
  for (int i = 0; i < 6; i++) {
    snprintf(w, sizeof w, "%s %s (fp32)", p, SN[i]);
    agree(w, st[1][i], st[0][i], (size_t)C, i >= 4 ? 4 * F32 : F32); /* dgamma, dbeta: sums of bf16 products */
  }
  for (int k = 0; k < 2; k++) free(out[k][0]), free(out[k][1]), free(out[k][2]);
  free(x), free(dy), free(g), free(be);
}

static void test_pool(void) {
  int N = 2, C = 16, H = 9, OH = 5;
  size_t nx = (size_t)N * C * H * H, ny = (size_t)N * C * OH * OH;
  float *x = rnd(nx, 1), *dy = rnd(ny, 1), *o[2][2];
  for (int k = 0; k < 2; k++) {
    mnt_pool *pl;
    EXPECT(mnt_pool_create(B[k], N, C, H, H, 3, 2, 1, &pl) == MNT_OK, "pool create");
    void *xa = act(k, x, N, C, H, H), *ya = act(k, NULL, N, C, OH, OH), *dya = act(k, dy, N, C, OH, OH),
         *dxa = act(k, NULL, N, C, H, H);
    EXPECT(mnt_pool_forward(pl, xa, ya) == MNT_OK && mnt_pool_backward(pl, dya, dxa) == MNT_OK, "pool");
    o[k][0] = down(k, ya, N, C, OH, OH), o[k][1] = down(k, dxa, N, C, H, H);
    mnt_be_free(B[k], xa), mnt_be_free(B[k], ya), mnt_be_free(B[k], dya), mnt_be_free(B[k], dxa);
    mnt_pool_destroy(pl);
  }
  agree("max pool y", o[1][0], o[0][0], ny, ACT);
  /* overlapping windows sum up to four gradients into one input, each partial sum rounded to bf16
   * (up to four half-ulps); the terms may cancel, hence a floor of half a bf16 ulp of their rms */
  agree_floor("max pool dx", o[1][1], o[0][1], nx, 4 * ACT, 256);
  for (int k = 0; k < 2; k++) free(o[k][0]), free(o[k][1]);
  free(x), free(dy);
}

/* relu, its backward, the residual add, the gradient accumulation, global average pooling (both
 * ways), the fully connected layer (both ways) and the loss, on one [N, C, HW] activation */
static void test_small(void) {
  int N = 4, C = 32, H = 3, O = 10;
  size_t n = (size_t)N * C * H * H;
  float *x = rnd(n, 1), *x2 = rnd(n, 1), *dy = rnd(n, 1), *w = rnd((size_t)O * C, 0.3f), *bias = rnd((size_t)O, 0.1f);
  float *dyo = rnd((size_t)N * O, 1), *fx = rnd((size_t)N * C, 1);
  int32_t lab[4] = {3, 0, 9, 5};
  float *o[2][9], dw[2][320], db[2][10], l3[2][3];
  for (int k = 0; k < 2; k++) {
    mnt_backend *b = B[k];
    void *xa = act(k, x, N, C, H, H), *x2a = act(k, x2, N, C, H, H), *dya = act(k, dy, N, C, H, H);
    void *r = act(k, NULL, N, C, H, H), *dr = act(k, NULL, N, C, H, H), *ad = act(k, NULL, N, C, H, H);
    void *acc = act(k, x, N, C, H, H), *gp = act(k, NULL, N, C, 1, 1), *dgp = act(k, NULL, N, C, H, H);
    void *lo = act(k, NULL, N, O, 1, 1), *dlo = act(k, NULL, N, O, 1, 1), *dyoa = act(k, dyo, N, O, 1, 1),
         *dfx = act(k, NULL, N, C, 1, 1), *fxa = act(k, fx, N, C, 1, 1);
    EXPECT(mnt_relu_forward(b, xa, r, n) == MNT_OK && mnt_relu_backward(b, r, dya, dr, n) == MNT_OK, "relu");
    EXPECT(mnt_add_forward(b, xa, x2a, ad, n) == MNT_OK && mnt_act_acc(b, acc, x2a, n) == MNT_OK, "add");
    EXPECT(mnt_gap_forward(b, xa, gp, N, C, H * H) == MNT_OK && mnt_gap_backward(b, gp, dgp, N, C, H * H) == MNT_OK,
           "gap");
    EXPECT(mnt_fc_forward(b, fxa, w, bias, lo, N, C, O) == MNT_OK, "fc forward");
    EXPECT(mnt_fc_backward(b, fxa, w, dyoa, dfx, dw[k], db[k], N, C, O) == MNT_OK, "fc backward");
    EXPECT(mnt_softmax_xent(b, lo, lab, dlo, N, O, 0.1f, l3[k]) == MNT_OK, "loss");
    o[k][0] = down(k, r, N, C, H, H), o[k][1] = down(k, dr, N, C, H, H), o[k][2] = down(k, ad, N, C, H, H);
    o[k][3] = down(k, acc, N, C, H, H), o[k][4] = down(k, gp, N, C, 1, 1), o[k][5] = down(k, dgp, N, C, H, H);
    o[k][6] = down(k, lo, N, O, 1, 1), o[k][7] = down(k, dfx, N, C, 1, 1), o[k][8] = down(k, dlo, N, O, 1, 1);
    void *all[] = {xa, x2a, dya, r, dr, ad, acc, gp, dgp, lo, dlo, dyoa, dfx, fxa};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mnt_be_free(b, all[i]);
  }
  agree("relu y", o[1][0], o[0][0], n, ACT);
  agree("relu dx", o[1][1], o[0][1], n, ACT);
  agree("residual add", o[1][2], o[0][2], n, ACT);
  agree("gradient accumulation", o[1][3], o[0][3], n, ACT);
  agree("global average pool y", o[1][4], o[0][4], (size_t)N * C, ACT);
  agree("global average pool dx", o[1][5], o[0][5], n, 2 * ACT); /* from the rounded y: two roundings */
  agree("fc y", o[1][6], o[0][6], (size_t)N * O, ACT);
  agree("fc dx", o[1][7], o[0][7], (size_t)N * C, ACT);
  agree("fc dw (fp32)", dw[1], dw[0], (size_t)O * C, F32);
  agree("fc dbias (fp32)", db[1], db[0], (size_t)O, F32);
  /* the loss reads the logits as bf16 rounded them: within their half-ulp, and the same hits */
  agree("loss, top-1, top-5 (fp32)", l3[1], l3[0], 3, ACT);
  agree("loss dlogits", o[1][8], o[0][8], (size_t)N * O, 2 * ACT);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 9; i++) free(o[k][i]);
  free(x), free(x2), free(dy), free(w), free(bias), free(dyo), free(fx);
}

int main(void) {
  mnt_backend_opts o32 = {.precision = MNT_PREC_FP32, .device = -1}, o16 = {.precision = MNT_PREC_BF16, .device = -1};
  /* the fp32 reference in fp32's own layout whatever MNT_CPU_LAYOUT says: a layout handled wrongly
   * in both would otherwise agree with itself */
  const char *lay = getenv("MNT_CPU_LAYOUT");
  char keep[32];
  snprintf(keep, sizeof keep, "%s", lay ? lay : "");
  unsetenv("MNT_CPU_LAYOUT");
  if (mnt_backend_create("cpu", &o32, &B[0]) != MNT_OK) return 1;
  if (lay) setenv("MNT_CPU_LAYOUT", keep, 1);
  int st = mnt_backend_create("cpu", &o16, &B[1]);
  const char *isa = mnt_cpu_isa_name();
  if (strncmp(isa, "avx512", 6)) { /* no bf16 kernels: refused, the ISA named (log above) */
    EXPECT(st == MNT_EARG, "--precision bf16 on %s: status %d, not the refusal", isa, st);
    printf("bf16 on %s: refused as it must be (%d checks, %d failures)\n", isa, checks, failures);
    mnt_backend_destroy(B[0]);
    return failures ? 1 : 0;
  }
  EXPECT(st == MNT_OK && B[1]->act_bytes == 2 && B[1]->precision == MNT_PREC_BF16, "bf16 backend on %s", isa);
  if (st != MNT_OK) return 1;
  printf("bf16 ops against fp32 on %s (MNT_CPU_LAYOUT=%s):\n", isa, getenv("MNT_CPU_LAYOUT") ? getenv("MNT_CPU_LAYOUT") : "auto");
  test_conv(2, 3, 16, 16, 7, 2, 3, 0);  /* the stem: 3 channels in, no dx */
  test_conv(2, 16, 8, 32, 3, 1, 1, 1);
  test_conv(2, 32, 8, 32, 3, 2, 1, 1);
  test_conv(2, 32, 7, 64, 1, 1, 0, 1);
  test_conv(2, 64, 7, 32, 1, 2, 0, 1);  /* a downsample */
  test_conv(2, 16, 2, 16, 3, 1, 1, 1);  /* a 2x2 input: layer4 at small sizes */
  test_bn(0);
  test_bn(1);
  test_pool();
  test_small();
  long long re[2];
  mnt_be_reorders(B[1], re);
  printf("reorders so far: %lld of activations, %lld of weights\n", re[0], re[1]);
  EXPECT(re[1] > 0, "the bf16 weights are made by reorders: none counted");
  mnt_backend_destroy(B[0]);
  mnt_backend_destroy(B[1]);
  printf("%d checks, %d failures (worst %.2f of a tolerance)\n", checks, failures, worst_seen);
  return failures ? 1 : 0;
}
