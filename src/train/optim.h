/* optim.h — SGD with momentum and weight decay (PyTorch semantics) and the learning-rate schedule.
 * defines: mnt_sgd_cfg, mnt_sched (step | cosine), mnt_lr_at, mnt_sgd_update.
 * The linear scaling rule: peak lr = base_lr * global_batch / 256 (Goyal et al.), reached by a
 * linear warm-up from peak / warm-up length, then step decay (x0.1 at 1/3, 2/3 and 8/9 of the run,
 * i.e. epochs 30, 60, 80 of 90) or cosine decay to zero. */
#ifndef MNT_OPTIM_H
#define MNT_OPTIM_H

#include "model/resnet.h"

typedef enum { MNT_SCHED_STEP = 0, MNT_SCHED_COSINE = 1 } mnt_sched;

typedef struct mnt_sgd_cfg {
  double base_lr;       /* per 256 images (0.1 for ResNet-50) */
  int global_batch;
  double warmup_epochs;
  double epochs;        /* length of the run, for the schedule */
  mnt_sched schedule;
  double momentum;      /* 0.9 */
  double weight_decay;  /* 1e-4 */
  int no_bn_bias_decay; /* no weight decay on BN weights/biases and biases */
} mnt_sgd_cfg;

int mnt_sched_parse(const char *s, mnt_sched *out);
/* learning rate at a (fractional) epoch */
double mnt_lr_at(const mnt_sgd_cfg *c, double epoch);
/* one step over every parameter of r (gradients in r->g, momentum in r->m) */
int mnt_sgd_update(mnt_resnet *r, const mnt_sgd_cfg *c, double lr, int first_step);

#endif
