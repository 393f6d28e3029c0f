// f32.cu — the CUDA backend's kernels over fp32 vectors (parameters, gradients, momentum):
// accumulate, scale, the SGD and LARS steps, the non-finite check and the poison that carries a
// rank's own non-finite values into the averaged gradients.
// defines: mnt_k_f32_acc, mnt_k_f32_scale, mnt_k_sgd, mnt_k_lars, mnt_k_rmsw, mnt_k_nonfinite, mnt_k_f32_poison
// (see ops.h).
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

// skip: the non-finite flag (or NULL); set, the kernel writes nothing (one load per thread, cached)
__device__ __forceinline__ bool skipped(const int32_t *skip) { return skip && *skip; }

__global__ void acc_k(float *y, const float *x, size_t n, const int32_t *skip) {
  if (skipped(skip)) return;
  MNT_GRID_STRIDE(i, n) { y[i] += x[i]; }
}
__global__ void scale_k(float *y, float a, size_t n) {
  MNT_GRID_STRIDE(i, n) { y[i] *= a; }
}
// PyTorch's SGD (torch.optim.SGD, dampening 0, no Nesterov) in the CPU backend's order
__global__ void sgd_k(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ m, size_t n,
                      const float *__restrict__ hp, float mu, float wd, int first, const int32_t *skip) {
  if (skipped(skip)) return;
  const float lr = hp[0];
  MNT_GRID_STRIDE(i, n) {
    float d = g[i] + wd * w[i];
    float v = first ? d : mu * m[i] + d;
    m[i] = v;
    w[i] -= lr * v;
  }
}
// RMSprop warm-up in the CPU backend's order (cpu_ops.c), without FMA contraction
__global__ void rmsw_k(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ m, float *__restrict__ v,
                       size_t n, const float *__restrict__ hp, float mu1, float mu2, float eps, float wd, int first,
                       const int32_t *skip) {
  if (skipped(skip)) return;
  const float lr = hp[0], as = hp[1], ar = hp[2];
  const float c2 = 1.0f - mu2;
  MNT_GRID_STRIDE(i, n) {
    float d = __fadd_rn(g[i], __fmul_rn(wd, w[i]));
    float dd = __fmul_rn(c2, __fmul_rn(d, d));
    float vi = first ? dd : __fadd_rn(__fmul_rn(mu2, v[i]), dd);
    float s = __fmul_rn(__fadd_rn(as, __fdiv_rn(ar, __fadd_rn(__fsqrt_rn(vi), eps))), d);
    float mi = first ? s : __fadd_rn(__fmul_rn(mu1, m[i]), s);
    v[i] = vi;
    m[i] = mi;
    w[i] = __fsub_rn(w[i], __fmul_rn(lr, mi));
  }
}
// LARS, pass 1: block x of segment y sums w^2 and g^2 over its grid-stride share into partial
// [y][x] (two doubles), no atomics: pass 2 adds the blocks in order
__global__ void lars_norms_k(const float *__restrict__ w, const float *__restrict__ g, const mnt_k_seg *seg,
                             double *partial) {
  __shared__ double sw[kThreads], sg[kThreads];
  const mnt_k_seg s = seg[blockIdx.y];
  double aw = 0, ag = 0;
  if (s.adapt)
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < s.n; i += (uint64_t)gridDim.x * blockDim.x) {
      double x = w[s.off + i], y = g[s.off + i];
      aw += x * x;
      ag += y * y;
    }
  sw[threadIdx.x] = aw;
  sg[threadIdx.x] = ag;
  __syncthreads();
  for (int k = kThreads / 2; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k) {
      sw[threadIdx.x] += sw[threadIdx.x + k];
      sg[threadIdx.x] += sg[threadIdx.x + k];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partial[2 * ((size_t)blockIdx.y * gridDim.x + blockIdx.x)] = sw[0];
    partial[2 * ((size_t)blockIdx.y * gridDim.x + blockIdx.x) + 1] = sg[0];
  }
}
// LARS, pass 2: the segment's trust ratio from the partial sums, then the step (rounded as the CPU's
// loop in src/simd.c: no contraction into FMA)
__global__ void lars_apply_k(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ m,
                             const mnt_k_seg *seg, const double *partial, const float *__restrict__ hp, float mu,
                             float wd, float eta, int first, const int32_t *skip) {
  if (skipped(skip)) return;
  const float lr = hp[0];
  const mnt_k_seg s = seg[blockIdx.y];
  float lr_i = lr, wd_i = 0.0f;
  if (s.adapt) {
    double ww = 0, gg = 0;
    for (unsigned b = 0; b < gridDim.x; b++) {
      ww += partial[2 * ((size_t)blockIdx.y * gridDim.x + b)];
      gg += partial[2 * ((size_t)blockIdx.y * gridDim.x + b) + 1];
    }
    double wn = sqrt(ww), gn = sqrt(gg);
    if (wn > 0 && gn > 0) lr_i = (float)(lr * (eta * wn / (gn + wd * wn)));
    wd_i = wd;
  }
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < s.n; i += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t k = s.off + i;
    float d = __fmul_rn(lr_i, __fadd_rn(g[k], __fmul_rn(wd_i, w[k])));
    float v = first ? d : __fadd_rn(__fmul_rn(mu, m[k]), d);
    m[k] = v;
    w[k] = __fsub_rn(w[k], v);
  }
}
__global__ void nonfinite_k(const float *__restrict__ x, size_t n, int32_t *flag) {
  MNT_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;  // every writer writes the same value
  }
}

__global__ void poison_k(float *x, size_t n, const int32_t *flags, int nflags) {
  int any = 0;
  for (int k = 0; k < nflags; k++) any |= flags[k];  // a few loads per thread, cached
  if (!any) return;
  MNT_GRID_STRIDE(i, n) { x[i] = __int_as_float(0x7fc00000); }  // a quiet NaN
}

cudaStream_t S(void *s) { return static_cast<cudaStream_t>(s); }

}  // namespace

extern "C" int mnt_k_f32_acc(float *y, const float *x, size_t n, const int32_t *skip, void *stream) {
  if (n == 0) return 0;
  acc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(y, x, n, skip);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_f32_scale(float *y, float a, size_t n, void *stream) {
  if (n == 0) return 0;
  scale_k<<<grid_for(n), kThreads, 0, S(stream)>>>(y, a, n);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_sgd(float *w, const float *g, float *m, size_t n, const float *hp, float mu, float wd, int first,
                         const int32_t *skip, void *stream) {
  if (n == 0) return 0;
  sgd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(w, g, m, n, hp, mu, wd, first, skip);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_rmsw(float *w, const float *g, float *m, float *v, size_t n, const float *hp, float mu1,
                          float mu2, float eps, float wd, int first, const int32_t *skip, void *stream) {
  if (n == 0) return 0;
  rmsw_k<<<grid_for(n), kThreads, 0, S(stream)>>>(w, g, m, v, n, hp, mu1, mu2, eps, wd, first, skip);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_lars(float *w, const float *g, float *m, const mnt_k_seg *seg, int nseg, double *partial,
                          const float *hp, float mu, float wd, float eta, int first, const int32_t *skip, void *stream) {
  if (nseg <= 0) return 0;
  dim3 grid(MNT_K_LARS_BLOCKS, (unsigned)nseg);
  lars_norms_k<<<grid, kThreads, 0, S(stream)>>>(w, g, seg, partial);
  lars_apply_k<<<grid, kThreads, 0, S(stream)>>>(w, g, m, seg, partial, hp, mu, wd, eta, first, skip);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_nonfinite(const float *x, size_t n, int32_t *flag, void *stream) {
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, S(stream));
  if (e != cudaSuccess || n == 0) return (int)e;
  nonfinite_k<<<grid_for(n), kThreads, 0, S(stream)>>>(x, n, flag);
  return (int)cudaGetLastError();
}

extern "C" int mnt_k_f32_poison(float *x, size_t n, const int32_t *flags, int nflags, void *stream) {
  if (n == 0 || nflags <= 0) return 0;
  poison_k<<<grid_for(n), kThreads, 0, S(stream)>>>(x, n, flags, nflags);
  return (int)cudaGetLastError();
}
