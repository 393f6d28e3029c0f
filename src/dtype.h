/* dtype.h — element types and reductions of the collectives.
 * defines: mnt_dtype, mnt_redop, mnt_dtype_size/name/parse/parse_comm, mnt_redop_name/parse,
 *          mnt_f32_to_bf16, mnt_bf16_to_f32, mnt_f32_to_f16, mnt_f16_to_f32 (round to nearest even),
 *          mnt_reduce (dst = (dst + src) / div computed in fp32, fp64 for fp64, rounded once to the
 *          element type), mnt_scale_div,
 *          mnt_to_f32 / mnt_from_f32 (bulk conversions). The bulk loops run in the CPU's best
 *          vector variant (simd.h); every variant gives the scalar conversions' results bit for bit. */
#ifndef MNT_DTYPE_H
#define MNT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* MNT_FP64: collectives only (bench allreduce -d double); the trainer's types are the other three */
typedef enum { MNT_FP32 = 0, MNT_BF16 = 1, MNT_FP16 = 2, MNT_FP64 = 3 } mnt_dtype;
typedef enum { MNT_SUM = 0, MNT_AVG = 1 } mnt_redop;

size_t mnt_dtype_size(mnt_dtype t);
const char *mnt_dtype_name(mnt_dtype t);
/* fp32, bf16, fp16 by value: the gradients' types as --grad-dtype spells them (the one place) */
extern const char *const mnt_grad_dtype_names[3]; /* nccl-tests' names: "float", "bfloat16", "half", "double" */
int mnt_dtype_parse(const char *s, mnt_dtype *t); /* float|fp32, bf16|bfloat16, half|fp16; 0 on success */
/* the same and double|fp64: every type the communicators reduce */
int mnt_dtype_parse_comm(const char *s, mnt_dtype *t);
const char *mnt_redop_name(mnt_redop op);
int mnt_redop_parse(const char *s, mnt_redop *op);

uint16_t mnt_f32_to_bf16(float f);
float mnt_bf16_to_f32(uint16_t h);
/* the same as branch-free inline bodies (every case computed, one selected), for loops that must
 * vectorize in each simd.h variant with the scalar functions' exact results */
static inline __attribute__((always_inline)) uint16_t mnt_bf16_round(float f) {
  union { float f; uint32_t u; } v = {.f = f};
  uint32_t x = v.u;
  uint32_t nan = (x >> 16) | 0x40u;                      /* quiet NaN */
  uint32_t even = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16; /* nearest even */
  return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : even);
}
static inline __attribute__((always_inline)) float mnt_bf16_widen(uint16_t h) {
  union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
  return v.f;
}
uint16_t mnt_f32_to_f16(float f);
float mnt_f16_to_f32(uint16_t h);

/* dst[i] = (dst[i] + src[i]) / div, computed in fp32 (fp64 for MNT_FP64) and rounded once to the
 * element type. div == 1 is a plain sum. src may lie at any byte (a chunk read in place from a
 * link's ring, mnt_link_peek); dst is aligned to its element. */
void mnt_reduce(mnt_dtype t, void *dst, const void *src, size_t n, float div);
/* buf[i] = buf[i] / div. */
void mnt_scale_div(mnt_dtype t, void *buf, size_t n, float div);
/* (fp64 to fp32 rounds to nearest) */
void mnt_to_f32(mnt_dtype t, const void *src, float *dst, size_t n);
void mnt_from_f32(mnt_dtype t, const float *src, void *dst, size_t n);

#endif
