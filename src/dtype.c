/* dtype.c — conversions and reduction loops; see dtype.h. The bulk loops run in the CPU's best
 * variant (simd.h), each bit-identical to the scalar conversions. */
#include "src/dtype.h"

#include <string.h>
#include <strings.h>

#include "src/simd.h"

size_t mnt_dtype_size(mnt_dtype t) { return t == MNT_FP64 ? 8 : t == MNT_FP32 ? 4 : 2; }

const char *mnt_dtype_name(mnt_dtype t) {
  return t == MNT_FP32 ? "float" : t == MNT_BF16 ? "bfloat16" : t == MNT_FP64 ? "double" : "half";
}

const char *const mnt_grad_dtype_names[3] = {"fp32", "bf16", "fp16"};

int mnt_dtype_parse(const char *s, mnt_dtype *t) {
  if (!strcasecmp(s, "float") || !strcasecmp(s, "fp32") || !strcasecmp(s, "f32")) *t = MNT_FP32;
  else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *t = MNT_BF16;
  else if (!strcasecmp(s, "half") || !strcasecmp(s, "fp16") || !strcasecmp(s, "f16")) *t = MNT_FP16;
  else return -1;
  return 0;
}

int mnt_dtype_parse_comm(const char *s, mnt_dtype *t) {
  if (!strcasecmp(s, "double") || !strcasecmp(s, "fp64") || !strcasecmp(s, "f64")) *t = MNT_FP64;
  else return mnt_dtype_parse(s, t);
  return 0;
}

const char *mnt_redop_name(mnt_redop op) { return op == MNT_SUM ? "sum" : "avg"; }

int mnt_redop_parse(const char *s, mnt_redop *op) {
  if (!strcasecmp(s, "sum")) *op = MNT_SUM;
  else if (!strcasecmp(s, "avg") || !strcasecmp(s, "mean")) *op = MNT_AVG;
  else return -1;
  return 0;
}

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* The conversions as branch-free bodies (every case computed, one selected), so that the bulk
 * loops below vectorize in each variant with the scalar functions' exact results. */
#define bf16_of mnt_bf16_round
#define f32_of_bf16 mnt_bf16_widen

MNT_SIMD_BODY uint16_t f16_of(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  /* Inf or NaN (NaN stays quiet); >= 65520 rounds to Inf */
  uint32_t inf = 0x7c00u | (0x200u & -(uint32_t)(ax > 0x7f800000u));
  /* below 2^-14: half subnormal or zero. Adding 0.5 puts the half's ulp (2^-24) at the float's
   * ulp, so the FPU rounds to nearest even for us. */
  uint32_t sub = f2u(u2f(ax) + 0.5f) - 0x3f000000u;
  /* rebias exponent by -112 and round to nearest even */
  uint32_t norm = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;
  /* selected with masks, not branches: the compiler does not move a float operation under a
   * condition it then cannot vectorize (it must not speculate one that might trap) */
  uint32_t big = -(uint32_t)(ax >= 0x477ff000u), small = ~big & -(uint32_t)(ax < 0x38800000u);
  uint32_t r = (big & inf) | (small & sub) | (~big & ~small & norm);
  return (uint16_t)(sign | (r & 0xffffu));
}

MNT_SIMD_BODY float f32_of_f16(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t inf = 0x7f800000u | ((em & 0x3ffu) << 13);
  uint32_t norm = (em << 13) + 0x38000000u;
  uint32_t sub = f2u((float)(int32_t)em * 5.9604644775390625e-8f); /* subnormal: em * 2^-24 */
  uint32_t big = -(uint32_t)(em >= 0x7c00u), small = -(uint32_t)(em < 0x0400u); /* masks, as in f16_of */
  return u2f(((big & inf) | (small & sub) | (~big & ~small & norm)) | sign);
}

uint16_t mnt_f32_to_bf16(float f) { return bf16_of(f); }
float mnt_bf16_to_f32(uint16_t h) { return f32_of_bf16(h); }
uint16_t mnt_f32_to_f16(float f) { return f16_of(f); }
float mnt_f16_to_f32(uint16_t h) { return f32_of_f16(h); }

/* ---- bulk loops, one body per variant (simd.h) ------------------------------------------------ */

/* the element types at alignment 1: a received chunk is reduced where it lies in the link's ring,
 * at any byte (an access through float * there is undefined; through these it is a plain unaligned
 * load, vectorized as before) */
typedef float uf32 __attribute__((aligned(1)));
typedef double uf64 __attribute__((aligned(1)));
typedef uint16_t uu16 __attribute__((aligned(1)));

MNT_SIMD_BODY void reduce_body(mnt_dtype t, void *dst, const void *src, size_t n, float div) {
  if (t == MNT_FP32) {
    float *restrict d = dst;
    const uf32 *restrict s = src;
    if (div == 1.0f)
      for (size_t i = 0; i < n; i++) d[i] = d[i] + s[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = (d[i] + s[i]) / div;
  } else if (t == MNT_FP64) {
    double *restrict d = dst;
    const uf64 *restrict s = src;
    double dv = div;
    if (div == 1.0f)
      for (size_t i = 0; i < n; i++) d[i] = d[i] + s[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = (d[i] + s[i]) / dv;
  } else if (t == MNT_BF16) {
    uint16_t *restrict d = dst;
    const uu16 *restrict s = src;
    for (size_t i = 0; i < n; i++) d[i] = bf16_of((f32_of_bf16(d[i]) + f32_of_bf16(s[i])) / div);
  } else {
    uint16_t *restrict d = dst;
    const uu16 *restrict s = src;
    for (size_t i = 0; i < n; i++) d[i] = f16_of((f32_of_f16(d[i]) + f32_of_f16(s[i])) / div);
  }
}

MNT_SIMD_BODY void scale_div_body(mnt_dtype t, void *buf, size_t n, float div) {
  if (t == MNT_FP32) {
    float *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = d[i] / div;
  } else if (t == MNT_FP64) {
    double *d = buf, dv = div;
    for (size_t i = 0; i < n; i++) d[i] = d[i] / dv;
  } else if (t == MNT_BF16) {
    uint16_t *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = bf16_of(f32_of_bf16(d[i]) / div);
  } else {
    uint16_t *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = f16_of(f32_of_f16(d[i]) / div);
  }
}

/* t is not MNT_FP32 (a copy) */
MNT_SIMD_BODY void to_f32_body(mnt_dtype t, const void *src, float *restrict dst, size_t n) {
  if (t == MNT_FP64) {
    const double *restrict s = src;
    for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    return;
  }
  const uint16_t *restrict s = src;
  if (t == MNT_BF16)
    for (size_t i = 0; i < n; i++) dst[i] = f32_of_bf16(s[i]);
  else
    for (size_t i = 0; i < n; i++) dst[i] = f32_of_f16(s[i]);
}

MNT_SIMD_BODY void from_f32_body(mnt_dtype t, const float *restrict src, void *dst, size_t n) {
  if (t == MNT_FP64) {
    double *restrict d = dst;
    for (size_t i = 0; i < n; i++) d[i] = src[i];
    return;
  }
  uint16_t *restrict d = dst;
  if (t == MNT_BF16)
    for (size_t i = 0; i < n; i++) d[i] = bf16_of(src[i]);
  else
    for (size_t i = 0; i < n; i++) d[i] = f16_of(src[i]);
}

MNT_SIMD_CLONES(reduce, (mnt_dtype t, void *dst, const void *src, size_t n, float div), (t, dst, src, n, div))
MNT_SIMD_CLONES(scale_div, (mnt_dtype t, void *buf, size_t n, float div), (t, buf, n, div))
MNT_SIMD_CLONES(to_f32, (mnt_dtype t, const void *src, float *dst, size_t n), (t, src, dst, n))
MNT_SIMD_CLONES(from_f32, (mnt_dtype t, const float *src, void *dst, size_t n), (t, src, dst, n))

void mnt_reduce(mnt_dtype t, void *dst, const void *src, size_t n, float div) {
  MNT_SIMD_PICK(reduce)(t, dst, src, n, div);
}

void mnt_scale_div(mnt_dtype t, void *buf, size_t n, float div) {
  if (div != 1.0f) MNT_SIMD_PICK(scale_div)(t, buf, n, div);
}

void mnt_to_f32(mnt_dtype t, const void *src, float *dst, size_t n) {
  if (t == MNT_FP32) memcpy(dst, src, n * 4);
  else MNT_SIMD_PICK(to_f32)(t, src, dst, n);
}

void mnt_from_f32(mnt_dtype t, const float *src, void *dst, size_t n) {
  if (t == MNT_FP32) memcpy(dst, src, n * 4);
  else MNT_SIMD_PICK(from_f32)(t, src, dst, n);
}
