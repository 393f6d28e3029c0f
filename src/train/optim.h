/* optim.h — the optimizers (SGD with momentum and weight decay in PyTorch's semantics; LARS) and the
 * learning-rate schedule.
 * defines: mnt_optim_cfg, mnt_sched (step | cosine | poly | slow-start), mnt_optim (sgd | lars |
 *          rmsprop-warmup), mnt_optim_desc and mnt_optims (the one table of optimizers: name, help,
 *          state tensors, update), mnt_optim_choices, mnt_optim_help, mnt_lr_at, mnt_rmsw_alpha,
 *          mnt_optim_scalars, mnt_optim_update (mnt_sgd_update, mnt_lars_update, mnt_rmsw_update).
 * The linear scaling rule: peak lr = base_lr * global_batch / 256 (Goyal et al., arXiv 1706.02677),
 * reached by a linear warm-up from base_lr (peak * 256 / global_batch; no warm-up below 256 images),
 * then step decay (x0.1 at 1/3, 2/3 and 8/9 of the run, i.e. epochs 30, 60, 80 of 90), cosine decay
 * to zero, polynomial decay of power 2 to zero (MLPerf's ResNet-50 with LARS), or slow-start (Akiba,
 * Suzuki, Fukuda, arXiv 1711.04325: 0.5 of the peak for the first 40 of 90 epochs, then 0.075, 0.01
 * and 0.001 of it for 30, 15 and 5; here the same fractions of the run's length).
 * LARS (You, Gitman, Ginsburg, arXiv 1708.03888), as MLPerf's ResNet-50 reference applies it: for
 * every weight tensor (convolutions, the fully connected weight) the trust ratio
 *   t = eta |w| / (|g| + wd |w|)   (1 when |w| or |g| is 0),
 * then v = mu v + lr t (g + wd w), w -= v; biases and batch-norm parameters are excluded from both
 * the trust ratio and weight decay: v = mu v + lr g, w -= v. The momentum buffer holds v, the step
 * with the learning rate in it (SGD's holds the unscaled one): a run keeps its optimizer on resume.
 * RMSprop warm-up (Akiba, Suzuki, Fukuda, arXiv 1711.04325): a blend of RMSprop into momentum SGD,
 *   d = g + wd w,  v = mu2 v + (1 - mu2) d^2,  m = mu m + (a_sgd + a_rms / (sqrt(v) + eps)) d,  w -= lr m
 * (m is the paper's -Delta; v its m_t), with a_sgd(e) = exp(2 (e - C) / P) / 2 before epoch C, then
 * 1/2 + (e - C) / P up to 1 (reached at C + P/2), and a_rms = (1 - a_sgd) rmsprop_lr / lr: at the
 * start plain RMSprop at rate rmsprop_lr, at the end plain momentum SGD at lr. C:P default to the
 * paper's 10:5 of 90 epochs, as fractions of the run. Biases and batch-norm parameters are not
 * decayed (as under LARS). Its state is two tensors per parameter: the momentum and v.
 * What changes from step to step (the learning rate, the blend) is not passed to the updates by value:
 * mnt_optim_scalars computes it, the trainer writes it to backend memory before the step, and the
 * updates' ops read it there (backend.h: mnt_step_hp), so that a step's device work is the same at
 * every step (the precondition of a CUDA graph captured once and replayed). */
#ifndef MNT_OPTIM_H
#define MNT_OPTIM_H

#include "src/model/resnet.h"

typedef enum {
  MNT_SCHED_STEP = 0,
  MNT_SCHED_COSINE = 1,
  MNT_SCHED_POLY = 2,
  MNT_SCHED_SLOW_START = 3,
  MNT_NSCHED
} mnt_sched;
/* the schedules as --schedule spells them, by value: the one place they are named */
extern const char *const mnt_sched_names[MNT_NSCHED];
typedef enum { MNT_OPTIM_SGD = 0, MNT_OPTIM_LARS = 1, MNT_OPTIM_RMSPROP_WARMUP = 2, MNT_NOPTIM } mnt_optim;

/* what the optimizers and the schedule read */
typedef struct mnt_optim_cfg {
  double base_lr;       /* per 256 images (0.1 for ResNet-50) */
  int global_batch;
  double warmup_epochs;
  double epochs;        /* length of the run, for the schedule */
  mnt_sched schedule;
  double momentum;      /* 0.9 */
  double weight_decay;  /* 1e-4 */
  int no_bn_bias_decay; /* no weight decay on BN weights/biases and biases (LARS: always) */
  mnt_optim optimizer;
  double lars_eta;      /* LARS trust coefficient (0.001) */
  double rms_center, rms_period; /* RMSprop warm-up's C and P, in epochs */
  double rms_lr;        /* the RMSprop term's rate (1e-4) */
  double rms_mu2, rms_eps; /* its second moment's decay (0.99) and epsilon (1e-8) */
} mnt_optim_cfg;

/* how many state tensors an optimizer keeps per parameter at most (the momentum, a second moment) */
enum { MNT_OPTIM_MAX_STATE = 2 };

/* One optimizer: its name (--optimizer, config.json, summary.json), what --help says of it, its state
 * tensors (nstate of them, each as large as the weights, held one after another in the model's m:
 * state[k] is m + k * nw, checkpointed as /optim/<state[k]>/<parameter>), and its update of every
 * parameter (through the backend's ops: mnt_sgd_step, mnt_lars_step, mnt_rmsw_step) at a
 * (fractional) epoch. The table, mnt_optims, is indexed by mnt_optim; a new optimizer is a row there
 * and its update. */
typedef struct mnt_optim_desc {
  mnt_optim id;
  const char *name, *help;
  int nstate;
  const char *state[MNT_OPTIM_MAX_STATE];
  int (*update)(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip);
} mnt_optim_desc;
extern const mnt_optim_desc mnt_optims[MNT_NOPTIM];

const char *mnt_optim_choices(void);                  /* "sgd|lars": the names, for --optimizer */
const char *mnt_optim_help(void);                     /* each name and its help, for --optimizer */
const char *mnt_sched_name(mnt_sched s);              /* as --schedule spells it */
const char *mnt_optim_name(mnt_optim o);              /* as --optimizer spells it */
/* learning rate at a (fractional) epoch */
double mnt_lr_at(const mnt_optim_cfg *c, double epoch);
/* RMSprop warm-up's blend at a (fractional) epoch: a_sgd, and a_rms at learning rate lr */
void mnt_rmsw_alpha(const mnt_optim_cfg *c, double epoch, double lr, double *a_sgd, double *a_rms);
/* the scalars of the step at a (fractional) epoch: the learning rate (mnt_lr_at) and, under
 * rmsprop-warmup, its blend (mnt_rmsw_alpha); 0 where an optimizer has none */
void mnt_optim_scalars(const mnt_optim_cfg *c, double epoch, mnt_step_hp *out);
/* one step over every parameter of r (gradients in r->g, state in r->m), by c->optimizer, with the
 * step's scalars at hp (backend memory: mnt_optim_scalars' values, copied there) */
int mnt_optim_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip);
int mnt_sgd_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip);
int mnt_lars_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip);
int mnt_rmsw_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip);

#endif
