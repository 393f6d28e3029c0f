/* augment.c — see augment.h. */
#include "io/data/augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/data/dataset.h" /* mnt_mix */
#include "src/simd.h"

typedef struct rng { uint64_t s; } rng;
static double uni(rng *r) {
  r->s = mnt_mix(r->s, 0x2545f4914f6cdd1dull);
  return (double)(r->s >> 11) / 9007199254740992.0;
}

/* crop box (x0, y0, w, h) of the S×S source resampled bilinearly (half-pixel centres, as
 * torchvision without antialiasing) to out×out, optional flip, normalised, into CHW floats.
 * Samples outside the source repeat its edge, or with `pad` are pixel value 0 (torchvision's
 * RandomCrop(padding) fill). Separable: the column taps are computed once per image; each source
 * row is interpolated along x once (into one of two cached rows: consecutive output rows share
 * source rows), then each output row is two cached rows mixed along y and normalised. Each output
 * value is computed as it would be directly, in the same order:
 *   a = r1[xa] + wx (r1[xb] - r1[xa]),  e = the same on r2,  o = (a + wy (e - a)) (inx iny) k + b
 * (every product and sum rounded to float, none fused), so every variant (simd.h) gives the same
 * floats. kernels/augment.cu computes the same expression with the same roundings (__fmul_rn and
 * __fadd_rn, which nvcc never fuses into an FMA); its scale and bias per channel are computed as
 * k and b are here, so the remaining difference is the sampling position's arithmetic (double on
 * both sides) and, for bf16 activations, the final rounding. */
enum { MAX_OUT = MNT_AUG_MAX_OUT, MAX_C = MNT_AUG_MAX_C, PLANE = MAX_OUT + 16 };
enum { STREAM_MIN = 256 << 10 /* bytes of output per image */ };

/* the column taps of one image: output column d (after the flip) reads source bytes xa[d], xb[d]
 * (pixel × C; xb - xa is 0 or C) with weight wx[d]; inx[d] = 0 outside a padded crop. For the
 * AVX2 row: pixels plo..phi of a row are what the columns read; block k of 8 columns reads
 * pixels blo[k] .. blo[k] + 15 when bok[k], the pixel blo[k] + ia[d] and + ib[d] */
typedef struct cols {
  int xa[MAX_OUT], xb[MAX_OUT], blo[MAX_OUT / 8], xbmin, plo, phi;
  float wx[MAX_OUT], inx[MAX_OUT];
  uint8_t ia[MAX_OUT], ib[MAX_OUT], bok[MAX_OUT / 8];
} cols;

/* columns d0 .. d1-1 of one source row r along x, channel byte sc: h[d] */
MNT_SIMD_BODY void hcols(const uint8_t *restrict r, int sc, int d0, int d1, const cols *t, float *restrict h) {
  for (int d = d0; d < d1; d++)
    h[d] = r[t->xa[d] + sc] + t->wx[d] * (float)(r[t->xb[d] + sc] - r[t->xa[d] + sc]);
}

/* one source row r along x for every output channel: h[c * out + d] */
MNT_SIMD_BODY void hrow_c(const uint8_t *restrict r, int C, int outC, int out, const cols *t, float *restrict h) {
  for (int c = 0; c < outC; c++) hcols(r, C == 1 ? 0 : c, 0, out, t, h + (size_t)c * out);
}

/* one value of a uint8 output row: the rows' values a and e mixed along y, clamped to 0..255, rounded
 * half up */
static inline uint8_t u8_mix(float a, float e, float wy) {
  float v = a + wy * (e - a);
  v = v > 0.0f ? v : 0.0f;
  v = v < 255.0f ? v : 255.0f;
  return (uint8_t)(int)(v + 0.5f);
}

/* one output row of dst8 (out × outC, channels interleaved) from the rows r1 and r2 (outC planes of out) */
MNT_SIMD_BODY void vrow_u8(uint8_t *restrict o, const float *restrict r1, const float *restrict r2, float wy, int out,
                           int outC) {
  for (int d = 0; d < out; d++)
    for (int c = 0; c < outC; c++)
      o[(size_t)d * outC + c] = u8_mix(r1[(size_t)c * out + d], r2[(size_t)c * out + d], wy);
}

#if MNT_SIMD_X86
#include <immintrin.h>
/* hrow_c for the AVX2 and AVX-512 variants, 8 columns at a time. The pixels the row needs are
 * converted to float planes once (one per channel), and each block of 8 columns picks its taps
 * from 16 consecutive pixels with permutes: as long as the crop is not shrunk more than twice
 * (bok). Other blocks use gathers: one 32-bit load ending at byte xb + sc holds both taps
 * (xb - xa <= 3), reading bytes xb + sc - 3 .. xb + sc of the row, where the caller has made sure
 * the first is in the image (roff + xbmin >= 3: roff is r's offset in it). Else scalar. */
MNT_TARGET_AVX2 static void hrow_avx2(const uint8_t *r, size_t roff, int C, int outC, int out, const cols *t,
                                      float (*planes)[PLANE], float *h) {
  int perm = (C == 1 || C == 3) && t->phi + 16 <= PLANE, gok = C <= 3 && roff + (size_t)t->xbmin >= 3;
  if (perm) { /* pixels plo..phi to floats, deinterleaved: 8 at a time, then one by one */
    int x = t->plo;
    if (C == 3) {
      const __m128i lo0 = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m128i hi0 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m128i lo1 = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m128i hi1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m128i lo2 = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m128i hi2 = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, -1, -1, -1, -1, -1, -1, -1, -1);
      for (; x + 8 <= t->phi + 1; x += 8) { /* bytes 3x .. 3x + 23 */
        __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)(r + 3 * x));
        __m128i hi = _mm_loadl_epi64((const __m128i *)(const void *)(r + 3 * x + 16));
        __m128i p0 = _mm_or_si128(_mm_shuffle_epi8(lo, lo0), _mm_shuffle_epi8(hi, hi0));
        __m128i p1 = _mm_or_si128(_mm_shuffle_epi8(lo, lo1), _mm_shuffle_epi8(hi, hi1));
        __m128i p2 = _mm_or_si128(_mm_shuffle_epi8(lo, lo2), _mm_shuffle_epi8(hi, hi2));
        _mm256_storeu_ps(planes[0] + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p0)));
        _mm256_storeu_ps(planes[1] + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p1)));
        _mm256_storeu_ps(planes[2] + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p2)));
      }
    } else {
      for (; x + 8 <= t->phi + 1; x += 8) {
        __m128i p = _mm_loadl_epi64((const __m128i *)(const void *)(r + x));
        _mm256_storeu_ps(planes[0] + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p)));
      }
    }
    for (; x <= t->phi; x++)
      for (int c = 0; c < C; c++) planes[c][x] = r[x * C + c];
  }
  const __m256i m255 = _mm256_set1_epi32(0xff), three = _mm256_set1_epi32(3);
  for (int c = 0; c < outC; c++) {
    int sc = C == 1 ? 0 : c, d = 0;
    const float *pf = planes[sc];
    const __m256i off = _mm256_set1_epi32(sc - 3);
    float *hc = h + (size_t)c * out;
    for (; d + 8 <= out; d += 8) {
      __m256 fa, diff;
      if (perm && t->bok[d / 8]) {
        const float *p = pf + t->blo[d / 8];
        __m256 v0 = _mm256_loadu_ps(p), v1 = _mm256_loadu_ps(p + 8);
        __m256i ja = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(t->ia + d)));
        __m256i jb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(t->ib + d)));
        /* lanes 0-7 from v0, 8-15 from v1: bit 3 of the index, shifted to the sign, picks */
        fa = _mm256_blendv_ps(_mm256_permutevar8x32_ps(v0, ja), _mm256_permutevar8x32_ps(v1, ja),
                              _mm256_castsi256_ps(_mm256_slli_epi32(ja, 28)));
        __m256 fb = _mm256_blendv_ps(_mm256_permutevar8x32_ps(v0, jb), _mm256_permutevar8x32_ps(v1, jb),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(jb, 28)));
        diff = _mm256_sub_ps(fb, fa); /* exact: whole numbers 0..255, as the integer difference */
      } else if (gok) {
        __m256i ia = _mm256_loadu_si256((const __m256i *)(const void *)(t->xa + d));
        __m256i ib = _mm256_loadu_si256((const __m256i *)(const void *)(t->xb + d));
        __m256i v = _mm256_i32gather_epi32((const int *)(const void *)r, _mm256_add_epi32(ib, off), 1);
        __m256i sh = _mm256_slli_epi32(_mm256_sub_epi32(three, _mm256_sub_epi32(ib, ia)), 3);
        __m256i pa = _mm256_and_si256(_mm256_srlv_epi32(v, sh), m255), pb = _mm256_srli_epi32(v, 24);
        fa = _mm256_cvtepi32_ps(pa);
        diff = _mm256_cvtepi32_ps(_mm256_sub_epi32(pb, pa));
      } else {
        hcols(r, sc, d, d + 8, t, hc);
        continue;
      }
      _mm256_storeu_ps(hc + d, _mm256_add_ps(fa, _mm256_mul_ps(_mm256_loadu_ps(t->wx + d), diff)));
    }
    hcols(r, sc, d, out, t, hc);
  }
}

/* one output row of one channel (vrow, below), 8 at a time; with `stream`, non-temporal stores
 * where 32-byte aligned: a batch of large images is far larger than the caches and is not read
 * again before the step consumes it */
MNT_TARGET_AVX2 static void vrow_avx2(float *o, const float *a, const float *e, const float *inx, float wy,
                                      float iny, float k, float b, int out, int stream) {
  int d = 0;
  for (; stream && d < out && ((uintptr_t)(o + d) & 31); d++)
    o[d] = (a[d] + wy * (e[d] - a[d])) * (inx[d] * iny) * k + b;
  const __m256 vwy = _mm256_set1_ps(wy), viny = _mm256_set1_ps(iny), vk = _mm256_set1_ps(k), vb = _mm256_set1_ps(b);
  for (; d + 8 <= out; d += 8) {
    __m256 va = _mm256_loadu_ps(a + d), ve = _mm256_loadu_ps(e + d);
    __m256 v = _mm256_add_ps(va, _mm256_mul_ps(vwy, _mm256_sub_ps(ve, va)));
    v = _mm256_mul_ps(_mm256_mul_ps(v, _mm256_mul_ps(_mm256_loadu_ps(inx + d), viny)), vk);
    if (stream) _mm256_stream_ps(o + d, _mm256_add_ps(v, vb));
    else _mm256_storeu_ps(o + d, _mm256_add_ps(v, vb));
  }
  for (; d < out; d++) o[d] = (a[d] + wy * (e[d] - a[d])) * (inx[d] * iny) * k + b;
}
/* vrow_u8 for RGB, 16 pixels at a time: each channel's 16 values computed as u8_mix does (the same
 * roundings, no fused multiply-add), packed to bytes, and the three interleaved with byte shuffles.
 * Written out because the compiler left vrow_u8 scalar and branching in these variants (perf: 29% of
 * the raw loader's time, 4x the float row's) */
MNT_TARGET_AVX2 static void vrow_u8_avx2(uint8_t *o, const float *r1, const float *r2, float wy, int out, int outC) {
  if (outC != 3) {
    vrow_u8(o, r1, r2, wy, out, outC);
    return;
  }
  /* output vector k, channel c: byte i of the 48 RGB bytes 16k + i takes pixel (16k + i) / 3 of channel
   * (16k + i) % 3 */
  const __m128i m[3][3] = {{_mm_setr_epi8(0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1, 5),
                            _mm_setr_epi8(-1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1),
                            _mm_setr_epi8(-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1)},
                           {_mm_setr_epi8(-1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10, -1),
                            _mm_setr_epi8(5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10),
                            _mm_setr_epi8(-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1)},
                           {_mm_setr_epi8(-1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1, -1),
                            _mm_setr_epi8(-1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1),
                            _mm_setr_epi8(10, -1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15)}};
  const __m256 vwy = _mm256_set1_ps(wy), zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f),
               half = _mm256_set1_ps(0.5f);
  int d = 0;
  for (; d + 16 <= out; d += 16) {
    __m128i p[3];
    for (int c = 0; c < 3; c++) {
      __m256i q[2];
      for (int h = 0; h < 2; h++) {
        __m256 va = _mm256_loadu_ps(r1 + (size_t)c * out + d + 8 * h),
               ve = _mm256_loadu_ps(r2 + (size_t)c * out + d + 8 * h);
        __m256 v = _mm256_add_ps(va, _mm256_mul_ps(vwy, _mm256_sub_ps(ve, va)));
        v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
        q[h] = _mm256_cvttps_epi32(_mm256_add_ps(v, half));
      }
      __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(q[0], q[1]), 0xD8); /* 16 words in order */
      p[c] = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    }
    for (int k = 0; k < 3; k++) {
      __m128i v = _mm_or_si128(_mm_shuffle_epi8(p[0], m[k][0]), _mm_shuffle_epi8(p[1], m[k][1]));
      v = _mm_or_si128(v, _mm_shuffle_epi8(p[2], m[k][2]));
      _mm_storeu_si128((__m128i *)(void *)(o + 3 * d + 16 * k), v);
    }
  }
  for (; d < out; d++)
    for (int c = 0; c < 3; c++) o[3 * d + c] = u8_mix(r1[(size_t)c * out + d], r2[(size_t)c * out + d], wy);
}
#define HROW_FAST(r, roff, C, outC, out, t, planes, h) hrow_avx2(r, roff, C, outC, out, t, planes, h)
#define VROW_U8_FAST(o, r1, r2, wy, out, outC) vrow_u8_avx2(o, r1, r2, wy, out, outC)
#define VROW_FAST(o, a, e, inx, wy, iny, k, b, out, stream) vrow_avx2(o, a, e, inx, wy, iny, k, b, out, stream)
#define STREAM_FENCE _mm_sfence
#else
#define HROW_FAST(r, roff, C, outC, out, t, planes, h) hrow_c(r, C, outC, out, t, h)
#define VROW_U8_FAST(o, r1, r2, wy, out, outC) vrow_u8(o, r1, r2, wy, out, outC)
#define VROW_FAST(o, a, e, inx, wy, iny, k, b, out, stream) vrow(o, a, e, inx, wy, iny, k, b, out)
#define STREAM_FENCE() (void)0
#endif

/* one output row of one channel from the rows a (r1) and e (r2) */
MNT_SIMD_BODY void vrow(float *restrict o, const float *restrict a, const float *restrict e, const float *restrict inx,
                        float wy, float iny, float k, float b, int out) {
  for (int d = 0; d < out; d++) o[d] = (a[d] + wy * (e[d] - a[d])) * (inx[d] * iny) * k + b;
}

/* one resampling: the box (x0, y0, w, h) of the W×H×C uint8 HWC image src (rows `stride` bytes apart)
 * to out×out, flipped, into dst (outC×out×out floats, normalised with mean/std) or, when dst8 is
 * set, into dst8 (out×out×outC uint8 HWC, the interpolated value rounded: no normalisation); the
 * sampling positions clamped to the pixels lo[0]..hi[0] (x) and lo[1]..hi[1] (y) */
typedef struct job {
  const uint8_t *src;
  int W, H, C, lo[2], hi[2];
  size_t stride;
  double x0, y0, w, h;
  int flip, pad, out, outC;
  const float *mean, *std;
  float *dst;
  uint8_t *dst8;
} job;

/* the column taps of a job (see cols); with fast, the AVX2 row's blocks too */
MNT_SIMD_BODY void col_taps(const job *j, int fast, cols *t) {
  int W = j->W, C = j->C, out = j->out;
  double sx = j->w / out;
  t->xbmin = W * C;
  for (int ox = 0; ox < out; ox++) {
    double fx = j->x0 + (ox + 0.5) * sx - 0.5;
    int d = j->flip ? out - 1 - ox : ox;
    t->inx[d] = !j->pad || (fx > -0.5 && fx < W - 0.5);
    if (fx < j->lo[0]) fx = j->lo[0];
    if (fx > j->hi[0]) fx = j->hi[0];
    int x1 = (int)fx;
    t->xa[d] = x1 * C;
    t->xb[d] = (x1 + 1 <= j->hi[0] ? x1 + 1 : x1) * C;
    t->wx[d] = (float)(fx - x1);
    if (t->xb[d] < t->xbmin) t->xbmin = t->xb[d];
  }
  if (!fast) return;
  t->plo = W; /* blocks of 8 columns for the permutes; pixels plo..phi (a row's floats) */
  t->phi = 0;
  for (int k = 0; k < out / 8; k++) {
    int lo = W, hi = 0;
    for (int d = 8 * k; d < 8 * k + 8; d++) {
      lo = t->xa[d] / C < lo ? t->xa[d] / C : lo;
      hi = t->xb[d] / C > hi ? t->xb[d] / C : hi;
    }
    t->blo[k] = lo;
    t->bok[k] = hi - lo <= 15;
    for (int d = 8 * k; d < 8 * k + 8 && t->bok[k]; d++) {
      t->ia[d] = (uint8_t)(t->xa[d] / C - lo);
      t->ib[d] = (uint8_t)(t->xb[d] / C - lo);
    }
    t->plo = lo < t->plo ? lo : t->plo;
    t->phi = hi > t->phi ? hi : t->phi;
  }
}

/* fast: 1 in the AVX2 and AVX-512 variants (hrow_avx2, vrow_avx2, vrow_u8_avx2), 0: the plain C rows */
MNT_SIMD_BODY void resample_body(const job *j, int fast) {
  cols t;
  float rows[2][MAX_C * MAX_OUT], planes[MAX_C][PLANE];
  int H = j->H, C = j->C, out = j->out, outC = j->outC;
  double sy = j->h / out;
  col_taps(j, fast, &t);
  if (fast && t.phi + 16 <= PLANE)
    for (int c = 0; c < MAX_C; c++) memset(planes[c] + t.phi + 1, 0, 15 * sizeof(float)); /* read, never used */
  float scale[MAX_C], bias[MAX_C];
  for (int c = 0; c < outC && !j->dst8; c++) {
    int sc = C == 1 ? 0 : c;
    scale[c] = 1.0f / (255.0f * j->std[sc]);
    bias[c] = -j->mean[sc] / j->std[sc];
  }
  int held[2] = {-1, -1}; /* the source row in rows[i] */
  int stream = fast && !j->dst8 && (size_t)outC * out * out * sizeof(float) >= STREAM_MIN;
  for (int oy = 0; oy < out; oy++) {
    double fy = j->y0 + (oy + 0.5) * sy - 0.5;
    float iny = !j->pad || (fy > -0.5 && fy < H - 0.5);
    if (fy < j->lo[1]) fy = j->lo[1];
    if (fy > j->hi[1]) fy = j->hi[1];
    int y1 = (int)fy, y2 = y1 + 1 <= j->hi[1] ? y1 + 1 : y1;
    float wy = (float)(fy - y1);
    int yy[2] = {y1, y2}, at[2];
    for (int k = 0; k < 2; k++) {
      at[k] = held[0] == yy[k] ? 0 : held[1] == yy[k] ? 1 : -1;
      if (at[k] >= 0) continue;
      at[k] = k ? 1 - at[0] : held[0] == y2; /* not the slot of the other row needed */
      size_t off = (size_t)yy[k] * j->stride;
      if (fast) HROW_FAST(j->src + off, off, C, outC, out, &t, planes, rows[at[k]]);
      else hrow_c(j->src + off, C, outC, out, &t, rows[at[k]]);
      held[at[k]] = yy[k];
    }
    if (j->dst8) {
      uint8_t *o8 = j->dst8 + (size_t)oy * out * outC;
      if (fast) VROW_U8_FAST(o8, rows[at[0]], rows[at[1]], wy, out, outC);
      else vrow_u8(o8, rows[at[0]], rows[at[1]], wy, out, outC);
      continue;
    }
    for (int c = 0; c < outC; c++) {
      float *o = j->dst + ((size_t)c * out + oy) * out;
      const float *a = rows[at[0]] + (size_t)c * out, *e = rows[at[1]] + (size_t)c * out;
      if (fast) VROW_FAST(o, a, e, t.inx, wy, iny, scale[c], bias[c], out, stream);
      else vrow(o, a, e, t.inx, wy, iny, scale[c], bias[c], out);
    }
  }
  if (stream) STREAM_FENCE(); /* the streamed stores are visible before the batch is handed on */
}

static void resample_sse2(const job *j) { resample_body(j, 0); }
MNT_TARGET_AVX2 static void resample_avx2(const job *j) { resample_body(j, 1); }
MNT_TARGET_AVX512 static void resample_avx512(const job *j) { resample_body(j, 1); }

/* the clamp window: the whole image, or (to_box) the pixels whose centres lie in the box (torchvision's
 * crop, then resize: a sample beyond the crop's outer pixel centres repeats them) */
static void window(job *j, int to_box) {
  j->lo[0] = j->lo[1] = 0, j->hi[0] = j->W - 1, j->hi[1] = j->H - 1;
  if (!to_box) return;
  double b0[2] = {j->x0, j->y0}, b1[2] = {j->x0 + j->w, j->y0 + j->h};
  for (int k = 0; k < 2; k++) {
    double lo = ceil(b0[k] - 0.5), hi = floor(b1[k] - 0.5);
    if (lo > j->lo[k]) j->lo[k] = lo > j->hi[k] ? j->hi[k] : (int)lo;
    if (hi < j->hi[k]) j->hi[k] = hi < j->lo[k] ? j->lo[k] : (int)hi;
  }
}

static void run_job(job *j, int to_box) {
  if (j->out < 1 || j->out > MAX_OUT || j->outC < 1 || j->outC > MAX_C || j->W < 1 || j->H < 1) return;
  window(j, to_box);
  MNT_SIMD_PICK(resample)(j); /* (out, outC refused before: see loader.h) */
}

static void crop_resize(const uint8_t *src, int S, int C, double x0, double y0, double w, double h, int flip, int pad,
                        int out, int outC, const float *mean, const float *std, float *dst) {
  job j = {.src = src, .W = S, .H = S, .C = C, .stride = (size_t)S * C, .x0 = x0, .y0 = y0, .w = w, .h = h,
           .flip = flip, .pad = pad, .out = out, .outC = outC, .mean = mean, .std = std, .dst = dst};
  run_job(&j, 0);
}

/* the validation box: centred, `crop` × the side of an S×S image (0: 0.875), at (o, o) */
static void centre_box(int S, double crop, double *o, double *side) {
  *side = S * (crop > 0 ? crop : 0.875);
  *o = (S - *side) / 2;
}

void mnt_centre_crop(const uint8_t *src, int S, int C, double crop, int out, int outC, const float *mean,
                     const float *std, float *dst) {
  double o, side;
  centre_box(S, crop, &o, &side);
  crop_resize(src, S, C, o, o, side, side, 0, 0, out, outC, mean, std, dst);
}

void mnt_crop_resize(const uint8_t *src, int S, int C, const float box[MNT_BOX_FLOATS], int pad, int out, int outC,
                     const float *mean, const float *std, float *dst) {
  crop_resize(src, S, C, box[0], box[1], box[2], box[3], box[4] != 0, pad, out, outC, mean, std, dst);
}

void mnt_crop_resize_wh(const uint8_t *src, int W, int H, size_t stride, int C, const float box[MNT_BOX_FLOATS],
                        int to_box, int out, int outC, const float *mean, const float *std, float *dst) {
  job j = {.src = src, .W = W, .H = H, .C = C, .stride = stride, .x0 = box[0], .y0 = box[1], .w = box[2],
           .h = box[3], .flip = box[4] != 0, .out = out, .outC = outC, .mean = mean, .std = std, .dst = dst};
  run_job(&j, to_box);
}

void mnt_crop_resize_u8(const uint8_t *src, int W, int H, size_t stride, int C, const float box[MNT_BOX_FLOATS],
                        int to_box, int out, int outC, uint8_t *dst) {
  job j = {.src = src, .W = W, .H = H, .C = C, .stride = stride, .x0 = box[0], .y0 = box[1], .w = box[2],
           .h = box[3], .flip = box[4] != 0, .out = out, .outC = outC, .dst8 = dst};
  run_job(&j, to_box);
}

/* Python's round(): halves to the even neighbour, whatever the FPU's rounding mode */
static double round_even(double v) {
  double f = floor(v), d = v - f;
  return d > 0.5 || (d == 0.5 && fmod(f, 2.0) != 0) ? f + 1 : f;
}

/* torchvision 0.14's RandomResizedCrop.get_params on a W×H image, scale (lo, 1), ratio (3/4, 4/3),
 * its draws from r: 10 tries of an area and a log-uniform aspect ratio, the box's size rounded and
 * accepted when it fits, placed uniformly (x drawn before y); else its fallback, the centred box of
 * the whole image with the ratio clamped into the range */
static void rrc_box(rng *r, int W, int H, double lo, double b[4]) {
  double area = (double)W * H;
  for (int t = 0; t < 10; t++) {
    double ta = area * (lo + (1.0 - lo) * uni(r));
    double ar = exp(log(3.0 / 4.0) + (log(4.0 / 3.0) - log(3.0 / 4.0)) * uni(r));
    double cw = round_even(sqrt(ta * ar)), ch = round_even(sqrt(ta / ar));
    if (cw > 0 && ch > 0 && cw <= W && ch <= H) {
      b[0] = floor(uni(r) * (W - cw + 1));
      b[1] = floor(uni(r) * (H - ch + 1));
      b[2] = cw;
      b[3] = ch;
      return;
    }
  }
  double in_ratio = (double)W / H, w = W, h = H;
  if (in_ratio < 3.0 / 4.0) h = round_even(W / (3.0 / 4.0));
  else if (in_ratio > 4.0 / 3.0) w = round_even(H * (4.0 / 3.0));
  b[0] = (double)((W - (int)w) / 2); /* Python's // on non-negative numbers */
  b[1] = (double)((H - (int)h) / 2);
  b[2] = w;
  b[3] = h;
}

void mnt_aug_box_wh(const mnt_aug_cfg *a, int W, int H, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]) {
  rng r = {mnt_mix(mnt_mix((uint64_t)a->seed, (uint64_t)epoch), (uint64_t)id)};
  double b[4] = {0, 0, W, H};
  if (a->pad_crop > 0) { /* torchvision's RandomCrop(S, padding=P): the image shifted by -P..P pixels, zeros around */
    int P = a->pad_crop;
    b[0] = floor(uni(&r) * (2 * P + 1)) - P;
    b[1] = floor(uni(&r) * (2 * P + 1)) - P;
  } else {
    rrc_box(&r, W, H, a->min_scale > 0 ? a->min_scale : 0.08, b);
  }
  int flip = uni(&r) < 0.5;
  box[0] = (float)b[0], box[1] = (float)b[1], box[2] = (float)b[2], box[3] = (float)b[3], box[4] = (float)flip;
}

void mnt_aug_box(const mnt_aug_cfg *a, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]) {
  if (!a->train) {
    double o, side;
    centre_box(a->S, a->val_crop, &o, &side);
    box[0] = box[1] = (float)o;
    box[2] = box[3] = (float)side;
    box[4] = 0;
    return;
  }
  mnt_aug_box_wh(a, a->S, a->S, epoch, id, box);
}

void mnt_val_box(int W, int H, int out, double crop, float box[MNT_BOX_FLOATS]) {
  int R = (int)floor(out / (crop > 0 ? crop : 0.875) + 1e-9), rw = R, rh = R;
  if (W <= H) rh = (int)((double)((long long)R * H) / W); /* int(R * long / short) */
  else rw = (int)((double)((long long)R * W) / H);
  double top = round_even((rh - out) / 2.0), left = round_even((rw - out) / 2.0);
  double kx = (double)W / rw, ky = (double)H / rh;
  box[0] = (float)(left * kx), box[1] = (float)(top * ky), box[2] = (float)(out * kx), box[3] = (float)(out * ky);
  box[4] = 0;
}
