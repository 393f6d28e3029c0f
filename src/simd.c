/* simd.c — the variant choice and the CPU backend's fp32 loops; see simd.h. */
#include "src/simd.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "src/dtype.h"
#include "src/env.h"
#include "src/log.h"

static const char *const NAMES[MNT_SIMD_LEVELS] = {MNT_SIMD_X86 ? "sse2" : "generic", "avx2", "avx512"};

const char *mnt_simd_name(mnt_simd_level v) {
  return (unsigned)v < MNT_SIMD_LEVELS ? NAMES[v] : "?";
}

int mnt_simd_supported(mnt_simd_level v) {
  if (v == MNT_SIMD_SSE2) return 1;
#if MNT_SIMD_X86
  __builtin_cpu_init(); /* libgcc checks the OS's XCR0 (YMM/ZMM state saved) before it reports AVX* */
  int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  if (v == MNT_SIMD_AVX2) return avx2;
  if (v == MNT_SIMD_AVX512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
  return 0;
}

static mnt_simd_level best(void) {
  for (int v = MNT_SIMD_LEVELS - 1; v > 0; v--)
    if (mnt_simd_supported((mnt_simd_level)v)) return (mnt_simd_level)v;
  return MNT_SIMD_SSE2;
}

/* "auto" -> -1, a variant's name -> its level; NULL or why not */
static const char *parse(const char *s, int *level) {
  static _Thread_local char why[160];
  *level = -1;
  if (!strcasecmp(s, "auto")) return NULL;
  for (int v = 0; v < MNT_SIMD_LEVELS; v++)
    if (!strcasecmp(s, NAMES[v])) {
      if (!mnt_simd_supported((mnt_simd_level)v)) {
        snprintf(why, sizeof why, "this CPU cannot run %s (the best it runs is %s)", NAMES[v], NAMES[best()]);
        return why;
      }
      *level = v;
      return NULL;
    }
  snprintf(why, sizeof why, "expected auto, %s, avx2 or avx512", NAMES[0]);
  return why;
}

int mnt_simd_env_check(void) {
  int level;
  const char *s = mnt_env_simd(), *why = s ? parse(s, &level) : NULL;
  if (!why) return MNT_OK;
  MNT_ERR("environment variable MNT_SIMD='%s': %s (see mntrain --help)", s, why);
  return MNT_EARG;
}

static _Atomic int active = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
  int want = -1;
  const char *s = mnt_env_simd(), *why = s ? parse(s, &want) : NULL;
  /* main has refused a bad value already (mnt_env_check); a library user is told, and gets the best */
  if (why) MNT_ERR("environment variable MNT_SIMD='%s': %s (see mntrain --help); using %s", s, why, NAMES[best()]);
  int expected = -1; /* a mnt_simd_force before the first call wins */
  atomic_compare_exchange_strong(&active, &expected, want >= 0 ? want : (int)best());
}

mnt_simd_level mnt_simd_active(void) {
  int v = atomic_load_explicit(&active, memory_order_relaxed);
  if (v >= 0) return (mnt_simd_level)v;
  pthread_once(&once, choose);
  return (mnt_simd_level)atomic_load(&active);
}

const char *mnt_simd_variant(void) { return NAMES[mnt_simd_active()]; }

int mnt_simd_force(mnt_simd_level v) {
  if ((unsigned)v >= MNT_SIMD_LEVELS || !mnt_simd_supported(v)) return MNT_EARG;
  atomic_store(&active, (int)v);
  return MNT_OK;
}

/* ---- fp32 loops ----------------------------------------------------------------------------- */
MNT_SIMD_BODY void acc_body(float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}
MNT_SIMD_BODY void scale_body(float *y, float a, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] *= a;
}
MNT_SIMD_BODY void add_body(float *y, const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
MNT_SIMD_BODY void relu_body(float *y, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}
MNT_SIMD_BODY void relu_bwd_body(float *dx, const float *y, const float *dy, size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
}
/* bf16 activations: computed in fp32, rounded once (dtype.h) */
MNT_SIMD_BODY void acc_bf16_body(uint16_t *y, const uint16_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = mnt_bf16_round(mnt_bf16_widen(y[i]) + mnt_bf16_widen(x[i]));
}
MNT_SIMD_BODY void add_bf16_body(uint16_t *y, const uint16_t *a, const uint16_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = mnt_bf16_round(mnt_bf16_widen(a[i]) + mnt_bf16_widen(b[i]));
}
MNT_SIMD_BODY void relu_bf16_body(uint16_t *y, const uint16_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = mnt_bf16_widen(x[i]) > 0 ? x[i] : 0;
}
MNT_SIMD_BODY void relu_bwd_bf16_body(uint16_t *dx, const uint16_t *y, const uint16_t *dy, size_t n) {
  for (size_t i = 0; i < n; i++) dx[i] = mnt_bf16_widen(y[i]) > 0 ? dy[i] : 0;
}
MNT_SIMD_BODY void sgd_body(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first) {
  if (first)
    for (size_t i = 0; i < n; i++) {
      float d = g[i] + wd * w[i];
      m[i] = d;
      w[i] -= lr * d;
    }
  else
    for (size_t i = 0; i < n; i++) {
      float v = mu * m[i] + (g[i] + wd * w[i]);
      m[i] = v;
      w[i] -= lr * v;
    }
}
/* LARS's step on one tensor: v = mu m + lr (g + wd w) (v without mu m on the first step); m = v; w -= v */
MNT_SIMD_BODY void lars_body(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first) {
  if (first)
    for (size_t i = 0; i < n; i++) {
      float v = lr * (g[i] + wd * w[i]);
      m[i] = v;
      w[i] -= v;
    }
  else
    for (size_t i = 0; i < n; i++) {
      float v = mu * m[i] + lr * (g[i] + wd * w[i]);
      m[i] = v;
      w[i] -= v;
    }
}
/* Inf and NaN: all exponent bits set (an integer test, so that the compiler vectorizes it) */
MNT_SIMD_BODY int nonfinite_body(const float *x, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return bad != 0;
}

MNT_SIMD_CLONES(acc, (float *y, const float *x, size_t n), (y, x, n))
MNT_SIMD_CLONES(scale, (float *y, float a, size_t n), (y, a, n))
MNT_SIMD_CLONES(add, (float *y, const float *a, const float *b, size_t n), (y, a, b, n))
MNT_SIMD_CLONES(relu, (float *y, const float *x, size_t n), (y, x, n))
MNT_SIMD_CLONES(relu_bwd, (float *dx, const float *y, const float *dy, size_t n), (dx, y, dy, n))
MNT_SIMD_CLONES(acc_bf16, (uint16_t *y, const uint16_t *x, size_t n), (y, x, n))
MNT_SIMD_CLONES(add_bf16, (uint16_t *y, const uint16_t *a, const uint16_t *b, size_t n), (y, a, b, n))
MNT_SIMD_CLONES(relu_bf16, (uint16_t *y, const uint16_t *x, size_t n), (y, x, n))
MNT_SIMD_CLONES(relu_bwd_bf16, (uint16_t *dx, const uint16_t *y, const uint16_t *dy, size_t n), (dx, y, dy, n))
MNT_SIMD_CLONES(sgd, (float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first),
                (w, g, m, n, lr, mu, wd, first))
MNT_SIMD_CLONES(lars, (float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first),
                (w, g, m, n, lr, mu, wd, first))
MNT_SIMD_CLONES_RET(int, nonfinite, (const float *x, size_t n), (x, n))

/* this thread's share [lo, hi) of n, in whole 64-byte lines, as `schedule(static)` */
static void chunk(size_t n, size_t *lo, size_t *hi) {
  size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
  size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
  *lo = t * per < n ? t * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

enum { PAR_MIN = 65536 }; /* as the backend's loops: fewer elements run on the calling thread */

void mnt_vec_acc(float *y, const float *x, size_t n) {
  void (*f)(float *, const float *, size_t) = MNT_SIMD_PICK(acc);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, x + lo, hi - lo);
  }
}

void mnt_vec_scale(float *y, float a, size_t n) {
  void (*f)(float *, float, size_t) = MNT_SIMD_PICK(scale);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, a, hi - lo);
  }
}

void mnt_vec_add(float *y, const float *a, const float *b, size_t n) {
  void (*f)(float *, const float *, const float *, size_t) = MNT_SIMD_PICK(add);
#pragma omp parallel
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, a + lo, b + lo, hi - lo);
  }
}

void mnt_vec_relu(float *y, const float *x, size_t n) {
  void (*f)(float *, const float *, size_t) = MNT_SIMD_PICK(relu);
#pragma omp parallel
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, x + lo, hi - lo);
  }
}

void mnt_vec_acc_bf16(uint16_t *y, const uint16_t *x, size_t n) {
  void (*f)(uint16_t *, const uint16_t *, size_t) = MNT_SIMD_PICK(acc_bf16);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, x + lo, hi - lo);
  }
}

void mnt_vec_add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, size_t n) {
  void (*f)(uint16_t *, const uint16_t *, const uint16_t *, size_t) = MNT_SIMD_PICK(add_bf16);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, a + lo, b + lo, hi - lo);
  }
}

void mnt_vec_relu_bf16(uint16_t *y, const uint16_t *x, size_t n) {
  void (*f)(uint16_t *, const uint16_t *, size_t) = MNT_SIMD_PICK(relu_bf16);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(y + lo, x + lo, hi - lo);
  }
}

void mnt_vec_relu_backward_bf16(uint16_t *dx, const uint16_t *y, const uint16_t *dy, size_t n) {
  void (*f)(uint16_t *, const uint16_t *, const uint16_t *, size_t) = MNT_SIMD_PICK(relu_bwd_bf16);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(dx + lo, y + lo, dy + lo, hi - lo);
  }
}

void mnt_vec_relu_backward(float *dx, const float *y, const float *dy, size_t n) {
  void (*f)(float *, const float *, const float *, size_t) = MNT_SIMD_PICK(relu_bwd);
#pragma omp parallel
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(dx + lo, y + lo, dy + lo, hi - lo);
  }
}

void mnt_vec_sgd(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first) {
  void (*f)(float *, const float *, float *, size_t, float, float, float, int) = MNT_SIMD_PICK(sgd);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(w + lo, g + lo, m + lo, hi - lo, lr, mu, wd, first);
  }
}

void mnt_vec_lars(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first) {
  void (*f)(float *, const float *, float *, size_t, float, float, float, int) = MNT_SIMD_PICK(lars);
#pragma omp parallel if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) f(w + lo, g + lo, m + lo, hi - lo, lr, mu, wd, first);
  }
}

void mnt_vec_sumsq2(const float *x, const float *y, size_t n, double *xx, double *yy) {
  /* blocks fixed by n alone (at most 1024 of them), summed in order: the same bits on any thread count */
  enum { MAXB = 1024 };
  size_t bs = (n + MAXB - 1) / MAXB;
  if (bs < 4096) bs = 4096;
  size_t nb = (n + bs - 1) / bs;
  double px[MAXB], py[MAXB];
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (size_t b = 0; b < nb; b++) {
    size_t lo = b * bs, hi = lo + bs < n ? lo + bs : n;
    double sx = 0, sy = 0;
    for (size_t i = lo; i < hi; i++) {
      sx += (double)x[i] * x[i];
      sy += (double)y[i] * y[i];
    }
    px[b] = sx;
    py[b] = sy;
  }
  double sx = 0, sy = 0;
  for (size_t b = 0; b < nb; b++) sx += px[b], sy += py[b];
  *xx = sx;
  *yy = sy;
}

int mnt_vec_nonfinite(const float *x, size_t n) {
  int (*f)(const float *, size_t) = MNT_SIMD_PICK(nonfinite);
  int bad = 0;
#pragma omp parallel reduction(| : bad) if (n > PAR_MIN)
  {
    size_t lo, hi;
    chunk(n, &lo, &hi);
    if (hi > lo) bad |= f(x + lo, hi - lo);
  }
  return bad;
}
