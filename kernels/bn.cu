// bn.cu — batch normalization over bf16 NHWC activations (per channel over the M = N*H*W rows of
// C channels), fp32 statistics and math, an optional fused ReLU. The CUDA backend runs it for
// --precision bf16 in place of cuDNN's legacy bf16 batch norm, which measured 647 of a 700 ms
// ResNet-50 step (batch 256, H200, 2026-12-04: 21 ms for one 256x256x56x56 forward, ~20 GB/s).
//
// Each pass is a few memory-bound kernels:
//   training forward   stats (per block: count, mean, M2 by Welford, blocks merged by Chan's
//                      formula in a fixed order) -> finalize (mean, 1/sqrt(var + eps), running
//                      statistics, per-channel scale and shift) -> apply (y = x*scale + shift, ReLU)
//   inference          finalize from the running statistics -> apply
//   backward           reduce (sum g, sum g*xhat with g = dy masked by y > 0 under the ReLU)
//                      -> finalize (dgamma, dbeta, coefficients) -> apply
//                      (dx = gamma*invstd * (g - mean(g) - xhat*mean(g*xhat)))
// No atomics: every sum is taken in the same order on every call, so reruns are bit-identical.
// Rows are read 8 channels at a time (16-byte loads) when C is a multiple of 8 and the pointers
// are 16-byte aligned, else one channel at a time.
// defines: the mnt_k_bn_* launchers of ops.h.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/bf16x8.cuh"
#include "kernels/ops.h"

namespace {

typedef __nv_bfloat16 bf16;

constexpr int kBlock = 256;       // threads per block of the row kernels
constexpr int kBlocksPerSm = 4;   // target blocks of the reductions per multiprocessor
constexpr int kMaxParts = 2048;   // most row blocks a reduction is split into

cudaStream_t S(void *s) { return (cudaStream_t)s; }
int launched() { return (int)cudaGetLastError(); }

// the reductions' shape: blockDim (bx channel groups x by rows), grid (gx x parts)
struct plan {
  int V, G, bx, by, gx, parts;
};

plan make_plan(int M, int C, int V, int sms) {
  plan p;
  p.V = V;
  p.G = C / V;
  p.bx = p.G < 32 ? p.G : 32;
  p.by = kBlock / p.bx;
  p.gx = (p.G + p.bx - 1) / p.bx;
  int want = (sms > 0 ? sms : 132) * kBlocksPerSm / p.gx;
  int rows = (M + p.by - 1) / p.by;  // more parts than row groups would leave blocks idle
  if (want > rows) want = rows;
  if (want > kMaxParts) want = kMaxParts;
  p.parts = want < 1 ? 1 : want;
  return p;
}

int vec_of(int C, const void *a, const void *b, const void *c) { return mnt_bf16x8_ok((size_t)C, a, b, c) ? 8 : 1; }

template <int V> __device__ __forceinline__ void load(const bf16 *p, float *v) {
  if constexpr (V == 8) mnt_ld8(p, v);
  else v[0] = __bfloat162float(p[0]);
}

template <int V> __device__ __forceinline__ void store(bf16 *p, const float *v) {
  if constexpr (V == 8) mnt_st8(p, v);
  else p[0] = __float2bfloat16_rn(v[0]);
}

// Chan et al.'s merge of (n, mean, M2) with (nb, mb, m2b) into the first
__device__ __forceinline__ void merge(float &n, float &mean, float &m2, float nb, float mb, float m2b) {
  if (nb == 0.0f) return;
  float nn = n + nb, d = mb - mean, f = nb / nn;
  mean = __fmaf_rn(d, f, mean);
  m2 = m2 + m2b + d * d * n * f;
  n = nn;
}

// ---- training statistics ------------------------------------------------------------------------
// per thread: Welford over its rows for V channels; per block: a tree over threadIdx.y;
// part[(blockIdx.y * 3 + {0,1,2}) * C + c] = count, mean, M2 of the block's rows
template <int V> __global__ void stats_k(const bf16 *x, int M, int C, float *part) {
  extern __shared__ float sh[];  // [by][bx][1 + 2V]
  const int G = C / V, g = blockIdx.x * blockDim.x + threadIdx.x;
  float n = 0.0f, mean[V], m2[V];
#pragma unroll
  for (int k = 0; k < V; k++) mean[k] = m2[k] = 0.0f;
  if (g < G) {
    for (int m = blockIdx.y * blockDim.y + threadIdx.y; m < M; m += gridDim.y * blockDim.y) {
      float v[V];
      load<V>(x + (size_t)m * C + (size_t)g * V, v);
      n += 1.0f;
      float inv = 1.0f / n;
#pragma unroll
      for (int k = 0; k < V; k++) {
        float d = v[k] - mean[k];
        mean[k] = __fmaf_rn(d, inv, mean[k]);
        m2[k] = __fmaf_rn(d, v[k] - mean[k], m2[k]);
      }
    }
  }
  const int W = 1 + 2 * V;
  float *me = sh + ((size_t)threadIdx.y * blockDim.x + threadIdx.x) * W;
  me[0] = n;
#pragma unroll
  for (int k = 0; k < V; k++) me[1 + k] = mean[k], me[1 + V + k] = m2[k];
  __syncthreads();
  int top = 1;
  while (top < (int)blockDim.y) top <<= 1;
  for (int s = top >> 1; s > 0; s >>= 1) {
    if ((int)threadIdx.y < s && (int)threadIdx.y + s < (int)blockDim.y) {
      const float *o = me + (size_t)s * blockDim.x * W;
      float nn = me[0];
#pragma unroll
      for (int k = 0; k < V; k++) {
        float n1 = nn, mk = me[1 + k], qk = me[1 + V + k];
        merge(n1, mk, qk, o[0], o[1 + k], o[1 + V + k]);
        me[1 + k] = mk, me[1 + V + k] = qk;
      }
      me[0] = nn + o[0];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && g < G) {
#pragma unroll
    for (int k = 0; k < V; k++) {
      int c = g * V + k;
      part[((size_t)blockIdx.y * 3 + 0) * C + c] = me[0];
      part[((size_t)blockIdx.y * 3 + 1) * C + c] = me[1 + k];
      part[((size_t)blockIdx.y * 3 + 2) * C + c] = me[1 + V + k];
    }
  }
}

// The finalizers: a block of (32 channels x kFinRows) threads per 32 channels; each thread merges
// every kFinRows-th part of its channel, then a tree over the rows, in a fixed order. (One thread per
// channel walking 500 parts in a dependent chain took 0.3 ms, more than the passes it finishes.)
constexpr int kFinRows = 8;

// saved statistics, running statistics (PyTorch: running = (1 - momentum) running + momentum batch,
// the variance unbiased), scale and shift
__global__ void stats_final_k(const float *part, int parts, int C, const float *gamma, const float *beta, float eps,
                              float momentum, float *save_mean, float *save_invstd, float *run_mean, float *run_var,
                              float *ss) {
  __shared__ float sh[kFinRows][32][3];
  const int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y;
  float n = 0.0f, mean = 0.0f, m2 = 0.0f;
  if (c < C)
    for (int j = ty; j < parts; j += kFinRows)
      merge(n, mean, m2, part[((size_t)j * 3 + 0) * C + c], part[((size_t)j * 3 + 1) * C + c],
            part[((size_t)j * 3 + 2) * C + c]);
  sh[ty][threadIdx.x][0] = n, sh[ty][threadIdx.x][1] = mean, sh[ty][threadIdx.x][2] = m2;
  __syncthreads();
  for (int s = kFinRows / 2; s > 0; s >>= 1) {
    if (ty < s) {
      float *a = sh[ty][threadIdx.x], *b = sh[ty + s][threadIdx.x];
      float na = a[0], ma = a[1], qa = a[2];
      merge(na, ma, qa, b[0], b[1], b[2]);
      a[0] = na, a[1] = ma, a[2] = qa;
    }
    __syncthreads();
  }
  if (ty != 0 || c >= C) return;
  n = sh[0][threadIdx.x][0], mean = sh[0][threadIdx.x][1], m2 = sh[0][threadIdx.x][2];
  float var = n > 0.0f ? m2 / n : 0.0f, invstd = 1.0f / sqrtf(var + eps);
  save_mean[c] = mean;
  save_invstd[c] = invstd;
  float unbiased = n > 1.0f ? m2 / (n - 1.0f) : var;
  run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean;
  run_var[c] = (1.0f - momentum) * run_var[c] + momentum * unbiased;
  float scale = gamma[c] * invstd;
  ss[c] = scale;
  ss[C + c] = beta[c] - mean * scale;
}

__global__ void infer_final_k(int C, const float *gamma, const float *beta, const float *run_mean,
                              const float *run_var, float eps, float *ss) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float scale = gamma[c] / sqrtf(run_var[c] + eps);
  ss[c] = scale;
  ss[C + c] = beta[c] - run_mean[c] * scale;
}

// y = x * scale + shift (then ReLU), V channels per thread; may run in place
template <int V> __global__ void apply_k(const bf16 *x, bf16 *y, const float *ss, int C, size_t nvec, int relu) {
  const int G = C / V;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
    int c0 = (int)(i % (size_t)G) * V;
    float v[V];
    load<V>(x + i * V, v);
#pragma unroll
    for (int k = 0; k < V; k++) {
      float t = __fmaf_rn(v[k], ss[c0 + k], ss[C + c0 + k]);
      v[k] = relu && !(t > 0.0f) ? 0.0f : t;
    }
    store<V>(y + i * V, v);
  }
}

// ---- backward ---------------------------------------------------------------------------------
// per thread: sum g and sum g*xhat over its rows; per block: a tree over threadIdx.y;
// part[(blockIdx.y * 2 + {0,1}) * C + c]
template <int V>
__global__ void bwd_reduce_k(const bf16 *x, const bf16 *y, const bf16 *dy, const float *mean, const float *invstd,
                             int M, int C, int relu, float *part) {
  extern __shared__ float sh[];  // [by][bx][2V]
  const int G = C / V, g = blockIdx.x * blockDim.x + threadIdx.x;
  float sg[V], sgx[V], mu[V], is[V];
#pragma unroll
  for (int k = 0; k < V; k++) sg[k] = sgx[k] = 0.0f, mu[k] = is[k] = 0.0f;
  if (g < G) {
#pragma unroll
    for (int k = 0; k < V; k++) mu[k] = mean[g * V + k], is[k] = invstd[g * V + k];
    for (int m = blockIdx.y * blockDim.y + threadIdx.y; m < M; m += gridDim.y * blockDim.y) {
      size_t at = (size_t)m * C + (size_t)g * V;
      float xv[V], gv[V];
      load<V>(x + at, xv);
      load<V>(dy + at, gv);
      if (relu) {
        float yv[V];
        load<V>(y + at, yv);
#pragma unroll
        for (int k = 0; k < V; k++)
          if (!(yv[k] > 0.0f)) gv[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < V; k++) {
        sg[k] += gv[k];
        sgx[k] = __fmaf_rn(gv[k], (xv[k] - mu[k]) * is[k], sgx[k]);
      }
    }
  }
  const int W = 2 * V;
  float *me = sh + ((size_t)threadIdx.y * blockDim.x + threadIdx.x) * W;
#pragma unroll
  for (int k = 0; k < V; k++) me[k] = sg[k], me[V + k] = sgx[k];
  __syncthreads();
  int top = 1;
  while (top < (int)blockDim.y) top <<= 1;
  for (int s = top >> 1; s > 0; s >>= 1) {
    if ((int)threadIdx.y < s && (int)threadIdx.y + s < (int)blockDim.y) {
      const float *o = me + (size_t)s * blockDim.x * W;
#pragma unroll
      for (int k = 0; k < W; k++) me[k] += o[k];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && g < G) {
#pragma unroll
    for (int k = 0; k < V; k++) {
      int c = g * V + k;
      part[((size_t)blockIdx.y * 2 + 0) * C + c] = me[k];
      part[((size_t)blockIdx.y * 2 + 1) * C + c] = me[V + k];
    }
  }
}

// dbeta, dgamma, and the apply's coefficients: a = gamma*invstd, mean(g), mean(g*xhat)
__global__ void bwd_final_k(const float *part, int parts, int M, int C, const float *gamma, const float *invstd,
                            float *dgamma, float *dbeta, float *coef) {
  __shared__ float sh[kFinRows][32][2];
  const int c = blockIdx.x * 32 + threadIdx.x, ty = threadIdx.y;
  float sg = 0.0f, sgx = 0.0f;
  if (c < C)
    for (int j = ty; j < parts; j += kFinRows) sg += part[((size_t)j * 2 + 0) * C + c], sgx += part[((size_t)j * 2 + 1) * C + c];
  sh[ty][threadIdx.x][0] = sg, sh[ty][threadIdx.x][1] = sgx;
  __syncthreads();
  for (int s = kFinRows / 2; s > 0; s >>= 1) {
    if (ty < s) sh[ty][threadIdx.x][0] += sh[ty + s][threadIdx.x][0], sh[ty][threadIdx.x][1] += sh[ty + s][threadIdx.x][1];
    __syncthreads();
  }
  if (ty != 0 || c >= C) return;
  sg = sh[0][threadIdx.x][0], sgx = sh[0][threadIdx.x][1];
  dbeta[c] = sg;
  dgamma[c] = sgx;
  coef[c] = gamma[c] * invstd[c];
  coef[C + c] = sg / (float)M;
  coef[2 * C + c] = sgx / (float)M;
}

template <int V>
__global__ void bwd_apply_k(const bf16 *x, const bf16 *y, const bf16 *dy, bf16 *dx, const float *mean,
                            const float *invstd, const float *coef, int C, size_t nvec, int relu) {
  const int G = C / V;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
    int c0 = (int)(i % (size_t)G) * V;
    float xv[V], gv[V];
    load<V>(x + i * V, xv);
    load<V>(dy + i * V, gv);
    if (relu) {
      float yv[V];
      load<V>(y + i * V, yv);
#pragma unroll
      for (int k = 0; k < V; k++)
        if (!(yv[k] > 0.0f)) gv[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
      int c = c0 + k;
      float xhat = (xv[k] - mean[c]) * invstd[c];
      gv[k] = coef[c] * (gv[k] - coef[C + c] - xhat * coef[2 * C + c]);
    }
    store<V>(dx + i * V, gv);
  }
}

unsigned apply_grid(size_t nvec, int sms) {
  size_t b = (nvec + kBlock - 1) / kBlock, cap = (size_t)(sms > 0 ? sms : 132) * 16;
  if (b < 1) b = 1;
  return (unsigned)(b < cap ? b : cap);
}

unsigned chan_grid(int C) { return (unsigned)((C + kBlock - 1) / kBlock); }
unsigned fin_grid(int C) { return (unsigned)((C + 31) / 32); }
dim3 fin_block() { return dim3(32, kFinRows); }

}  // namespace

extern "C" {

size_t mnt_k_bn_ws_floats(int M, int C, int sms) {
  plan p = make_plan(M, C, C % 8 == 0 ? 8 : 1, sms);
  plan q = make_plan(M, C, 1, sms);  // the unaligned case of the same shape
  int parts = p.parts > q.parts ? p.parts : q.parts;
  return (size_t)parts * 3 * C + 3 * (size_t)C;
}

int mnt_k_bn_fwd_train(const void *x, const float *gamma, const float *beta, void *y, float *save_mean,
                       float *save_invstd, float *run_mean, float *run_var, float momentum, float eps, int M, int C,
                       int relu, float *ws, int sms, void *stream) {
  const bf16 *xb = (const bf16 *)x;
  bf16 *yb = (bf16 *)y;
  int V = vec_of(C, x, y, x);
  plan p = make_plan(M, C, V, sms);
  float *part = ws, *ss = ws + (size_t)p.parts * 3 * C;
  dim3 block((unsigned)p.bx, (unsigned)p.by), grid((unsigned)p.gx, (unsigned)p.parts);
  size_t shm = (size_t)kBlock * (1 + 2 * V) * sizeof(float);
  if (V == 8) stats_k<8><<<grid, block, shm, S(stream)>>>(xb, M, C, part);
  else stats_k<1><<<grid, block, shm, S(stream)>>>(xb, M, C, part);
  stats_final_k<<<fin_grid(C), fin_block(), 0, S(stream)>>>(part, p.parts, C, gamma, beta, eps, momentum, save_mean,
                                                             save_invstd, run_mean, run_var, ss);
  size_t nvec = (size_t)M * C / V;
  if (V == 8) apply_k<8><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>(xb, yb, ss, C, nvec, relu);
  else apply_k<1><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>(xb, yb, ss, C, nvec, relu);
  return launched();
}

int mnt_k_bn_fwd_infer(const void *x, const float *gamma, const float *beta, void *y, const float *run_mean,
                       const float *run_var, float eps, int M, int C, int relu, float *ws, int sms, void *stream) {
  int V = vec_of(C, x, y, x);
  float *ss = ws;
  infer_final_k<<<chan_grid(C), kBlock, 0, S(stream)>>>(C, gamma, beta, run_mean, run_var, eps, ss);
  size_t nvec = (size_t)M * C / V;
  if (V == 8)
    apply_k<8><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>((const bf16 *)x, (bf16 *)y, ss, C, nvec, relu);
  else apply_k<1><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>((const bf16 *)x, (bf16 *)y, ss, C, nvec, relu);
  return launched();
}

int mnt_k_bn_bwd(const void *x, const void *y, const void *dy, const float *gamma, const float *save_mean,
                 const float *save_invstd, void *dx, float *dgamma, float *dbeta, int M, int C, int relu, float *ws,
                 int sms, void *stream) {
  const bf16 *xb = (const bf16 *)x, *yb = (const bf16 *)(relu ? y : x), *gb = (const bf16 *)dy;
  int V = vec_of(C, x, relu ? y : x, dy) == 8 && vec_of(C, dx, dx, dx) == 8 ? 8 : 1;
  plan p = make_plan(M, C, V, sms);
  float *part = ws, *coef = ws + (size_t)p.parts * 3 * C;
  dim3 block((unsigned)p.bx, (unsigned)p.by), grid((unsigned)p.gx, (unsigned)p.parts);
  size_t shm = (size_t)kBlock * 2 * V * sizeof(float);
  if (V == 8) bwd_reduce_k<8><<<grid, block, shm, S(stream)>>>(xb, yb, gb, save_mean, save_invstd, M, C, relu, part);
  else bwd_reduce_k<1><<<grid, block, shm, S(stream)>>>(xb, yb, gb, save_mean, save_invstd, M, C, relu, part);
  bwd_final_k<<<fin_grid(C), fin_block(), 0, S(stream)>>>(part, p.parts, M, C, gamma, save_invstd, dgamma, dbeta,
                                                           coef);
  size_t nvec = (size_t)M * C / V;
  if (V == 8)
    bwd_apply_k<8><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>(xb, yb, gb, (bf16 *)dx, save_mean, save_invstd,
                                                                     coef, C, nvec, relu);
  else
    bwd_apply_k<1><<<apply_grid(nvec, sms), kBlock, 0, S(stream)>>>(xb, yb, gb, (bf16 *)dx, save_mean, save_invstd,
                                                                     coef, C, nvec, relu);
  return launched();
}

}  // extern "C"
