// bf16x8.cuh — eight bf16 values in one 16-byte access, as fp32: what the memory-bound kernels
// (bn.cu, act.cu) use to read and write NHWC rows at full bandwidth. The pointer must be 16-byte
// aligned (mnt_bf16x8_ok).
// defines: mnt_bf16x8_ok, mnt_ld8, mnt_st8.
#ifndef MNT_KERNELS_BF16X8_CUH
#define MNT_KERNELS_BF16X8_CUH

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

// n elements at each pointer can be read 8 at a time
static inline bool mnt_bf16x8_ok(size_t n, const void *a, const void *b, const void *c) {
  return n % 8 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

static __device__ __forceinline__ void mnt_ld8(const __nv_bfloat16 *p, float *v) {
  uint4 u = *reinterpret_cast<const uint4 *>(p);
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
  for (int k = 0; k < 4; k++) {
    float2 f = __bfloat1622float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}

static __device__ __forceinline__ void mnt_st8(__nv_bfloat16 *p, const float *v) {
  uint4 u;
  __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
  for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4 *>(p) = u;
}

#endif
