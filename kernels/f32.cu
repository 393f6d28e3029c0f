// f32.cu — the CUDA backend's kernels over fp32 vectors (parameters, gradients, momentum):
// accumulate, scale, the SGD step and the non-finite check.
// defines: mnt_k_f32_acc, mnt_k_f32_scale, mnt_k_sgd, mnt_k_nonfinite (see ops.h).
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/ops.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return (unsigned)(b < 32768 ? b : 32768);
}

#define MNT_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void acc_k(float *y, const float *x, size_t n) {
  MNT_GRID_STRIDE(i, n) { y[i] += x[i]; }
}
__global__ void scale_k(float *y, float a, size_t n) {
  MNT_GRID_STRIDE(i, n) { y[i] *= a; }
}
// PyTorch's SGD (torch.optim.SGD, dampening 0, no Nesterov) in the CPU backend's order
__global__ void sgd_k(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ m, size_t n, float lr,
                      float mu, float wd, int first) {
  MNT_GRID_STRIDE(i, n) {
    float d = g[i] + wd * w[i];
    float v = first ? d : mu * m[i] + d;
    m[i] = v;
    w[i] -= lr * v;
  }
}
__global__ void nonfinite_k(const float *__restrict__ x, size_t n, int32_t *flag) {
  MNT_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;  // every writer writes the same value
  }
}

cudaStream_t S(void *s) { return static_cast<cudaStream_t>(s); }

}  // namespace

extern "C" int mnt_k_f32_acc(float *y, const float *x, size_t n, void *stream) {
  if (n == 0) return 0;
  acc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(y, x, n);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_f32_scale(float *y, float a, size_t n, void *stream) {
  if (n == 0) return 0;
  scale_k<<<grid_for(n), kThreads, 0, S(stream)>>>(y, a, n);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_sgd(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first,
                         void *stream) {
  if (n == 0) return 0;
  sgd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(w, g, m, n, lr, mu, wd, first);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_nonfinite(const float *x, size_t n, int32_t *flag, void *stream) {
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, S(stream));
  if (e != cudaSuccess || n == 0) return (int)e;
  nonfinite_k<<<grid_for(n), kThreads, 0, S(stream)>>>(x, n, flag);
  return (int)cudaGetLastError();
}
