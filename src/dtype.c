/* dtype.c — conversions and reduction loops; see dtype.h. Written so GCC vectorizes them. */
#include "dtype.h"

#include <string.h>
#include <strings.h>

size_t mnt_dtype_size(mnt_dtype t) { return t == MNT_FP64 ? 8 : t == MNT_FP32 ? 4 : 2; }

const char *mnt_dtype_name(mnt_dtype t) {
  return t == MNT_FP32 ? "float" : t == MNT_BF16 ? "bfloat16" : t == MNT_FP64 ? "double" : "half";
}

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

uint16_t mnt_f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);                                           /* nearest even */
  return (uint16_t)(x >> 16);
}

float mnt_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t mnt_f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* Inf or NaN (NaN stays quiet) */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (ax < 0x38800000u) {
    /* below 2^-14: half subnormal or zero. Adding 0.5 puts the half's ulp (2^-24) at the
     * float's ulp, so the FPU rounds to nearest even for us. */
    float a = u2f(ax) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(f2u(a) - 0x3f000000u));
  }
  uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd; /* rebias exponent by -112 and round to nearest even */
  return (uint16_t)(sign | (uint16_t)(ax >> 13));
}

float mnt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  uint32_t x;
  if (em >= 0x7c00u) x = 0x7f800000u | ((em & 0x3ffu) << 13);
  else if (em >= 0x0400u) x = (em << 13) + 0x38000000u;
  else x = f2u((float)em * 5.9604644775390625e-8f); /* subnormal: em * 2^-24 */
  return u2f(x | sign);
}

void mnt_reduce(mnt_dtype t, void *dst, const void *src, size_t n, float div) {
  if (t == MNT_FP32) {
    float *restrict d = dst;
    const float *restrict s = src;
    if (div == 1.0f)
      for (size_t i = 0; i < n; i++) d[i] = d[i] + s[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = (d[i] + s[i]) / div;
  } else if (t == MNT_FP64) {
    double *restrict d = dst;
    const double *restrict s = src;
    double dv = div;
    if (div == 1.0f)
      for (size_t i = 0; i < n; i++) d[i] = d[i] + s[i];
    else
      for (size_t i = 0; i < n; i++) d[i] = (d[i] + s[i]) / dv;
  } else if (t == MNT_BF16) {
    uint16_t *restrict d = dst;
    const uint16_t *restrict s = src;
    for (size_t i = 0; i < n; i++)
      d[i] = mnt_f32_to_bf16((mnt_bf16_to_f32(d[i]) + mnt_bf16_to_f32(s[i])) / div);
  } else {
    uint16_t *restrict d = dst;
    const uint16_t *restrict s = src;
    for (size_t i = 0; i < n; i++)
      d[i] = mnt_f32_to_f16((mnt_f16_to_f32(d[i]) + mnt_f16_to_f32(s[i])) / div);
  }
}

void mnt_scale_div(mnt_dtype t, void *buf, size_t n, float div) {
  if (div == 1.0f) return;
  if (t == MNT_FP32) {
    float *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = d[i] / div;
  } else if (t == MNT_FP64) {
    double *d = buf, dv = div;
    for (size_t i = 0; i < n; i++) d[i] = d[i] / dv;
  } else if (t == MNT_BF16) {
    uint16_t *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = mnt_f32_to_bf16(mnt_bf16_to_f32(d[i]) / div);
  } else {
    uint16_t *d = buf;
    for (size_t i = 0; i < n; i++) d[i] = mnt_f32_to_f16(mnt_f16_to_f32(d[i]) / div);
  }
}

void mnt_to_f32(mnt_dtype t, const void *src, float *dst, size_t n) {
  if (t == MNT_FP32) { memcpy(dst, src, n * 4); return; }
  if (t == MNT_FP64) {
    const double *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = (float)s[i];
    return;
  }
  const uint16_t *s = src;
  if (t == MNT_BF16)
    for (size_t i = 0; i < n; i++) dst[i] = mnt_bf16_to_f32(s[i]);
  else
    for (size_t i = 0; i < n; i++) dst[i] = mnt_f16_to_f32(s[i]);
}

void mnt_from_f32(mnt_dtype t, const float *src, void *dst, size_t n) {
  if (t == MNT_FP32) { memcpy(dst, src, n * 4); return; }
  if (t == MNT_FP64) {
    double *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = src[i];
    return;
  }
  uint16_t *d = dst;
  if (t == MNT_BF16)
    for (size_t i = 0; i < n; i++) d[i] = mnt_f32_to_bf16(src[i]);
  else
    for (size_t i = 0; i < n; i++) d[i] = mnt_f32_to_f16(src[i]);
}
