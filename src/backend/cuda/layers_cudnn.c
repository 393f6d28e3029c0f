/* layers_cudnn.c — the CUDA backend's layers on cuDNN's legacy API: convolution (algorithms
 * chosen once per layer at create time, one workspace shared by all layers; backward-data only
 * for layers that compute dx), batch normalization (fp32: cuDNN, the fused ReLU by kernels/act.cu;
 * bf16: kernels/bn.cu) and max pooling, and what each runs (mnt_cuda_*_impl: the algorithms and modes in use, after any
 * fallback at run time). See backend.h for the contract.
 *
 * fp32: NCHW tensors, OIHW filters, FMA math only (no TF32: results agree with the CPU backend to
 * fp32 rounding). bf16: NHWC tensors, the fp32 OIHW master weights cast each call into a bf16
 * KRSC copy the layer owns, fp32 accumulation (cuDNN's pseudo-bf16 configuration, tensor cores).
 * The stem (3 input channels, no dx) in bf16 pads its input and weights to 4 channels with zeros
 * (MNT_STEM_PAD, env.h): tensor-core NHWC kernels want a multiple of 4.
 *
 * cuDNN 9 marks these calls deprecated, but warns only when CUDNN_WARN_DEPRECATED is defined
 * (cudnn_graph.h), which this build does not; they remain supported through cuDNN 9. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/cuda/cuda_impl.h"
#include "src/check.h"
#include "kernels/ops.h"

static const float mnt_one = 1.0f, mnt_zero = 0.0f;

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

static cudnnDataType_t act_dtype(const mnt_cuda *c) { return c->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }
static cudnnTensorFormat_t act_format(const mnt_cuda *c) { return c->bf16 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

/* a "not supported" status of any kind (cuDNN 9 codes 3000-3999) */
static int cudnn_unsupported(cudnnStatus_t s) { return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED; }

/* ---- convolution ------------------------------------------------------------------------ */
enum { MNT_CONV_FWD = 0, MNT_CONV_BWD_DATA = 1, MNT_CONV_BWD_FILTER = 2 };
static const char *const mnt_conv_dir_name[3] = {"forward", "backward data", "backward filter"};

/* one candidate of cudnnGetConvolution*Algorithm_v7, whatever the direction */
typedef struct mnt_conv_cand {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnDeterminism_t det;
  cudnnMathType_t math;
} mnt_conv_cand;

/* a usable algorithm: cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, its math type, workspace */
typedef struct mnt_conv_choice {
  int algo;
  cudnnMathType_t math;
  size_t ws;
  int det;
} mnt_conv_choice;

enum { MNT_CONV_MAX_CANDS = 32 };

typedef struct mnt_cuda_conv {
  mnt_cuda *c;
  int N, C, H, W, K, R, s, p, OH, OW;
  int Cp;                             /* the input channels cuDNN sees: C, or 4 for the padded stem */
  int need_dx;                        /* 0: backward never computes dx, nothing chosen for it */
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd[3]; /* one per direction: each carries its algorithm's math type */
  mnt_conv_choice choice[3][MNT_CONV_MAX_CANDS]; /* per direction: the usable algorithms, best first */
  int nchoice[3], cur[3];                         /* how many; the one in use */
  void *w16, *dw16;                               /* bf16 only: KRSC weights and their gradient */
  const float *w16_of;                            /* the fp32 weights the last forward cast into w16 */
  void *x4;                                       /* padded stem only: the input with Cp channels */
  const void *x4_of;                              /* the input the last forward padded into x4 */
  char impl[128];                                 /* mnt_cuda_conv_impl's text */
} mnt_cuda_conv;

static cudnnStatus_t conv_ws_size(const mnt_cuda_conv *cv, int dir, int algo, size_t *bytes) {
  cudnnHandle_t h = cv->c->dnn;
  switch (dir) {
  case MNT_CONV_FWD:
    return cudnnGetConvolutionForwardWorkspaceSize(h, cv->xd, cv->wd, cv->cd[dir], cv->yd,
                                                   (cudnnConvolutionFwdAlgo_t)algo, bytes);
  case MNT_CONV_BWD_DATA:
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, cv->wd, cv->yd, cv->cd[dir], cv->xd,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  default:
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, cv->xd, cv->yd, cv->cd[dir], cv->wd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
  }
}

/* cuDNN's heuristic ranking (fastest first) of the algorithms of one direction */
static int conv_candidates(mnt_cuda_conv *cv, int dir, mnt_conv_cand *out, int *n) {
  cudnnHandle_t h = cv->c->dnn;
  int max = 0, got = 0;
  *n = 0;
  if (dir == MNT_CONV_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
    max = max < MNT_CONV_MAX_CANDS ? max : MNT_CONV_MAX_CANDS;
    MNT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, cv->xd, cv->wd, cv->cd[dir], cv->yd, max, &got, perf));
    for (int i = 0; i < got && i < max; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  } else if (dir == MNT_CONV_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
    max = max < MNT_CONV_MAX_CANDS ? max : MNT_CONV_MAX_CANDS;
    MNT_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataAlgorithm_v7(h, cv->wd, cv->yd, cv->cd[dir], cv->xd, max, &got, perf));
    for (int i = 0; i < got && i < max; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
    max = max < MNT_CONV_MAX_CANDS ? max : MNT_CONV_MAX_CANDS;
    MNT_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, cv->xd, cv->yd, cv->cd[dir], cv->wd, max, &got, perf));
    for (int i = 0; i < got && i < max; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  }
  *n = got < max ? got : max;
  return MNT_OK;
}

/* Buffers of a layer's shapes for timing its algorithms (contents do not matter: zeros) */
typedef struct mnt_conv_bufs {
  void *x, *y, *w, *w2, *ws;
  size_t ws_bytes;
} mnt_conv_bufs;

/* workspace offered to the timed algorithms: ones that need more are passed over by cuDNN */
#define MNT_CUDA_TIMING_WS ((size_t)256 << 20)

/* cuDNN's measured ranking (fastest first, cudnnFind*AlgorithmEx: each algorithm run on the layer's
 * shapes) of the algorithms of one direction */
static int conv_timed(mnt_cuda_conv *cv, int dir, const mnt_conv_bufs *b, mnt_conv_cand *out, int *n) {
  cudnnHandle_t h = cv->c->dnn;
  int got = 0;
  *n = 0;
  /* the math type the layer allows (fp32: no tensor ops) for every algorithm tried */
  MNT_CUDNN_CHECK(cudnnSetConvolutionMathType(cv->cd[dir], cv->c->bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  if (dir == MNT_CONV_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, cv->xd, b->x, cv->wd, b->w, cv->cd[dir], cv->yd, b->y,
                                                           MNT_CONV_MAX_CANDS, &got, perf, b->ws, b->ws_bytes));
    for (int i = 0; i < got && i < MNT_CONV_MAX_CANDS; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  } else if (dir == MNT_CONV_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, cv->wd, b->w, cv->yd, b->y, cv->cd[dir], cv->xd,
                                                                b->x, MNT_CONV_MAX_CANDS, &got, perf, b->ws,
                                                                b->ws_bytes));
    for (int i = 0; i < got && i < MNT_CONV_MAX_CANDS; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MNT_CONV_MAX_CANDS];
    MNT_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, cv->xd, b->x, cv->yd, b->y, cv->cd[dir], cv->wd,
                                                                  b->w2, MNT_CONV_MAX_CANDS, &got, perf, b->ws,
                                                                  b->ws_bytes));
    for (int i = 0; i < got && i < MNT_CONV_MAX_CANDS; i++)
      out[i] = (mnt_conv_cand){(int)perf[i].algo, perf[i].status, perf[i].memory, perf[i].determinism,
                               perf[i].mathType};
  }
  *n = got < MNT_CONV_MAX_CANDS ? got : MNT_CONV_MAX_CANDS;
  return MNT_OK;
}

/* The usable algorithms of one direction in cuDNN's heuristic order, deterministic ones first
 * (reruns are bit-identical), each supported and within MNT_CUDA_WS_CAP; the first is used.
 * MNT_CUDNN_ALGO (env.h, c->algo_policy): "deterministic" (the default) and "heuristic" rank without
 * timing, so every rank and every rerun of a shape runs the same algorithm; "timed" ranks by cuDNN's
 * measurement of each algorithm on the layer's shapes (timing: the buffers), deterministic ones
 * first, and a multi-rank job runs rank 0's choice (mnt_conv_algos). fp32 keeps FMA math (no TF32:
 * tensor-op candidates are passed over); bf16 runs each algorithm in the math type cuDNN gave it. */
static int conv_rank(mnt_cuda_conv *cv, int dir, const mnt_conv_bufs *timing) {
  mnt_conv_cand cand[MNT_CONV_MAX_CANDS];
  int n = 0;
  if (timing) MNT_CHECK(conv_timed(cv, dir, timing, cand, &n));
  else MNT_CHECK(conv_candidates(cv, dir, cand, &n));
  cv->nchoice[dir] = 0;
  cv->cur[dir] = 0;
  int det_first = cv->c->algo_policy != MNT_CUDA_ALGO_HEURISTIC; /* heuristic: cuDNN's first, whatever it is */
  for (int pass = 0; pass < (det_first ? 2 : 1); pass++) {
    for (int i = 0; i < n; i++) {
      if (cand[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (det_first && (cand[i].det == CUDNN_DETERMINISTIC) != (pass == 0)) continue;
      if (cand[i].memory > MNT_CUDA_WS_CAP) continue;
      cudnnMathType_t m = cand[i].math;
      if (!cv->c->bf16) {
        if (m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
        m = CUDNN_FMA_MATH;
      }
      size_t bytes = 0;
      if (cudnnSetConvolutionMathType(cv->cd[dir], m) != CUDNN_STATUS_SUCCESS ||
          conv_ws_size(cv, dir, cand[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) {
        (void)cudaGetLastError(); /* a candidate passed over: no error left behind */
        continue;
      }
      if (bytes > MNT_CUDA_WS_CAP) continue;
      cv->choice[dir][cv->nchoice[dir]++] = (mnt_conv_choice){cand[i].algo, m, bytes, cand[i].det == CUDNN_DETERMINISTIC};
    }
  }
  if (cv->nchoice[dir] == 0) {
    MNT_ERR("cuDNN offers no %s algorithm for a %dx%d convolution %d->%d channels, stride %d, padding %d, on "
            "%dx%dx%dx%d in %s (%d candidates, workspace cap %zu bytes)",
            mnt_conv_dir_name[dir], cv->R, cv->R, cv->C, cv->K, cv->s, cv->p, cv->N, cv->C, cv->H, cv->W,
            cv->c->bf16 ? "bf16 NHWC" : "fp32 NCHW", n, MNT_CUDA_WS_CAP);
    return MNT_EARG;
  }
  const mnt_conv_choice *ch = &cv->choice[dir][0];
  MNT_CUDNN_CHECK(cudnnSetConvolutionMathType(cv->cd[dir], ch->math));
  MNT_DBG("conv %dx%d s%d p%d %d->%d on %dx%dx%dx%d (%s): %s algorithm %d, math %d, workspace %zu bytes%s", cv->R,
          cv->R, cv->s, cv->p, cv->C, cv->K, cv->N, cv->C, cv->H, cv->W, cv->c->bf16 ? "bf16" : "fp32",
          mnt_conv_dir_name[dir], ch->algo, (int)ch->math, ch->ws, ch->det ? "" : " (not deterministic)");
  return MNT_OK;
}

/* cuDNN refused the algorithm in use at run time: the next one, 1 when there is one */
static int conv_next(mnt_cuda_conv *cv, int dir, cudnnStatus_t st) {
  if (!cudnn_unsupported(st) && CUDNN_STATUS_CATEGORY(st) != CUDNN_STATUS_BAD_PARAM) return 0;
  if (cv->cur[dir] + 1 >= cv->nchoice[dir]) return 0;
  (void)cudaGetLastError(); /* tolerated: whatever CUDA call of cuDNN's failed with the refusal */
  const mnt_conv_choice *old = &cv->choice[dir][cv->cur[dir]], *ch = &cv->choice[dir][++cv->cur[dir]];
  MNT_WARN("conv %dx%d s%d p%d %d->%d on %dx%dx%dx%d: cuDNN refused %s algorithm %d at run time (%s); trying %d",
           cv->R, cv->R, cv->s, cv->p, cv->C, cv->K, cv->N, cv->C, cv->H, cv->W, mnt_conv_dir_name[dir], old->algo,
           cudnnGetErrorString(st), ch->algo);
  if (MNT_CUDNN_OK(cudnnSetConvolutionMathType(cv->cd[dir], ch->math)) != MNT_OK) return 0;
  /* the one time the shared workspace may grow after create */
  return mnt_cuda_reserve(cv->c, &cv->c->ws, &cv->c->ws_bytes, ch->ws) == MNT_OK;
}

void mnt_cuda_conv_destroy(void *h) {
  mnt_cuda_conv *cv = h;
  if (!cv) return;
  if (cv->xd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(cv->xd));
  if (cv->yd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(cv->yd));
  if (cv->wd) MNT_CUDNN_WARN(cudnnDestroyFilterDescriptor(cv->wd));
  for (int d = 0; d < 3; d++)
    if (cv->cd[d]) MNT_CUDNN_WARN(cudnnDestroyConvolutionDescriptor(cv->cd[d]));
  if (cv->w16 || cv->dw16 || cv->x4) {
    MNT_CUDA_WARN(cudaStreamSynchronize(cv->c->stream)); /* the stream may still use them */
    if (cv->w16) MNT_CUDA_WARN(cudaFree(cv->w16));
    if (cv->dw16) MNT_CUDA_WARN(cudaFree(cv->dw16));
    if (cv->x4) MNT_CUDA_WARN(cudaFree(cv->x4));
  }
  free(cv);
}

static int conv_setup(mnt_cuda_conv *cv) {
  mnt_cuda *c = cv->c;
  cudnnDataType_t dt = act_dtype(c);
  cudnnTensorFormat_t fmt = act_format(c);
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&cv->xd));
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&cv->yd));
  MNT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&cv->wd));
  MNT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(cv->xd, fmt, dt, cv->N, cv->Cp, cv->H, cv->W));
  MNT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(cv->yd, fmt, dt, cv->N, cv->K, cv->OH, cv->OW));
  MNT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(cv->wd, dt, fmt, cv->K, cv->Cp, cv->R, cv->R));
  for (int d = 0; d < 3; d++) {
    if (d == MNT_CONV_BWD_DATA && !cv->need_dx) continue;
    MNT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cv->cd[d]));
    MNT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cv->cd[d], cv->p, cv->p, cv->s, cv->s, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    MNT_CUDNN_CHECK(cudnnSetConvolutionMathType(cv->cd[d], c->bf16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
  int n = 0, k = 0, oh = 0, ow = 0;
  MNT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(cv->cd[0], cv->xd, cv->wd, &n, &k, &oh, &ow));
  if (n != cv->N || k != cv->K || oh != cv->OH || ow != cv->OW) {
    MNT_ERR("cuDNN's convolution output %dx%dx%dx%d differs from PyTorch's %dx%dx%dx%d", n, k, oh, ow, cv->N, cv->K,
            cv->OH, cv->OW);
    return MNT_ESYS;
  }
  /* backward-data only where dx is computed: the stem's (3 channels, in bf16 NHWC cuDNN's least
   * supported case) would otherwise be searched, and its workspace counted, for nothing */
  size_t need = 0;
  mnt_conv_bufs tb = {0}, *timing = NULL;
  int st = MNT_OK;
  if (c->algo_policy == MNT_CUDA_ALGO_TIMED) {
    size_t ab = c->be->act_bytes, wb = (size_t)cv->K * cv->Cp * cv->R * cv->R * ab;
    size_t xb = (size_t)cv->N * cv->Cp * cv->H * cv->W * ab, yb = (size_t)cv->N * cv->K * cv->OH * cv->OW * ab;
    tb.ws_bytes = MNT_CUDA_TIMING_WS;
    void **bufs[] = {&tb.x, &tb.y, &tb.w, &tb.w2, &tb.ws};
    size_t sizes[] = {xb, yb, wb, wb, tb.ws_bytes};
    for (int i = 0; i < 5 && st == MNT_OK; i++) {
      st = MNT_CUDA_OK(cudaMalloc(bufs[i], sizes[i]));
      if (st == MNT_OK) st = MNT_CUDA_OK(cudaMemsetAsync(*bufs[i], 0, sizes[i], c->stream));
    }
    timing = &tb;
  }
  for (int d = 0; d < 3 && st == MNT_OK; d++) {
    if (d == MNT_CONV_BWD_DATA && !cv->need_dx) continue;
    st = conv_rank(cv, d, timing);
    if (st == MNT_OK && cv->choice[d][0].ws > need) need = cv->choice[d][0].ws;
  }
  if (timing) { /* cudaFree waits for the timing runs */
    void *bufs[] = {tb.x, tb.y, tb.w, tb.w2, tb.ws};
    for (int i = 0; i < 5; i++)
      if (bufs[i]) MNT_CUDA_WARN(cudaFree(bufs[i]));
  }
  MNT_CHECK(st);
  MNT_CHECK(mnt_cuda_reserve(c, &c->ws, &c->ws_bytes, need));
  if (c->bf16) {
    size_t bytes = (size_t)cv->K * cv->Cp * cv->R * cv->R * 2;
    MNT_CUDA_CHECK(cudaMalloc(&cv->w16, bytes));
    MNT_CUDA_CHECK(cudaMalloc(&cv->dw16, bytes));
  }
  if (cv->Cp != cv->C) MNT_CUDA_CHECK(cudaMalloc(&cv->x4, (size_t)cv->N * cv->H * cv->W * cv->Cp * 2));
  return MNT_OK;
}

int mnt_cuda_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                         void **h) {
  *h = NULL;
  if (N < 1 || C < 1 || H < 1 || W < 1 || K < 1 || R < 1 || s < 1 || p < 0) {
    MNT_ERR("bad convolution shape: N %d C %d H %d W %d K %d R %d stride %d padding %d", N, C, H, W, K, R, s, p);
    return MNT_EARG;
  }
  int OH = out_dim(H, R, s, p), OW = out_dim(W, R, s, p);
  if (OH < 1 || OW < 1) {
    MNT_ERR("convolution %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    return MNT_EARG;
  }
  mnt_cuda_conv *cv = calloc(1, sizeof *cv);
  if (!cv) {
    MNT_ERR("calloc of a convolution failed");
    return MNT_ENOMEM;
  }
  *cv = (mnt_cuda_conv){.c = mnt_cuda_of(b), .N = N, .C = C, .H = H, .W = W, .K = K, .R = R, .s = s, .p = p,
                        .OH = OH, .OW = OW, .need_dx = need_dx ? 1 : 0, .Cp = C};
  /* bf16 NHWC: cuDNN's tensor-core kernels want a multiple of 4 (better 8) input channels, and the
   * stem has 3; NVIDIA's ResNet-50 recipes pad them to 4. A zero fourth channel, with zero weights,
   * is the same convolution: the layer pads its input into x4 (one pass over the N x H x W x 3 input)
   * and its bf16 weights, and drops the fourth channel of dw. Only without dx (the stem), where no
   * gradient of the padded input is wanted. */
  if (cv->c->bf16 && cv->c->stem_pad && C == 3 && !need_dx) cv->Cp = 4;
  int rc = conv_setup(cv);
  if (rc != MNT_OK && cv->Cp != C) { /* cuDNN refused the padded shape: the 3 channels as they are */
    MNT_WARN("conv %dx%d s%d p%d 3->%d on %dx%dx%dx%d: no cuDNN algorithm for the input padded to %d channels; "
             "running on 3 channels (MNT_STEM_PAD=off does the same)", R, R, s, p, K, N, C, H, W, cv->Cp);
    (void)cudaGetLastError();
    mnt_cuda_conv_destroy(cv);
    if (!(cv = calloc(1, sizeof *cv))) {
      MNT_ERR("calloc of a convolution failed");
      return MNT_ENOMEM;
    }
    *cv = (mnt_cuda_conv){.c = mnt_cuda_of(b), .N = N, .C = C, .H = H, .W = W, .K = K, .R = R, .s = s, .p = p,
                          .OH = OH, .OW = OW, .need_dx = need_dx ? 1 : 0, .Cp = C};
    rc = conv_setup(cv);
  }
  if (rc != MNT_OK) {
    MNT_ERR("could not set up a %dx%d convolution %d->%d channels, stride %d, on %dx%dx%dx%d", R, R, C, K, s, N, C,
            H, W);
    mnt_cuda_conv_destroy(cv);
    return rc;
  }
  *h = cv;
  return MNT_OK;
}

int mnt_cuda_conv_forward(void *h, const void *x, const float *w, void *y) {
  mnt_cuda_conv *cv = h;
  mnt_cuda *c = cv->c;
  const void *wk = w;
  if (cv->Cp != cv->C) { /* backward-filter reuses the padded copy (backend.h: x unchanged until then) */
    MNT_KERNEL_CHECK(mnt_k_pad_channels_bf16(x, cv->x4, (size_t)cv->N * cv->H * cv->W, cv->C, cv->Cp, c->stream));
    cv->x4_of = x;
    x = cv->x4;
  }
  if (c->bf16) { /* once per step: backward reuses this copy (backend.h: w unchanged until then) */
    MNT_KERNEL_CHECK(mnt_k_oihw_to_krsc_bf16(w, cv->w16, cv->K, cv->C, cv->Cp, cv->R, c->stream));
    cv->w16_of = w;
    wk = cv->w16;
  }
  const int d = MNT_CONV_FWD;
  cudnnStatus_t st;
  do {
    st = cudnnConvolutionForward(c->dnn, &mnt_one, cv->xd, x, cv->wd, wk, cv->cd[d],
                                 (cudnnConvolutionFwdAlgo_t)cv->choice[d][cv->cur[d]].algo, c->ws, c->ws_bytes,
                                 &mnt_zero, cv->yd, y);
  } while (st != CUDNN_STATUS_SUCCESS && conv_next(cv, d, st));
  MNT_CHECK(mnt_cudnn_ok_at(st, "cudnnConvolutionForward", __FILE__, __LINE__));
  return MNT_OK;
}

int mnt_cuda_conv_backward(void *h, const void *x, const float *w, const void *dy, void *dx, float *dw) {
  mnt_cuda_conv *cv = h;
  mnt_cuda *c = cv->c;
  if (dx && !cv->need_dx) { /* refused before anything is queued */
    MNT_ERR("conv %dx%d s%d p%d %d->%d on %dx%dx%dx%d: backward asked for dx, but the layer was created without it "
            "(need_dx 0: no backward-data algorithm was chosen)",
            cv->R, cv->R, cv->s, cv->p, cv->C, cv->K, cv->N, cv->C, cv->H, cv->W);
    return MNT_EARG;
  }
  if (cv->Cp != cv->C) {
    if (cv->x4_of != x) /* no forward of this input before: pad it here */
      MNT_KERNEL_CHECK(mnt_k_pad_channels_bf16(x, cv->x4, (size_t)cv->N * cv->H * cv->W, cv->C, cv->Cp, c->stream));
    cv->x4_of = x;
    x = cv->x4;
  }
  int d = MNT_CONV_BWD_FILTER;
  cudnnStatus_t st;
  do {
    st = cudnnConvolutionBackwardFilter(c->dnn, &mnt_one, cv->xd, x, cv->yd, dy, cv->cd[d],
                                        (cudnnConvolutionBwdFilterAlgo_t)cv->choice[d][cv->cur[d]].algo, c->ws,
                                        c->ws_bytes, &mnt_zero, cv->wd, c->bf16 ? cv->dw16 : (void *)dw);
  } while (st != CUDNN_STATUS_SUCCESS && conv_next(cv, d, st));
  MNT_CHECK(mnt_cudnn_ok_at(st, "cudnnConvolutionBackwardFilter", __FILE__, __LINE__));
  if (c->bf16) MNT_KERNEL_CHECK(mnt_k_krsc_bf16_to_oihw(cv->dw16, dw, cv->K, cv->C, cv->Cp, cv->R, c->stream));
  if (!dx) return MNT_OK;
  const void *wk = w;
  if (c->bf16) {
    if (cv->w16_of != w) /* no forward of these weights before: cast them here */
      MNT_KERNEL_CHECK(mnt_k_oihw_to_krsc_bf16(w, cv->w16, cv->K, cv->C, cv->Cp, cv->R, c->stream));
    cv->w16_of = w;
    wk = cv->w16;
  }
  d = MNT_CONV_BWD_DATA;
  do {
    st = cudnnConvolutionBackwardData(c->dnn, &mnt_one, cv->wd, wk, cv->yd, dy, cv->cd[d],
                                      (cudnnConvolutionBwdDataAlgo_t)cv->choice[d][cv->cur[d]].algo, c->ws,
                                      c->ws_bytes, &mnt_zero, cv->xd, dx);
  } while (st != CUDNN_STATUS_SUCCESS && conv_next(cv, d, st));
  MNT_CHECK(mnt_cudnn_ok_at(st, "cudnnConvolutionBackwardData", __FILE__, __LINE__));
  return MNT_OK;
}

/* cuDNN's names of the algorithms (cudnn_ops.h), without the CUDNN_CONVOLUTION_*_ALGO_ prefix */
static const char *conv_algo_name(int dir, int algo) {
  static const char *const fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                    "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *const bwd_data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *const bwd_filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                           "FFT_TILING"};
  const char *const *t = dir == MNT_CONV_FWD ? fwd : dir == MNT_CONV_BWD_DATA ? bwd_data : bwd_filter;
  int n = dir == MNT_CONV_FWD ? 8 : dir == MNT_CONV_BWD_DATA ? 6 : 7;
  return algo >= 0 && algo < n ? t[algo] : "unknown";
}

/* "fwd IMPLICIT_PRECOMP_GEMM, bwd-data ALGO_1, bwd-weights ALGO_1" (no bwd-data without need_dx):
 * the algorithms in use now, after any run-time fallback (conv_next); each names cuDNN's own
 * kernels, none a reference implementation */
const char *mnt_cuda_conv_impl(void *h, int *slow) {
  mnt_cuda_conv *cv = h;
  if (slow) *slow = 0;
  const mnt_conv_choice *f = &cv->choice[MNT_CONV_FWD][cv->cur[MNT_CONV_FWD]];
  const mnt_conv_choice *w = &cv->choice[MNT_CONV_BWD_FILTER][cv->cur[MNT_CONV_BWD_FILTER]];
  if (cv->need_dx) {
    const mnt_conv_choice *d = &cv->choice[MNT_CONV_BWD_DATA][cv->cur[MNT_CONV_BWD_DATA]];
    snprintf(cv->impl, sizeof cv->impl, "fwd %s, bwd-data %s, bwd-weights %s",
             conv_algo_name(MNT_CONV_FWD, f->algo), conv_algo_name(MNT_CONV_BWD_DATA, d->algo),
             conv_algo_name(MNT_CONV_BWD_FILTER, w->algo));
  } else {
    snprintf(cv->impl, sizeof cv->impl, "fwd %s, bwd-weights %s%s", conv_algo_name(MNT_CONV_FWD, f->algo),
             conv_algo_name(MNT_CONV_BWD_FILTER, w->algo), cv->Cp != cv->C ? ", input padded 3->4 channels" : "");
  }
  return cv->impl;
}

int mnt_cuda_conv_algos(void *h, int algos[3], int set) {
  mnt_cuda_conv *cv = h;
  for (int d = 0; d < 3; d++) {
    if (!set) {
      algos[d] = cv->nchoice[d] ? cv->choice[d][cv->cur[d]].algo : -1;
      continue;
    }
    if (algos[d] < 0 || !cv->nchoice[d] || cv->choice[d][cv->cur[d]].algo == algos[d]) continue;
    int j = 0;
    while (j < cv->nchoice[d] && cv->choice[d][j].algo != algos[d]) j++;
    if (j == cv->nchoice[d]) { /* not usable here (another cuDNN, or over the workspace cap) */
      MNT_WARN("conv %dx%d s%d p%d %d->%d: %s algorithm %d asked for is not usable here; keeping %d", cv->R, cv->R,
               cv->s, cv->p, cv->C, cv->K, mnt_conv_dir_name[d], algos[d], cv->choice[d][cv->cur[d]].algo);
      continue;
    }
    MNT_CUDNN_CHECK(cudnnSetConvolutionMathType(cv->cd[d], cv->choice[d][j].math));
    MNT_CHECK(mnt_cuda_reserve(cv->c, &cv->c->ws, &cv->c->ws_bytes, cv->choice[d][j].ws));
    cv->cur[d] = j;
  }
  return MNT_OK;
}

/* ---- batch normalization ------------------------------------------------------------------ */
/* fp32 (NCHW) runs cuDNN's SPATIAL mode, its fused ReLU as kernels/act.cu's passes. bf16 (NHWC)
 * runs kernels/bn.cu: cuDNN's legacy bf16 batch norm (SPATIAL_PERSISTENT) took 647 of a 700 ms
 * ResNet-50 step at batch 256 on an H200 (2026-12-04), where a memory-bound pass should take a few
 * ms; the kernels read each tensor in 16-byte rows, fuse the ReLU both ways and sum in a fixed order
 * (bit-identical reruns). mnt_cuda_bn_impl says which ran: "cudnn-spatial" or "nhwc-kernels". */
typedef struct mnt_cuda_bn {
  mnt_cuda *c;
  int N, C, H, W, relu;
  size_t n;                 /* N*C*H*W */
  double eps;
  cudnnTensorDescriptor_t xd, pd; /* fp32: activations, per-channel fp32 */
  const void *y;            /* output of the last training forward (the fused ReLU's mask) */
} mnt_cuda_bn;

void mnt_cuda_bn_destroy(void *h) {
  mnt_cuda_bn *bn = h;
  if (!bn) return;
  if (bn->xd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(bn->xd));
  if (bn->pd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(bn->pd));
  free(bn);
}

static int bn_setup(mnt_cuda_bn *bn) {
  mnt_cuda *c = bn->c;
  if (c->bf16) {
    size_t M = (size_t)bn->N * bn->H * bn->W;
    if (M > (size_t)1 << 30) {
      MNT_ERR("batch normalization over %zu rows per channel: at most 2^30", M);
      return MNT_EARG;
    }
    return mnt_cuda_reserve(c, &c->bn_ws, &c->bn_ws_bytes, mnt_k_bn_ws_floats((int)M, bn->C, c->sms) * sizeof(float));
  }
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bn->xd));
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bn->pd));
  MNT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bn->xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, bn->N, bn->C, bn->H, bn->W));
  MNT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bn->pd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, bn->C, 1, 1));
  if (bn->relu) MNT_CHECK(mnt_cuda_reserve(c, &c->bn_dy, &c->bn_dy_bytes, bn->n * c->be->act_bytes));
  return MNT_OK;
}

int mnt_cuda_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, void **h) {
  *h = NULL;
  if (N < 1 || C < 1 || H < 1 || W < 1) {
    MNT_ERR("bad batch normalization shape: N %d C %d H %d W %d", N, C, H, W);
    return MNT_EARG;
  }
  if (!(eps >= CUDNN_BN_MIN_EPSILON) || !(eps > 0)) {
    MNT_ERR("batch normalization epsilon %g: cuDNN needs a positive epsilon", (double)eps);
    return MNT_EARG;
  }
  mnt_cuda_bn *bn = calloc(1, sizeof *bn);
  if (!bn) {
    MNT_ERR("calloc of a batch normalization failed");
    return MNT_ENOMEM;
  }
  mnt_cuda *c = mnt_cuda_of(b);
  *bn = (mnt_cuda_bn){.c = c, .N = N, .C = C, .H = H, .W = W, .relu = fuse_relu ? 1 : 0,
                      .n = (size_t)N * C * H * W, .eps = (double)eps};
  int rc = bn_setup(bn);
  if (rc != MNT_OK) {
    MNT_ERR("could not set up batch normalization over %d channels of %dx%dx%dx%d", C, N, C, H, W);
    mnt_cuda_bn_destroy(bn);
    return rc;
  }
  *h = bn;
  return MNT_OK;
}

static int bn_rows(const mnt_cuda_bn *bn) { return bn->N * bn->H * bn->W; }

int mnt_cuda_bn_forward_train(void *h, const void *x, const float *gamma, const float *beta, void *y,
                              float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum) {
  mnt_cuda_bn *bn = h;
  mnt_cuda *c = bn->c;
  /* running = (1 - momentum) running + momentum batch, the running variance unbiased (as PyTorch);
   * save_var receives 1/sqrt(var + eps) */
  if (c->bf16) {
    MNT_KERNEL_CHECK(mnt_k_bn_fwd_train(x, gamma, beta, y, save_mean, save_var, run_mean, run_var, momentum,
                                        (float)bn->eps, bn_rows(bn), bn->C, bn->relu, c->bn_ws, c->sms, c->stream));
  } else {
    MNT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(c->dnn, CUDNN_BATCHNORM_SPATIAL, &mnt_one, &mnt_zero,
                                                           bn->xd, x, bn->xd, y, bn->pd, gamma, beta,
                                                           (double)momentum, run_mean, run_var, bn->eps, save_mean,
                                                           save_var));
    if (bn->relu) MNT_KERNEL_CHECK(mnt_k_relu_fwd(0, y, y, bn->n, c->stream));
  }
  bn->y = y;
  return MNT_OK;
}

int mnt_cuda_bn_forward_infer(void *h, const void *x, const float *gamma, const float *beta, void *y,
                              const float *run_mean, const float *run_var) {
  mnt_cuda_bn *bn = h;
  mnt_cuda *c = bn->c;
  if (c->bf16) {
    MNT_KERNEL_CHECK(mnt_k_bn_fwd_infer(x, gamma, beta, y, run_mean, run_var, (float)bn->eps, bn_rows(bn), bn->C,
                                        bn->relu, c->bn_ws, c->sms, c->stream));
    return MNT_OK;
  }
  MNT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(c->dnn, CUDNN_BATCHNORM_SPATIAL, &mnt_one, &mnt_zero, bn->xd,
                                                          x, bn->xd, y, bn->pd, gamma, beta, run_mean, run_var,
                                                          bn->eps));
  if (bn->relu) MNT_KERNEL_CHECK(mnt_k_relu_fwd(0, y, y, bn->n, c->stream));
  return MNT_OK;
}

int mnt_cuda_bn_backward(void *h, const void *x, const void *dy, const float *gamma, const float *save_mean,
                         const float *save_var, void *dx, float *dgamma, float *dbeta) {
  mnt_cuda_bn *bn = h;
  mnt_cuda *c = bn->c;
  if (bn->relu && !bn->y) {
    MNT_ERR("batch normalization backward with a fused ReLU before any training forward");
    return MNT_EARG;
  }
  /* dx, dgamma and dbeta overwritten */
  if (c->bf16) {
    MNT_KERNEL_CHECK(mnt_k_bn_bwd(x, bn->y, dy, gamma, save_mean, save_var, dx, dgamma, dbeta, bn_rows(bn), bn->C,
                                  bn->relu, c->bn_ws, c->sms, c->stream));
    return MNT_OK;
  }
  const void *g = dy;
  if (bn->relu) {
    MNT_KERNEL_CHECK(mnt_k_relu_bwd(0, bn->y, dy, c->bn_dy, bn->n, c->stream));
    g = c->bn_dy;
  }
  MNT_CUDNN_CHECK(cudnnBatchNormalizationBackward(c->dnn, CUDNN_BATCHNORM_SPATIAL, &mnt_one, &mnt_zero, &mnt_one,
                                                  &mnt_zero, bn->xd, x, bn->xd, g, bn->xd, dx, bn->pd, gamma, dgamma,
                                                  dbeta, bn->eps, save_mean, save_var));
  return MNT_OK;
}

const char *mnt_cuda_bn_impl(void *h, int *slow) {
  mnt_cuda_bn *bn = h;
  if (slow) *slow = 0;
  return bn->c->bf16 ? "nhwc-kernels" : "cudnn-spatial";
}

/* ---- max pooling ----------------------------------------------------------------------------- */
typedef struct mnt_cuda_pool {
  mnt_cuda *c;
  int N, C, H, W, R, s, p, OH, OW;
  cudnnPoolingDescriptor_t pd;
  cudnnTensorDescriptor_t xd, yd;
  const void *x, *y; /* of the last forward, for backward */
  int plain_max;     /* cuDNN refused CUDNN_POOLING_MAX_DETERMINISTIC: CUDNN_POOLING_MAX */
} mnt_cuda_pool;

void mnt_cuda_pool_destroy(void *h) {
  mnt_cuda_pool *pl = h;
  if (!pl) return;
  if (pl->pd) MNT_CUDNN_WARN(cudnnDestroyPoolingDescriptor(pl->pd));
  if (pl->xd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(pl->xd));
  if (pl->yd) MNT_CUDNN_WARN(cudnnDestroyTensorDescriptor(pl->yd));
  free(pl);
}

static int pool_setup(mnt_cuda_pool *pl) {
  mnt_cuda *c = pl->c;
  MNT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pl->pd));
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->xd));
  MNT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&pl->yd));
  /* the deterministic max (backward without atomics); NaN propagated, as PyTorch */
  MNT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pl->pd, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, pl->R,
                                              pl->R, pl->p, pl->p, pl->s, pl->s));
  MNT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(pl->xd, act_format(c), act_dtype(c), pl->N, pl->C, pl->H, pl->W));
  MNT_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(pl->yd, act_format(c), act_dtype(c), pl->N, pl->C, pl->OH, pl->OW));
  int n = 0, ch = 0, oh = 0, ow = 0;
  MNT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pl->pd, pl->xd, &n, &ch, &oh, &ow));
  if (n != pl->N || ch != pl->C || oh != pl->OH || ow != pl->OW) {
    MNT_ERR("cuDNN's pooling output %dx%dx%dx%d differs from PyTorch's %dx%dx%dx%d", n, ch, oh, ow, pl->N, pl->C,
            pl->OH, pl->OW);
    return MNT_ESYS;
  }
  return MNT_OK;
}

int mnt_cuda_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, void **h) {
  *h = NULL;
  if (N < 1 || C < 1 || H < 1 || W < 1 || R < 1 || s < 1 || p < 0 || 2 * p > R) {
    MNT_ERR("bad max pooling: N %d C %d H %d W %d window %d stride %d padding %d (padding at most half the window)", N,
            C, H, W, R, s, p);
    return MNT_EARG;
  }
  int OH = out_dim(H, R, s, p), OW = out_dim(W, R, s, p);
  if (OH < 1 || OW < 1) {
    MNT_ERR("max pooling %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    return MNT_EARG;
  }
  mnt_cuda_pool *pl = calloc(1, sizeof *pl);
  if (!pl) {
    MNT_ERR("calloc of a pooling layer failed");
    return MNT_ENOMEM;
  }
  *pl = (mnt_cuda_pool){.c = mnt_cuda_of(b), .N = N, .C = C, .H = H, .W = W, .R = R, .s = s, .p = p, .OH = OH,
                        .OW = OW};
  int rc = pool_setup(pl);
  if (rc != MNT_OK) {
    MNT_ERR("could not set up max pooling %dx%d stride %d on %dx%dx%dx%d", R, R, s, N, C, H, W);
    mnt_cuda_pool_destroy(pl);
    return rc;
  }
  *h = pl;
  return MNT_OK;
}

int mnt_cuda_pool_forward(void *h, const void *x, void *y) {
  mnt_cuda_pool *pl = h;
  mnt_cuda *c = pl->c;
  cudnnStatus_t st = cudnnPoolingForward(c->dnn, pl->pd, &mnt_one, pl->xd, x, &mnt_zero, pl->yd, y);
  if (cudnn_unsupported(st)) { /* fall back to the plain max mode for good */
    (void)cudaGetLastError();        /* tolerated: whatever CUDA call of cuDNN's failed with the refusal */
    pl->plain_max = 1;
    MNT_WARN("cuDNN refuses deterministic max pooling here (%s); using CUDNN_POOLING_MAX", cudnnGetErrorString(st));
    MNT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pl->pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, pl->R, pl->R, pl->p,
                                                pl->p, pl->s, pl->s));
    st = cudnnPoolingForward(c->dnn, pl->pd, &mnt_one, pl->xd, x, &mnt_zero, pl->yd, y);
  }
  MNT_CHECK(mnt_cudnn_ok_at(st, "cudnnPoolingForward", __FILE__, __LINE__));
  pl->x = x;
  pl->y = y;
  return MNT_OK;
}

int mnt_cuda_pool_backward(void *h, const void *dy, void *dx) {
  mnt_cuda_pool *pl = h;
  mnt_cuda *c = pl->c;
  if (!pl->x || !pl->y) {
    MNT_ERR("max pooling backward before any forward");
    return MNT_EARG;
  }
  cudnnStatus_t st =
      cudnnPoolingBackward(c->dnn, pl->pd, &mnt_one, pl->yd, pl->y, pl->yd, dy, pl->xd, pl->x, &mnt_zero, pl->xd, dx);
  if (cudnn_unsupported(st) && !pl->plain_max) {
    /* as the forward: the plain max mode for good (its forward output is the same, so the y kept
     * from the deterministic forward serves its backward) */
    (void)cudaGetLastError(); /* tolerated: whatever CUDA call of cuDNN's failed with the refusal */
    pl->plain_max = 1;
    MNT_WARN("cuDNN refuses deterministic max pooling backward here (%s); using CUDNN_POOLING_MAX",
             cudnnGetErrorString(st));
    MNT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pl->pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, pl->R, pl->R, pl->p,
                                                pl->p, pl->s, pl->s));
    st = cudnnPoolingBackward(c->dnn, pl->pd, &mnt_one, pl->yd, pl->y, pl->yd, dy, pl->xd, pl->x, &mnt_zero, pl->xd,
                              dx);
  }
  MNT_CHECK(mnt_cudnn_ok_at(st, "cudnnPoolingBackward", __FILE__, __LINE__));
  return MNT_OK;
}

/* cuDNN's max-pooling mode in use */
const char *mnt_cuda_pool_impl(void *h, int *slow) {
  mnt_cuda_pool *pl = h;
  if (slow) *slow = 0;
  return pl->plain_max ? "max" : "max_deterministic";
}
