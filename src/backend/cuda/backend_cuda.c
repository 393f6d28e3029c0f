/* backend_cuda.c — the CUDA compute backend (see backend.h): one GPU, one non-blocking stream on
 * which every op is queued, cuDNN (layers_cudnn.c) and cuBLAS handles bound to it, and the
 * kernels of kernels/ops.h; a second stream for the uploads beside the work (upload_*: events
 * between the two). Activations are fp32 NCHW, or bf16 NHWC with --precision bf16; parameters,
 * gradients and statistics are fp32. No op synchronizes except a copy to the host, act_download,
 * sync and upload_host_done (and alloc, once, so that fresh memory is zero on every stream). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/augment.h"
#include "kernels/cast.h"
#include "src/backend/cuda/cuda_impl.h"
#include "src/backend/cuda/device.h"
#include "src/check.h"
#include "src/env.h"
#include "kernels/ops.h"

/* ---- scratch ------------------------------------------------------------------------------- */
int mnt_cuda_reserve(mnt_cuda *c, void **p, size_t *have, size_t need) {
  if (need <= *have && *p) return MNT_OK;
  /* a captured step keeps the buffers it was captured with: grown, the graph would write the old one */
  if (c->be->capturing) return mnt_be_capture_refused(c->be, "a CUDA scratch buffer grown");
  need = (need + 255) / 256 * 256;
  if (need == 0) need = 256;
  if (c->pools) {
    if (*p) MNT_CUDA_CHECK(cudaFreeAsync(*p, c->stream));
    *p = NULL;
    *have = 0;
    MNT_CUDA_CHECK(cudaMallocAsync(p, need, c->stream));
  } else {
    MNT_CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* the old buffer may be in use */
    if (*p) MNT_CUDA_CHECK(cudaFree(*p));
    *p = NULL;
    *have = 0;
    MNT_CUDA_CHECK(cudaMalloc(p, need));
  }
  *have = need;
  return MNT_OK;
}

void mnt_cuda_release(mnt_cuda *c, void **p, size_t *have) {
  if (*p) {
    cudaError_t e = mnt_cuda_clear(c->pools ? cudaFreeAsync(*p, c->stream) : cudaFree(*p));
    if (e != cudaSuccess) MNT_WARN("freeing a CUDA scratch buffer failed: %s", cudaGetErrorString(e));
  }
  *p = NULL;
  *have = 0;
}

/* ---- memory and stream ----------------------------------------------------------------- */
/* Memory may be taken from other threads than the one that created the backend (the loader's
 * page-locked buffers): each such entry makes the backend's device current on its thread, so
 * that no thread creates a context on device 0 or allocates on the wrong GPU. */
static int cu_alloc(mnt_backend *b, size_t bytes, void **p) {
  mnt_cuda *c = mnt_cuda_of(b);
  *p = NULL;
  if (bytes == 0) return MNT_OK;
  MNT_CUDA_CHECK(cudaSetDevice(c->device));
  int rc = MNT_CUDA_OK(cudaMalloc(p, bytes));
  if (rc != MNT_OK) {
    MNT_ERR("could not allocate %zu bytes on CUDA device %d", bytes, c->device);
    *p = NULL;
    return rc;
  }
  /* zeroed before any stream (the communicator's included) can touch it: setup time only */
  if ((rc = MNT_CUDA_OK(cudaMemsetAsync(*p, 0, bytes, c->stream))) != MNT_OK ||
      (rc = MNT_CUDA_OK(cudaStreamSynchronize(c->stream))) != MNT_OK) {
    MNT_CUDA_WARN(cudaFree(*p));
    *p = NULL;
    return rc;
  }
  return MNT_OK;
}

static void cu_free(mnt_backend *b, void *p) {
  if (!p) return;
  cudaError_t e = mnt_cuda_clear(cudaSetDevice(mnt_cuda_of(b)->device));
  if (e == cudaSuccess) e = mnt_cuda_clear(cudaFree(p)); /* waits for the device's work */
  if (e != cudaSuccess) MNT_ERR("cudaFree(%p) failed: %s", p, cudaGetErrorString(e));
}

static int cu_host_alloc(mnt_backend *b, size_t bytes, void **p) {
  *p = NULL;
  if (bytes == 0) return MNT_OK;
  MNT_CUDA_CHECK(cudaSetDevice(mnt_cuda_of(b)->device));
  int rc = MNT_CUDA_OK(cudaMallocHost(p, bytes));
  if (rc != MNT_OK) {
    MNT_ERR("could not allocate %zu bytes of page-locked host memory", bytes);
    *p = NULL;
    return rc;
  }
  memset(*p, 0, bytes);
  return MNT_OK;
}

static void cu_host_free(mnt_backend *b, void *p) {
  if (!p) return;
  cudaError_t e = mnt_cuda_clear(cudaSetDevice(mnt_cuda_of(b)->device));
  if (e == cudaSuccess) e = mnt_cuda_clear(cudaFreeHost(p));
  if (e != cudaSuccess) MNT_ERR("cudaFreeHost(%p) failed: %s", p, cudaGetErrorString(e));
}

static int cu_copy(mnt_backend *b, void *dst, const void *src, size_t bytes, mnt_copy_kind k) {
  mnt_cuda *c = mnt_cuda_of(b);
  if (bytes == 0) return MNT_OK;
  switch (k) {
  case MNT_COPY_H2D:
    MNT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    return MNT_OK;
  case MNT_COPY_D2D:
    MNT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return MNT_OK;
  case MNT_COPY_D2H:
    MNT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    MNT_CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* the value is final on return */
    return MNT_OK;
  }
  MNT_ERR("unknown copy kind %d", (int)k);
  return MNT_EARG;
}

static int cu_memset0(mnt_backend *b, void *p, size_t bytes) {
  if (bytes == 0) return MNT_OK;
  MNT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static int cu_sync(mnt_backend *b) {
  MNT_CUDA_CHECK(cudaStreamSynchronize(mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static size_t elems(int N, int C, int H, int W) {
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0) return 0;
  return (size_t)N * (size_t)C * (size_t)H * (size_t)W;
}

/* fp32 NCHW on the host -> the activation layout: fp32 straight in; bf16 through the staging
 * buffer and a transposing cast */
static int cu_act_upload(mnt_backend *b, const float *host_nchw, void *act, int N, int C, int H, int W) {
  mnt_cuda *c = mnt_cuda_of(b);
  size_t n = elems(N, C, H, W);
  if (n == 0) return MNT_OK;
  if (!c->bf16) {
    MNT_CUDA_CHECK(cudaMemcpyAsync(act, host_nchw, n * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    return MNT_OK;
  }
  MNT_CHECK(mnt_cuda_reserve(c, &c->stage, &c->stage_bytes, n * sizeof(float)));
  MNT_CUDA_CHECK(cudaMemcpyAsync(c->stage, host_nchw, n * sizeof(float), cudaMemcpyHostToDevice, c->stream));
  MNT_KERNEL_CHECK(mnt_k_nchw_to_act(1, c->stage, act, N, C, H * W, c->stream));
  return MNT_OK;
}

static int cu_act_download(mnt_backend *b, const void *act, float *host_nchw, int N, int C, int H, int W) {
  mnt_cuda *c = mnt_cuda_of(b);
  size_t n = elems(N, C, H, W);
  if (n == 0) return MNT_OK;
  const void *src = act;
  if (c->bf16) {
    MNT_CHECK(mnt_cuda_reserve(c, &c->stage, &c->stage_bytes, n * sizeof(float)));
    MNT_KERNEL_CHECK(mnt_k_act_to_nchw(1, act, c->stage, N, C, H * W, c->stream));
    src = c->stage;
  }
  MNT_CUDA_CHECK(cudaMemcpyAsync(host_nchw, src, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
  MNT_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  return MNT_OK;
}

/* ---- activations ----------------------------------------------------------------------------- */
static int cu_relu_forward(mnt_backend *b, const void *x, void *y, size_t n) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_relu_fwd(c->bf16, x, y, n, c->stream));
  return MNT_OK;
}

static int cu_relu_backward(mnt_backend *b, const void *y, const void *dy, void *dx, size_t n) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_relu_bwd(c->bf16, y, dy, dx, n, c->stream));
  return MNT_OK;
}

static int cu_add_forward(mnt_backend *b, const void *x1, const void *x2, void *y, size_t n) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_add(c->bf16, x1, x2, y, n, c->stream));
  return MNT_OK;
}

static int cu_act_acc(mnt_backend *b, void *y, const void *x, size_t n) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_acc(c->bf16, y, x, n, c->stream));
  return MNT_OK;
}

static int cu_gap_forward(mnt_backend *b, const void *x, void *y, int N, int C, int HW) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_gap_fwd(c->bf16, x, y, N, C, HW, c->stream));
  return MNT_OK;
}

static int cu_gap_backward(mnt_backend *b, const void *dy, void *dx, int N, int C, int HW) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_KERNEL_CHECK(mnt_k_gap_bwd(c->bf16, dy, dx, N, C, HW, c->stream));
  return MNT_OK;
}

/* ---- fully connected (row-major y[N,O] = x[N,I] w[O,I]^T + bias, as column-major cuBLAS) ----- */
/* the bf16 copy of w[O,I] that GemmEx reads */
static int fc_w16(mnt_cuda *c, const float *w, int I, int O, const void **out) {
  size_t n = (size_t)O * (size_t)I;
  MNT_CHECK(mnt_cuda_reserve(c, &c->fc_w, &c->fc_w_bytes, n * 2));
  int r = mnt_cuda_cast(MNT_FP32, MNT_BF16, w, c->fc_w, n, c->stream);
  if (r != 0) {
    MNT_ERR("mnt_cuda_cast(fp32 -> bf16) of a %dx%d fully-connected weight failed (%d): %s", O, I, r,
            cudaGetErrorString(cudaGetLastError()));
    return MNT_ESYS;
  }
  *out = c->fc_w;
  return MNT_OK;
}

static int cu_fc_forward(mnt_backend *b, const void *x, const float *w, const float *bias, void *y, int N, int I,
                             int O) {
  mnt_cuda *c = mnt_cuda_of(b);
  const float one = 1.0f;
  if (N <= 0 || I <= 0 || O <= 0) {
    MNT_ERR("bad fully-connected shape N %d I %d O %d", N, I, O);
    return MNT_EARG;
  }
  MNT_KERNEL_CHECK(mnt_k_bias_rows(c->bf16, bias, y, N, O, c->stream)); /* then y += x w^T */
  if (!c->bf16) {
    MNT_CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &one, w, I, x, I, &one, y, O));
    return MNT_OK;
  }
  const void *w16 = NULL;
  MNT_CHECK(fc_w16(c, w, I, O, &w16));
  MNT_CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &one, w16, CUDA_R_16BF, I, x, CUDA_R_16BF,
                                I, &one, y, CUDA_R_16BF, O, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MNT_OK;
}

static int cu_fc_backward(mnt_backend *b, const void *x, const float *w, const void *dy, void *dx, float *dw,
                              float *dbias, int N, int I, int O) {
  mnt_cuda *c = mnt_cuda_of(b);
  const float one = 1.0f, zero = 0.0f;
  if (N <= 0 || I <= 0 || O <= 0) {
    MNT_ERR("bad fully-connected shape N %d I %d O %d", N, I, O);
    return MNT_EARG;
  }
  /* dw[O,I] = dy^T x (column-major: dw^T[I,O] = x^T[I,N] dy[N,O]); dbias = column sums of dy */
  if (!c->bf16)
    MNT_CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &one, x, I, dy, O, &zero, dw, I));
  else
    MNT_CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &one, x, CUDA_R_16BF, I, dy,
                                  CUDA_R_16BF, O, &zero, dw, CUDA_R_32F, I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  MNT_KERNEL_CHECK(mnt_k_col_sum(c->bf16, dy, dbias, N, O, c->stream));
  if (!dx) return MNT_OK;
  /* dx[N,I] = dy w (column-major: dx^T[I,N] = w^T[I,O] dy^T[O,N]) */
  if (!c->bf16) {
    MNT_CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &one, w, I, dy, O, &zero, dx, I));
    return MNT_OK;
  }
  const void *w16 = NULL;
  MNT_CHECK(fc_w16(c, w, I, O, &w16));
  MNT_CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &one, w16, CUDA_R_16BF, I, dy, CUDA_R_16BF,
                                O, &zero, dx, CUDA_R_16BF, I, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return MNT_OK;
}

static int cu_softmax_xent(mnt_backend *b, const void *logits, const int32_t *labels, void *dlogits, int N,
                               int classes, float smoothing, float *out3) {
  mnt_cuda *c = mnt_cuda_of(b);
  if (N <= 0 || classes <= 0) {
    MNT_ERR("bad softmax cross-entropy shape N %d classes %d", N, classes);
    return MNT_EARG;
  }
  MNT_CHECK(mnt_cuda_reserve(c, &c->xent, &c->xent_bytes, (size_t)N * 3 * sizeof(float)));
  MNT_KERNEL_CHECK(mnt_k_xent_rows(c->bf16, logits, labels, dlogits, N, classes, smoothing, c->xent, c->stream));
  MNT_KERNEL_CHECK(mnt_k_xent_reduce(c->xent, N, out3, c->stream));
  return MNT_OK;
}

/* ---- fp32 vectors ---------------------------------------------------------------------------- */
static int cu_f32_acc(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip) {
  MNT_KERNEL_CHECK(mnt_k_f32_acc(y, x, n, skip, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static int cu_f32_scale(mnt_backend *b, float *y, float a, size_t n) {
  MNT_KERNEL_CHECK(mnt_k_f32_scale(y, a, n, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

/* hp is device memory: the kernels read the step's scalars there, as floats in kernels/ops.h's order */
_Static_assert(offsetof(mnt_step_hp, lr) == 0 && offsetof(mnt_step_hp, a_sgd) == sizeof(float) &&
                   offsetof(mnt_step_hp, a_rms) == 2 * sizeof(float),
               "mnt_step_hp: lr, a_sgd, a_rms as the kernels read them (hp[0], hp[1], hp[2])");
static int cu_sgd_step(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp, float mu,
                       float wd, int first, const int32_t *skip) {
  MNT_KERNEL_CHECK(mnt_k_sgd(w, g, m, n, &hp->lr, mu, wd, first, skip, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static int cu_rmsw_step(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n, const mnt_step_hp *hp,
                        const mnt_rmsw_hp *c, int first, const int32_t *skip) {
  MNT_KERNEL_CHECK(
      mnt_k_rmsw(w, g, m, v, n, &hp->lr, c->mu1, c->mu2, c->eps, c->wd, first, skip, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

/* the tensor table goes to the device when it differs from the last one (the trainer's is the same
 * every step); a pageable copy is staged before cudaMemcpyAsync returns, so the host copy may change */
static int cu_lars_step(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                        const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip) {
  mnt_cuda *c = mnt_cuda_of(b);
  if (nseg <= 0) return MNT_OK;
  int same = nseg == c->lars_n && c->lars_host;
  for (int i = 0; same && i < nseg; i++)
    same = c->lars_host[i].off == seg[i].off && c->lars_host[i].n == seg[i].n && c->lars_host[i].adapt == seg[i].adapt;
  if (!same) {
    mnt_k_seg *h = realloc(c->lars_host, (size_t)nseg * sizeof *h);
    if (!h) return MNT_ENOMEM;
    c->lars_host = h;
    c->lars_n = 0;
    for (int i = 0; i < nseg; i++) h[i] = (mnt_k_seg){.off = seg[i].off, .n = seg[i].n, .adapt = seg[i].adapt};
    MNT_CHECK(mnt_cuda_reserve(c, &c->lars_seg, &c->lars_seg_bytes, (size_t)nseg * sizeof *h));
    MNT_CUDA_CHECK(cudaMemcpyAsync(c->lars_seg, h, (size_t)nseg * sizeof *h, cudaMemcpyHostToDevice, c->stream));
    c->lars_n = nseg;
  }
  MNT_CHECK(mnt_cuda_reserve(c, &c->lars_part, &c->lars_part_bytes, (size_t)nseg * MNT_K_LARS_BLOCKS * 2 * sizeof(double)));
  MNT_KERNEL_CHECK(mnt_k_lars(w, g, m, c->lars_seg, nseg, c->lars_part, &hp->lr, mu, wd, eta, first, skip, c->stream));
  return MNT_OK;
}

static int cu_nonfinite(mnt_backend *b, const float *x, size_t n, int32_t *flag) {
  MNT_KERNEL_CHECK(mnt_k_nonfinite(x, n, flag, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static int cu_f32_poison(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags) {
  MNT_KERNEL_CHECK(mnt_k_f32_poison(x, n, flags, nflags, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static int cu_cast(mnt_cuda *c, mnt_dtype from, mnt_dtype to, const void *src, void *dst, size_t n) {
  if (n == 0) return MNT_OK;
  if (from == to) {
    MNT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * mnt_dtype_size(from), cudaMemcpyDeviceToDevice, c->stream));
    return MNT_OK;
  }
  int r = mnt_cuda_cast((int)from, (int)to, src, dst, n, c->stream);
  if (r == -1) {
    MNT_ERR("no GPU cast from %s to %s", mnt_dtype_name(from), mnt_dtype_name(to));
    return MNT_EARG;
  }
  if (r != 0) {
    MNT_ERR("mnt_cuda_cast(%s -> %s, %zu elements) failed: %s", mnt_dtype_name(from), mnt_dtype_name(to), n,
            cudaGetErrorString(cudaGetLastError()));
    return MNT_ESYS;
  }
  return MNT_OK;
}

static int cu_cast_from_f32(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n) {
  return cu_cast(mnt_cuda_of(b), MNT_FP32, t, src, dst, n);
}

static int cu_cast_to_f32(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n) {
  return cu_cast(mnt_cuda_of(b), t, MNT_FP32, src, dst, n);
}

/* the loader's raw batches, augmented on the GPU (kernels/augment.cu, as io/data/loader.c computes it) */
static int cu_augment_u8(mnt_backend *b, const uint8_t *src, int n, int S, int C, const float *boxes, int pad,
                             int out, int outC, const float *mean, const float *std, void *act) {
  mnt_cuda *c = mnt_cuda_of(b);
  if (n == 0) return MNT_OK;
  if (n < 0 || S < 1 || out < 1 || out > 65535 || C < 1 || outC < 1 || outC > MNT_K_AUG_MAX_C ||
      (C != 1 && C < outC) || !mean || !std) {
    MNT_ERR("augment_u8: %d images of %dx%dx%d -> %d channels of %dx%d not supported (at most %d channels, the "
            "source grey or with at least as many channels, host mean and std)",
            n, S, S, C, outC, out, out, MNT_K_AUG_MAX_C);
    return MNT_EARG;
  }
  MNT_KERNEL_CHECK(mnt_k_augment_u8(c->bf16, src, n, S, C, boxes, pad, out, outC, mean, std, act, c->stream));
  return MNT_OK;
}

/* ---- uploads beside the work: a copy stream, two lanes (backend.h, mnt_upload_*) ------------ */
static int up_lane(mnt_cuda *c, int lane) {
  if (lane != 0 && lane != 1) {
    MNT_ERR("internal: upload lane %d (0 or 1)", lane);
    return MNT_EARG;
  }
  if (c->copy_stream) return MNT_OK;
  MNT_CUDA_CHECK(cudaSetDevice(c->device)); /* the stream and events in the compute stream's context */
  /* events without timing: the cheapest to record and wait for */
  for (int i = 0; i < 2; i++) {
    MNT_CUDA_CHECK(cudaEventCreateWithFlags(&c->up_ready[i], cudaEventDisableTiming));
    MNT_CUDA_CHECK(cudaEventCreateWithFlags(&c->up_freed[i], cudaEventDisableTiming));
  }
  MNT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
  return MNT_OK;
}

static int cu_upload_start(mnt_backend *b, int lane, void *const *dst, const void *const *src, const size_t *bytes,
                           int n) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_CHECK(up_lane(c, lane));
  /* an event never recorded is complete: the first use of a lane waits for nothing */
  MNT_CUDA_CHECK(cudaStreamWaitEvent(c->copy_stream, c->up_freed[lane], 0));
  int st = MNT_OK;
  for (int i = 0; i < n && st == MNT_OK; i++)
    if (bytes[i]) st = MNT_CUDA_OK(cudaMemcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyHostToDevice, c->copy_stream));
  /* recorded on failure too: upload_host_done then waits for the copies that were queued */
  int rs = MNT_CUDA_OK(cudaEventRecord(c->up_ready[lane], c->copy_stream));
  return st != MNT_OK ? st : rs;
}

static int cu_upload_use(mnt_backend *b, int lane) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_CHECK(up_lane(c, lane));
  MNT_CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->up_ready[lane], 0));
  return MNT_OK;
}

static int cu_upload_release(mnt_backend *b, int lane) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_CHECK(up_lane(c, lane));
  MNT_CUDA_CHECK(cudaEventRecord(c->up_freed[lane], c->stream));
  return MNT_OK;
}

static int cu_upload_host_done(mnt_backend *b, int lane) {
  mnt_cuda *c = mnt_cuda_of(b);
  MNT_CHECK(up_lane(c, lane));
  MNT_CUDA_CHECK(cudaEventSynchronize(c->up_ready[lane]));
  return MNT_OK;
}

/* ---- the table, create, destroy ---------------------------------------------------------- */
static void cu_destroy(mnt_backend *b);

/* ---- a step captured as a CUDA graph (backend.h: mnt_be_capture_begin) ----------------------
 * The capture is this thread's alone (cudaStreamCaptureModeThreadLocal): a loader thread's
 * cudaHostAlloc meanwhile does not invalidate it. Another stream joins it through an event recorded
 * on this one (the NCCL communicator's, mnt_comm_join) and must be joined back before the end, or
 * cudaStreamEndCapture fails (cudaErrorStreamCaptureUnjoined). Built without a GPU: not run yet. */
static int cu_capture_begin(mnt_backend *b) {
  MNT_CUDA_CHECK(cudaStreamBeginCapture(mnt_cuda_of(b)->stream, cudaStreamCaptureModeThreadLocal));
  return MNT_OK;
}

static int cu_capture_end(mnt_backend *b, void **out) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  *out = NULL;
  MNT_CUDA_CHECK(cudaStreamEndCapture(mnt_cuda_of(b)->stream, &g)); /* an invalidated capture fails here */
  cudaError_t e = mnt_cuda_clear(cudaGraphInstantiate(&x, g, 0));
  MNT_CUDA_WARN(cudaGraphDestroy(g)); /* the executable graph keeps what it needs */
  if (e != cudaSuccess) {
    MNT_ERR("cudaGraphInstantiate of the captured step failed: %s", cudaGetErrorString(e));
    return MNT_ESYS;
  }
  *out = x;
  return MNT_OK;
}

static int cu_graph_launch(mnt_backend *b, void *g) {
  MNT_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)g, mnt_cuda_of(b)->stream));
  return MNT_OK;
}

static void cu_graph_free(mnt_backend *b, void *g) {
  (void)b;
  MNT_CUDA_WARN(cudaGraphExecDestroy((cudaGraphExec_t)g));
}

static const mnt_backend_ops mnt_cuda_ops = {
    .alloc = cu_alloc,
    .free = cu_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy = cu_copy,
    .memset0 = cu_memset0,
    .sync = cu_sync,
    .act_upload = cu_act_upload,
    .act_download = cu_act_download,
    .conv_create = mnt_cuda_conv_create,
    .conv_forward = mnt_cuda_conv_forward,
    .conv_backward = mnt_cuda_conv_backward,
    .conv_destroy = mnt_cuda_conv_destroy,
    .bn_create = mnt_cuda_bn_create,
    .bn_forward_train = mnt_cuda_bn_forward_train,
    .bn_forward_infer = mnt_cuda_bn_forward_infer,
    .bn_backward = mnt_cuda_bn_backward,
    .bn_destroy = mnt_cuda_bn_destroy,
    .pool_create = mnt_cuda_pool_create,
    .pool_forward = mnt_cuda_pool_forward,
    .pool_backward = mnt_cuda_pool_backward,
    .pool_destroy = mnt_cuda_pool_destroy,
    .conv_impl = mnt_cuda_conv_impl,
    .conv_algos = mnt_cuda_conv_algos,
    .bn_impl = mnt_cuda_bn_impl,
    .pool_impl = mnt_cuda_pool_impl,
    .relu_forward = cu_relu_forward,
    .relu_backward = cu_relu_backward,
    .add_forward = cu_add_forward,
    .act_acc = cu_act_acc,
    .gap_forward = cu_gap_forward,
    .gap_backward = cu_gap_backward,
    .fc_forward = cu_fc_forward,
    .fc_backward = cu_fc_backward,
    .softmax_xent = cu_softmax_xent,
    .f32_acc = cu_f32_acc,
    .f32_scale = cu_f32_scale,
    .sgd_step = cu_sgd_step,
    .lars_step = cu_lars_step,
    .rmsw_step = cu_rmsw_step,
    .nonfinite = cu_nonfinite,
    .f32_poison = cu_f32_poison,
    .upload_start = cu_upload_start,
    .upload_use = cu_upload_use,
    .upload_release = cu_upload_release,
    .upload_host_done = cu_upload_host_done,
    .cast_from_f32 = cu_cast_from_f32,
    .cast_to_f32 = cu_cast_to_f32,
    .augment_u8 = cu_augment_u8,
    .capture_begin = cu_capture_begin,
    .capture_end = cu_capture_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .destroy = cu_destroy,
};

static void cu_destroy(mnt_backend *b) {
  if (!b) return;
  mnt_cuda *c = mnt_cuda_of(b);
  if (c) {
    if (c->stream) {
      mnt_cuda_release(c, &c->ws, &c->ws_bytes);
      mnt_cuda_release(c, &c->bn_dy, &c->bn_dy_bytes);
      mnt_cuda_release(c, &c->bn_ws, &c->bn_ws_bytes);
      mnt_cuda_release(c, &c->stage, &c->stage_bytes);
      mnt_cuda_release(c, &c->fc_w, &c->fc_w_bytes);
      mnt_cuda_release(c, &c->xent, &c->xent_bytes);
      mnt_cuda_release(c, &c->lars_seg, &c->lars_seg_bytes);
      mnt_cuda_release(c, &c->lars_part, &c->lars_part_bytes);
      MNT_CUDA_WARN(cudaStreamSynchronize(c->stream)); /* at backend destroy */
    }
    if (c->blas) MNT_CUBLAS_WARN(cublasDestroy(c->blas));
    if (c->dnn) MNT_CUDNN_WARN(cudnnDestroy(c->dnn));
    if (c->copy_stream) {
      MNT_CUDA_WARN(cudaStreamSynchronize(c->copy_stream)); /* its copies read host buffers */
      MNT_CUDA_WARN(cudaStreamDestroy(c->copy_stream));
    }
    for (int i = 0; i < 2; i++) {
      if (c->up_ready[i]) MNT_CUDA_WARN(cudaEventDestroy(c->up_ready[i]));
      if (c->up_freed[i]) MNT_CUDA_WARN(cudaEventDestroy(c->up_freed[i]));
    }
    if (c->stream) MNT_CUDA_WARN(cudaStreamDestroy(c->stream));
    free(c->lars_host);
    free(c);
  }
  free(b);
}

static int cu_setup(mnt_cuda *c) {
  MNT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  MNT_CUDNN_CHECK(cudnnCreate(&c->dnn));
  MNT_CUDNN_CHECK(cudnnSetStream(c->dnn, c->stream));
  MNT_CUBLAS_CHECK(cublasCreate(&c->blas));
  MNT_CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
  /* fp32 GEMMs stay fp32 (no TF32); bf16 ones ask for CUBLAS_COMPUTE_32F explicitly */
  MNT_CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
  return MNT_OK;
}

int mnt_backend_cuda_create(const mnt_backend_opts *o, mnt_backend **out) {
  *out = NULL;
  if (o->precision != MNT_PREC_FP32 && o->precision != MNT_PREC_BF16 && o->precision != MNT_PREC_AUTO) {
    MNT_ERR("cuda backend: unknown precision %d", (int)o->precision);
    return MNT_EARG;
  }
  int dev = -1;
  MNT_CHECK(mnt_cuda_use_device(o->device, &dev)); /* o->device, or the one the communicator chose */
  int major = 0, pools = 0, sms = 0;
  MNT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  MNT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MNT_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev));
  /* auto: bf16 where the tensor cores take it (Ampere and newer), else fp32 */
  mnt_precision prec = o->precision == MNT_PREC_AUTO ? (major >= 8 ? MNT_PREC_BF16 : MNT_PREC_FP32) : o->precision;
  if (prec == MNT_PREC_BF16 && major < 8) {
    MNT_ERR("--precision bf16 needs a GPU of compute capability 8.0 or newer; device %d is %d.x", dev, major);
    return MNT_EARG;
  }
  mnt_backend *b = calloc(1, sizeof *b);
  mnt_cuda *c = calloc(1, sizeof *c);
  if (!b || !c) {
    MNT_ERR("calloc of the cuda backend failed");
    free(b);
    free(c);
    return MNT_ENOMEM;
  }
  c->be = b;
  c->device = dev;
  c->bf16 = prec == MNT_PREC_BF16;
  c->pools = pools != 0;
  c->sms = sms;
  const char *policy = mnt_env_cudnn_algo(); /* a word of the table's (env.c checked it), any case */
  c->algo_policy = !policy || !strcasecmp(policy, "deterministic") ? MNT_CUDA_ALGO_DETERMINISTIC
                   : !strcasecmp(policy, "heuristic")             ? MNT_CUDA_ALGO_HEURISTIC
                                                                  : MNT_CUDA_ALGO_TIMED;
  const char *pad = mnt_env_stem_pad(); /* on|off, any case */
  c->stem_pad = !pad || strcasecmp(pad, "off");
  *b = (mnt_backend){.ops = &mnt_cuda_ops,
                     .name = "cuda",
                     .host_visible = 0,
                     .device = dev,
                     .precision = prec,
                     .act_bytes = c->bf16 ? 2 : 4,
                     .stream = NULL,
                     .impl = c};
  int rc = cu_setup(c);
  if (rc != MNT_OK) {
    MNT_ERR("could not set up the cuda backend on device %d", dev);
    cu_destroy(b);
    return rc;
  }
  b->stream = mnt_as_stream(c->stream);
  char name[256] = "";
  struct cudaDeviceProp prop;
  if ((rc = MNT_CUDA_OK(cudaGetDeviceProperties(&prop, dev))) != MNT_OK) {
    MNT_ERR("could not read the properties of CUDA device %d", dev);
    cu_destroy(b);
    return rc;
  }
  memcpy(name, prop.name, sizeof name < sizeof prop.name ? sizeof name : sizeof prop.name);
  name[sizeof name - 1] = '\0';
  MNT_DBG("cuda backend on device %d (%s, cc %d.x), %s activations, cuDNN %zu, memory pools %s", dev, name, major,
          c->bf16 ? "bf16 NHWC" : "fp32 NCHW", cudnnGetVersion(), c->pools ? "yes" : "no");
  *out = b;
  return MNT_OK;
}
