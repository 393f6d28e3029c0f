/* cuda_impl.h — private to src/backend/cuda/: the CUDA backend's state shared by its files.
 * defines: mnt_cuda (be->impl: stream, cuDNN and cuBLAS handles, the shared scratch buffers),
 *          mnt_cuda_of, mnt_cuda_reserve (grow a scratch buffer, stream-ordered),
 *          MNT_CUDA_WS_CAP (the most workspace one convolution algorithm may take),
 *          the layer ops of layers_cudnn.c (mnt_cuda_conv_*, mnt_cuda_bn_*, mnt_cuda_pool_*, and
 *          mnt_cuda_{conv,bn,pool}_impl: what each layer runs). */
#ifndef MNT_CUDA_IMPL_H
#define MNT_CUDA_IMPL_H

#include <stddef.h>

#include "src/backend/backend.h"
#include "src/backend/cuda/cuda_check.h"

/* a convolution algorithm needing more workspace than this is passed over */
#define MNT_CUDA_WS_CAP ((size_t)1 << 30)

/* how convolution algorithms are chosen (MNT_CUDNN_ALGO, env.h) */
enum { MNT_CUDA_ALGO_DETERMINISTIC = 0, MNT_CUDA_ALGO_HEURISTIC = 1, MNT_CUDA_ALGO_TIMED = 2 };

typedef struct mnt_cuda {
  mnt_backend *be;
  int device;
  int bf16;             /* activations bf16 NHWC (else fp32 NCHW) */
  int pools;            /* cudaMallocAsync available */
  int sms;              /* multiprocessors (sizes kernels/bn.cu's reductions) */
  int algo_policy;      /* MNT_CUDA_ALGO_*: how convolutions choose their algorithms */
  int stem_pad;         /* bf16: a 3-channel convolution without dx (the stem) sees 4 (MNT_STEM_PAD) */
  cudaStream_t stream;  /* be->stream */
  cudnnHandle_t dnn;
  cublasHandle_t blas;
  /* scratch, each used by one op at a time on the stream; grown, never shrunk */
  void *ws;             /* convolution workspace, sized at conv_create (max over layers) */
  size_t ws_bytes;
  void *bn_dy;          /* fp32 BN+ReLU backward: dy masked by y > 0, sized at bn_create */
  size_t bn_dy_bytes;
  void *bn_ws;          /* bf16 batch norm (kernels/bn.cu): partial sums and per-channel factors */
  size_t bn_ws_bytes;
  void *stage;          /* act_upload / act_download: fp32 NCHW */
  size_t stage_bytes;
  void *fc_w;           /* bf16 copy of a fully-connected weight */
  size_t fc_w_bytes;
  void *xent;           /* softmax_xent: [N][3] per-row loss and hits */
  size_t xent_bytes;
  void *lars_seg;       /* lars_step: its tensor table (mnt_k_seg), uploaded when it changes */
  size_t lars_seg_bytes;
  void *lars_part;      /* lars_step: the norms' partial sums */
  size_t lars_part_bytes;
  struct mnt_k_seg *lars_host; /* the table last uploaded */
  int lars_n;
  /* uploads beside the work (upload_*): a copy stream, made at the first upload; per lane, the
   * event after its copies (ready) and after the compute work that last used it (freed) */
  cudaStream_t copy_stream;
  cudaEvent_t up_ready[2], up_freed[2];
} mnt_cuda;

static inline mnt_cuda *mnt_cuda_of(mnt_backend *b) { return (mnt_cuda *)b->impl; }

/* *p holds at least need bytes afterwards (contents lost when it grows). Stream-ordered: the old
 * buffer is released after the work queued before, so growing never synchronizes. */
int mnt_cuda_reserve(mnt_cuda *c, void **p, size_t *have, size_t need);
/* release a scratch buffer taken by mnt_cuda_reserve */
void mnt_cuda_release(mnt_cuda *c, void **p, size_t *have);

/* layers_cudnn.c: the layer entries of the ops table */
int mnt_cuda_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                         void **h);
int mnt_cuda_conv_forward(void *h, const void *x, const float *w, void *y);
int mnt_cuda_conv_backward(void *h, const void *x, const float *w, const void *dy, void *dx, float *dw);
void mnt_cuda_conv_destroy(void *h);
/* "fwd A, bwd-data B, bwd-weights C" (cuDNN's algorithm names; no bwd-data when need_dx was 0), and
 * ", input padded 3->4 channels" where the layer pads (the stem in bf16, MNT_STEM_PAD) */
const char *mnt_cuda_conv_impl(void *h, int *slow);
/* the algorithms in use (forward, backward data, backward filter; -1: none), or set them (backend.h) */
int mnt_cuda_conv_algos(void *h, int algos[3], int set);
int mnt_cuda_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, void **h);
int mnt_cuda_bn_forward_train(void *h, const void *x, const float *gamma, const float *beta, void *y,
                              float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum);
int mnt_cuda_bn_forward_infer(void *h, const void *x, const float *gamma, const float *beta, void *y,
                              const float *run_mean, const float *run_var);
int mnt_cuda_bn_backward(void *h, const void *x, const void *dy, const float *gamma, const float *save_mean,
                         const float *save_var, void *dx, float *dgamma, float *dbeta);
void mnt_cuda_bn_destroy(void *h);
/* what runs: "cudnn-spatial" (fp32) or "nhwc-kernels" (bf16, kernels/bn.cu) */
const char *mnt_cuda_bn_impl(void *h, int *slow);
int mnt_cuda_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, void **h);
int mnt_cuda_pool_forward(void *h, const void *x, void *y);
int mnt_cuda_pool_backward(void *h, const void *dy, void *dx);
void mnt_cuda_pool_destroy(void *h);
/* "max_deterministic", or "max" after cuDNN refused the deterministic mode */
const char *mnt_cuda_pool_impl(void *h, int *slow);

#endif
