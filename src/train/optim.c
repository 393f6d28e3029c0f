/* optim.c — see optim.h. */
#include "src/train/optim.h"

#include "src/check.h"
#include "src/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/backend/backend.h"

const char *const mnt_sched_names[MNT_NSCHED] = {"step", "cosine", "poly", "slow-start"};

const mnt_optim_desc mnt_optims[MNT_NOPTIM] = {
    {MNT_OPTIM_SGD, "sgd", "momentum SGD (PyTorch)", 1, {"momentum"}, mnt_sgd_update},
    {MNT_OPTIM_LARS, "lars",
     "layer-wise trust ratio (You et al. 2017, as MLPerf's ResNet-50), biases and BN parameters by plain momentum SGD "
     "without decay",
     1, {"momentum"}, mnt_lars_update},
    {MNT_OPTIM_RMSPROP_WARMUP, "rmsprop-warmup",
     "RMSprop blended into momentum SGD over the first epochs (Akiba et al. 2017; --rmsprop-warmup, --rmsprop-lr), "
     "biases and BN parameters without decay",
     2, {"momentum", "second_moment"}, mnt_rmsw_update},
};

/* "a|b|c" or "a: help; b: help" from the table, made once */
static const char *joined(char *buf, size_t n, int help) {
  if (buf[0]) return buf;
  size_t k = 0;
  for (int i = 0; i < MNT_NOPTIM && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, help ? "%s%s: %s" : "%s%s", i ? (help ? "; " : "|") : "", mnt_optims[i].name,
                          help ? mnt_optims[i].help : "");
  return buf;
}

const char *mnt_optim_choices(void) {
  static char buf[256];
  return joined(buf, sizeof buf, 0);
}

const char *mnt_optim_help(void) {
  static char buf[2048];
  return joined(buf, sizeof buf, 1);
}

const char *mnt_sched_name(mnt_sched s) { return s >= 0 && s < MNT_NSCHED ? mnt_sched_names[s] : "?"; }
const char *mnt_optim_name(mnt_optim o) { return o >= 0 && o < MNT_NOPTIM ? mnt_optims[o].name : "?"; }

double mnt_lr_at(const mnt_optim_cfg *c, double epoch) {
  double peak = c->base_lr * (double)c->global_batch / 256.0;
  double w = c->warmup_epochs;
  if (w > 0 && epoch < w) {
    double start = peak * (c->global_batch > 256 ? 256.0 / c->global_batch : 1.0);
    return start + (peak - start) * epoch / w;
  }
  double T = c->epochs > w ? c->epochs : w + 1;
  if (c->schedule == MNT_SCHED_COSINE || c->schedule == MNT_SCHED_POLY) {
    double t = (epoch - w) / (T - w);
    if (t > 1) t = 1;
    if (c->schedule == MNT_SCHED_POLY) return peak * (1.0 - t) * (1.0 - t);
    return 0.5 * peak * (1.0 + cos(M_PI * t));
  }
  double f = epoch / T, lr = peak;
  if (c->schedule == MNT_SCHED_SLOW_START) /* Akiba et al.'s 40, 30, 15 and 5 of 90 epochs */
    return peak * (f < 40.0 / 90 ? 0.5 : f < 70.0 / 90 ? 0.075 : f < 85.0 / 90 ? 0.01 : 0.001);
  if (f >= 1.0 / 3.0) lr *= 0.1;
  if (f >= 2.0 / 3.0) lr *= 0.1;
  if (f >= 8.0 / 9.0) lr *= 0.1;
  return lr;
}

/* the weight decay of parameter i: none on biases and BN parameters when exclude (or --no-bn-decay) */
static float decay_of(const mnt_resnet *r, const mnt_optim_cfg *c, int i, int exclude) {
  return (exclude || c->no_bn_bias_decay) && r->params[i].no_decay ? 0.0f : (float)c->weight_decay;
}

/* the run of consecutive parameters from i with the same weight decay: [*off, *off + *n) of the slab,
 * its decay in *wd; returns the index after it. One fused update per run (the whole slab when every
 * parameter decays); the padding between views is zero in w, g and the state and stays so */
static int decay_run(const mnt_resnet *r, const mnt_optim_cfg *c, int i, int exclude, size_t *off, size_t *n,
                     float *wd) {
  *wd = decay_of(r, c, i, exclude);
  int j = i + 1;
  while (j < r->nparams && decay_of(r, c, j, exclude) == *wd) j++;
  *off = r->params[i].off;
  *n = r->params[j - 1].off + r->params[j - 1].n - *off;
  return j;
}

int mnt_sgd_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip) {
  for (int i = 0; i < r->nparams;) {
    size_t off, n;
    float wd;
    i = decay_run(r, c, i, 0, &off, &n, &wd);
    MNT_CHECK(mnt_sgd_step(r->be, r->w + off, r->g + off, r->m + off, n, hp, (float)c->momentum, wd, first_step, skip));
  }
  return MNT_OK;
}

int mnt_lars_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip) {
  /* one segment per tensor: the trust ratio is a tensor's own (the padding between views stays zero) */
  mnt_lars_seg *seg = malloc((size_t)r->nparams * sizeof *seg);
  int st = MNT_OK;
  if (!seg) return MNT_ENOMEM;
  for (int i = 0; i < r->nparams; i++)
    seg[i] = (mnt_lars_seg){.off = r->params[i].off, .n = r->params[i].n, .adapt = !r->params[i].no_decay};
  MNT_CHECK_GOTO(mnt_lars_step(r->be, r->w, r->g, r->m, seg, r->nparams, hp, (float)c->momentum, (float)c->weight_decay,
                               (float)c->lars_eta, first_step, skip),
                 st, out);
out:
  free(seg);
  return st;
}

void mnt_rmsw_alpha(const mnt_optim_cfg *c, double epoch, double lr, double *a_sgd, double *a_rms) {
  double C = c->rms_center, P = c->rms_period > 0 ? c->rms_period : 1e-12, a;
  if (epoch < C) a = 0.5 * exp(2.0 * (epoch - C) / P);
  else a = 0.5 + (epoch - C) / P;
  if (a > 1) a = 1;
  *a_sgd = a;
  *a_rms = lr > 0 ? (1.0 - a) * c->rms_lr / lr : 0.0;
}

int mnt_rmsw_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step, const int32_t *skip) {
  for (int i = 0; i < r->nparams;) { /* biases and BN parameters: no decay */
    size_t off, n;
    float wd;
    i = decay_run(r, c, i, 1, &off, &n, &wd);
    mnt_rmsw_hp k = {.mu1 = (float)c->momentum, .mu2 = (float)c->rms_mu2, .eps = (float)c->rms_eps, .wd = wd};
    MNT_CHECK(
        mnt_rmsw_step(r->be, r->w + off, r->g + off, r->m + off, r->m + r->nw + off, n, hp, &k, first_step, skip));
  }
  return MNT_OK;
}

void mnt_optim_scalars(const mnt_optim_cfg *c, double epoch, mnt_step_hp *out) {
  double lr = mnt_lr_at(c, epoch), as = 0, ar = 0;
  if (c->optimizer == MNT_OPTIM_RMSPROP_WARMUP) mnt_rmsw_alpha(c, epoch, lr, &as, &ar);
  *out = (mnt_step_hp){.lr = (float)lr, .a_sgd = (float)as, .a_rms = (float)ar};
}

int mnt_optim_update(mnt_resnet *r, const mnt_optim_cfg *c, const mnt_step_hp *hp, int first_step,
                     const int32_t *skip) {
  if (c->optimizer < 0 || c->optimizer >= MNT_NOPTIM) {
    MNT_ERR("internal: optimizer %d is not in the table", (int)c->optimizer);
    return MNT_EARG;
  }
  if (r->nstate < mnt_optims[c->optimizer].nstate) {
    MNT_ERR("internal: %s keeps %d state tensors, the model holds %d", mnt_optims[c->optimizer].name,
            mnt_optims[c->optimizer].nstate, r->nstate);
    return MNT_EARG;
  }
  return mnt_optims[c->optimizer].update(r, c, hp, first_step, skip);
}
