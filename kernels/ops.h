/* ops.h — host launchers of kernels/act.cu and kernels/f32.cu, the CUDA backend's own kernels
 * (C linkage, no CUDA headers needed: streams are passed as void *, the cudaStream_t).
 * Every launcher queues its work on the stream and returns the cudaError_t of the launch as an
 * int (0: queued); none synchronizes. `bf16` selects the activation element type: 0 fp32,
 * 1 bf16 (__nv_bfloat16). Activations are NCHW in fp32 and NHWC in bf16 (backend.h).
 * defines (activations): mnt_k_relu_fwd, mnt_k_relu_bwd, mnt_k_add, mnt_k_acc, mnt_k_gap_fwd,
 *          mnt_k_gap_bwd, mnt_k_bias_rows, mnt_k_col_sum, mnt_k_nchw_to_act, mnt_k_act_to_nchw,
 *          mnt_k_xent_rows, mnt_k_xent_reduce;
 *          (weights) mnt_k_oihw_to_krsc_bf16, mnt_k_krsc_bf16_to_oihw, mnt_k_pad_channels_bf16;
 *          (fp32 vectors) mnt_k_f32_acc, mnt_k_f32_scale, mnt_k_sgd, mnt_k_lars (mnt_k_seg), mnt_k_rmsw, mnt_k_nonfinite,
 *          mnt_k_f32_poison;
 *          (batch norm, bf16 NHWC, bn.cu) mnt_k_bn_ws_floats, mnt_k_bn_fwd_train, mnt_k_bn_fwd_infer,
 *          mnt_k_bn_bwd. */
#ifndef MNT_KERNELS_OPS_H
#define MNT_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- activations (act.cu) ---- */
int mnt_k_relu_fwd(int bf16, const void *x, void *y, size_t n, void *stream);          /* y = max(x, 0) */
int mnt_k_relu_bwd(int bf16, const void *y, const void *dy, void *dx, size_t n, void *stream); /* y > 0 ? dy : 0 */
int mnt_k_add(int bf16, const void *x1, const void *x2, void *y, size_t n, void *stream);
int mnt_k_acc(int bf16, void *y, const void *x, size_t n, void *stream);              /* y += x */
/* global average pool [N,C,HW] (NCHW when !bf16, NHWC when bf16) <-> plain [N,C] */
int mnt_k_gap_fwd(int bf16, const void *x, void *y, int N, int C, int HW, void *stream);
int mnt_k_gap_bwd(int bf16, const void *dy, void *dx, int N, int C, int HW, void *stream);
/* y[n][o] = bias[o] (fp32 bias, activation y [N,O]) */
int mnt_k_bias_rows(int bf16, const float *bias, void *y, int N, int O, void *stream);
/* out[o] = sum over n of dy[n][o] (activation dy [N,O], fp32 out, overwritten) */
int mnt_k_col_sum(int bf16, const void *dy, float *out, int N, int O, void *stream);
/* plain fp32 NCHW <-> the activation layout (bf16 NHWC; fp32 NCHW: a copy) */
int mnt_k_nchw_to_act(int bf16, const float *src, void *act, int N, int C, int HW, void *stream);
int mnt_k_act_to_nchw(int bf16, const void *act, float *dst, int N, int C, int HW, void *stream);
/* softmax cross-entropy, per row n of logits [N,K]: rows[3n..3n+2] = loss, top-1 hit, top-5 hit
 * (NaN, 0, 0 for a label outside [0,K)); dlogits (may be NULL) = (softmax - target) / N with
 * target (1-e) onehot + e/K (a NaN row for a bad label) */
int mnt_k_xent_rows(int bf16, const void *logits, const int32_t *labels, void *dlogits, int N, int K, float smoothing,
                    float *rows, void *stream);
/* out3 = column sums of rows [N,3], in a fixed order (deterministic), overwritten */
int mnt_k_xent_reduce(const float *rows, int N, float *out3, void *stream);

/* ---- conv weights (act.cu) ---- */
/* fp32 OIHW [K,C,R,R] -> bf16 KRSC [K,R,R,Cp] (cuDNN's NHWC filter); Cp >= C, channels C..Cp-1 zero
 * (the stem's 3 input channels padded to 4) */
int mnt_k_oihw_to_krsc_bf16(const float *w, void *out, int K, int C, int Cp, int R, void *stream);
/* bf16 KRSC [K,R,R,Cp] -> fp32 OIHW [K,C,R,R] (overwritten; channels C..Cp-1 dropped) */
int mnt_k_krsc_bf16_to_oihw(const void *in, float *w, int K, int C, int Cp, int R, void *stream);
/* bf16 NHWC [npix][C] -> [npix][Cp], Cp >= C, the added channels zero */
int mnt_k_pad_channels_bf16(const void *x, void *y, size_t npix, int C, int Cp, void *stream);

/* ---- fp32 vectors (f32.cu) ---- */
/* skip (device memory, or NULL): when *skip is non-zero as the kernel runs, nothing is written (the
 * non-finite flag, read on the device) */
int mnt_k_f32_acc(float *y, const float *x, size_t n, const int32_t *skip, void *stream); /* y += x */
int mnt_k_f32_scale(float *y, float a, size_t n, void *stream);        /* y *= a */
/* The optimizers read the step's scalars from device memory (hp: lr, a_sgd, a_rms, in this order:
 * src/backend/backend.h's mnt_step_hp), written before the step, so that a step's launches are the
 * same at every step (a CUDA graph replayed) */
/* PyTorch SGD: d = g + wd w; m = first ? d : mu m + d; w -= lr m (lr = hp[0]) */
int mnt_k_sgd(float *w, const float *g, float *m, size_t n, const float *hp, float mu, float wd, int first,
              const int32_t *skip, void *stream);
/* LARS over tensors (device arrays): seg[s] = {off, n, adapt} of the slab; partial: 2 * nseg *
 * MNT_K_LARS_BLOCKS doubles of scratch. adapt: t = eta |w| / (|g| + wd |w|) (1 when a norm is 0),
 * m = mu m + lr t (g + wd w); else m = mu m + lr g; w -= m (no mu m when first). Norms are summed in
 * a fixed order (the same bits every run); the element update rounds as the CPU's, no FMA. */
enum { MNT_K_LARS_BLOCKS = 32 };
/* RMSprop warm-up (src/backend/backend.h mnt_rmsw_step), element by element in the CPU's order, no
 * FMA: d = g + wd w; v = mu2 v + (1 - mu2) d d; m = mu1 m + (a_sgd + a_rms / (sqrt(v) + eps)) d;
 * w -= lr m (first: v and m without their old values); lr, a_sgd, a_rms = hp[0], hp[1], hp[2] */
int mnt_k_rmsw(float *w, const float *g, float *m, float *v, size_t n, const float *hp, float mu1, float mu2, float eps,
               float wd, int first, const int32_t *skip, void *stream);
typedef struct mnt_k_seg {
  uint64_t off, n;
  int32_t adapt, pad;
} mnt_k_seg;
int mnt_k_lars(float *w, const float *g, float *m, const mnt_k_seg *seg, int nseg, double *partial, const float *hp,
               float mu, float wd, float eta, int first, const int32_t *skip, void *stream); /* lr = hp[0] */
/* *flag = 1 when x[0..n) holds a NaN or an infinity, else 0 (flag is device memory) */
int mnt_k_nonfinite(const float *x, size_t n, int32_t *flag, void *stream);
/* x[0..n) = NaN when any of flags[0..nflags) (device memory) is non-zero as the kernel runs */
int mnt_k_f32_poison(float *x, size_t n, const int32_t *flags, int nflags, void *stream);

/* ---- batch normalization over bf16 NHWC activations (bn.cu) ----
 * Per channel c of C over the M = N*H*W rows; gamma, beta, statistics fp32 [C]; relu: a ReLU fused
 * after the forward (the backward then takes the ReLU output's gradient and masks it by y > 0).
 * ws: device scratch of mnt_k_bn_ws_floats(M, C, sms) floats, used by one call at a time; sms: the
 * device's multiprocessor count (sizes the reductions). Deterministic (no atomics). */
size_t mnt_k_bn_ws_floats(int M, int C, int sms);
/* training: y = relu?(gamma (x - mean) invstd + beta) with the batch's mean and biased variance;
 * save_mean, save_invstd = 1/sqrt(var + eps) written; running = (1 - momentum) running + momentum
 * batch (the variance unbiased), as PyTorch */
int mnt_k_bn_fwd_train(const void *x, const float *gamma, const float *beta, void *y, float *save_mean,
                       float *save_invstd, float *run_mean, float *run_var, float momentum, float eps, int M, int C,
                       int relu, float *ws, int sms, void *stream);
/* inference: the running statistics */
int mnt_k_bn_fwd_infer(const void *x, const float *gamma, const float *beta, void *y, const float *run_mean,
                       const float *run_var, float eps, int M, int C, int relu, float *ws, int sms, void *stream);
/* backward of a training forward: dx (may be dy: in place), dgamma and dbeta overwritten; y (the
 * forward's output) is read only when relu */
int mnt_k_bn_bwd(const void *x, const void *y, const void *dy, const float *gamma, const float *save_mean,
                 const float *save_invstd, void *dx, float *dgamma, float *dbeta, int M, int C, int relu, float *ws,
                 int sms, void *stream);

#ifdef __cplusplus
}
#endif

#endif
