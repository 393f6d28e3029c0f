/* optim.c — see optim.h. */
#include "train/optim.h"

#include "check.h"
#include "log.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "backend/backend.h"

int mnt_sched_parse(const char *s, mnt_sched *out) {
  if (!strcasecmp(s, "step")) *out = MNT_SCHED_STEP;
  else if (!strcasecmp(s, "cosine")) *out = MNT_SCHED_COSINE;
  else return -1;
  return 0;
}

double mnt_lr_at(const mnt_sgd_cfg *c, double epoch) {
  double peak = c->base_lr * (double)c->global_batch / 256.0;
  double w = c->warmup_epochs;
  if (w > 0 && epoch < w) {
    double start = peak * (c->global_batch > 256 ? 256.0 / c->global_batch : 1.0);
    return start + (peak - start) * epoch / w;
  }
  double T = c->epochs > w ? c->epochs : w + 1;
  if (c->schedule == MNT_SCHED_COSINE) {
    double t = (epoch - w) / (T - w);
    if (t > 1) t = 1;
    return 0.5 * peak * (1.0 + cos(M_PI * t));
  }
  double f = epoch / T, lr = peak;
  if (f >= 1.0 / 3.0) lr *= 0.1;
  if (f >= 2.0 / 3.0) lr *= 0.1;
  if (f >= 8.0 / 9.0) lr *= 0.1;
  return lr;
}

int mnt_sgd_update(mnt_resnet *r, const mnt_sgd_cfg *c, double lr, int first_step) {
  /* one fused update per run of consecutive parameters with the same weight decay (the whole slab
   * when every parameter decays); the padding between views is zero in w, g and m and stays so */
  for (int i = 0; i < r->nparams;) {
    float wd = c->no_bn_bias_decay && r->params[i].no_decay ? 0.0f : (float)c->weight_decay;
    int j = i + 1;
    while (j < r->nparams && (c->no_bn_bias_decay && r->params[j].no_decay ? 0.0f : (float)c->weight_decay) == wd) j++;
    size_t off = r->params[i].off, end = r->params[j - 1].off + r->params[j - 1].n;
    MNT_CHECK(mnt_sgd_step(r->be, r->w + off, r->g + off, r->m + off, end - off, (float)lr, (float)c->momentum, wd,
                           first_step));
    i = j;
  }
  return MNT_OK;
}
