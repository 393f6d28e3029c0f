/* resnet.h — ResNet v1.5 (torchvision's architecture and parameter names) on the compute backend.
 * defines: mnt_resnet, mnt_param, mnt_resnet_create / destroy / forward / loss / backward / plan_bytes,
 *          mnt_resnet_find, mnt_resnet_known, mnt_resnet_arch_names, mnt_layer_shape / mnt_resnet_walk, mnt_resnet_flops,
 *          mnt_resnet_slow_layers, mnt_resnet_impls, mnt_resnet_first_nonfinite.
 * Architectures: resnet18, resnet34 (basic blocks), resnet50, resnet101 (bottlenecks, stride on
 * the 3x3 conv), and two small variants for tests and 28-64 px images (3x3 stem without max-pool,
 * widths 16/32/64): resnet8 (one basic block per stage) and resnet20 (three, He et al.'s CIFAR net). Any input size that leaves at least one
 * pixel after the stem, any class count.
 * Memory: one slab of weights, one of gradients and one of momentum with the same layout (each
 * view 256-byte aligned, in torchvision's state_dict order), BN running statistics apart; all of
 * it, and every activation, is the backend's memory (device memory on cuda): host code reads it
 * through mnt_be_copy. */
#ifndef MNT_RESNET_H
#define MNT_RESNET_H

#include <stddef.h>
#include <stdint.h>

#include "src/backend/backend.h"

typedef struct mnt_param {
  char name[128];  /* torchvision name: "layer1.0.conv1.weight", "fc.bias", "bn1.running_mean" */
  size_t off, n;   /* elements, into the weight slab (or the BN-statistics buffer) */
  int ndims, dims[4];
  int no_decay;    /* BN weight/bias and biases: optionally excluded from weight decay */
} mnt_param;

typedef struct mnt_layer mnt_layer;

typedef struct mnt_resnet {
  char arch[16];
  int classes, size, batch;
  mnt_backend *be;
  mnt_param *params;   /* in slab order */
  int nparams;
  float *w, *g, *m;    /* weights, gradients: nw fp32 elements each; m: the optimizer's state, nstate
                        * tensors of nw one after another (the momentum first) (backend memory) */
  size_t nw;
  int nstate;          /* 1 unless mnt_resnet_optim_state made room for more */
  mnt_param *stats;    /* BN running_mean / running_var, in buffer order */
  int nstats;
  float *bn;           /* nbn elements */
  size_t nbn;
  mnt_layer *layers;
  int nlayers;
  int nact;
  void **act, **dact;  /* activations and their gradients (backend memory, be->act_bytes per element);
                        * act[0] is the input */
  size_t *act_n;
  int *written;        /* per backward pass: has dact[i] been written yet */
  /* gradient buffers live only from their first writer to their producer's backward; they
   * come from this pool, kept across steps (no page faults after the first). used: how many
   * activations' gradients the buffer holds now (a residual add hands its output's gradient to its
   * inputs without a copy: two holders until one is released or changed) */
  struct mnt_gradbuf { void *p; size_t n; int used; } *pool;
  int npool, cap_pool;
  void *scratch;
  size_t scratch_n;
  float *bn_save;      /* per BN layer and group: batch mean and variance for backward */
  float *bn_tmp;
  float *bn_run;       /* running statistics of BN groups: the old values and the sums */
  int bn_group;        /* batch-norm statistics over groups of this many images (default: batch) */
  float label_smoothing; /* mnt_resnet_loss's target: (1 - e) onehot + e / classes (default 0) */
  float bn_momentum;   /* a training forward's running statistics: (1 - b) old + b batch (default 0.1,
                        * PyTorch's; 1: the last batch's; 1/(k+1) for batch k: their mean) */
  int32_t *labels;     /* backend memory, batch entries */
  float *out3;         /* backend memory: the last mnt_resnet_loss's loss sum, top-1 and top-5 hits */
  int32_t *flag;       /* backend memory: one flag for the caller's non-finite check */
  /* called during backward, in decreasing slab offsets, once the gradient range
   * [off, off + n) is final (the hook for overlapping allreduce with backward) */
  void (*grad_ready)(void *ctx, size_t off, size_t n);
  void *grad_ctx;
} mnt_resnet;

/* room for k state tensors of the optimizer in r->m (k >= 1), all zero: the old ones are dropped */
int mnt_resnet_optim_state(mnt_resnet *r, int k);
/* 1 when arch names a model this build knows, else 0 */
int mnt_resnet_known(const char *arch);
/* "resnet8, resnet20, resnet18, resnet34, resnet50 or resnet101": the names mnt_resnet_known takes */
const char *mnt_resnet_arch_names(void);
/* Build the model and initialise it as torchvision does (Kaiming normal fan_out for conv,
 * BN weight 1 / bias 0, Linear's default uniform), reproducibly from seed; zero_init_residual
 * zeroes the last BN weight of each residual branch (Goyal et al.). Errors (unknown arch, image
 * too small, classes or batch < 1) are MNT_EARG with a message. */
int mnt_resnet_create(mnt_backend *be, const char *arch, int classes, int size, int batch, uint64_t seed,
                      int zero_init_residual, mnt_resnet **out);
/* The same with batch normalisation over groups of bn_group images of the batch ("virtual" or
 * ghost batch norm): one rank with batch G*b and groups of b computes what G ranks with batch b
 * compute, which is how data-parallel training normalises (per rank). */
int mnt_resnet_create_ex(mnt_backend *be, const char *arch, int classes, int size, int batch, int bn_group,
                         uint64_t seed, int zero_init_residual, mnt_resnet **out);
void mnt_resnet_destroy(mnt_resnet *r);
/* Bytes mnt_resnet_create_ex would use for these arguments (weights, gradients, momentum,
 * activations, gradient buffers, the backend's copies), computed from the layer plan without
 * allocating any of it: what a run checks against its memory limit before it starts. */
int mnt_resnet_plan_bytes(const char *arch, int classes, int size, int batch, int bn_group, size_t act_bytes,
                          size_t *bytes);
/* x: host fp32 [batch, 3, size, size], uploaded into the input; NULL: the input was filled
 * already (mnt_resnet_input, e.g. by the backend's augment_u8). train: batch statistics
 * (updating the running ones), else the running ones. */
int mnt_resnet_forward(mnt_resnet *r, const float *x, int train);
/* the model's input activation (backend memory, batch x 3 x size x size in the backend's layout) */
void *mnt_resnet_input(mnt_resnet *r);
/* the logits of the last forward (backend memory, [batch, classes], act_bytes per element) */
const void *mnt_resnet_logits(const mnt_resnet *r);
/* Softmax cross-entropy of the last forward's first n samples against labels (host, n entries),
 * into r->out3 on the backend (loss sum, top-1, top-5; nothing read back). for_backward: with
 * the label smoothing, keeping dlogits for backward (n must be the batch); else the plain loss
 * (evaluation). */
int mnt_resnet_loss(mnt_resnet *r, const int32_t *labels, int n, int for_backward);
/* the same with the labels in backend memory already (the trainer's upload lanes) */
int mnt_resnet_loss_dev(mnt_resnet *r, const int32_t *dev_labels, int n, int for_backward);
/* copies r->out3 to the host (waits for the queued work) */
int mnt_resnet_read_loss(mnt_resnet *r, float out[3]);
/* gradients of every parameter into r->g (overwritten), in reverse layer order */
int mnt_resnet_backward(mnt_resnet *r);
/* One layer the backend makes, as mnt_resnet_walk reports it. */
typedef enum { MNT_LAYER_CONV, MNT_LAYER_BN, MNT_LAYER_POOL, MNT_LAYER_FC } mnt_layer_kind;
typedef struct mnt_layer_shape {
  const char *name;   /* "layer4.0.conv2", "bn1", "maxpool", "fc" */
  mnt_layer_kind kind;
  int N, C, H, W;     /* its input: batch (bn: the batch-norm group), channels, height, width */
  int K, R, s, p;     /* conv: output channels, kernel, stride, padding; pool: channels, window, stride,
                       * padding; bn: channels; fc: outputs */
  int flag;           /* conv: its input gradient is computed (not for the image); bn: ReLU fused */
} mnt_layer_shape;
typedef void (*mnt_layer_fn)(void *ctx, const mnt_layer_shape *l);
/* Every layer of the architecture at these arguments, in forward order, without building anything. */
int mnt_resnet_walk(const char *arch, int classes, int size, int batch, int bn_group, mnt_layer_fn fn, void *ctx);
/* Floating-point operations of one training step (2 per multiply-add of the convolutions and the fully
 * connected layer): forward, and backward (weight gradients, and input gradients but the image's). */
int mnt_resnet_flops(const char *arch, int classes, int size, int batch, double *fwd, double *bwd);
/* Layers that run a reference (unoptimised) implementation: their number, and "name (what runs); ..."
 * into buf. */
int mnt_resnet_slow_layers(const mnt_resnet *r, char *buf, size_t n);
/* What the layers of one kind (conv, bn or pool) run, each distinct text with its count:
 * "fwd bnorm_jit:avx2, infer bnorm_jit:avx2, bwd bnorm_jit:avx2 x20" ("; " between); the number of texts. */
int mnt_resnet_impls(const mnt_resnet *r, mnt_layer_kind kind, char *buf, size_t n);

/* The convolutions' algorithms in layer order, 3 ints each (mnt_conv_algos): read into algos (set 0)
 * or set from it (set 1). The number of convolutions into *n; algos NULL: only count them. */
int mnt_resnet_conv_algos(mnt_resnet *r, int *algos, int *n, int set);
/* the parameter (or BN statistic) of that name, NULL if none */
const mnt_param *mnt_resnet_find(const mnt_resnet *r, const char *name, int *is_stat);
/* the first of ps[0..n) (params or stats) that holds a NaN or an infinity in base, a host copy of
 * its slab (weights, momentum, gradients or BN statistics); NULL when none does */
const mnt_param *mnt_resnet_first_nonfinite(const mnt_param *ps, int n, const float *base);

#endif
