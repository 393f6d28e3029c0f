/* backend.h — the compute backend: the memory, the stream and every operation a model layer runs,
 * chosen at run time like the communicator ("cpu": oneDNN on the host, backend/cpu/; "cuda":
 * cuDNN, cuBLAS and kernels/ on one GPU, backend/cuda/, in builds with CUDA and cuDNN).
 *
 * Memory. Everything an op touches comes from mnt_be_alloc (device memory on cuda, aligned host
 * memory on cpu). Host code never dereferences it unless be->host_visible; it goes through
 * mnt_be_copy. Ops are queued on be->stream in call order; a copy to the
 * host waits for what was queued before it, so a value read with mnt_be_copy is final. A copy
 * from page-locked host memory may return before the device has read it: keep the source
 * unchanged until the stream has passed the copy (mnt_be_sync, or a later copy to the host).
 *
 * Precision and layout. Parameters, their gradients, momentum and BN statistics are always fp32
 * in torchvision's layouts (conv weights OIHW, fully-connected [out][in]) so they map 1:1 onto a
 * state_dict. Activations (and their gradients) are the backend's business: be->act_bytes per
 * element (4: fp32; 2: bf16 with --precision bf16) in its own layout (cpu: NCHW for channel
 * counts not divisible by the oneDNN block, otherwise nChw16c/nChw8c, or nhwc where oneDNN's bf16
 * kernels want it, MNT_CPU_LAYOUT; cuda: NCHW for fp32, NHWC for bf16). mnt_act_upload / mnt_act_download convert from and to plain fp32 NCHW;
 * element-wise ops do not care about the layout. Sizes are in elements unless named bytes.
 *
 * Statuses are MNT_* codes (log.h); a failing call logs the call, file:line and rank. */
#ifndef MNT_BACKEND_H
#define MNT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "src/dtype.h"
#include "src/backend/stream.h"

typedef struct mnt_backend mnt_backend;
typedef struct mnt_conv mnt_conv;
typedef struct mnt_bn mnt_bn;
typedef struct mnt_pool mnt_pool;
/* one tensor of the parameter slab for mnt_lars_step */
typedef struct mnt_lars_seg {
  size_t off, n;
  int32_t adapt; /* 1: trust ratio and weight decay (weights); 0: plain momentum SGD (biases, BN) */
} mnt_lars_seg;
/* The scalars of an update that change from step to step: the update ops read them from backend
 * memory (the trainer writes them there before each step's update, mnt_optim_scalars), never by
 * value, so that a step's work on the device is the same at every step: what a CUDA graph captured
 * once and replayed at every step needs (train/optim.h). The order is the kernels' (kernels/ops.h). */
typedef struct mnt_step_hp {
  float lr;           /* the learning rate */
  float a_sgd, a_rms; /* rmsprop-warmup's blend (train/optim.h); 0 under the others */
  float pad;
} mnt_step_hp;
/* the scalars of one mnt_rmsw_step that are the same at every step (train/optim.h: RMSprop warm-up) */
typedef struct mnt_rmsw_hp {
  float mu1, mu2, eps, wd;
} mnt_rmsw_hp;

/* MNT_PREC_AUTO is a request only, resolved where the device is known (cpu: mnt_cpu_auto_precision;
 * cuda: bf16 from compute capability 8.0, else fp32): a backend's precision is never auto */
typedef enum { MNT_PREC_FP32 = 0, MNT_PREC_BF16 = 1, MNT_PREC_AUTO = 2, MNT_NPREC } mnt_precision;
/* as --precision spells them, by value: the one place they are named (an MNT_OPT_ENUM's words) */
#define MNT_PRECISION_NAMES \
  { "fp32", "bf16", "auto" }
int mnt_precision_parse(const char *s, mnt_precision *p); /* a name of MNT_PRECISION_NAMES; -1 otherwise */
/* inline: the backends name their precision without calling back into backend.c (no cycle) */
static inline const char *mnt_precision_name(mnt_precision p) {
  static const char *const names[MNT_NPREC] = MNT_PRECISION_NAMES;
  return p >= 0 && p < MNT_NPREC ? names[p] : "?";
}

/* --device: a device, or auto (mnt_device_auto). By value as --device spells them: the one place */
typedef enum { MNT_DEVICE_CPU = 0, MNT_DEVICE_CUDA = 1, MNT_DEVICE_AUTO = 2, MNT_NDEVICE } mnt_device;
extern const char *const mnt_device_names[MNT_NDEVICE];
/* What --device auto is, in every command: cuda when this build has the CUDA backend, the CUDA
 * module loads and a GPU is visible, else cpu; *why: the reason in words. say: one INFO line says
 * why it is cpu (once per process; 0 for a caller that says it itself) */
mnt_device mnt_device_auto(const char **why, int say);

typedef enum { MNT_COPY_H2D = 0, MNT_COPY_D2H = 1, MNT_COPY_D2D = 2 } mnt_copy_kind;
/* A copy that must be complete when it returns (the CUDA module's mem_copy) waits for the device
 * after cudaMemcpy for these kinds: from pageable host memory cudaMemcpy returns once the bytes are
 * staged, possibly before they land (CUDA Runtime API, "API synchronization behavior"), and a
 * device-to-device copy is asynchronous to the host; device-to-host returns complete. */
static inline int mnt_copy_waits_after(mnt_copy_kind k) { return k != MNT_COPY_D2H; }

/* Creation options. device -1: the current CUDA device (the NCCL communicator's choice).
 * plan_only (cpu): layers only choose their implementations (for *_impl: what would run), nothing
 * is compiled or allocated and nothing may run; for checking a model's layers without building it. */
typedef struct mnt_backend_opts {
  mnt_precision precision;
  int device;
  int plan_only;
} mnt_backend_opts;

/* The implementation's table. Layer handles are the implementation's own (void *). */
typedef struct mnt_backend_ops {
  /* memory and stream */
  int (*alloc)(mnt_backend *b, size_t bytes, void **p);  /* zeroed */
  void (*free)(mnt_backend *b, void *p);
  int (*host_alloc)(mnt_backend *b, size_t bytes, void **p); /* page-locked on cuda; zeroed */
  void (*host_free)(mnt_backend *b, void *p);
  int (*copy)(mnt_backend *b, void *dst, const void *src, size_t bytes, mnt_copy_kind k);
  int (*memset0)(mnt_backend *b, void *p, size_t bytes);
  int (*sync)(mnt_backend *b);
  int (*act_upload)(mnt_backend *b, const float *host_nchw, void *act, int N, int C, int H, int W);
  int (*act_download)(mnt_backend *b, const void *act, float *host_nchw, int N, int C, int H, int W);
  /* layers: created once per shape, run every step */
  /* need_dx 0: conv_backward is never asked for dx (the first layer): nothing is prepared for it */
  int (*conv_create)(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx, void **h);
  int (*conv_forward)(void *h, const void *x, const float *w, void *y);
  int (*conv_backward)(void *h, const void *x, const float *w, const void *dy, void *dx, float *dw);
  void (*conv_destroy)(void *h);
  int (*bn_create)(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, void **h);
  int (*bn_forward_train)(void *h, const void *x, const float *gamma, const float *beta, void *y, float *save_mean,
                          float *save_var, float *run_mean, float *run_var, float momentum);
  int (*bn_forward_infer)(void *h, const void *x, const float *gamma, const float *beta, void *y,
                          const float *run_mean, const float *run_var);
  int (*bn_backward)(void *h, const void *x, const void *dy, const float *gamma, const float *save_mean,
                     const float *save_var, void *dx, float *dgamma, float *dbeta);
  void (*bn_destroy)(void *h);
  int (*pool_create)(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, void **h);
  int (*pool_forward)(void *h, const void *x, void *y);
  int (*pool_backward)(void *h, const void *dy, void *dx);
  void (*pool_destroy)(void *h);
  /* what a layer runs, for reports: a short text naming the implementation of each pass (cpu: oneDNN's
   * implementation names, e.g. "fwd jit:avx2, bwd-data jit:avx2, bwd-weights gemm:jit"; cuda: the
   * cuDNN algorithms or batch-norm mode), owned by the handle; *slow = 1 when part of it is a
   * reference (generic, unoptimised) implementation. NULL op: nothing to report. */
  const char *(*conv_impl)(void *h, int *slow);
  const char *(*bn_impl)(void *h, int *slow);
  const char *(*pool_impl)(void *h, int *slow);
  /* the algorithms a convolution runs, as the implementation numbers them (cuda: cuDNN's forward,
   * backward-data, backward-filter algorithm; -1 where a pass has none), read (set 0) or set (set 1:
   * one the layer cannot run is kept as it is, with a warning), so that every rank of a job runs
   * rank 0's. NULL op: nothing to choose. */
  int (*conv_algos)(void *h, int algos[3], int set);
  /* activations (act_bytes per element) */
  int (*relu_forward)(mnt_backend *b, const void *x, void *y, size_t n);
  int (*relu_backward)(mnt_backend *b, const void *y, const void *dy, void *dx, size_t n);
  int (*add_forward)(mnt_backend *b, const void *x1, const void *x2, void *y, size_t n);
  int (*act_acc)(mnt_backend *b, void *y, const void *x, size_t n);
  int (*gap_forward)(mnt_backend *b, const void *x, void *y, int N, int C, int HW);
  int (*gap_backward)(mnt_backend *b, const void *dy, void *dx, int N, int C, int HW);
  int (*fc_forward)(mnt_backend *b, const void *x, const float *w, const float *bias, void *y, int N, int I, int O);
  int (*fc_backward)(mnt_backend *b, const void *x, const float *w, const void *dy, void *dx, float *dw,
                     float *dbias, int N, int I, int O);
  int (*softmax_xent)(mnt_backend *b, const void *logits, const int32_t *labels, void *dlogits, int N, int classes,
                      float smoothing, float *out3);
  /* fp32 vectors (parameters, gradients, statistics) */
  /* skip (backend memory, or NULL): the update is not made when *skip is non-zero, decided where the
   * work runs (the device reads the non-finite flag: no round trip to the host before the update) */
  int (*f32_acc)(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip);
  int (*f32_scale)(mnt_backend *b, float *y, float a, size_t n);
  /* hp: backend memory (mnt_step_hp) */
  int (*sgd_step)(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp, float mu,
                  float wd, int first, const int32_t *skip);
  int (*lars_step)(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                   const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip);
  int (*rmsw_step)(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n, const mnt_step_hp *hp,
                   const mnt_rmsw_hp *c, int first, const int32_t *skip);
  int (*nonfinite)(mnt_backend *b, const float *x, size_t n, int32_t *flag);
  int (*f32_poison)(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags);
  int (*cast_from_f32)(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n);
  int (*cast_to_f32)(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n);
  /* the loader's raw batches augmented here: n uint8 HWC images of S×S×C and their boxes
   * (MNT_BOX_FLOATS each: x0, y0, w, h, flip), both in backend memory -> the model's input
   * (n×outC×out×out in the activation layout), as io/data/loader.c's mnt_crop_resize computes it
   * (pad: zeros outside the image); mean/std: host arrays. NULL where the host augments (cpu). */
  int (*augment_u8)(mnt_backend *b, const uint8_t *src, int n, int S, int C, const float *boxes, int pad, int out,
                    int outC, const float *mean, const float *std, void *act);
  /* uploads beside the work (cuda: a copy stream and events): two lanes (0, 1) of device buffers,
   * so that the next batch goes up while the current one trains. NULL where there is no copy engine
   * (cpu: the host's memory is the backend's). See mnt_upload_*. */
  int (*upload_start)(mnt_backend *b, int lane, void *const *dst, const void *const *src, const size_t *bytes, int n);
  int (*upload_use)(mnt_backend *b, int lane);
  int (*upload_release)(mnt_backend *b, int lane);
  int (*upload_host_done)(mnt_backend *b, int lane);
  /* a step captured and replayed (cuda: a CUDA graph of the work queued on the stream between
   * capture_begin and capture_end, which does not run then; graph_launch queues all of it). NULL: this
   * backend does not replay (cpu); see mnt_be_capture_begin. */
  int (*capture_begin)(mnt_backend *b);
  int (*capture_end)(mnt_backend *b, void **graph);
  int (*graph_launch)(mnt_backend *b, void *graph);
  void (*graph_free)(mnt_backend *b, void *graph);
  /* reorders run so far: [0] of activations, [1] of weights (cpu: oneDNN's layout and type changes
   * around a pass; bench step reports them per step). NULL op: none counted */
  void (*reorders)(mnt_backend *b, long long out[2]);
  void (*destroy)(mnt_backend *b);
} mnt_backend_ops;

struct mnt_backend {
  const mnt_backend_ops *ops;
  const char *name;        /* "cpu", "cuda" */
  int host_visible;        /* mnt_be_alloc memory is host memory */
  int device;              /* the CUDA device, -1 on cpu */
  mnt_precision precision;
  size_t act_bytes;        /* bytes per activation element */
  mnt_stream *stream;      /* every op is queued here */
  int capturing;           /* between mnt_be_capture_begin and _end: what a graph cannot hold is refused */
  void *impl;
};

/* name: "cpu", "cuda" or "auto" (mnt_device_auto: the caller says what it chose and why). o->precision MNT_PREC_AUTO is resolved here, the
 * one place it is (the backend's precision then says what it became). MNT_EARG naming what is
 * missing when the backend cannot run here (no GPU, no CUDA build, a CUDA library that cannot be
 * opened, bf16 on a CPU below AVX-512). */
int mnt_backend_create(const char *name, const mnt_backend_opts *o, mnt_backend **out);
void mnt_backend_destroy(mnt_backend *b);
/* the names this build knows, for --help and errors: "cpu" or "cpu, cuda" */
const char *mnt_backend_names(void);
#if MNT_HAVE_CUDA_BACKEND
/* backend/cuda/, in the CUDA module: mnt_backend_create("cuda") loads it (cuda_module.h) */
int mnt_backend_cuda_create(const mnt_backend_opts *o, mnt_backend **out);
#endif
int mnt_backend_cpu_create(const mnt_backend_opts *o, mnt_backend **out);  /* backend/cpu/ */
/* The instruction set oneDNN's CPU kernels use here (dnnl_get_effective_cpu_isa; ONEDNN_MAX_CPU_ISA
 * caps it): "avx2", "avx512_core", ... */
const char *mnt_cpu_isa_name(void);
/* The oneDNN release this process runs on, as the library reports it (dnnl_version), and the one it
 * was built against when they differ: "3.7.2", "3.2.0 (built with 3.7.2)" */
const char *mnt_cpu_onednn_version(void);
/* --precision auto on the CPU: bf16 where the CPU has bf16 instructions (avx512_core_bf16, AMX), else fp32 */
mnt_precision mnt_cpu_auto_precision(void);
static inline void mnt_be_reorders(mnt_backend *b, long long out[2]) {
  out[0] = out[1] = 0;
  if (b->ops->reorders) b->ops->reorders(b, out);
}

/* ---- a step captured and replayed (CUDA graphs) ------------------------------------------------
 * mnt_be_capture_begin: from here the work queued on the stream is recorded into a graph (cuda: it
 * does not run now) or runs as usual (cpu). Either way, until mnt_be_capture_end, what a replayed
 * graph cannot hold is refused with MNT_EARG naming it (mnt_be_capture_refused): copies between the
 * host and the backend (a graph would replay the copy, not the value the host meant), waits for the
 * stream, allocations. So the same step checked on the CPU is the step a GPU captures.
 * mnt_be_capture_end: *graph = the graph, queued by mnt_be_graph_launch as often as wanted (cuda);
 * NULL where the backend does not replay (cpu: the work has run). A capture that fails is ended and
 * its graph discarded. */
int mnt_be_capture_begin(mnt_backend *b);
int mnt_be_capture_end(mnt_backend *b, void **graph);
int mnt_be_graph_launch(mnt_backend *b, void *graph);
void mnt_be_graph_free(mnt_backend *b, void *graph);
int mnt_be_capture_refused(const mnt_backend *b, const char *what); /* logs; MNT_EARG */
/* the work body(ctx) queues, as a graph: captured into *graph when it is NULL, then launched (cuda);
 * run inside a capture every time (cpu: *graph stays NULL). *captured: 1 when a graph was made by
 * this call. A body or a capture that fails leaves *graph as it was. */
int mnt_be_graph_run(mnt_backend *b, void **graph, int (*body)(void *ctx), void *ctx, int *captured);
static inline int mnt_be_can_replay(const mnt_backend *b) { return b->ops->graph_launch != NULL; }

/* ---- memory ---------------------------------------------------------------------------------- */
static inline int mnt_be_alloc(mnt_backend *b, size_t bytes, void **p) {
  return b->capturing ? mnt_be_capture_refused(b, "an allocation") : b->ops->alloc(b, bytes, p);
}
static inline void mnt_be_free(mnt_backend *b, void *p) {
  if (p) b->ops->free(b, p);
}
static inline int mnt_be_host_alloc(mnt_backend *b, size_t bytes, void **p) {
  return b->capturing ? mnt_be_capture_refused(b, "a host allocation") : b->ops->host_alloc(b, bytes, p);
}
static inline void mnt_be_host_free(mnt_backend *b, void *p) {
  if (p) b->ops->host_free(b, p);
}
static inline int mnt_be_copy(mnt_backend *b, void *dst, const void *src, size_t bytes, mnt_copy_kind k) {
  if (b->capturing && k != MNT_COPY_D2D)
    return mnt_be_capture_refused(b, k == MNT_COPY_D2H ? "a copy to the host" : "a copy from the host");
  return bytes ? b->ops->copy(b, dst, src, bytes, k) : 0;
}
static inline int mnt_be_memset0(mnt_backend *b, void *p, size_t bytes) { return bytes ? b->ops->memset0(b, p, bytes) : 0; }
static inline int mnt_be_sync(mnt_backend *b) {
  return b->capturing ? mnt_be_capture_refused(b, "a wait for the stream") : b->ops->sync(b);
}
static inline int mnt_act_upload(mnt_backend *b, const float *host_nchw, void *act, int N, int C, int H, int W) {
  if (b->capturing) return mnt_be_capture_refused(b, "an upload of activations");
  return b->ops->act_upload(b, host_nchw, act, N, C, H, W);
}
static inline int mnt_act_download(mnt_backend *b, const void *act, float *host_nchw, int N, int C, int H, int W) {
  if (b->capturing) return mnt_be_capture_refused(b, "a download of activations");
  return b->ops->act_download(b, act, host_nchw, N, C, H, W);
}
/* p advanced by n activation elements */
static inline void *mnt_act_at(const mnt_backend *b, const void *p, size_t n) {
  return (char *)(uintptr_t)p + n * b->act_bytes;
}

/* ---- layers ---------------------------------------------------------------------------------- */
/* Convolution without bias: x[N,C,H,W] * w[K,C,R,R] -> y[N,K,OH,OW], square kernel R, stride s,
 * padding p on each side (PyTorch semantics: OH = (H + 2p - R) / s + 1). */
int mnt_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                    mnt_conv **out);
void mnt_conv_out_hw(const mnt_conv *c, int *OH, int *OW);
int mnt_conv_forward(mnt_conv *c, const void *x, const float *w, void *y);
/* dx and dw from dy; both are overwritten. dx NULL: not needed (it must be NULL when the layer was
 * created with need_dx 0). w must hold the values the layer's last forward was given, when that
 * forward had the same w (the cuda backend reuses the bf16 copy of the weights that forward made);
 * likewise x (the cuda backend's bf16 stem reuses the 4-channel copy of its input). */
int mnt_conv_backward(mnt_conv *c, const void *x, const float *w, const void *dy, void *dx, float *dw);
void mnt_conv_destroy(mnt_conv *c);

/* Batch normalization over N,H,W per channel, optionally followed by a fused ReLU (one pass
 * forward and backward; the backward dy is then the gradient of the ReLU's output). Training:
 * normalizes with the batch statistics, saves what backward needs into save_mean / save_var
 * (fp32, C each: the batch mean and the backend's form of the variance, biased variance on cpu,
 * 1/sqrt(var + eps) on cuda) and updates the running statistics as PyTorch does (momentum,
 * unbiased variance). Inference: uses the running statistics.
 * Layers that need their forward tensors in backward (fused ReLU's mask, max-pool's argmax) may
 * keep pointers to the x and y of the last training forward: the caller keeps both unchanged until
 * that layer's backward has run (the model does: every activation lives until the step ends). */
int mnt_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, mnt_bn **out);
int mnt_bn_forward_train(mnt_bn *bn, const void *x, const float *gamma, const float *beta, void *y,
                         float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum);
int mnt_bn_forward_infer(mnt_bn *bn, const void *x, const float *gamma, const float *beta, void *y,
                         const float *run_mean, const float *run_var);
int mnt_bn_backward(mnt_bn *bn, const void *x, const void *dy, const float *gamma, const float *save_mean,
                    const float *save_var, void *dx, float *dgamma, float *dbeta);
void mnt_bn_destroy(mnt_bn *bn);

/* Max pooling, square window R, stride s, padding p (keeps what backward needs). */
int mnt_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, mnt_pool **out);
void mnt_pool_out_hw(const mnt_pool *pl, int *OH, int *OW);
int mnt_pool_forward(mnt_pool *pl, const void *x, void *y);
int mnt_pool_backward(mnt_pool *pl, const void *dy, void *dx);
void mnt_pool_destroy(mnt_pool *pl);

/* What a layer runs (see mnt_backend_ops.conv_impl): a text owned by the handle, "" when the backend
 * does not say; *slow (may be NULL) = 1 when part of it is a reference implementation. */
const char *mnt_conv_impl(const mnt_conv *c, int *slow);
/* see mnt_backend_ops.conv_algos: read fills -1s on a backend without the op, set does nothing there */
int mnt_conv_algos(mnt_conv *c, int algos[3], int set);
const char *mnt_bn_impl(const mnt_bn *bn, int *slow);
const char *mnt_pool_impl(const mnt_pool *pl, int *slow);

/* ---- element-wise and small ops -------------------------------------------------------------- */
static inline int mnt_relu_forward(mnt_backend *b, const void *x, void *y, size_t n) {
  return b->ops->relu_forward(b, x, y, n);
}
/* uses the forward output y */
static inline int mnt_relu_backward(mnt_backend *b, const void *y, const void *dy, void *dx, size_t n) {
  return b->ops->relu_backward(b, y, dy, dx, n);
}
static inline int mnt_add_forward(mnt_backend *b, const void *x1, const void *x2, void *y, size_t n) {
  return b->ops->add_forward(b, x1, x2, y, n);
}
/* y += x (activations) */
static inline int mnt_act_acc(mnt_backend *b, void *y, const void *x, size_t n) { return b->ops->act_acc(b, y, x, n); }
/* global average pool: activation [N,C,HW] -> [N,C] (plain, act_bytes per element) */
static inline int mnt_gap_forward(mnt_backend *b, const void *x, void *y, int N, int C, int HW) {
  return b->ops->gap_forward(b, x, y, N, C, HW);
}
static inline int mnt_gap_backward(mnt_backend *b, const void *dy, void *dx, int N, int C, int HW) {
  return b->ops->gap_backward(b, dy, dx, N, C, HW);
}
/* y[N,O] = x[N,I] w[O,I]^T + bias[O] */
static inline int mnt_fc_forward(mnt_backend *b, const void *x, const float *w, const float *bias, void *y, int N, int I,
                                 int O) {
  return b->ops->fc_forward(b, x, w, bias, y, N, I, O);
}
/* dx (may be NULL), dw, dbias: overwritten */
static inline int mnt_fc_backward(mnt_backend *b, const void *x, const float *w, const void *dy, void *dx, float *dw,
                                  float *dbias, int N, int I, int O) {
  return b->ops->fc_backward(b, x, w, dy, dx, dw, dbias, N, I, O);
}
/* Softmax cross-entropy of logits [N, classes] against labels (backend memory) and the target
 * (1 - e) onehot + e / classes (label smoothing e, as PyTorch's CrossEntropyLoss). out3 (backend
 * memory, fp32): [0] the loss summed over the N samples, [1] top-1 hits, [2] top-5 hits,
 * overwritten. dlogits (may be NULL) = (softmax - target) / N. A label outside [0, classes) makes
 * the loss NaN. Nothing is read back: the caller copies out3 when it needs it. */
static inline int mnt_softmax_xent(mnt_backend *b, const void *logits, const int32_t *labels, void *dlogits, int N,
                                   int classes, float smoothing, float *out3) {
  return b->ops->softmax_xent(b, logits, labels, dlogits, N, classes, smoothing, out3);
}
/* y += x, y *= a (fp32) */
static inline int mnt_f32_acc(mnt_backend *b, float *y, const float *x, size_t n) {
  return b->ops->f32_acc(b, y, x, n, NULL);
}
/* y += x unless *skip (backend memory) is non-zero when the work runs */
static inline int mnt_f32_acc_unless(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip) {
  return b->ops->f32_acc(b, y, x, n, skip);
}
static inline int mnt_f32_scale(mnt_backend *b, float *y, float a, size_t n) { return b->ops->f32_scale(b, y, a, n); }
/* PyTorch SGD: g += wd * w; m = mu * m + g (m = g on the first step); w -= lr * m, lr = hp->lr read
 * where the work runs (hp: backend memory, mnt_step_hp). skip (backend memory, or NULL): w and m are
 * left as they are when *skip is non-zero as the step runs (the non-finite flag of mnt_nonfinite,
 * read where the work runs). */
static inline int mnt_sgd_step(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp,
                               float mu, float wd, int first, const int32_t *skip) {
  return b->ops->sgd_step(b, w, g, m, n, hp, mu, wd, first, skip);
}
/* LARS over the tensors seg[0..nseg) (host array; off and n in floats of w, g and m): a segment with
 * adapt = 1 takes the trust ratio t = eta |w| / (|g| + wd |w|) (norms over the segment; t = 1 when
 * either is 0) and weight decay: m = mu m + lr t (g + wd w); adapt = 0: m = mu m + lr g. Then
 * w -= m (m = the step on the first one), lr = hp->lr (as mnt_sgd_step). Elements outside every
 * segment are not touched; none is when *skip is non-zero (as mnt_sgd_step). */
static inline int mnt_lars_step(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                                const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip) {
  return b->ops->lars_step(b, w, g, m, seg, nseg, hp, mu, wd, eta, first, skip);
}
/* RMSprop warm-up (train/optim.h), element by element in this order, in float without FMA:
 * d = g + wd w; v = mu2 v + (1 - mu2) d d (v = (1 - mu2) d d on the first step);
 * m = mu1 m + (a_sgd + a_rms / (sqrt(v) + eps)) d (m = that step on the first); w -= lr m.
 * lr, a_sgd and a_rms from hp (backend memory, as mnt_sgd_step), mu1, mu2, eps and wd from c (host).
 * Nothing written when *skip is non-zero (as mnt_sgd_step). */
static inline int mnt_rmsw_step(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n,
                                const mnt_step_hp *hp, const mnt_rmsw_hp *c, int first, const int32_t *skip) {
  return b->ops->rmsw_step(b, w, g, m, v, n, hp, c, first, skip);
}
/* *flag (backend memory) = 1 when x[0..n) holds a NaN or an infinity, else 0 */
static inline int mnt_nonfinite(mnt_backend *b, const float *x, size_t n, int32_t *flag) {
  return b->ops->nonfinite(b, x, n, flag);
}
/* x[0..n) = NaN when any of flags[0..nflags) (backend memory) is non-zero as the work runs (a rank's
 * own non-finite values carried into the gradients that every rank averages: no round trip to the
 * host) */
static inline int mnt_f32_poison(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags) {
  return b->ops->f32_poison(b, x, n, flags, nflags);
}
/* Uploads beside the work, in two lanes (backends with upload_start; see mnt_be_has_upload):
 * - mnt_upload_start: n host-to-device copies (page-locked sources) queued on the copy stream,
 *   after the compute work that the lane's last mnt_upload_release followed (its buffers are free);
 * - mnt_upload_use: the compute work queued after it waits for the lane's copies (no host wait);
 * - mnt_upload_release: the lane's device buffers may be overwritten once the compute work queued
 *   so far has run;
 * - mnt_upload_host_done: the host waits until the lane's copies have read their sources (which may
 *   then be reused). A lane never started or released counts as done and free. */
static inline int mnt_be_has_upload(const mnt_backend *b) { return b->ops->upload_start != NULL; }
static inline int mnt_upload_start(mnt_backend *b, int lane, void *const *dst, const void *const *src,
                                   const size_t *bytes, int n) {
  return b->ops->upload_start(b, lane, dst, src, bytes, n);
}
static inline int mnt_upload_use(mnt_backend *b, int lane) { return b->ops->upload_use(b, lane); }
static inline int mnt_upload_release(mnt_backend *b, int lane) { return b->ops->upload_release(b, lane); }
static inline int mnt_upload_host_done(mnt_backend *b, int lane) { return b->ops->upload_host_done(b, lane); }

/* fp32 <-> bf16/fp16 (t = MNT_FP32 copies), in backend memory */
static inline int mnt_be_cast_from_f32(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n) {
  return b->ops->cast_from_f32(b, t, src, dst, n);
}
static inline int mnt_be_cast_to_f32(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n) {
  return b->ops->cast_to_f32(b, t, src, dst, n);
}

#endif
