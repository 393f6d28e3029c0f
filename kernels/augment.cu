// augment.cu — see augment.h. One thread per output pixel of one image, all channels: the two
// source rows and columns are found once and every channel is interpolated from them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/augment.h"

namespace {

struct aug_norm {
  float scale[MNT_K_AUG_MAX_C], bias[MNT_K_AUG_MAX_C];
};

template <bool BF16>
__global__ void augment_kernel(const uint8_t *__restrict__ src, int S, int C, const float *__restrict__ boxes, int pad,
                               int out, int outC, aug_norm nm, void *__restrict__ act) {
  const int ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y, i = blockIdx.z;
  if (ox >= out) return;
  const float *b = boxes + (size_t)i * 5;
  const double x0 = b[0], y0 = b[1], sx = (double)b[2] / out, sy = (double)b[3] / out;
  const int flip = b[4] != 0.0f;
  // as crop_resize: the output column d takes source column fx of column ox (flipped: d = out-1-ox)
  const int sox = flip ? out - 1 - ox : ox;
  double fx = x0 + (sox + 0.5) * sx - 0.5, fy = y0 + (oy + 0.5) * sy - 0.5;
  const float inside = (!pad || (fx > -0.5 && fx < S - 0.5)) && (!pad || (fy > -0.5 && fy < S - 0.5)) ? 1.0f : 0.0f;
  fx = fx < 0 ? 0 : fx > S - 1 ? S - 1 : fx;
  fy = fy < 0 ? 0 : fy > S - 1 ? S - 1 : fy;
  const int x1 = (int)fx, y1 = (int)fy;
  const int x2 = x1 + 1 < S ? x1 + 1 : x1, y2 = y1 + 1 < S ? y1 + 1 : y1;
  const float wx = (float)(fx - x1), wy = (float)(fy - y1);
  const uint8_t *img = src + (size_t)i * S * S * C;
  const uint8_t *r1 = img + (size_t)y1 * S * C, *r2 = img + (size_t)y2 * S * C;
  for (int c = 0; c < outC; c++) {
    const int sc = C == 1 ? 0 : c;
    // io/data/augment.c's expression, each product and sum rounded on its own: nvcc contracts a * b + c
    // into one FMA (one rounding) unless told not to, and the CPU's -std=c11 build does not
    // contract, so the __f*_rn intrinsics (never fused) keep the two sides' floats the same
    const float a = __fadd_rn(r1[x1 * C + sc], __fmul_rn(wx, (float)(r1[x2 * C + sc] - r1[x1 * C + sc])));
    const float e = __fadd_rn(r2[x1 * C + sc], __fmul_rn(wx, (float)(r2[x2 * C + sc] - r2[x1 * C + sc])));
    const float v = __fadd_rn(__fmul_rn(__fmul_rn(__fadd_rn(a, __fmul_rn(wy, __fsub_rn(e, a))), inside), nm.scale[c]),
                              nm.bias[c]);
    if (BF16)
      static_cast<__nv_bfloat16 *>(act)[(((size_t)i * out + oy) * out + ox) * outC + c] = __float2bfloat16(v);
    else
      static_cast<float *>(act)[(((size_t)i * outC + c) * out + oy) * out + ox] = v;
  }
}

}  // namespace

extern "C" int mnt_k_augment_u8(int bf16, const uint8_t *src, int n, int S, int C, const float *boxes, int pad, int out,
                                int outC, const float *mean, const float *std, void *act, void *stream) {
  if (n < 1 || n > 65535 || out < 1 || outC < 1 || outC > MNT_K_AUG_MAX_C || C < 1 || S < 1 || out > 65535)
    return (int)cudaErrorInvalidValue;
  aug_norm nm;
  for (int c = 0; c < outC; c++) {
    const int sc = C == 1 ? 0 : c;
    nm.scale[c] = 1.0f / (255.0f * std[sc]);
    nm.bias[c] = -mean[sc] / std[sc];
  }
  const dim3 block(128), grid((unsigned)((out + 127) / 128), (unsigned)out, (unsigned)n);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (bf16)
    augment_kernel<true><<<grid, block, 0, s>>>(src, S, C, boxes, pad, out, outC, nm, act);
  else
    augment_kernel<false><<<grid, block, 0, s>>>(src, S, C, boxes, pad, out, outC, nm, act);
  return (int)cudaGetLastError();
}
