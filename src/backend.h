/* backend.h — the compute operations every model layer goes through, with a fixed argument order
 * (inputs, parameters, outputs). All tensors are fp32. Parameters are in torchvision's layouts
 * (conv weights OIHW, fully-connected [out][in]) so they map 1:1 onto a state_dict. Activations
 * are in the backend's layout: NCHW for channel counts not divisible by mnt_act_block() (the
 * input image), channel-blocked (nChw16c / nChw8c) otherwise; element-wise ops do not care.
 * defines: mnt_backend (engine + stream), mnt_conv / mnt_bn / mnt_pool (created once per layer
 *          shape, executed every step), and the element-wise ops: relu, add, global average
 *          pool, fully connected, softmax cross-entropy, SGD step.
 * CPU implementation: backend_cpu.c (oneDNN 2.x C API for conv, batch-norm and max-pool; sgemm
 * for fully connected; plain loops for element-wise work). */
#ifndef MNT_BACKEND_H
#define MNT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct mnt_backend mnt_backend;
typedef struct mnt_conv mnt_conv;
typedef struct mnt_bn mnt_bn;
typedef struct mnt_pool mnt_pool;

int mnt_backend_create(mnt_backend **out);
void mnt_backend_destroy(mnt_backend *b);

/* Convolution without bias: x[N,C,H,W] * w[K,C,R,R] -> y[N,K,OH,OW], square kernel R, stride s,
 * padding p on each side (PyTorch semantics: OH = (H + 2p - R) / s + 1). */
int mnt_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, mnt_conv **out);
void mnt_conv_out_hw(const mnt_conv *c, int *OH, int *OW);
int mnt_conv_forward(mnt_conv *c, const float *x, const float *w, float *y);
/* dx (may be NULL: not needed for the first layer) and dw from dy; both are overwritten. */
int mnt_conv_backward(mnt_conv *c, const float *x, const float *w, const float *dy, float *dx, float *dw);
void mnt_conv_destroy(mnt_conv *c);

/* Batch normalization over N,H,W per channel, optionally followed by a fused ReLU (one pass
 * forward and backward; the backward dy is then the gradient of the ReLU's output). Training:
 * normalizes with the batch statistics, saves them (mean, var: biased, C each) for backward and
 * updates the running statistics as PyTorch does (momentum, unbiased variance). Inference: uses
 * the running statistics. */
int mnt_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, mnt_bn **out);
int mnt_bn_forward_train(mnt_bn *bn, const float *x, const float *gamma, const float *beta, float *y,
                         float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum);
int mnt_bn_forward_infer(mnt_bn *bn, const float *x, const float *gamma, const float *beta, float *y,
                         const float *run_mean, const float *run_var);
int mnt_bn_backward(mnt_bn *bn, const float *x, const float *dy, const float *gamma, const float *save_mean,
                    const float *save_var, float *dx, float *dgamma, float *dbeta);
void mnt_bn_destroy(mnt_bn *bn);

/* Max pooling, square window R, stride s, padding p (keeps a workspace for backward). */
int mnt_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, mnt_pool **out);
void mnt_pool_out_hw(const mnt_pool *pl, int *OH, int *OW);
int mnt_pool_forward(mnt_pool *pl, const float *x, float *y);
int mnt_pool_backward(mnt_pool *pl, const float *dy, float *dx);
void mnt_pool_destroy(mnt_pool *pl);

/* channels per block of blocked activations (16 with AVX-512, else 8) */
int mnt_act_block(void);

/* element-wise and small ops */
void mnt_relu_forward(const float *x, float *y, size_t n);
void mnt_relu_backward(const float *y, const float *dy, float *dx, size_t n); /* uses the output */
void mnt_add_forward(const float *a, const float *b, float *y, size_t n);
void mnt_acc(float *y, const float *x, size_t n); /* y += x */
void mnt_gap_forward(const float *x, float *y, int N, int C, int HW); /* activation [N,C,HW] -> plain [N,C] */
void mnt_gap_backward(const float *dy, float *dx, int N, int C, int HW);
/* y[N,O] = x[N,I] w[O,I]^T + bias[O] */
int mnt_fc_forward(const float *x, const float *w, const float *bias, float *y, int N, int I, int O);
/* dx (may be NULL), dw, dbias: overwritten */
int mnt_fc_backward(const float *x, const float *w, const float *dy, float *dx, float *dw, float *dbias, int N,
                    int I, int O);
/* Mean softmax cross-entropy over the batch against the target (1 - e) onehot + e / classes
 * (label smoothing e, as PyTorch's CrossEntropyLoss(label_smoothing=e)); dlogits = (softmax -
 * target) / N. Counts top-1 and top-5 hits. Returns the loss; labels outside [0, classes) make it
 * return NAN. */
float mnt_softmax_xent(const float *logits, const int32_t *labels, float *dlogits, int N, int classes, float smoothing,
                       int *top1, int *top5);
/* PyTorch SGD: g += wd * w; m = mu * m + g (m = g on the first step); w -= lr * m. */
void mnt_sgd_step(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first);

#endif
