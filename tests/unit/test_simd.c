/* test_simd.c — every variant of the dispatched loops (src/simd.h) that this CPU runs, against a
 * scalar reference written here as the code was before the dispatch (one value at a time):
 * the casts fp32 <-> bf16/fp16/fp64 and the collectives' reduce/scale loops (bit for bit, NaNs
 * included: special values, all 65,536 16-bit patterns, a sweep of the 2^32 float patterns), the
 * CPU backend's fp32 loops (acc, scale, add, relu, relu backward, SGD, non-finite check), and the
 * loader's resampler mnt_crop_resize and its uint8 form for the raw mode (bit for bit: up- and
 * down-scaling, flips, padded crops, grey to 3 channels, images larger than the fast path's
 * buffers), on awkward sizes (0, 1, 7, 8,
 * 15, 16, 17, large), unaligned pointers, and images placed against an inaccessible page on either
 * side (a read past the image faults). Then MNT_SIMD: a bad value or a variant this CPU cannot run
 * is an error (mnt_env_check), a good one is what a new process runs.
 * Variants this CPU cannot run are reported as skipped; the test passes when the others pass, and
 * exits 77 (skip) only when nothing beyond the baseline could run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "src/dtype.h"
#include "src/env.h"
#include "io/data/loader.h"
#include "src/log.h"
#include "src/simd.h"

#include "tests/expect.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float fl(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint64_t dbits(double f) { uint64_t u; memcpy(&u, &f, 8); return u; }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float unit(void) { return (float)((next() >> 40) * (1.0 / 16777216.0)); } /* [0, 1) */

/* ---- the reference: the scalar code as it was before the dispatch (src/dtype.c, io/data/loader.c,
 * src/backend/cpu/backend_cpu.c at 1de930f) -------------------------------------------------- */
static uint16_t ref_f32_to_bf16(float f) {
  uint32_t x = bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}
static float ref_bf16_to_f32(uint16_t h) { return fl((uint32_t)h << 16); }
static uint16_t ref_f32_to_f16(float f) {
  uint32_t x = bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    float a = fl(ax) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(bits(a) - 0x3f000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;
  return (uint16_t)(sign | (uint16_t)(ax >> 13));
}
static float ref_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, x;
  if (em >= 0x7c00u) x = 0x7f800000u | ((em & 0x3ffu) << 13);
  else if (em >= 0x0400u) x = (em << 13) + 0x38000000u;
  else x = bits((float)em * 5.9604644775390625e-8f);
  return fl(x | sign);
}

enum { REF_MAX_OUT = 4096 };
/* dst: outC planes of normalised floats; dst8 (when not NULL, pad 0): the interpolated values clamped to
 * 0..255 and rounded half up, out x out x outC interleaved (the loader's raw mode) */
static void ref_crop_resize(const uint8_t *src, int S, int C, double x0, double y0, double w, double h, int flip,
                            int pad, int out, int outC, const float *mean, const float *std, float *dst,
                            uint8_t *dst8) {
  static int xa[REF_MAX_OUT], xb[REF_MAX_OUT];
  static float wx[REF_MAX_OUT], inx[REF_MAX_OUT];
  double sx = w / out, sy = h / out;
  for (int ox = 0; ox < out; ox++) {
    double fx = x0 + (ox + 0.5) * sx - 0.5;
    int d = flip ? out - 1 - ox : ox;
    inx[d] = !pad || (fx > -0.5 && fx < S - 0.5);
    if (fx < 0) fx = 0;
    if (fx > S - 1) fx = S - 1;
    int x1 = (int)fx;
    xa[d] = x1 * C;
    xb[d] = (x1 + 1 < S ? x1 + 1 : x1) * C;
    wx[d] = (float)(fx - x1);
  }
  float scale[3], bias[3];
  for (int c = 0; c < outC; c++) {
    int sc = C == 1 ? 0 : c;
    scale[c] = 1.0f / (255.0f * std[sc]);
    bias[c] = -mean[sc] / std[sc];
  }
  for (int oy = 0; oy < out; oy++) {
    double fy = y0 + (oy + 0.5) * sy - 0.5;
    float iny = !pad || (fy > -0.5 && fy < S - 0.5);
    if (fy < 0) fy = 0;
    if (fy > S - 1) fy = S - 1;
    int y1 = (int)fy, y2 = y1 + 1 < S ? y1 + 1 : y1;
    float wy = (float)(fy - y1);
    const uint8_t *r1 = src + (size_t)y1 * S * C, *r2 = src + (size_t)y2 * S * C;
    for (int c = 0; c < outC; c++) {
      int sc = C == 1 ? 0 : c;
      float *o = dst + ((size_t)c * out + oy) * out, k = scale[c], b = bias[c];
      for (int ox = 0; ox < out; ox++) {
        float a = r1[xa[ox] + sc] + wx[ox] * (float)(r1[xb[ox] + sc] - r1[xa[ox] + sc]);
        float e = r2[xa[ox] + sc] + wx[ox] * (float)(r2[xb[ox] + sc] - r2[xa[ox] + sc]);
        o[ox] = (a + wy * (e - a)) * (inx[ox] * iny) * k + b;
        if (dst8) {
          float v = a + wy * (e - a);
          dst8[((size_t)oy * out + ox) * outC + c] = v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)(int)(v + 0.5f);
        }
      }
    }
  }
}

/* ---- helpers --------------------------------------------------------------------------------- */
/* equal bit for bit, or both NaN (which NaN an operation on two NaNs returns is the hardware's) */
static int same32(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }
static int nan16(uint16_t h, int bf) {
  return bf ? (h & 0x7f80) == 0x7f80 && (h & 0x7f) : (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}
/* element i of two arrays of type t: the same bits, or both NaN */
static int same_elem(int t, const unsigned char *a, const unsigned char *b, size_t i) {
  if (t == MNT_FP32) {
    float x, y;
    memcpy(&x, a + i * 4, 4);
    memcpy(&y, b + i * 4, 4);
    return same32(x, y);
  }
  if (t == MNT_FP64) {
    double x, y;
    memcpy(&x, a + i * 8, 8);
    memcpy(&y, b + i * 8, 8);
    return dbits(x) == dbits(y) || (isnan(x) && isnan(y));
  }
  uint16_t x, y;
  memcpy(&x, a + i * 2, 2);
  memcpy(&y, b + i * 2, 2);
  return x == y || (nan16(x, t == MNT_BF16) && nan16(y, t == MNT_BF16));
}

static const uint32_t SPECIAL[] = {
    0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00800000,
    0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fa12345, 0x7fbfffff, 0xffffffff,
    0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0x38800000, 0x387fffff, 0x38000000, 0x33800000,
    0x33000000, 0x33000001, 0x32ffffff, 0x337fffff, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x3f807fff, 0x7f7fffff,
    0x7f7f8000, 0x7f7f7fff, 0xff7fffff, 0x3a800fff, 0x3a801000, 0x3a803000, 0x387fe000, 0x387ff000, 0x4b800000};
enum { NSPECIAL = sizeof SPECIAL / sizeof SPECIAL[0] };

/* n floats: the specials, random bit patterns, and ordinary values, shuffled by position */
static void fill_f32(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = next();
    if (r % 5 == 0) x[i] = fl(SPECIAL[(r >> 8) % NSPECIAL]);
    else if (r % 5 == 1) x[i] = fl((uint32_t)(r >> 16));
    else x[i] = (unit() - 0.5f) * (float)(1 << (r >> 60));
  }
}

static const size_t SIZES[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099};
enum { NSIZES = sizeof SIZES / sizeof SIZES[0], BIG = 200003 };

/* ---- casts and reductions -------------------------------------------------------------------- */
static void check_casts(const char *v) {
  enum { N = 65536 + 64 };
  float *src = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
  uint16_t *h = malloc(N * 2), *h2 = malloc(N * 2);
  double *dd = malloc(N * sizeof(double));
  int bad = 0;
  for (int k = 0; k < NSIZES + 1; k++)
    for (size_t off = 0; off < 3; off++) {
      size_t n = k < NSIZES ? SIZES[k] : 65536;
      fill_f32(src, n + off);
      for (int bf = 0; bf < 2; bf++) {
        memset(h, 0xa5, N * 2);
        mnt_from_f32(bf ? MNT_BF16 : MNT_FP16, src + off, h + off, n);
        for (size_t i = 0; i < n && bad < 10; i++) {
          uint16_t want = bf ? ref_f32_to_bf16(src[off + i]) : ref_f32_to_f16(src[off + i]);
          if (h[off + i] != want) {
            bad++;
            EXPECT(0, "%s: %s(%08x) = %04x, want %04x (n %zu, offset %zu)", v, bf ? "bf16" : "fp16", bits(src[off + i]),
                   h[off + i], want, n, off);
          }
        }
        EXPECT(h[off + n] == 0xa5a5, "%s: %s wrote past n = %zu", v, bf ? "bf16" : "fp16", n);
      }
      mnt_from_f32(MNT_FP64, src + off, dd + off, n);
      for (size_t i = 0; i < n && bad < 10; i++)
        if (dbits(dd[off + i]) != dbits((double)src[off + i])) {
          bad++;
          EXPECT(0, "%s: fp64(%08x) differs (n %zu)", v, bits(src[off + i]), n);
        }
      /* back to fp32: every 16-bit pattern (k == NSIZES), or random ones */
      for (size_t i = 0; i < n + off; i++) h2[i] = (uint16_t)(k == NSIZES ? i - off : next());
      for (int bf = 0; bf < 2; bf++) {
        memset(got, 0xa5, N * sizeof(float));
        mnt_to_f32(bf ? MNT_BF16 : MNT_FP16, h2 + off, got + off, n);
        for (size_t i = 0; i < n && bad < 10; i++) {
          float want = bf ? ref_bf16_to_f32(h2[off + i]) : ref_f16_to_f32(h2[off + i]);
          if (bits(got[off + i]) != bits(want)) {
            bad++;
            EXPECT(0, "%s: f32(%s %04x) = %08x, want %08x", v, bf ? "bf16" : "fp16", h2[off + i], bits(got[off + i]),
                   bits(want));
          }
        }
        EXPECT(bits(got[off + n]) == 0xa5a5a5a5u, "%s: to_f32 wrote past n = %zu", v, n);
      }
      for (size_t i = 0; i < n + off; i++) dd[i] = (double)fl((uint32_t)next()) * (1.0 + unit() * 1e-9);
      mnt_to_f32(MNT_FP64, dd + off, got + off, n);
      for (size_t i = 0; i < n && bad < 10; i++)
        if (!same32(got[off + i], (float)dd[off + i])) {
          bad++;
          EXPECT(0, "%s: f32(double %a) differs", v, dd[off + i]);
        }
    }
  /* a sweep of the 2^32 float patterns (every 251st), in blocks */
  for (uint64_t base = 0; base < (1ull << 32) && bad < 10; base += 65536ull * 251) {
    for (uint32_t i = 0; i < 65536; i++) src[i] = fl((uint32_t)(base + (uint64_t)i * 251));
    for (int bf = 0; bf < 2; bf++) {
      mnt_from_f32(bf ? MNT_BF16 : MNT_FP16, src, h, 65536);
      for (uint32_t i = 0; i < 65536 && bad < 10; i++) {
        uint16_t want = bf ? ref_f32_to_bf16(src[i]) : ref_f32_to_f16(src[i]);
        if (h[i] != want) {
          bad++;
          EXPECT(0, "%s: sweep %s(%08x) = %04x, want %04x", v, bf ? "bf16" : "fp16", bits(src[i]), h[i], want);
        }
      }
    }
  }
  /* the collectives' loops: dst = (dst + src) / div and buf / div, one rounding */
  const float divs[] = {1.0f, 2.0f, 3.0f, 0.5f, 7.0f};
  for (int t = 0; t < 4; t++)
    for (int k = 0; k < NSIZES; k++)
      for (int j = 0; j < 5; j++) {
        size_t n = SIZES[k], off = (size_t)(k % 2), es = t == MNT_FP64 ? 8 : t == MNT_FP32 ? 4 : 2;
        unsigned char *d = malloc((n + 2) * es), *s = malloc((n + 2) * es), *want = malloc((n + 2) * es);
        fill_f32(src, 2 * (n + 2));
        for (size_t i = 0; i < n + 2; i++) {
          float a = src[i], b = src[n + 2 + i];
          if (t == MNT_FP32) { memcpy(d + i * 4, &a, 4); memcpy(s + i * 4, &b, 4); }
          else if (t == MNT_FP64) { double x = a, y = b; memcpy(d + i * 8, &x, 8); memcpy(s + i * 8, &y, 8); }
          else {
            uint16_t x = t == MNT_BF16 ? ref_f32_to_bf16(a) : ref_f32_to_f16(a);
            uint16_t y = t == MNT_BF16 ? ref_f32_to_bf16(b) : ref_f32_to_f16(b);
            memcpy(d + i * 2, &x, 2);
            memcpy(s + i * 2, &y, 2);
          }
        }
        memcpy(want, d, (n + 2) * es);
        for (size_t i = off; i < off + n; i++) {
          if (t == MNT_FP32) {
            float x, y;
            memcpy(&x, want + i * 4, 4);
            memcpy(&y, s + i * 4, 4);
            x = divs[j] == 1.0f ? x + y : (x + y) / divs[j];
            memcpy(want + i * 4, &x, 4);
          } else if (t == MNT_FP64) {
            double x, y, dv = divs[j];
            memcpy(&x, want + i * 8, 8);
            memcpy(&y, s + i * 8, 8);
            x = divs[j] == 1.0f ? x + y : (x + y) / dv;
            memcpy(want + i * 8, &x, 8);
          } else {
            uint16_t x, y;
            memcpy(&x, want + i * 2, 2);
            memcpy(&y, s + i * 2, 2);
            x = t == MNT_BF16 ? ref_f32_to_bf16((ref_bf16_to_f32(x) + ref_bf16_to_f32(y)) / divs[j])
                              : ref_f32_to_f16((ref_f16_to_f32(x) + ref_f16_to_f32(y)) / divs[j]);
            memcpy(want + i * 2, &x, 2);
          }
        }
        mnt_reduce((mnt_dtype)t, d + off * es, s + off * es, n, divs[j]);
        for (size_t i = 0; i < n + 2 && bad < 10; i++)
          if (!same_elem(t, d, want, i)) {
            bad++;
            EXPECT(0, "%s: mnt_reduce(%s, n %zu, div %g) differs at %zu", v, mnt_dtype_name((mnt_dtype)t), n,
                   (double)divs[j], i);
          }
        /* scale: buf / div on the result */
        memcpy(want, d, (n + 2) * es);
        for (size_t i = off; i < off + n && divs[j] != 1.0f; i++) {
          if (t == MNT_FP32) {
            float x;
            memcpy(&x, want + i * 4, 4);
            x = x / divs[j];
            memcpy(want + i * 4, &x, 4);
          } else if (t == MNT_FP64) {
            double x, dv = divs[j];
            memcpy(&x, want + i * 8, 8);
            x = x / dv;
            memcpy(want + i * 8, &x, 8);
          } else {
            uint16_t x;
            memcpy(&x, want + i * 2, 2);
            x = t == MNT_BF16 ? ref_f32_to_bf16(ref_bf16_to_f32(x) / divs[j])
                              : ref_f32_to_f16(ref_f16_to_f32(x) / divs[j]);
            memcpy(want + i * 2, &x, 2);
          }
        }
        mnt_scale_div((mnt_dtype)t, d + off * es, n, divs[j]);
        for (size_t i = 0; i < n + 2 && bad < 10; i++)
          if (!same_elem(t, d, want, i)) {
            bad++;
            EXPECT(0, "%s: mnt_scale_div(%s, n %zu, div %g) differs at %zu", v, mnt_dtype_name((mnt_dtype)t), n,
                   (double)divs[j], i);
          }
        free(d);
        free(s);
        free(want);
      }
  free(src);
  free(got);
  free(h);
  free(h2);
  free(dd);
}

/* ---- the backend's fp32 loops ------------------------------------------------------------------ */
static void check_vec(const char *v) {
  size_t cap = BIG + 8;
  float *x = malloc(cap * 4), *y = malloc(cap * 4), *g = malloc(cap * 4), *want = malloc(cap * 4),
        *wm = malloc(cap * 4), *m = malloc(cap * 4), *w0 = malloc(cap * 4), *m0 = malloc(cap * 4);
  int bad = 0;
  for (int k = 0; k <= NSIZES; k++)
    for (size_t off = 0; off < 2; off++) {
      size_t n = k < NSIZES ? SIZES[k] : BIG; /* BIG: OpenMP threads, uneven chunks */
      fill_f32(x, n + off + 1);
      fill_f32(y, n + off + 1);
      float *X = x + off, *Y = y + off;
#define CMP(what)                                                                                 \
  for (size_t i = 0; i < n + off + 1 && bad < 10; i++)                                            \
    if (!same32(got_[i], want[i])) {                                                              \
      bad++;                                                                                      \
      EXPECT(0, "%s: %s differs at %zu of n %zu (offset %zu): %08x, want %08x", v, what, i, n, off, \
             bits(got_[i]), bits(want[i]));                                                       \
    }
      float *got_ = g;
      /* y += x */
      memcpy(g, y, (n + off + 1) * 4);
      memcpy(want, y, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] += X[i];
      mnt_vec_acc(g + off, X, n);
      CMP("acc");
      /* y *= a */
      memcpy(g, y, (n + off + 1) * 4);
      memcpy(want, y, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] *= 0.3f;
      mnt_vec_scale(g + off, 0.3f, n);
      CMP("scale");
      /* y = a + b */
      memcpy(g, y, (n + off + 1) * 4);
      memcpy(want, y, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] = X[i] + Y[i];
      mnt_vec_add(g + off, X, Y, n);
      CMP("add");
      /* relu, in place and not */
      memcpy(g, y, (n + off + 1) * 4);
      memcpy(want, y, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] = X[i] > 0 ? X[i] : 0;
      mnt_vec_relu(g + off, X, n);
      CMP("relu");
      memcpy(g, x, (n + off + 1) * 4);
      memcpy(want, x, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] = X[i] > 0 ? X[i] : 0;
      mnt_vec_relu(g + off, g + off, n);
      CMP("relu in place");
      memcpy(g, y, (n + off + 1) * 4);
      memcpy(want, y, (n + off + 1) * 4);
      for (size_t i = 0; i < n; i++) want[off + i] = X[i] > 0 ? Y[i] : 0;
      mnt_vec_relu_backward(g + off, X, Y, n);
      CMP("relu backward");
      /* SGD: w, m from x, y; g from fresh values, a first step and a later one */
      for (int first = 0; first < 2; first++) {
        float lr = 0.1f, mu = 0.9f, wd = 5e-4f;
        fill_f32(g, n + off + 1);
        for (size_t i = 0; i < n + off + 1; i++) w0[i] = x[i], m0[i] = y[i];
        memcpy(want, w0, (n + off + 1) * 4);
        memcpy(wm, m0, (n + off + 1) * 4);
        for (size_t i = off; i < off + n; i++) {
          float d = g[i] + wd * want[i];
          float vv = first ? d : mu * wm[i] + d;
          wm[i] = vv;
          want[i] -= lr * vv;
        }
        memcpy(m, m0, (n + off + 1) * 4);
        float *wt = malloc((n + off + 1) * 4);
        memcpy(wt, w0, (n + off + 1) * 4);
        mnt_vec_sgd(wt + off, g + off, m + off, n, lr, mu, wd, first);
        got_ = wt;
        CMP(first ? "sgd (first) w" : "sgd w");
        memcpy(want, wm, (n + off + 1) * 4);
        got_ = m;
        CMP(first ? "sgd (first) m" : "sgd m");
        free(wt);
        got_ = g;
      }
      /* non-finite: none, then one Inf or NaN at the start, the end, the middle */
      for (size_t i = 0; i < n + off + 1; i++) g[i] = unit() - 0.5f;
      EXPECT(mnt_vec_nonfinite(g + off, n) == 0, "%s: nonfinite(finite, n %zu)", v, n);
      g[off + n] = NAN; /* just past the end: not looked at */
      EXPECT(mnt_vec_nonfinite(g + off, n) == 0, "%s: nonfinite read past n %zu", v, n);
      const uint32_t nf[] = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff};
      for (int j = 0; j < 5 && n; j++) {
        size_t at = j == 0 ? 0 : j == 1 ? n - 1 : (size_t)(next() % n);
        float keep = g[off + at];
        g[off + at] = fl(nf[j]);
        EXPECT(mnt_vec_nonfinite(g + off, n) == 1, "%s: nonfinite missed %08x at %zu of %zu", v, nf[j], at, n);
        g[off + at] = keep;
      }
#undef CMP
    }
  free(x);
  free(y);
  free(g);
  free(want);
  free(wm);
  free(m);
  free(w0);
  free(m0);
}

/* ---- the resampler --------------------------------------------------------------------------- */
/* `bytes` in a mapping with an inaccessible page right after them (at_end) or right before */
static uint8_t *guarded(size_t bytes, int at_end, void **map, size_t *maplen) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), body = (bytes + pg - 1) / pg * pg;
  *maplen = body + 2 * pg;
  uint8_t *p = mmap(NULL, *maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  mprotect(p, pg, PROT_NONE);
  mprotect(p + pg + body, pg, PROT_NONE);
  *map = p;
  return at_end ? p + pg + body - bytes : p + pg;
}

static int resample_case(const char *v, int S, int C, int outC, int out, const float box[MNT_BOX_FLOATS], int pad,
                         int at_end) {
  size_t px = (size_t)S * S * C, no = (size_t)outC * out * out;
  void *map;
  size_t maplen;
  uint8_t *img = guarded(px, at_end, &map, &maplen);
  float *got = malloc((no + 2) * sizeof(float)), *want = malloc(no * sizeof(float));
  if (!img || !got || !want) {
    EXPECT(0, "%s: out of memory for a %dx%dx%d image", v, S, S, C);
    return 1;
  }
  for (size_t i = 0; i < px; i++) img[i] = (uint8_t)(next() >> 56);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  uint8_t *want8 = pad ? NULL : malloc(no + 2), *got8 = pad ? NULL : malloc(no + 2);
  ref_crop_resize(img, S, C, box[0], box[1], box[2], box[3], box[4] != 0, pad, out, outC, mean, std, want, want8);
  got[0] = got[no + 1] = 12345.0f;
  mnt_crop_resize(img, S, C, box, pad, out, outC, mean, std, got + 1); /* unaligned */
  int bad = memcmp(got + 1, want, no * sizeof(float)) != 0 || got[0] != 12345.0f || got[no + 1] != 12345.0f;
  if (bad) {
    size_t i = 0;
    while (i < no && bits(got[1 + i]) == bits(want[i])) i++;
    EXPECT(0, "%s: crop_resize S %d C %d->%d out %d box (%g %g %g %g flip %g) pad %d: value %zu is %a, want %a", v, S,
           C, outC, out, (double)box[0], (double)box[1], (double)box[2], (double)box[3], (double)box[4], pad, i,
           i < no ? (double)got[1 + i] : 0.0, i < no ? (double)want[i] : 0.0);
  }
  /* aligned output (the fast path streams whole 32-byte lines) */
  float *al = aligned_alloc(64, (no * sizeof(float) + 63) / 64 * 64);
  if (al) {
    mnt_crop_resize(img, S, C, box, pad, out, outC, mean, std, al);
    if (memcmp(al, want, no * sizeof(float))) {
      bad = 1;
      EXPECT(0, "%s: crop_resize into aligned memory differs (S %d out %d)", v, S, out);
    }
    free(al);
  }
  if (want8 && got8) { /* the raw mode's uint8 crops (no padding there), unaligned, nothing written around */
    got8[0] = got8[no + 1] = 0xa5;
    mnt_crop_resize_u8(img, S, S, (size_t)S * C, C, box, 0, out, outC, got8 + 1);
    if (memcmp(got8 + 1, want8, no) || got8[0] != 0xa5 || got8[no + 1] != 0xa5) {
      size_t i = 0;
      while (i < no && got8[1 + i] == want8[i]) i++;
      bad = 1;
      EXPECT(0, "%s: crop_resize_u8 S %d C %d->%d out %d box (%g %g %g %g flip %g): byte %zu is %d, want %d", v, S, C,
             outC, out, (double)box[0], (double)box[1], (double)box[2], (double)box[3], (double)box[4], i,
             i < no ? got8[1 + i] : -1, i < no ? want8[i] : -1);
    }
  }
  munmap(map, maplen);
  free(got);
  free(want);
  free(got8);
  free(want8);
  return bad;
}

static void check_resample(const char *v) {
  static const int SS[] = {1, 2, 3, 4, 5, 9, 16, 33, 64, 256};
  static const int OUTS[] = {1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 64, 224};
  int bad = 0, cases = 0;
  for (int si = 0; si < (int)(sizeof SS / sizeof SS[0]) && bad < 5; si++)
    for (int oi = 0; oi < (int)(sizeof OUTS / sizeof OUTS[0]) && bad < 5; oi++)
      for (int C = 1; C <= 3; C += 2)
        for (int kind = 0; kind < 5; kind++) {
          int S = SS[si], out = OUTS[oi], outC = kind == 1 ? 3 : C, pad = kind == 3;
          if (S == 256 && out == 224 && kind > 2) continue; /* the slow reference, a few times is enough */
          float box[MNT_BOX_FLOATS];
          double u = unit(), sz;
          switch (kind) {
            case 0: /* RandomResizedCrop-like: whole pixels inside the image */
            case 1:
              sz = fmax(1.0, floor(S * (0.25 + 0.75 * u)));
              box[0] = (float)floor(unit() * (S - sz + 1));
              box[1] = (float)floor(unit() * (S - sz + 1));
              box[2] = (float)sz;
              box[3] = (float)floor(fmax(1.0, fmin(S, sz * (0.75 + 0.5 * unit()))));
              break;
            case 2: /* the validation crop (fractional) */
              box[2] = box[3] = (float)(S * 0.875);
              box[0] = box[1] = (float)((S - box[2]) / 2);
              break;
            case 3: /* padded shift: zeros around */
              box[0] = (float)floor(unit() * 9) - 4;
              box[1] = (float)floor(unit() * 9) - 4;
              box[2] = box[3] = (float)S;
              break;
            default: /* anything: partly outside, fractional, large shrink or stretch */
              box[0] = (float)((unit() - 0.25) * S);
              box[1] = (float)((unit() - 0.25) * S);
              box[2] = (float)(S * (0.05 + 3 * unit()));
              box[3] = (float)(S * (0.05 + 3 * unit()));
          }
          box[4] = (float)(next() & 1);
          bad += resample_case(v, S, C, outC, out, box, pad, (cases & 1));
          cases++;
        }
  /* shrinking 256 px to 8..40: blocks of columns wider than 16 pixels (the gathers) */
  for (int out = 8; out <= 40 && bad < 5; out += 8) {
    float box[MNT_BOX_FLOATS] = {0, 0, 256, 256, (float)(out & 8 ? 1 : 0)};
    bad += resample_case(v, 256, 3, 3, out, box, 0, out & 16);
    bad += resample_case(v, 256, 1, 3, out, box, 0, !(out & 16));
  }
  /* an image wider than the fast path's row buffers (4096 + 16 floats) */
  float wide[MNT_BOX_FLOATS] = {4000, 4100, 190, 90, 1};
  bad += resample_case(v, 4200, 1, 1, 24, wide, 0, 1);
  printf("  %s: resampled %d cases\n", v, cases + 11);
}

/* ---- MNT_SIMD -------------------------------------------------------------------------------- */
static void check_env(const char *self) {
  printf("MNT_SIMD: two errors expected below (bogus, and any variant this CPU cannot run)\n");
  fflush(stdout);
  setenv("MNT_SIMD", "bogus", 1);
  EXPECT(mnt_env_check() == MNT_EARG, "MNT_SIMD=bogus accepted");
  setenv("MNT_SIMD", "auto", 1);
  EXPECT(mnt_env_check() == MNT_OK, "MNT_SIMD=auto refused");
  for (int v = 0; v < MNT_SIMD_LEVELS; v++) {
    const char *name = mnt_simd_name((mnt_simd_level)v);
    setenv("MNT_SIMD", name, 1);
    int ok = mnt_env_check() == MNT_OK && mnt_simd_env_check() == MNT_OK;
    EXPECT(ok == mnt_simd_supported((mnt_simd_level)v), "MNT_SIMD=%s: accepted %d, runs %d", name, ok,
           mnt_simd_supported((mnt_simd_level)v));
    if (!ok) continue;
    /* a new process with it runs that variant */
    char cmd[4200], line[64] = "";
    snprintf(cmd, sizeof cmd, "'%s' --active", self);
    FILE *p = popen(cmd, "r");
    if (p && fgets(line, sizeof line, p)) line[strcspn(line, "\n")] = 0;
    if (p) pclose(p);
    EXPECT(!strcmp(line, name), "MNT_SIMD=%s: the process ran '%s'", name, line);
  }
  unsetenv("MNT_SIMD");
  char cmd[4200], line[64] = "";
  snprintf(cmd, sizeof cmd, "'%s' --active", self);
  FILE *p = popen(cmd, "r");
  if (p && fgets(line, sizeof line, p)) line[strcspn(line, "\n")] = 0;
  if (p) pclose(p);
  mnt_simd_level best = MNT_SIMD_SSE2;
  for (int v = 0; v < MNT_SIMD_LEVELS; v++)
    if (mnt_simd_supported((mnt_simd_level)v)) best = (mnt_simd_level)v;
  EXPECT(!strcmp(line, mnt_simd_name(best)), "unset MNT_SIMD: the process ran '%s', not the best, %s", line,
         mnt_simd_name(best));
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--active")) { /* check_env's child */
    printf("%s\n", mnt_simd_variant());
    return 0;
  }
  printf("test_simd: this process chose %s\n", mnt_simd_variant());
  int ran = 0, passed = 0, skipped = 0;
  for (int v = 0; v < MNT_SIMD_LEVELS; v++) {
    const char *name = mnt_simd_name((mnt_simd_level)v);
    if (mnt_simd_force((mnt_simd_level)v) != MNT_OK) {
      printf("SKIP %s: this CPU cannot run it\n", name);
      skipped++;
      continue;
    }
    int f0 = failures, c0 = checks;
    check_casts(name);
    check_vec(name);
    check_resample(name);
    printf("%s %s: %d checks, %d failed\n", failures == f0 ? "ok  " : "FAIL", name, checks - c0, failures - f0);
    ran++;
    passed += failures == f0;
  }
  check_env(argv[0]);
  printf("variants: %d passed, %d failed, %d skipped\n", passed, ran - passed, skipped);
  if (failures) {
    fprintf(stderr, "test_simd: %d failures\n", failures);
    return 1;
  }
  if (ran < 2) {
    printf("SKIP: only the baseline variant runs on this CPU\n");
    return 77;
  }
  return 0;
}
