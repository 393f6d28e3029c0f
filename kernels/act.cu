// act.cu — the CUDA backend's activation kernels (fp32 NCHW or bf16 NHWC elements, fp32 math):
// element-wise ops, global average pooling, layout conversions, the fully-connected bias helpers,
// softmax cross-entropy and the conv weight layout casts (input normalization is augment.cu's).
// defines: the mnt_k_* launchers of ops.h marked act.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/bf16x8.cuh"
#include "kernels/ops.h"

namespace {

constexpr int kThreads = 256;

unsigned grid_for(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  return (unsigned)(b < 32768 ? b : 32768);  // grid-stride loops cover the rest
}

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T st(float v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

#define MNT_GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---- element-wise --------------------------------------------------------------------------
// element-wise kernels may run in place (x == y, dx == dy): no __restrict__
template <typename T> __global__ void relu_fwd_k(const T *x, T *y, size_t n) {
  MNT_GRID_STRIDE(i, n) {
    float v = ld(x[i]);
    y[i] = st<T>(v > 0.0f ? v : 0.0f);
  }
}
template <typename T>
__global__ void relu_bwd_k(const T *y, const T *dy, T *dx, size_t n) {
  MNT_GRID_STRIDE(i, n) { dx[i] = ld(y[i]) > 0.0f ? dy[i] : st<T>(0.0f); }
}
template <typename T> __global__ void add_k(const T *x1, const T *x2, T *y, size_t n) {
  MNT_GRID_STRIDE(i, n) { y[i] = st<T>(ld(x1[i]) + ld(x2[i])); }
}
template <typename T> __global__ void acc_k(T *y, const T *x, size_t n) {
  MNT_GRID_STRIDE(i, n) { y[i] = st<T>(ld(y[i]) + ld(x[i])); }
}

// bf16, 8 elements per thread (16-byte accesses; mnt_bf16x8_ok): the same results as the kernels
// above, at full memory bandwidth (the one-element kernels reached about a third of it)
enum { EW_RELU_FWD, EW_RELU_BWD, EW_ADD, EW_ACC };
template <int OP> __global__ void ew8_k(const __nv_bfloat16 *a, const __nv_bfloat16 *b, __nv_bfloat16 *y, size_t n8) {
  MNT_GRID_STRIDE(i, n8) {
    float u[8], v[8];
    mnt_ld8(a + 8 * i, u);
    if (OP != EW_RELU_FWD) mnt_ld8(b + 8 * i, v);
#pragma unroll
    for (int k = 0; k < 8; k++) {
      if (OP == EW_RELU_FWD) u[k] = u[k] > 0.0f ? u[k] : 0.0f;
      else if (OP == EW_RELU_BWD) u[k] = u[k] > 0.0f ? v[k] : 0.0f;  // y > 0 ? dy : 0 (a bf16 value: exact)
      else u[k] = u[k] + v[k];
    }
    mnt_st8(y + 8 * i, u);
  }
}

// ---- reductions -----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
// whole-block reductions (blockDim.x a multiple of 32, <= 1024), the same order every call;
// every thread gets the result. sh: 32 floats of shared memory.
__device__ float block_sum(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = (int)threadIdx.x < nw ? sh[threadIdx.x] : 0.0f;
  if (w == 0) v = warp_sum(v);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  float r = sh[0];
  __syncthreads();
  return r;
}
__device__ float block_max(float v, float *sh) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) sh[w] = v;
  __syncthreads();
  v = (int)threadIdx.x < nw ? sh[threadIdx.x] : -INFINITY;
  if (w == 0) v = warp_max(v);
  if (threadIdx.x == 0) sh[0] = v;
  __syncthreads();
  float r = sh[0];
  __syncthreads();
  return r;
}

// ---- global average pooling -----------------------------------------------------------------
// NCHW: one warp per (n, c) plane
__global__ void gap_fwd_nchw_k(const float *__restrict__ x, float *__restrict__ y, int NC, int HW) {
  int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= NC) return;  // whole warps leave together
  const float *p = x + (size_t)warp * HW;
  float s = 0.0f;
  for (int j = lane; j < HW; j += 32) s += p[j];
  s = warp_sum(s);
  if (lane == 0) y[warp] = s / (float)HW;
}
// NHWC: one thread per (n, c), reading along the channels (coalesced)
template <typename T> __global__ void gap_fwd_nhwc_k(const T *__restrict__ x, T *__restrict__ y, int N, int C, int HW) {
  MNT_GRID_STRIDE(i, (size_t)N * C) {
    size_t n = i / C, c = i % C;
    const T *p = x + n * (size_t)HW * C + c;
    float s = 0.0f;
    for (int j = 0; j < HW; j++) s += ld(p[(size_t)j * C]);
    y[i] = st<T>(s / (float)HW);
  }
}
template <typename T>
__global__ void gap_bwd_k(const T *__restrict__ dy, T *__restrict__ dx, int N, int C, int HW, int nhwc) {
  size_t total = (size_t)N * C * HW;
  MNT_GRID_STRIDE(i, total) {
    size_t nc;
    if (nhwc) nc = (i / ((size_t)HW * C)) * C + i % C;
    else nc = i / HW;
    dx[i] = st<T>(ld(dy[nc]) / (float)HW);
  }
}

// ---- fully-connected helpers ----------------------------------------------------------------
template <typename T> __global__ void bias_rows_k(const float *__restrict__ bias, T *__restrict__ y, int N, int O) {
  MNT_GRID_STRIDE(i, (size_t)N * O) { y[i] = st<T>(bias[i % O]); }
}
template <typename T> __global__ void col_sum_k(const T *__restrict__ dy, float *__restrict__ out, int N, int O) {
  MNT_GRID_STRIDE(o, (size_t)O) {
    float s = 0.0f;
    for (int n = 0; n < N; n++) s += ld(dy[(size_t)n * O + o]);
    out[o] = s;
  }
}

// ---- layouts --------------------------------------------------------------------------------
// fp32 NCHW -> T NHWC, one thread per output element
template <typename T> __global__ void nchw_to_nhwc_k(const float *__restrict__ src, T *__restrict__ dst, int N, int C, int HW) {
  MNT_GRID_STRIDE(i, (size_t)N * C * HW) {
    size_t c = i % C, p = i / C, n = p / HW, hw = p % HW;
    dst[i] = st<T>(src[(n * C + c) * HW + hw]);
  }
}
// T NHWC -> fp32 NCHW, one thread per output element
template <typename T> __global__ void nhwc_to_nchw_k(const T *__restrict__ src, float *__restrict__ dst, int N, int C, int HW) {
  MNT_GRID_STRIDE(i, (size_t)N * C * HW) {
    size_t hw = i % HW, nc = i / HW, c = nc % C, n = nc / C;
    dst[i] = ld(src[(n * HW + hw) * C + c]);
  }
}

// ---- softmax cross-entropy ------------------------------------------------------------------
// one block per row; the label's rank counts the classes scoring strictly higher (as the CPU)
template <typename T>
__global__ void xent_rows_k(const T *__restrict__ logits, const int32_t *__restrict__ labels, T *__restrict__ dlogits,
                            int N, int K, float smoothing, float *__restrict__ rows) {
  __shared__ float sh[32];
  int n = blockIdx.x;
  const T *z = logits + (size_t)n * K;
  int y = labels[n];
  if (y < 0 || y >= K) {  // the same for the whole block: no reduction is left waiting
    if (threadIdx.x == 0) {
      rows[3 * (size_t)n] = NAN;
      rows[3 * (size_t)n + 1] = 0.0f;
      rows[3 * (size_t)n + 2] = 0.0f;
    }
    if (dlogits)
      for (int k = threadIdx.x; k < K; k += blockDim.x) dlogits[(size_t)n * K + k] = st<T>(NAN);
    return;
  }
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, ld(z[k]));
  mx = block_max(mx, sh);
  const float zy = ld(z[y]);
  float se = 0.0f, zs = 0.0f, above = 0.0f;
  for (int k = threadIdx.x; k < K; k += blockDim.x) {
    float v = ld(z[k]);
    se += expf(v - mx);
    zs += v;
    above += v > zy ? 1.0f : 0.0f;
  }
  se = block_sum(se, sh);
  zs = block_sum(zs, sh);
  above = block_sum(above, sh);
  const float lse = logf(se) + mx, on = 1.0f - smoothing, off = smoothing / (float)K;
  if (threadIdx.x == 0) {
    rows[3 * (size_t)n] = on * (lse - zy) + off * ((float)K * lse - zs);  // target (1-e) onehot + e/K
    rows[3 * (size_t)n + 1] = above < 1.0f ? 1.0f : 0.0f;
    rows[3 * (size_t)n + 2] = above < 5.0f ? 1.0f : 0.0f;
  }
  if (dlogits)
    for (int k = threadIdx.x; k < K; k += blockDim.x)
      dlogits[(size_t)n * K + k] = st<T>((expf(ld(z[k]) - lse) - (k == y ? on : 0.0f) - off) / (float)N);
}

__global__ void xent_reduce_k(const float *__restrict__ rows, int N, float *__restrict__ out3) {
  __shared__ float sh[32];
  for (int j = 0; j < 3; j++) {
    float s = 0.0f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) s += rows[3 * (size_t)n + j];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out3[j] = s;
  }
}

// ---- conv weights ---------------------------------------------------------------------------
// Cp >= C: the KRSC copy's channel count; channels C..Cp-1 are zero (the stem's padding to 4)
__global__ void oihw_to_krsc_k(const float *__restrict__ w, __nv_bfloat16 *__restrict__ out, int K, int C, int Cp,
                               int R) {
  MNT_GRID_STRIDE(i, (size_t)K * Cp * R * R) {
    size_t c = i % Cp, t = i / Cp, s = t % R;
    t /= R;
    size_t r = t % R, k = t / R;
    out[i] = c < (size_t)C ? __float2bfloat16_rn(w[((k * C + c) * R + r) * R + s]) : __float2bfloat16_rn(0.0f);
  }
}
__global__ void krsc_to_oihw_k(const __nv_bfloat16 *__restrict__ in, float *__restrict__ w, int K, int C, int Cp,
                               int R) {
  MNT_GRID_STRIDE(i, (size_t)K * C * R * R) {
    size_t s = i % R, t = i / R, r = t % R;
    t /= R;
    size_t c = t % C, k = t / C;
    w[i] = __bfloat162float(in[((k * R + r) * R + s) * Cp + c]);
  }
}
// NHWC with C channels -> NHWC with Cp >= C, the added channels zero
__global__ void pad_channels_k(const __nv_bfloat16 *__restrict__ x, __nv_bfloat16 *__restrict__ y, size_t npix, int C,
                               int Cp) {
  MNT_GRID_STRIDE(i, npix * Cp) {
    size_t c = i % Cp, p = i / Cp;
    y[i] = c < (size_t)C ? x[p * C + c] : __float2bfloat16_rn(0.0f);
  }
}

int launched() { return (int)cudaGetLastError(); }
cudaStream_t S(void *s) { return static_cast<cudaStream_t>(s); }
typedef __nv_bfloat16 bf;

}  // namespace

// ---- launchers ------------------------------------------------------------------------------
extern "C" int mnt_k_relu_fwd(int bf16, const void *x, void *y, size_t n, void *stream) {
  if (n == 0) return 0;
  if (bf16 && mnt_bf16x8_ok(n, x, y, y))
    ew8_k<EW_RELU_FWD><<<grid_for(n / 8), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x), nullptr,
                                                                      static_cast<bf *>(y), n / 8);
  else if (bf16) relu_fwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x), static_cast<bf *>(y), n);
  else relu_fwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const float *>(x), static_cast<float *>(y), n);
  return launched();
}

extern "C" int mnt_k_relu_bwd(int bf16, const void *y, const void *dy, void *dx, size_t n, void *stream) {
  if (n == 0) return 0;
  if (bf16 && mnt_bf16x8_ok(n, y, dy, dx))
    ew8_k<EW_RELU_BWD><<<grid_for(n / 8), kThreads, 0, S(stream)>>>(static_cast<const bf *>(y),
                                                                      static_cast<const bf *>(dy), static_cast<bf *>(dx),
                                                                      n / 8);
  else if (bf16)
    relu_bwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(y), static_cast<const bf *>(dy),
                                                         static_cast<bf *>(dx), n);
  else
    relu_bwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const float *>(y), static_cast<const float *>(dy),
                                                         static_cast<float *>(dx), n);
  return launched();
}

extern "C" int mnt_k_add(int bf16, const void *x1, const void *x2, void *y, size_t n, void *stream) {
  if (n == 0) return 0;
  if (bf16 && mnt_bf16x8_ok(n, x1, x2, y))
    ew8_k<EW_ADD><<<grid_for(n / 8), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x1), static_cast<const bf *>(x2),
                                                                 static_cast<bf *>(y), n / 8);
  else if (bf16)
    add_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x1), static_cast<const bf *>(x2),
                                                    static_cast<bf *>(y), n);
  else
    add_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const float *>(x1), static_cast<const float *>(x2),
                                                    static_cast<float *>(y), n);
  return launched();
}

extern "C" int mnt_k_acc(int bf16, void *y, const void *x, size_t n, void *stream) {
  if (n == 0) return 0;
  if (bf16 && mnt_bf16x8_ok(n, y, x, x))
    ew8_k<EW_ACC><<<grid_for(n / 8), kThreads, 0, S(stream)>>>(static_cast<const bf *>(y), static_cast<const bf *>(x),
                                                                 static_cast<bf *>(y), n / 8);
  else if (bf16) acc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<bf *>(y), static_cast<const bf *>(x), n);
  else acc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<float *>(y), static_cast<const float *>(x), n);
  return launched();
}

extern "C" int mnt_k_gap_fwd(int bf16, const void *x, void *y, int N, int C, int HW, void *stream) {
  size_t nc = (size_t)N * C;
  if (nc == 0 || HW <= 0) return 0;
  if (bf16) {
    gap_fwd_nhwc_k<<<grid_for(nc), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x), static_cast<bf *>(y), N, C,
                                                              HW);
  } else {
    unsigned blocks = (unsigned)((nc * 32 + kThreads - 1) / kThreads);  // a warp per plane
    gap_fwd_nchw_k<<<blocks, kThreads, 0, S(stream)>>>(static_cast<const float *>(x), static_cast<float *>(y), (int)nc,
                                                       HW);
  }
  return launched();
}

extern "C" int mnt_k_gap_bwd(int bf16, const void *dy, void *dx, int N, int C, int HW, void *stream) {
  size_t n = (size_t)N * C * (size_t)(HW > 0 ? HW : 0);
  if (n == 0) return 0;
  if (bf16)
    gap_bwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(dy), static_cast<bf *>(dx), N, C, HW, 1);
  else
    gap_bwd_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const float *>(dy), static_cast<float *>(dx), N, C,
                                                        HW, 0);
  return launched();
}

extern "C" int mnt_k_bias_rows(int bf16, const float *bias, void *y, int N, int O, void *stream) {
  size_t n = (size_t)N * O;
  if (n == 0) return 0;
  if (bf16) bias_rows_k<<<grid_for(n), kThreads, 0, S(stream)>>>(bias, static_cast<bf *>(y), N, O);
  else bias_rows_k<<<grid_for(n), kThreads, 0, S(stream)>>>(bias, static_cast<float *>(y), N, O);
  return launched();
}

extern "C" int mnt_k_col_sum(int bf16, const void *dy, float *out, int N, int O, void *stream) {
  if (O <= 0) return 0;
  if (bf16) col_sum_k<<<grid_for((size_t)O), kThreads, 0, S(stream)>>>(static_cast<const bf *>(dy), out, N, O);
  else col_sum_k<<<grid_for((size_t)O), kThreads, 0, S(stream)>>>(static_cast<const float *>(dy), out, N, O);
  return launched();
}

extern "C" int mnt_k_nchw_to_act(int bf16, const float *src, void *act, int N, int C, int HW, void *stream) {
  size_t n = (size_t)N * C * HW;
  if (n == 0) return 0;
  if (!bf16) return (int)cudaMemcpyAsync(act, src, n * sizeof(float), cudaMemcpyDeviceToDevice, S(stream));
  nchw_to_nhwc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(src, static_cast<bf *>(act), N, C, HW);
  return launched();
}

extern "C" int mnt_k_act_to_nchw(int bf16, const void *act, float *dst, int N, int C, int HW, void *stream) {
  size_t n = (size_t)N * C * HW;
  if (n == 0) return 0;
  if (!bf16) return (int)cudaMemcpyAsync(dst, act, n * sizeof(float), cudaMemcpyDeviceToDevice, S(stream));
  nhwc_to_nchw_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(act), dst, N, C, HW);
  return launched();
}

extern "C" int mnt_k_xent_rows(int bf16, const void *logits, const int32_t *labels, void *dlogits, int N, int K,
                               float smoothing, float *rows, void *stream) {
  if (N <= 0 || K <= 0) return 0;
  if (bf16)
    xent_rows_k<<<(unsigned)N, kThreads, 0, S(stream)>>>(static_cast<const bf *>(logits), labels,
                                                          static_cast<bf *>(dlogits), N, K, smoothing, rows);
  else
    xent_rows_k<<<(unsigned)N, kThreads, 0, S(stream)>>>(static_cast<const float *>(logits), labels,
                                                          static_cast<float *>(dlogits), N, K, smoothing, rows);
  return launched();
}

extern "C" int mnt_k_xent_reduce(const float *rows, int N, float *out3, void *stream) {
  xent_reduce_k<<<1, kThreads, 0, S(stream)>>>(rows, N, out3);
  return launched();
}

extern "C" int mnt_k_oihw_to_krsc_bf16(const float *w, void *out, int K, int C, int Cp, int R, void *stream) {
  size_t n = (size_t)K * Cp * R * R;
  if (n == 0 || Cp < C) return n == 0 ? 0 : (int)cudaErrorInvalidValue;
  oihw_to_krsc_k<<<grid_for(n), kThreads, 0, S(stream)>>>(w, static_cast<bf *>(out), K, C, Cp, R);
  return launched();
}

extern "C" int mnt_k_krsc_bf16_to_oihw(const void *in, float *w, int K, int C, int Cp, int R, void *stream) {
  size_t n = (size_t)K * C * R * R;
  if (n == 0 || Cp < C) return n == 0 ? 0 : (int)cudaErrorInvalidValue;
  krsc_to_oihw_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(in), w, K, C, Cp, R);
  return launched();
}

extern "C" int mnt_k_pad_channels_bf16(const void *x, void *y, size_t npix, int C, int Cp, void *stream) {
  size_t n = npix * (size_t)Cp;
  if (n == 0 || Cp < C) return n == 0 ? 0 : (int)cudaErrorInvalidValue;
  pad_channels_k<<<grid_for(n), kThreads, 0, S(stream)>>>(static_cast<const bf *>(x), static_cast<bf *>(y), npix, C,
                                                          Cp);
  return launched();
}
