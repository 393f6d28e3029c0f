/* loader.c — see loader.h. Worker threads produce whole batches: batch k goes to slot k mod depth;
 * a worker takes the next k only while fewer than `depth` batches are unconsumed. HDF5 (built
 * thread-safe on Debian) serialises the reads; decoding-free uint8 shards make them cheap, and the
 * augmentation runs in parallel. */
#include "loader.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "simd.h"

typedef struct slot {
  mnt_batch b;
  int64_t k; /* which batch it holds; -1: none */
  int ready;
} slot;

struct mnt_loader {
  mnt_dataset *d;
  mnt_loader_cfg cfg;
  int per_rank, C;
  int64_t per_epoch;       /* samples used per epoch (drop-last) */
  int64_t epoch0, cursor0; /* position of batch 0 */
  int64_t next_k, consumed;
  slot *slots;
  pthread_t *thr;
  int nthr, stop, error;
  int handed_out; /* batch `consumed` is with the caller */
  pthread_mutex_t mu;
  pthread_mutex_t io_mu; /* one worker at a time in HDF5 (see read_sample) */
  pthread_cond_t cv;
  int64_t perm_epoch[2];
  int64_t *perm[2];
  int perm_users[2];
  double wait_s;
};

static void batch_pos(const mnt_loader *l, int64_t k, int64_t *e, int64_t *c) {
  int64_t per = l->per_epoch / l->cfg.global_batch; /* batches per epoch */
  int64_t first = l->cursor0 / l->cfg.global_batch + k;
  *e = l->epoch0 + first / per;
  *c = (first % per) * l->cfg.global_batch;
}

/* The permutation of epoch e, from a cache of two (the consumer's epoch and the next); a slot
 * in use by a worker is not replaced. Called with mu held; returns the slot or -1 (wait). */
static int perm_of(mnt_loader *l, int64_t e) {
  for (int i = 0; i < 2; i++)
    if (l->perm_epoch[i] == e) return i;
  int i = -1;
  for (int j = 0; j < 2; j++)
    if (!l->perm_users[j] && (i < 0 || l->perm_epoch[j] < l->perm_epoch[i])) i = j;
  if (i < 0) return -1;
  mnt_permutation(l->perm[i], l->d->total, mnt_mix((uint64_t)l->cfg.seed, (uint64_t)e + 0x10000ull));
  l->perm_epoch[i] = e;
  return i;
}

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
 * floats, and kernels/augment.cu computes the same expression. */
#define MAX_OUT 4096
enum { MAX_C = 3, PLANE = MAX_OUT + 16, STREAM_MIN = 256 << 10 /* bytes of output per image */ };

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
#define HROW_FAST(r, roff, C, outC, out, t, planes, h) hrow_avx2(r, roff, C, outC, out, t, planes, h)
#define VROW_FAST(o, a, e, inx, wy, iny, k, b, out, stream) vrow_avx2(o, a, e, inx, wy, iny, k, b, out, stream)
#define STREAM_FENCE _mm_sfence
#else
#define HROW_FAST(r, roff, C, outC, out, t, planes, h) hrow_c(r, C, outC, out, t, h)
#define VROW_FAST(o, a, e, inx, wy, iny, k, b, out, stream) vrow(o, a, e, inx, wy, iny, k, b, out)
#define STREAM_FENCE() (void)0
#endif

/* one output row of one channel from the rows a (r1) and e (r2) */
MNT_SIMD_BODY void vrow(float *restrict o, const float *restrict a, const float *restrict e, const float *restrict inx,
                        float wy, float iny, float k, float b, int out) {
  for (int d = 0; d < out; d++) o[d] = (a[d] + wy * (e[d] - a[d])) * (inx[d] * iny) * k + b;
}

/* fast: 1 in the AVX2 and AVX-512 variants (hrow_avx2, vrow_avx2), 0: the plain C rows */
MNT_SIMD_BODY void resample_body(const uint8_t *src, int S, int C, double x0, double y0, double w, double h,
                                 int flip, int pad, int out, int outC, const float *mean, const float *std,
                                 float *dst, int fast) {
  cols t;
  float rows[2][MAX_C * MAX_OUT], planes[MAX_C][PLANE];
  double sx = w / out, sy = h / out;
  t.xbmin = S * C;
  for (int ox = 0; ox < out; ox++) {
    double fx = x0 + (ox + 0.5) * sx - 0.5;
    int d = flip ? out - 1 - ox : ox;
    t.inx[d] = !pad || (fx > -0.5 && fx < S - 0.5);
    if (fx < 0) fx = 0;
    if (fx > S - 1) fx = S - 1;
    int x1 = (int)fx;
    t.xa[d] = x1 * C;
    t.xb[d] = (x1 + 1 < S ? x1 + 1 : x1) * C;
    t.wx[d] = (float)(fx - x1);
    if (t.xb[d] < t.xbmin) t.xbmin = t.xb[d];
  }
  if (fast) { /* blocks of 8 columns for the permutes; pixels plo..phi (a row's floats) */
    t.plo = S;
    t.phi = 0;
    for (int k = 0; k < out / 8; k++) {
      int lo = S, hi = 0;
      for (int d = 8 * k; d < 8 * k + 8; d++) {
        lo = t.xa[d] / C < lo ? t.xa[d] / C : lo;
        hi = t.xb[d] / C > hi ? t.xb[d] / C : hi;
      }
      t.blo[k] = lo;
      t.bok[k] = hi - lo <= 15;
      for (int d = 8 * k; d < 8 * k + 8 && t.bok[k]; d++) {
        t.ia[d] = (uint8_t)(t.xa[d] / C - lo);
        t.ib[d] = (uint8_t)(t.xb[d] / C - lo);
      }
      t.plo = lo < t.plo ? lo : t.plo;
      t.phi = hi > t.phi ? hi : t.phi;
    }
    if (t.phi + 16 <= PLANE)
      for (int c = 0; c < MAX_C; c++) memset(planes[c] + t.phi + 1, 0, 15 * sizeof(float)); /* read, never used */
  }
  float scale[MAX_C], bias[MAX_C];
  for (int c = 0; c < outC; c++) {
    int sc = C == 1 ? 0 : c;
    scale[c] = 1.0f / (255.0f * std[sc]);
    bias[c] = -mean[sc] / std[sc];
  }
  int held[2] = {-1, -1}; /* the source row in rows[i] */
  int stream = fast && (size_t)outC * out * out * sizeof(float) >= STREAM_MIN;
  for (int oy = 0; oy < out; oy++) {
    double fy = y0 + (oy + 0.5) * sy - 0.5;
    float iny = !pad || (fy > -0.5 && fy < S - 0.5);
    if (fy < 0) fy = 0;
    if (fy > S - 1) fy = S - 1;
    int y1 = (int)fy, y2 = y1 + 1 < S ? y1 + 1 : y1;
    float wy = (float)(fy - y1);
    int yy[2] = {y1, y2}, at[2];
    for (int j = 0; j < 2; j++) {
      at[j] = held[0] == yy[j] ? 0 : held[1] == yy[j] ? 1 : -1;
      if (at[j] >= 0) continue;
      at[j] = j ? 1 - at[0] : held[0] == y2; /* not the slot of the other row needed */
      size_t off = (size_t)yy[j] * S * C;
      if (fast) HROW_FAST(src + off, off, C, outC, out, &t, planes, rows[at[j]]);
      else hrow_c(src + off, C, outC, out, &t, rows[at[j]]);
      held[at[j]] = yy[j];
    }
    for (int c = 0; c < outC; c++) {
      float *o = dst + ((size_t)c * out + oy) * out;
      const float *a = rows[at[0]] + (size_t)c * out, *e = rows[at[1]] + (size_t)c * out;
      if (fast) VROW_FAST(o, a, e, t.inx, wy, iny, scale[c], bias[c], out, stream);
      else vrow(o, a, e, t.inx, wy, iny, scale[c], bias[c], out);
    }
  }
  if (stream) STREAM_FENCE(); /* the streamed stores are visible before the batch is handed on */
}

static void resample_sse2(const uint8_t *src, int S, int C, double x0, double y0, double w, double h, int flip,
                          int pad, int out, int outC, const float *mean, const float *std, float *dst) {
  resample_body(src, S, C, x0, y0, w, h, flip, pad, out, outC, mean, std, dst, 0);
}
MNT_TARGET_AVX2 static void resample_avx2(const uint8_t *src, int S, int C, double x0, double y0, double w, double h,
                                          int flip, int pad, int out, int outC, const float *mean, const float *std,
                                          float *dst) {
  resample_body(src, S, C, x0, y0, w, h, flip, pad, out, outC, mean, std, dst, 1);
}
MNT_TARGET_AVX512 static void resample_avx512(const uint8_t *src, int S, int C, double x0, double y0, double w,
                                              double h, int flip, int pad, int out, int outC, const float *mean,
                                              const float *std, float *dst) {
  resample_body(src, S, C, x0, y0, w, h, flip, pad, out, outC, mean, std, dst, 1);
}

static void crop_resize(const uint8_t *src, int S, int C, double x0, double y0, double w, double h, int flip, int pad,
                        int out, int outC, const float *mean, const float *std, float *dst) {
  if (out < 1 || out > MAX_OUT || outC < 1 || outC > MAX_C) return; /* refused before (see loader.h) */
  MNT_SIMD_PICK(resample)(src, S, C, x0, y0, w, h, flip, pad, out, outC, mean, std, dst);
}

/* the validation box: centred, `crop` × the side of an S×S image (0: 0.875), at (o, o) */
static void centre_box(int S, double crop, double *o, double *side) {
  *side = S * (crop > 0 ? crop : 0.875);
  *o = (S - *side) / 2;
}

/* the validation transform: the centre box resampled to out × out */
static void centre_crop(const mnt_dataset *d, const uint8_t *src, double crop, int out, int outC, float *dst) {
  double o, side;
  centre_box(d->size, crop, &o, &side);
  crop_resize(src, d->size, d->channels, o, o, side, side, 0, 0, out, outC, d->mean, d->std, dst);
}

void mnt_crop_resize(const uint8_t *src, int S, int C, const float box[MNT_BOX_FLOATS], int pad, int out, int outC,
                     const float *mean, const float *std, float *dst) {
  crop_resize(src, S, C, box[0], box[1], box[2], box[3], box[4] != 0, pad, out, outC, mean, std, dst);
}

/* the augmentation of sample id in epoch: its box (the same random draws on every rank) */
static void aug_box(const mnt_loader *l, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]) {
  int S = l->d->size;
  if (!l->cfg.train) {
    double o, side;
    centre_box(S, l->cfg.val_crop, &o, &side);
    box[0] = box[1] = (float)o;
    box[2] = box[3] = (float)side;
    box[4] = 0;
    return;
  }
  rng r = {mnt_mix(mnt_mix((uint64_t)l->cfg.seed, (uint64_t)epoch), (uint64_t)id)};
  double area = (double)S * S, x0 = 0, y0 = 0, w = S, h = S;
  int found = l->cfg.pad_crop > 0;
  if (found) { /* torchvision's RandomCrop(S, padding=P): the image shifted by -P..P pixels, zeros around */
    int P = l->cfg.pad_crop;
    x0 = floor(uni(&r) * (2 * P + 1)) - P;
    y0 = floor(uni(&r) * (2 * P + 1)) - P;
  }
  for (int t = 0; t < 10 && !found; t++) { /* torchvision's RandomResizedCrop */
    double lo = l->cfg.min_scale > 0 ? l->cfg.min_scale : 0.08;
    double ta = area * (lo + (1.0 - lo) * uni(&r));
    double ar = exp(log(3.0 / 4.0) + (log(4.0 / 3.0) - log(3.0 / 4.0)) * uni(&r));
    double cw = round(sqrt(ta * ar)), ch = round(sqrt(ta / ar));
    if (cw > 0 && ch > 0 && cw <= S && ch <= S) {
      x0 = floor(uni(&r) * (S - cw + 1));
      y0 = floor(uni(&r) * (S - ch + 1));
      w = cw;
      h = ch;
      found = 1;
    }
  }
  int flip = uni(&r) < 0.5; /* the fallback is the whole (square) image, centred */
  box[0] = (float)x0, box[1] = (float)y0, box[2] = (float)w, box[3] = (float)h, box[4] = (float)flip;
}

static void augment(const mnt_loader *l, const uint8_t *src, int64_t epoch, int64_t id, float *dst) {
  float box[MNT_BOX_FLOATS];
  aug_box(l, epoch, id, box);
  mnt_crop_resize(src, l->d->size, l->d->channels, box, l->cfg.train && l->cfg.pad_crop > 0, l->cfg.out_size, l->C,
                  l->d->mean, l->d->std, dst);
}

/* HDF5's thread-safe build lets one thread in at a time behind a global lock that sleeps at once
 * when taken; with small images the workers meet there all the time, each meeting a futex sleep
 * and wake-up (Fashion-MNIST, 2 workers: 146,000 context switches for 96,000 images, 18% slower
 * than with the slower resampler before). An adaptive mutex of ours in front (it spins briefly
 * before it sleeps) takes them in turn without most of those switches (86,000; 30% faster).
 * mnt_dataset_read is HDF5 only; work it may do outside HDF5 (decoding) belongs outside this lock. */
static int read_sample(mnt_loader *l, int64_t id, uint8_t *pix, int32_t *label) {
  pthread_mutex_lock(&l->io_mu);
  int st = mnt_dataset_read(l->d, id, pix, label);
  pthread_mutex_unlock(&l->io_mu);
  return st;
}

static void *worker(void *arg) {
  mnt_loader *l = arg;
  size_t px = (size_t)l->d->size * l->d->size * l->d->channels;
  size_t img = (size_t)l->C * l->cfg.out_size * l->cfg.out_size;
  uint8_t *pix = malloc(px);
  pthread_mutex_lock(&l->mu);
  while (!l->stop && !l->error) {
    if (l->next_k >= l->consumed + l->cfg.depth) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    int64_t e, c;
    batch_pos(l, l->next_k, &e, &c);
    int pi = perm_of(l, e);
    if (pi < 0) { /* both cached permutations are being read: wait for one */
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    int64_t k = l->next_k++;
    const int64_t *perm = l->perm[pi];
    l->perm_users[pi]++;
    slot *s = &l->slots[k % l->cfg.depth];
    pthread_mutex_unlock(&l->mu);
    int st = pix ? MNT_OK : MNT_ENOMEM;
    s->b.epoch = e;
    s->b.cursor = c;
    for (int i = 0; i < l->per_rank && st == MNT_OK; i++) {
      int64_t id = perm[c + (int64_t)l->cfg.rank * l->per_rank + i];
      s->b.ids[i] = id;
      if (l->cfg.raw) {
        st = read_sample(l, id, s->b.raw + (size_t)i * px, &s->b.labels[i]);
        aug_box(l, e, id, s->b.boxes + (size_t)i * MNT_BOX_FLOATS);
      }
      else if ((st = read_sample(l, id, pix, &s->b.labels[i])) == MNT_OK)
        augment(l, pix, e, id, s->b.images + (size_t)i * img);
    }
    pthread_mutex_lock(&l->mu);
    l->perm_users[pi]--;
    if (st != MNT_OK) l->error = st;
    s->k = k;
    s->ready = 1;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  free(pix);
  return NULL;
}

int mnt_loader_open(mnt_loader **out, mnt_dataset *d, const mnt_loader_cfg *cfg, int64_t epoch, int64_t cursor) {
  *out = NULL;
  mnt_loader_cfg c = *cfg;
  if (c.threads <= 0) c.threads = 2;
  if (c.depth <= 0) c.depth = 2 * c.threads;
  if (c.nranks < 1 || c.rank < 0 || c.rank >= c.nranks || c.global_batch < c.nranks || c.global_batch % c.nranks) {
    MNT_ERR("global batch %d cannot be split evenly over %d ranks (rank %d)", c.global_batch, c.nranks, c.rank);
    return MNT_EARG;
  }
  if (c.out_size < 1 || c.out_size > MAX_OUT || (c.out_channels != 0 && c.out_channels != d->channels && !(d->channels == 1 && c.out_channels == 3))) {
    MNT_ERR("loader: bad output size %d or channels %d for a %d-channel dataset", c.out_size, c.out_channels, d->channels);
    return MNT_EARG;
  }
  if (d->total < c.global_batch) {
    MNT_ERR("%s: %lld samples, fewer than one global batch of %d", d->dir, (long long)d->total, c.global_batch);
    return MNT_EARG;
  }
  int64_t per_epoch = d->total / c.global_batch * c.global_batch;
  if (epoch < 0 || cursor < 0 || cursor % c.global_batch || cursor > per_epoch) {
    MNT_ERR("loader position (epoch %lld, cursor %lld) is not a global-batch boundary of this dataset", (long long)epoch,
            (long long)cursor);
    return MNT_EARG;
  }
  if (cursor == per_epoch) { /* a position at an epoch's end is the next epoch's start */
    epoch++;
    cursor = 0;
  }
  mnt_loader *l = calloc(1, sizeof *l);
  if (!l) return MNT_ENOMEM;
  l->d = d;
  l->cfg = c;
  l->per_rank = c.global_batch / c.nranks;
  l->C = c.out_channels ? c.out_channels : d->channels;
  l->per_epoch = per_epoch;
  l->epoch0 = epoch;
  l->cursor0 = cursor;
  l->perm_epoch[0] = l->perm_epoch[1] = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(&l->io_mu, &ma);
  pthread_mutexattr_destroy(&ma);
  pthread_cond_init(&l->cv, NULL);
  l->perm[0] = malloc((size_t)d->total * sizeof(int64_t));
  l->perm[1] = malloc((size_t)d->total * sizeof(int64_t));
  l->slots = calloc((size_t)c.depth, sizeof *l->slots);
  l->thr = calloc((size_t)c.threads, sizeof *l->thr);
  int st = l->perm[0] && l->perm[1] && l->slots && l->thr ? MNT_OK : MNT_ENOMEM;
  size_t img = (size_t)l->C * c.out_size * c.out_size;
  for (int i = 0; i < c.depth && st == MNT_OK; i++) {
    mnt_batch *b = &l->slots[i].b;
    l->slots[i].k = -1;
    b->n = l->per_rank;
    b->channels = l->C;
    b->size = c.out_size;
    size_t px = (size_t)d->size * d->size * d->channels;
    if (c.raw) {
      size_t bytes = ((size_t)l->per_rank * px + 63) / 64 * 64;
      void *p = NULL;
      if (c.host_alloc ? c.host_alloc(c.alloc_ctx, bytes, &p) == MNT_OK : (p = aligned_alloc(64, bytes)) != NULL)
        b->raw = p;
      b->boxes = malloc((size_t)l->per_rank * MNT_BOX_FLOATS * sizeof(float));
      b->size = d->size;
      b->channels = d->channels;
    } else {
      b->images = aligned_alloc(64, ((size_t)l->per_rank * img * sizeof(float) + 63) / 64 * 64);
    }
    b->labels = malloc((size_t)l->per_rank * sizeof *b->labels);
    b->ids = malloc((size_t)l->per_rank * sizeof *b->ids);
    if (!(b->images || (b->raw && b->boxes)) || !b->labels || !b->ids) st = MNT_ENOMEM;
  }
  for (int i = 0; i < c.threads && st == MNT_OK; i++) {
    if (pthread_create(&l->thr[i], NULL, worker, l) != 0) st = MNT_ESYS;
    else l->nthr++;
  }
  if (st != MNT_OK) {
    MNT_ERR("loader: cannot allocate %d batches of %d images or start %d threads", c.depth, l->per_rank, c.threads);
    mnt_loader_close(l);
    return st;
  }
  *out = l;
  return MNT_OK;
}

int mnt_loader_next(mnt_loader *l, const mnt_batch **b) {
  pthread_mutex_lock(&l->mu);
  if (l->handed_out) { /* the batch returned last time goes back to the workers */
    l->slots[l->consumed % l->cfg.depth].ready = 0;
    l->consumed++;
    l->handed_out = 0;
    pthread_cond_broadcast(&l->cv);
  }
  int64_t k = l->consumed;
  slot *s = &l->slots[k % l->cfg.depth];
  double t0 = mnt_now();
  while (!(s->ready && s->k == k) && !l->error) pthread_cond_wait(&l->cv, &l->mu);
  l->wait_s += mnt_now() - t0;
  int st = l->error;
  if (!st) l->handed_out = 1;
  pthread_mutex_unlock(&l->mu);
  if (st) return st;
  *b = &s->b;
  return MNT_OK;
}

int mnt_loader_val_sample(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop, float *dst,
                          int32_t *label) {
  int outC = out_channels ? out_channels : d->channels;
  if (out_size < 1 || out_size > MAX_OUT || outC > MAX_C) {
    MNT_ERR("loader: bad validation size %d or channels %d", out_size, outC);
    return MNT_EARG;
  }
  uint8_t *pix = malloc((size_t)d->size * d->size * d->channels);
  if (!pix) return MNT_ENOMEM;
  int st = mnt_dataset_read(d, g, pix, label);
  if (st == MNT_OK) centre_crop(d, pix, crop, out_size, outC, dst);
  free(pix);
  return st;
}

void mnt_loader_position(const mnt_loader *l, int64_t *epoch, int64_t *cursor) {
  batch_pos(l, l->consumed + l->handed_out, epoch, cursor);
}

int64_t mnt_loader_batches_per_epoch(const mnt_loader *l) { return l->per_epoch / l->cfg.global_batch; }

double mnt_loader_wait_s(const mnt_loader *l) { return l->wait_s; }

void mnt_loader_close(mnt_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->nthr; i++) pthread_join(l->thr[i], NULL);
  for (int i = 0; l->slots && i < l->cfg.depth; i++) {
    free(l->slots[i].b.images);
    if (l->slots[i].b.raw && l->cfg.host_free) l->cfg.host_free(l->cfg.alloc_ctx, l->slots[i].b.raw);
    else free(l->slots[i].b.raw);
    free(l->slots[i].b.boxes);
    free(l->slots[i].b.labels);
    free(l->slots[i].b.ids);
  }
  free(l->slots);
  free(l->thr);
  free(l->perm[0]);
  free(l->perm[1]);
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->io_mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
