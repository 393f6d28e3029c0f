// cast.cu — element casts on the GPU (fp32 <-> bf16 / fp16), used for reduced-precision
// gradient allreduce. defines: mnt_cuda_cast (host launcher, see cast.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cast.h"

namespace {

__global__ void f32_to_bf16(const float *__restrict__ in, __nv_bfloat16 *__restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}
__global__ void bf16_to_f32(const __nv_bfloat16 *__restrict__ in, float *__restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}
__global__ void f32_to_f16(const float *__restrict__ in, __half *__restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __float2half_rn(in[i]);
}
__global__ void f16_to_f32(const __half *__restrict__ in, float *__restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = __half2float(in[i]);
}

}  // namespace

extern "C" int mnt_cuda_cast(int from, int to, const void *in, void *out, size_t n, void *stream) {
  if (n == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  unsigned blocks = (unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (from == 0 && to == 1)
    f32_to_bf16<<<blocks, 256, 0, s>>>(static_cast<const float *>(in), static_cast<__nv_bfloat16 *>(out), n);
  else if (from == 1 && to == 0)
    bf16_to_f32<<<blocks, 256, 0, s>>>(static_cast<const __nv_bfloat16 *>(in), static_cast<float *>(out), n);
  else if (from == 0 && to == 2)
    f32_to_f16<<<blocks, 256, 0, s>>>(static_cast<const float *>(in), static_cast<__half *>(out), n);
  else if (from == 2 && to == 0)
    f16_to_f32<<<blocks, 256, 0, s>>>(static_cast<const __half *>(in), static_cast<float *>(out), n);
  else
    return -1;
  return cudaPeekAtLastError() == cudaSuccess ? 0 : -2; /* the caller reads (and clears) the error */
}
