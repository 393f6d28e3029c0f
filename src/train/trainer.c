/* trainer.c — see trainer.h. One step, top to bottom: the next global batch's slice (io/loader;
 * on a backend that augments, from the upload lane that the last step filled, the next batch then
 * going up beside this one), forward, loss, backward on the compute backend; the gradient allreduce
 * runs in buckets of --bucket-mb (comm/reducer.c), each started as soon as backward has finished
 * its slab range, so that it overlaps the rest of backward and the step waits only for what is
 * still in flight ("exposed comm"); then the non-finite check and the update, which reads the
 * check's flag on the backend, and the step's one wait, for that flag. The loss and top-1 stay on
 * the backend and are read at log time. */
#include "src/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/ckpt/export.h"
#include "src/check.h"
#include "src/env.h"
#include "src/log.h"
#include "src/simd.h"
#include "src/sysmem.h"
#include "src/trace.h"

/* ---- state -------------------------------------------------------------------------------- */
json_t *mnt_train_state_json(const mnt_train_state *s) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:b, s:I, s:f, s:f}", "step", (json_int_t)s->step,
                   "epoch", (json_int_t)s->epoch, "cursor", (json_int_t)s->cursor, "skipped_steps",
                   (json_int_t)s->skipped, "global_batch", (json_int_t)s->global_batch, "bn_group",
                   (json_int_t)s->bn_group, "interval_loss_sum", s->iv_loss, "interval_top1_sum", s->iv_top1,
                   "interval_images", s->iv_n, "eval_due", s->eval_due, "target_step", (json_int_t)s->target_step,
                   "elapsed_s", s->elapsed_s, "best_val_top1", s->best_top1);
}

int mnt_train_state_parse(json_t *o, mnt_train_state *s, char *why, size_t n) {
  json_error_t e;
  /* target_step, elapsed_s, best_val_top1, eval_due: absent from checkpoints written before they were kept */
  json_int_t st, ep, cu, sk, gb, bg, ts = 0;
  int due = 0;
  double il, it, in, el = 0, bt = 0;
  if (!json_is_object(o) ||
      json_unpack_ex(o, &e, 0, "{s:I, s:I, s:I, s:I, s:I, s:I, s:F, s:F, s:F, s?b, s?I, s?F, s?F}", "step", &st, "epoch",
                     &ep, "cursor", &cu, "skipped_steps", &sk, "global_batch", &gb, "bn_group", &bg,
                     "interval_loss_sum", &il, "interval_top1_sum", &it, "interval_images", &in, "eval_due", &due,
                     "target_step", &ts, "elapsed_s", &el, "best_val_top1", &bt) != 0) {
    snprintf(why, n, "the training state is incomplete: %s", json_is_object(o) ? e.text : "not an object");
    return MNT_EDATA;
  }
  /* what a run can reach: 2^40 steps, global batches of 2^30 images; groups within the batch, a
   * position on the batch grid, no more skipped steps than steps */
  if (st < 0 || st > (json_int_t)1 << 40 || ep < 0 || ep > st || gb < 1 || gb > 1 << 30 || bg < 1 || bg > gb ||
      cu < 0 || cu % gb || sk < 0 || sk > st || !(in >= 0) || !isfinite(il) || !isfinite(it) || ts < 0 || ts > st ||
      !(el >= 0) || !isfinite(el) || !(bt >= 0 && bt <= 1)) {
    snprintf(why, n, "the training state is out of range (step %lld, epoch %lld, cursor %lld, skipped %lld, global "
             "batch %lld, bn group %lld)", (long long)st, (long long)ep, (long long)cu, (long long)sk, (long long)gb,
             (long long)bg);
    return MNT_EDATA;
  }
  *s = (mnt_train_state){.step = st, .epoch = ep, .cursor = cu, .skipped = sk, .global_batch = gb, .bn_group = bg,
                         .iv_loss = il, .iv_top1 = it, .iv_n = in, .eval_due = due, .target_step = ts,
                         .elapsed_s = el, .best_top1 = bt};
  return MNT_OK;
}

/* ---- create / destroy --------------------------------------------------------------------- */

/* what the run will hold in memory per rank on the CPU, from the model plan at the backend's
 * precision p and the loader's buffers */
static int check_memory(const mnt_train_cfg *o, mnt_precision p, const mnt_dataset *train, int have_val, int bn,
                        int local_size) {
  size_t model;
  MNT_CHECK(mnt_resnet_plan_bytes(o->arch, train->nclasses, o->size, o->batch, bn, p == MNT_PREC_BF16 ? 2 : 4, &model));
  double img = 3.0 * o->size * o->size * sizeof(float) * o->batch; /* one batch of network input */
  double need = (double)model + img * (2.0 * o->loader_threads + 1 + have_val) + 2.0 * 8 * (double)train->total;
  char what[200];
  snprintf(what, sizeof what, "--arch %s at --size %d with --batch-per-rank %d", o->arch, o->size, o->batch);
  return mnt_mem_check(need > 1e19 ? SIZE_MAX : (size_t)need, what, local_size);
}
/* the loader's raw buffers from the backend (page-locked on cuda) */
/* MNT_CUDNN_ALGO=timed: each rank timed the convolutions' algorithms on its own GPU, and timings
 * differ; every rank runs rank 0's choice (one PMIx broadcast of 3 ints per convolution), so that
 * the ranks' gradients come from the same arithmetic. The other choices need no exchange. */
static int same_algorithms(mnt_world *w, mnt_resnet *m) {
  const char *policy = mnt_env_cudnn_algo();
  if (w->size < 2 || !policy || strcasecmp(policy, "timed")) return MNT_OK;
  int n = 0;
  MNT_CHECK(mnt_resnet_conv_algos(m, NULL, &n, 0));
  int *a = malloc(((size_t)n * 3 + 1) * sizeof *a);
  if (!a) return MNT_ENOMEM;
  int st = MNT_OK;
  MNT_CHECK_GOTO(mnt_resnet_conv_algos(m, a, &n, 0), st, out);
  MNT_CHECK_GOTO(mnt_world_bcast(w, a, (size_t)n * 3 * sizeof *a, 0), st, out);
  if (w->rank != 0) MNT_CHECK_GOTO(mnt_resnet_conv_algos(m, a, &n, 1), st, out);
out:
  free(a);
  return st;
}

/* the model's gradient hook: this rank's own non-finite values into the allreduce (below) */
static void grad_hook(void *ctx, size_t off, size_t n);

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* --trace: this rank's clock against rank 0's (trace.h), from 9 rounds of a barrier and then every
 * rank's reading of its clock (an allgather): a round's offset is rank 0's reading minus this
 * rank's, the median is kept and half the spread of the middle five is its uncertainty. Ranks leave
 * a barrier within microseconds to a few hundred of them of each other: that is the error left. */
static int trace_clock(mnt_world *w, mnt_comm *c) {
  enum { ROUNDS = 9 };
  int64_t off[ROUNDS];
  uint64_t *all = malloc((size_t)w->size * sizeof *all);
  if (!all) return MNT_ENOMEM;
  int st = MNT_OK;
  for (int k = 0; k < ROUNDS; k++) {
    MNT_CHECK_GOTO(mnt_barrier(c), st, out);
    uint64_t mine = mnt_trace_now();
    MNT_CHECK_GOTO(mnt_allgather(c, &mine, all, sizeof mine), st, out);
    off[k] = (int64_t)all[0] - (int64_t)mine;
  }
out:
  free(all);
  MNT_CHECK(st);
  qsort(off, ROUNDS, sizeof *off, cmp_i64);
  mnt_trace_set_offset(off[ROUNDS / 2], (off[ROUNDS / 2 + 2] - off[ROUNDS / 2 - 2]) / 2);
  return MNT_OK;
}

static int loader_host_alloc(void *ctx, size_t bytes, void **p) { return mnt_be_host_alloc(ctx, bytes, p); }
static void loader_host_free(void *ctx, void *p) { mnt_be_host_free(ctx, p); }

/* the training loader's configuration for this world (uneven: a share of the global batch that need
 * not divide, after a loss); a backend that augments (t->raw) gets raw batches in its memory */
static void loader_cfg(const mnt_trainer *t, int global_batch, int uneven, mnt_loader_cfg *lc) {
  const mnt_train_cfg *o = &t->cfg;
  *lc = (mnt_loader_cfg){.out_size = o->size, .train = 1, .global_batch = global_batch, .rank = t->w->rank,
                         .nranks = t->w->size, .uneven = uneven, .seed = o->seed, .threads = o->loader_threads,
                         .out_channels = 3, .min_scale = o->min_scale, .pad_crop = o->pad_crop};
  if (t->raw) {
    lc->raw = 1;
    lc->host_alloc = loader_host_alloc;
    lc->host_free = loader_host_free;
    lc->alloc_ctx = t->be;
  }
}

/* the two upload lanes (t->raw), for nb images each; lanes_free releases them (copies done first) */
static void lanes_free(mnt_trainer *t) {
  for (int i = 0; i < 2; i++) {
    struct mnt_up_lane *L = &t->lane[i];
    /* a copy under way reads the loader's page-locked buffer: done before the loader closes */
    if (L->full && mnt_be_has_upload(t->be)) (void)mnt_upload_host_done(t->be, i);
    mnt_be_free(t->be, L->raw_dev);
    mnt_be_free(t->be, L->box_dev);
    mnt_be_free(t->be, L->lab_dev);
    mnt_be_host_free(t->be, L->box_host);
    mnt_be_host_free(t->be, L->lab_host);
    free(L->ids);
    memset(L, 0, sizeof *L);
  }
}

/* (a failure leaves what was allocated to lanes_free) */
static int lanes_alloc(mnt_trainer *t, size_t nb) {
  int side, ch; /* format 1/2: the stored squares; format 3: the CPU's crops at the output size */
  mnt_loader_raw_shape(&t->train, t->cfg.size, &side, &ch);
  size_t px = (size_t)side * side * ch;
  for (int i = 0; i < 2; i++) {
    struct mnt_up_lane *L = &t->lane[i];
    MNT_CHECK(mnt_be_alloc(t->be, nb * px, (void **)&L->raw_dev));
    MNT_CHECK(mnt_be_alloc(t->be, nb * MNT_BOX_FLOATS * sizeof(float), (void **)&L->box_dev));
    MNT_CHECK(mnt_be_alloc(t->be, nb * sizeof(int32_t), (void **)&L->lab_dev));
    MNT_CHECK(mnt_be_host_alloc(t->be, nb * MNT_BOX_FLOATS * sizeof(float), (void **)&L->box_host));
    MNT_CHECK(mnt_be_host_alloc(t->be, nb * sizeof(int32_t), (void **)&L->lab_host));
    if (!(L->ids = malloc(nb * sizeof *L->ids))) return MNT_ENOMEM;
  }
  return MNT_OK;
}

/* a model at `batch` images per rank in BN groups of bn, with its optimizer state and the trainer's
 * settings and hooks: create's, and regroup's at the survivors' batch (it copies the state in) */
static int make_model(mnt_trainer *t, int batch, int bn, mnt_resnet **out) {
  const mnt_train_cfg *o = &t->cfg;
  mnt_resnet *m;
  int st;
  MNT_CHECK(
      mnt_resnet_create_ex(t->be, o->arch, t->train.nclasses, o->size, batch, bn, (uint64_t)o->seed, o->zero_init, &m));
  MNT_CHECK_GOTO(mnt_resnet_optim_state(m, mnt_optims[o->optimizer].nstate), st, fail);
  m->label_smoothing = (float)o->smoothing;
  if (o->bn_eval == MNT_BN_EVAL_LAST) m->bn_momentum = 1.0f; /* the last batch's */
  m->grad_ready = grad_hook;                                 /* this rank's own non-finite values, then the reducer */
  m->grad_ctx = t;
  *out = m;
  return MNT_OK;
fail:
  mnt_resnet_destroy(m);
  return st;
}

/* what feeds and reduces a step at `batch` images per rank: the upload lanes (a backend that
 * augments), the loader at the state's position (uneven: a share of the global batch that need not
 * divide, after a loss) and the gradient reducer; create's, and regroup's after a shrink */
static int make_feed(mnt_trainer *t, int batch, int uneven) {
  const mnt_train_cfg *o = &t->cfg;
  mnt_loader_cfg lc;
  if (t->raw) MNT_CHECK(lanes_alloc(t, (size_t)batch));
  loader_cfg(t, (int)t->s.global_batch, uneven, &lc);
  MNT_CHECK(mnt_loader_open(&t->ld, &t->train, &lc, t->s.epoch, t->s.cursor));
  return mnt_reducer_create(t->c, t->be, t->m->g, t->m->nw, o->grad_dtype, (size_t)(o->bucket_mb * 1e6 / 4), &t->red);
}

/* --device and --comm, auto resolved: the one place (t->cfg holds what they became). A device given
 * or auto (mnt_device_auto: a GPU where there is one), except that --comm cpu or nccl decides an
 * auto device; the communicator follows the device. A device and a communicator that cannot work
 * together are refused. */
static int choose_device(mnt_trainer *t) {
  mnt_train_cfg *o = &t->cfg;
  const char *why = "";
  if (o->device == MNT_DEVICE_AUTO) {
    o->device = o->comm == MNT_COMM_NCCL  ? MNT_DEVICE_CUDA
                : o->comm == MNT_COMM_CPU ? MNT_DEVICE_CPU
                                          : mnt_device_auto(&why, 0); /* the set-up line says why */
    snprintf(t->device_why, sizeof t->device_why, "%s",
             o->comm == MNT_COMM_AUTO   ? why
             : o->comm == MNT_COMM_NCCL ? "--comm nccl works on GPU buffers"
                                        : "--comm cpu works on host buffers");
  }
  if (o->comm == MNT_COMM_AUTO) o->comm = o->device == MNT_DEVICE_CUDA ? MNT_COMM_NCCL : MNT_COMM_CPU;
  if ((o->device == MNT_DEVICE_CUDA) != (o->comm == MNT_COMM_NCCL)) {
    MNT_ERR("--device %s with --comm %s: GPU buffers need the nccl communicator and host buffers the cpu one",
            mnt_device_names[o->device], mnt_comm_names[o->comm]);
    return MNT_EARG;
  }
  return MNT_OK;
}

/* this rank, before anything collective: the data sets, the device and communicator */
static int prepare(mnt_trainer *t) {
  const mnt_train_cfg *o = &t->cfg;
  MNT_CHECK(mnt_dataset_open(o->data, &t->train));
  t->have_train = 1;
  if (o->val) {
    MNT_CHECK(mnt_dataset_open(o->val, &t->val));
    t->have_val = 1;
  }
  if (t->have_val && t->val.nclasses != t->train.nclasses) {
    MNT_ERR("--val %s has %d classes, --data %s has %d", o->val, t->val.nclasses, o->data, t->train.nclasses);
    return MNT_EARG;
  }
  return choose_device(t);
}

/* once per node: the layers that run a reference implementation (nodes of a job may differ in their CPUs) */
static void warn_slow_layers(const mnt_trainer *t) {
  static char slow[4096];
  int n = mnt_resnet_slow_layers(t->m, slow, sizeof slow);
  if (n)
    MNT_WARN("%d layers of %s run a reference implementation (100x slower than the tuned ones) on %s: %s", n,
             t->cfg.arch, t->cfg.device == MNT_DEVICE_CPU ? mnt_cpu_isa_name() : t->be->name, slow);
}

/* this rank's parts of the trainer: the communicator first (on nccl it binds this process to its
 * GPU, where the backend then runs), the backend (its precision: --precision auto resolved), on the
 * CPU whether the run fits in memory, the model, the feed and the step's small buffers */
static int build(mnt_trainer *t) {
  const mnt_train_cfg *o = &t->cfg;
  mnt_backend_opts bo = {.precision = o->precision, .device = -1};
  MNT_CHECK(mnt_comm_create(t->w, mnt_comm_names[o->comm], o->topology, &t->c));
  MNT_CHECK(mnt_backend_create(mnt_device_names[o->device], &bo, &t->be));
  if (o->device == MNT_DEVICE_CPU)
    MNT_CHECK(check_memory(o, t->be->precision, &t->train, t->have_val, (int)t->s.bn_group, t->w->local_size));
  MNT_CHECK(make_model(t, o->batch, (int)t->s.bn_group, &t->m));
  if (t->w->local_rank == 0) warn_slow_layers(t);
  /* a backend that augments (the GPU) gets the stored pixels in page-locked buffers and each
   * sample's box: the CPU only reads and decodes */
  if (t->be->ops->augment_u8) {
    const char *ov = mnt_env_copy_overlap(); /* on|off, any case (env.c checked it) */
    t->raw = 1;
    t->overlap = mnt_be_has_upload(t->be) && (!ov || strcasecmp(ov, "off"));
  }
  MNT_CHECK(make_feed(t, o->batch, 0));
  MNT_CHECK(mnt_be_alloc(t->be, 4 * sizeof(float), (void **)&t->iv_dev));
  MNT_CHECK(mnt_be_alloc(t->be, sizeof *t->hp_dev, (void **)&t->hp_dev));
  MNT_CHECK(mnt_be_alloc(t->be, (t->m->nbn + 1) * sizeof(float), (void **)&t->bn_prev));
  MNT_CHECK(mnt_be_alloc(t->be, 2 * sizeof(int32_t), (void **)&t->own_flag));
  MNT_CHECK(mnt_be_alloc(t->be, 3 * sizeof(int32_t), (void **)&t->state_flag));
  if (!t->be->host_visible &&
      (!(t->hw = malloc(t->m->nw * sizeof(float))) || !(t->hm = malloc(t->m->nw * t->m->nstate * sizeof(float))) ||
       !(t->hbn = malloc((t->m->nbn + 1) * sizeof(float)))))
    return MNT_ENOMEM;
  if (o->cuda_graph && mnt_be_can_replay(t->be) && !t->c->ops->join) {
    MNT_ERR("--cuda-graph on: the %s communicator cannot join a captured step (--comm nccl can)", t->c->ops->name);
    return MNT_EARG;
  }
  return MNT_OK;
}

/* the run's length and its optimizer's schedule, from the loader's epoch */
static void schedule(mnt_trainer *t) {
  const mnt_train_cfg *o = &t->cfg;
  t->per_epoch = mnt_loader_batches_per_epoch(t->ld);
  t->total = o->steps ? o->steps : t->per_epoch * o->epochs;
  t->opt = (mnt_optim_cfg){.base_lr = o->lr,
                           .global_batch = (int)t->s.global_batch,
                           .warmup_epochs = o->warmup_epochs,
                           .epochs = (double)t->total / t->per_epoch,
                           .schedule = o->schedule,
                           .momentum = o->momentum,
                           .weight_decay = o->wd,
                           .no_bn_bias_decay = o->no_bn_decay,
                           .optimizer = o->optimizer,
                           .lars_eta = o->lars_eta,
                           .rms_lr = o->rms_lr,
                           .rms_mu2 = 0.99,
                           .rms_eps = 1e-8};
  double E = t->opt.epochs; /* RMSprop warm-up's C:P: the paper's 10 and 5 of 90 epochs unless given */
  t->opt.rms_center = o->rms_center >= 0 ? o->rms_center : E * 10.0 / 90.0;
  t->opt.rms_period = o->rms_period > 0 ? o->rms_period : E * 5.0 / 90.0;
}

int mnt_trainer_create(mnt_world *w, const mnt_train_cfg *cfg, const mnt_train_state *state, mnt_trainer **out) {
  *out = NULL;
  mnt_trainer *t = calloc(1, sizeof *t);
  if (!t) return MNT_ENOMEM;
  t->cfg = *cfg;
  t->w = w;
  if (state) t->s = *state;
  if (state && w->rank != 0) t->s.iv_loss = t->s.iv_top1 = t->s.iv_n = 0; /* the saved sums are global: rank 0's */
  t->s.global_batch = (int64_t)cfg->batch * w->size;
  t->s.bn_group = cfg->bn_batch ? cfg->bn_batch : cfg->batch;
  t->grad_weight = 1.0f;
  int st;
  /* each part agreed by every rank before the next collective one: a failure on one is every rank's */
  MNT_CHECK_GOTO(mnt_world_agree(w, prepare(t)), st, fail);
  MNT_CHECK_GOTO(mnt_world_agree(w, build(t)), st, fail);
  MNT_CHECK_GOTO(same_algorithms(w, t->m), st, fail);
  if (mnt_trace_on()) MNT_CHECK_GOTO(trace_clock(w, t->c), st, fail);
  schedule(t);
  *out = t;
  return MNT_OK;
fail:
  mnt_trainer_destroy(t);
  return st;
}

static void graphs_free(mnt_trainer *t);

void mnt_trainer_destroy(mnt_trainer *t) {
  if (!t) return;
  if (t->be) graphs_free(t);
  mnt_reducer_destroy(t->red);
  if (t->be) {
    mnt_be_free(t->be, t->iv_dev);
    mnt_be_free(t->be, t->hp_dev);
    mnt_be_free(t->be, t->bn_prev);
    mnt_be_free(t->be, t->own_flag);
    mnt_be_free(t->be, t->state_flag);
    lanes_free(t);
  }
  free(t->hw);
  free(t->hm);
  free(t->hbn);
  mnt_loader_close(t->ld); /* before the backend: its buffers may be the backend's */
  mnt_resnet_destroy(t->m);
  mnt_backend_destroy(t->be);
  mnt_comm_destroy(t->c);
  if (t->have_val) mnt_dataset_close(&t->val);
  if (t->have_train) mnt_dataset_close(&t->train);
  free(t);
}

int mnt_trainer_sync(mnt_trainer *t) {
  mnt_resnet *m = t->m;
  MNT_CHECK(mnt_be_sync(t->be));
  MNT_CHECK(mnt_broadcast(t->c, m->w, m->nw * sizeof(float), 0));
  MNT_CHECK(mnt_broadcast(t->c, m->m, m->nw * m->nstate * sizeof(float), 0));
  return mnt_broadcast(t->c, m->bn, m->nbn * sizeof(float), 0);
}

/* the model at n images per rank (regroup), the state copied into it from the old one */
static int rebatch(mnt_trainer *t, int n, int bn) {
  mnt_resnet *m = t->m, *m2;
  int st;
  MNT_CHECK(make_model(t, n, bn, &m2));
  MNT_CHECK_GOTO(mnt_be_copy(t->be, m2->w, m->w, m->nw * sizeof(float), MNT_COPY_D2D), st, fail);
  MNT_CHECK_GOTO(mnt_be_copy(t->be, m2->m, m->m, m->nw * m->nstate * sizeof(float), MNT_COPY_D2D), st, fail);
  if (m->nbn) MNT_CHECK_GOTO(mnt_be_copy(t->be, m2->bn, m->bn, m->nbn * sizeof(float), MNT_COPY_D2D), st, fail);
  mnt_resnet_destroy(m);
  t->m = m2;
  t->cfg.batch = n;
  return MNT_OK;
fail:
  mnt_resnet_destroy(m2);
  return st;
}

int mnt_trainer_regroup(mnt_trainer *t, char *why, size_t why_n) {
  mnt_world *w = t->w;
  graphs_free(t); /* the communicators, the reducer and the lanes they hold are made anew */
  mnt_train_cfg *o = &t->cfg;
  why[0] = '\0';
  mnt_reducer_destroy(t->red); /* its buckets failed with the collective in flight */
  t->red = NULL;
  /* the most advanced survivor's state: a rank whose last step's allreduce completed before the
   * loss has applied that step, a rank whose did not has not (its gradients are dropped) */
  int64_t *steps = malloc((size_t)w->size * sizeof *steps);
  if (!steps) return MNT_ENOMEM;
  int st = mnt_allgather(t->c, &t->s.step, steps, sizeof *steps);
  int src = 0;
  for (int r = 1; r < w->size && st == MNT_OK; r++)
    if (steps[r] > steps[src]) src = r;
  free(steps);
  MNT_CHECK(st);
  mnt_train_state mine = t->s;
  MNT_CHECK(mnt_broadcast(t->c, &t->s, sizeof t->s, src));
  t->s.iv_loss = mine.iv_loss, t->s.iv_top1 = mine.iv_top1, t->s.iv_n = mine.iv_n; /* each rank's own sums */
  MNT_CHECK(mnt_be_sync(t->be));
  MNT_CHECK(mnt_broadcast(t->c, t->m->w, t->m->nw * sizeof(float), src));
  MNT_CHECK(mnt_broadcast(t->c, t->m->m, t->m->nw * t->m->nstate * sizeof(float), src));
  if (t->m->nbn) MNT_CHECK(mnt_broadcast(t->c, t->m->bn, t->m->nbn * sizeof(float), src));
  /* the same global batch over the survivors: this rank's share of it */
  int64_t first;
  int n;
  mnt_loader_split((int)t->s.global_batch, w->size, w->rank, &first, &n);
  int bn = o->bn_batch ? o->bn_batch : n;
  st = MNT_OK;
  if (n % bn) {
    snprintf(why, why_n, "the %d images per rank the survivors need do not divide into --bn-batch %d", n, bn);
    st = MNT_ENOMEM;
  }
  if (st == MNT_OK && n != t->m->batch && t->cfg.device == MNT_DEVICE_CPU) { /* the host's memory (cuda: its own) */
    mnt_train_cfg grown = *o;
    grown.batch = n;
    st = check_memory(&grown, t->be->precision, &t->train, t->have_val, bn, w->local_size);
    if (st != MNT_OK) snprintf(why, why_n, "%d images per rank do not fit in this node's memory", n);
  }
  if ((st = mnt_world_agree(w, st)) != MNT_OK) {
    if (!why[0]) snprintf(why, why_n, "another rank cannot take its larger share of the global batch");
    return st;
  }
  if (n != t->m->batch) MNT_CHECK(rebatch(t, n, bn));
  /* this rank's gradient is the mean over its n images: weighted n R / B, the allreduce's mean over
   * R ranks is the mean over the global batch */
  t->grad_weight = (float)((double)n * w->size / (double)t->s.global_batch);
  if (t->raw) { /* the lanes hold the old split's next batch: dropped, and made for the new batch */
    lanes_free(t);
    t->cur_lane = 0;
  }
  mnt_loader_close(t->ld);
  t->ld = NULL;
  return make_feed(t, n, 1);
}

int mnt_trainer_host_model(mnt_trainer *t, float **w, float **m, float **bn) {
  mnt_resnet *r = t->m;
  if (t->be->host_visible) {
    *w = r->w, *m = r->m, *bn = r->bn;
    return mnt_be_sync(t->be);
  }
  MNT_CHECK(mnt_be_copy(t->be, t->hw, r->w, r->nw * sizeof(float), MNT_COPY_D2H));
  MNT_CHECK(mnt_be_copy(t->be, t->hm, r->m, r->nw * r->nstate * sizeof(float), MNT_COPY_D2H));
  MNT_CHECK(mnt_be_copy(t->be, t->hbn, r->bn, r->nbn * sizeof(float), MNT_COPY_D2H));
  *w = t->hw, *m = t->hm, *bn = t->hbn;
  return MNT_OK;
}

int mnt_trainer_upload(mnt_trainer *t) {
  mnt_resnet *r = t->m;
  if (t->be->host_visible) return MNT_OK;
  MNT_CHECK(mnt_be_copy(t->be, r->w, t->hw, r->nw * sizeof(float), MNT_COPY_H2D));
  MNT_CHECK(mnt_be_copy(t->be, r->m, t->hm, r->nw * r->nstate * sizeof(float), MNT_COPY_H2D));
  MNT_CHECK(mnt_be_copy(t->be, r->bn, t->hbn, r->nbn * sizeof(float), MNT_COPY_H2D));
  return mnt_be_sync(t->be);
}

/* this rank's interval sums from the backend into the state (and the backend's zeroed) */
static int pull_interval(mnt_trainer *t) {
  float v[3];
  MNT_CHECK(mnt_be_copy(t->be, v, t->iv_dev, sizeof v, MNT_COPY_D2H));
  MNT_CHECK(mnt_be_memset0(t->be, t->iv_dev, sizeof v));
  t->s.iv_loss += v[0];
  t->s.iv_top1 += v[1];
  return MNT_OK;
}

/* ---- the step ----------------------------------------------------------------------------- */
double mnt_trainer_lr(const mnt_trainer *t) { return mnt_lr_at(&t->opt, (double)t->s.step / t->per_epoch); }

/* ---- non-finite values (trainer.h) ----------------------------------------------------------- */

/* the first tensor of a list that holds a non-finite value (mnt_resnet_first_nonfinite), named PREFIX
 * NAME ("model/" for "model/layer1.0.conv1.weight"; n bytes); 0 when none does */
static int first_nonfinite(const mnt_param *ps, int np, const float *base, const char *prefix, char *out, size_t n) {
  const mnt_param *p = mnt_resnet_first_nonfinite(ps, np, base);
  if (p) snprintf(out, n, "%s%s", prefix, p->name);
  return p != NULL;
}

/* what holds a non-finite value on this rank, named as a checkpoint names it, in the order a
 * cause comes before its effects: this rank's loss, its BN statistics, the weights, the momentum, the
 * averaged gradients (g: 1 to look at them). "" when nothing does (or it cannot be read) */
static void name_nonfinite(mnt_trainer *t, int g, char *out, size_t n) {
  mnt_resnet *m = t->m;
  out[0] = '\0';
  float *hw, *hm, *hbn, l3[3] = {0, 0, 0};
  if (mnt_trainer_host_model(t, &hw, &hm, &hbn) != MNT_OK) return;
  if (g && mnt_be_copy(t->be, l3, m->out3, sizeof l3, MNT_COPY_D2H) == MNT_OK && !isfinite(l3[0])) {
    snprintf(out, n, "the loss of this rank's batch (%g)", (double)l3[0]);
    return;
  }
  if (first_nonfinite(m->stats, m->nstats, hbn, "bn/", out, n) || first_nonfinite(m->params, m->nparams, hw, "model/", out, n))
    return;
  for (int k = 0; k < m->nstate; k++) { /* the optimizer's state, as the checkpoint names it */
    char prefix[64];
    snprintf(prefix, sizeof prefix, "optim/%s/", mnt_optims[t->opt.optimizer].state[k]);
    if (first_nonfinite(m->params, m->nparams, hm + (size_t)k * m->nw, prefix, out, n)) return;
  }
  if (!g) return;
  float *hg = t->be->host_visible ? m->g : malloc(m->nw * sizeof *hg);
  if (hg && (t->be->host_visible || mnt_be_copy(t->be, hg, m->g, m->nw * sizeof *hg, MNT_COPY_D2H) == MNT_OK))
    first_nonfinite(m->params, m->nparams, hg, "the averaged gradient of ", out, n);
  if (hg != m->g) free(hg);
}

/* the gradient hook (the model's grad_ready): the first range backward reports (the last layer's)
 * takes this rank's own non-finite flags (a NaN when set) into the allreduce, then the reducer */
static void grad_hook(void *ctx, size_t off, size_t n) {
  mnt_trainer *t = ctx;
  if (t->poison_due) {
    t->poison_due = 0;
    int st = mnt_f32_poison(t->be, t->m->g + off, 1, t->own_flag, 2);
    if (st != MNT_OK && t->hook_st == MNT_OK) t->hook_st = st;
  }
  if (t->grad_weight != 1.0f) { /* an uneven share of the global batch (mnt_trainer_regroup) */
    int st = mnt_f32_scale(t->be, t->m->g + off, t->grad_weight, n);
    if (st != MNT_OK && t->hook_st == MNT_OK) t->hook_st = st;
  }
  mnt_reducer_ready(t->red, off, n);
}

/* this rank's weights, momentum and BN statistics: *bad = 1 when one holds a NaN or an infinity */
static int state_nonfinite(mnt_trainer *t, int *bad) {
  mnt_resnet *m = t->m;
  int32_t f[3] = {0, 0, 0};
  MNT_CHECK(mnt_nonfinite(t->be, m->w, m->nw, t->state_flag));
  MNT_CHECK(mnt_nonfinite(t->be, m->m, m->nw * m->nstate, t->state_flag + 1));
  if (m->nbn) MNT_CHECK(mnt_nonfinite(t->be, m->bn, m->nbn, t->state_flag + 2));
  MNT_CHECK(mnt_be_copy(t->be, f, t->state_flag, sizeof f, MNT_COPY_D2H));
  *bad = f[0] || f[1] || (m->nbn && f[2]);
  return MNT_OK;
}

/* every rank, the ranks having found a non-finite state (an allreduce said so): this rank's finding
 * said, and the failure agreed (the job ends together, exit 1) */
static int state_failed(mnt_trainer *t, const char *when) {
  char what[300];
  name_nonfinite(t, 0, what, sizeof what);
  if (what[0] || t->w->rank == 0)
    MNT_ERR("after step %lld (epoch %.3f), %s: NaN or Inf in %s: the run has diverged and stops here (no checkpoint "
            "or export of it is written; the last checkpoint is kept: resume from an earlier one with a lower --lr, "
            "or a warm-up)", (long long)t->s.step, (double)t->s.step / t->per_epoch, when,
            what[0] ? what : "another rank's state (its message names it)");
  return mnt_world_agree(t->w, MNT_EDATA);
}

int mnt_trainer_check_state(mnt_trainer *t, const char *when) {
  int bad = 0;
  MNT_CHECK(state_nonfinite(t, &bad));
  float f = (float)bad;
  MNT_CHECK(mnt_allreduce(t->c, &f, 1, MNT_FP32, MNT_SUM));
  return f > 0 ? state_failed(t, when) : MNT_OK;
}

/* the step's phases on the timeline (trace.h): "step" holds data, forward, backward, comm, optimizer */
static int step_phases(mnt_trainer *t, mnt_step_out *out);

int mnt_trainer_step(mnt_trainer *t, mnt_step_out *out) {
  mnt_trace_step(t->s.step + 1);
  mnt_trace_push("step", t->s.step + 1);
  int st = step_phases(t, out);
  mnt_trace_pop();
  return st;
}

/* The loader's next batch into lane i, on its way up: boxes, labels and ids copied out of the
 * loader's (pageable) buffers into the lane's, the pixels sent from the loader's page-locked buffer,
 * which the copy reads until mnt_upload_host_done (the loader's batch is valid until its next call) */
static int lane_fill(mnt_trainer *t, int i) {
  mnt_backend *be = t->be;
  struct mnt_up_lane *L = &t->lane[i];
  const mnt_batch *b;
  if (mnt_be_has_upload(be)) {
    MNT_CHECK(mnt_upload_host_done(be, i));     /* this lane's host buffers are free again */
    MNT_CHECK(mnt_upload_host_done(be, i ^ 1)); /* the loader's current batch has been read */
  }
  MNT_CHECK(mnt_loader_next(t->ld, &b));
  size_t n = (size_t)b->n;
  memcpy(L->box_host, b->boxes, n * MNT_BOX_FLOATS * sizeof(float));
  memcpy(L->lab_host, b->labels, n * sizeof(int32_t));
  memcpy(L->ids, b->ids, n * sizeof *L->ids);
  L->b = *b;
  L->b.labels = L->lab_host, L->b.ids = L->ids, L->b.boxes = L->box_host;
  L->b.raw = NULL, L->b.images = NULL; /* the loader's, not to be read after its next call */
  mnt_loader_position(t->ld, &L->epoch, &L->cursor);
  L->full = 1;
  void *dst[3] = {L->raw_dev, L->box_dev, L->lab_dev};
  const void *src[3] = {b->raw, L->box_host, L->lab_host};
  size_t bytes[3] = {n * b->size * b->size * b->channels, n * MNT_BOX_FLOATS * sizeof(float), n * sizeof(int32_t)};
  if (mnt_be_has_upload(be)) return mnt_upload_start(be, i, dst, src, bytes, 3);
  for (int k = 0; k < 3; k++) MNT_CHECK(mnt_be_copy(be, dst[k], src[k], bytes[k], MNT_COPY_H2D));
  return MNT_OK;
}

/* the next batch into the model's input. A backend that augments (cuda) takes it from the step's
 * lane (uploaded during the last step, or now for the first), and the batch after it goes up into
 * the other lane while this step trains */
static int data_phase(mnt_trainer *t, const mnt_batch **out) {
  mnt_backend *be = t->be;
  if (!t->raw) {
    const mnt_batch *b;
    MNT_CHECK(mnt_loader_next(t->ld, &b));
    t->last = b;
    *out = b;
    return MNT_OK;
  }
  int i = t->cur_lane;
  struct mnt_up_lane *L = &t->lane[i];
  if (!L->full) MNT_CHECK(lane_fill(t, i)); /* the first step, or MNT_COPY_OVERLAP=off */
  if (mnt_be_has_upload(be)) MNT_CHECK(mnt_upload_use(be, i));
  const mnt_dataset *d = &t->train;
  MNT_CHECK(be->ops->augment_u8(be, L->raw_dev, L->b.n, L->b.size, L->b.channels, L->box_dev, t->cfg.pad_crop > 0,
                                t->cfg.size, 3, d->mean, d->std, mnt_resnet_input(t->m)));
  t->last = &L->b;
  *out = &L->b;
  if (t->overlap) MNT_CHECK(lane_fill(t, i ^ 1));
  return MNT_OK;
}

/* the step's work from the BN statistics' copy to the update, as one graph can hold it (graph: its
 * waits on the backend's stream, not the host; no host time taken). tt: when the forward, backward
 * and exposed communication ended (eager only) */
/* step_body's forward pass and loss, and this rank's own non-finite checks */
static int forward_part(mnt_trainer *t, const mnt_batch *b, int graph) {
  mnt_resnet *m = t->m;
  mnt_backend *be = t->be;
  /* the BN statistics before the forward moves them: a step not applied leaves them as they were */
  if (m->nbn) MNT_CHECK(mnt_be_copy(be, t->bn_prev, m->bn, m->nbn * sizeof(float), MNT_COPY_D2D));
  MNT_CHECK(mnt_resnet_forward(m, NULL, 1)); /* the input is in place (step_inputs) */
  MNT_CHECK(mnt_resnet_loss_dev(m, t->raw ? t->lane[t->cur_lane].lab_dev : m->labels, b->n, 1));
  /* the lane's buffers are free after the loss (a graph: after the step, step_graph) */
  if (t->raw && !graph && mnt_be_has_upload(be)) MNT_CHECK(mnt_upload_release(be, t->cur_lane));
  /* this rank's own: its BN statistics and its loss, checked where they are; the gradient hook takes
   * the flags into the allreduce, so that every rank finds the averaged gradients non-finite */
  if (m->nbn) MNT_CHECK(mnt_nonfinite(be, m->bn, m->nbn, t->own_flag));
  return mnt_nonfinite(be, m->out3, 1, t->own_flag + 1);
}

/* step_body's update: the non-finite check of the averaged gradients, the optimizer and the
 * interval's sums, each reading the flag where it runs */
static int update_part(mnt_trainer *t) {
  mnt_resnet *m = t->m;
  mnt_backend *be = t->be;
  MNT_CHECK(mnt_nonfinite(be, m->g, m->nw, m->flag));
  MNT_CHECK(mnt_optim_update(m, &t->opt, t->hp_dev, t->s.step == 0, m->flag));
  /* a skipped step's non-finite loss would poison the interval (and a checkpoint) */
  return mnt_f32_acc_unless(be, t->iv_dev, m->out3, 2, m->flag);
}

/* step_body's backward pass: every parameter's range is reported to the gradient hook (the first is
 * poisoned, the buckets start); the hook's own failure, which it cannot return, after it */
static int backward_part(mnt_trainer *t) {
  t->poison_due = 1;
  t->hook_st = MNT_OK;
  MNT_CHECK(mnt_resnet_backward(t->m));
  return t->hook_st;
}

static int step_body(mnt_trainer *t, const mnt_batch *b, int graph, double tt[3]) {
  mnt_trace_push("forward", 0);
  int st = forward_part(t, b, graph);
  mnt_trace_pop();
  MNT_CHECK(st);
  if (!graph) tt[0] = mnt_now();
  mnt_trace_push("backward", 0);
  st = backward_part(t);
  mnt_trace_pop();
  if (st != MNT_OK) { /* buckets already started must finish (or time out) before anything is freed */
    (void)(graph ? mnt_reducer_join(t->red) : mnt_reducer_finish(t->red));
    return st;
  }
  if (!graph) tt[1] = mnt_now();
  mnt_trace_push("comm", 0); /* what is still in flight after backward: exposed */
  st = graph ? mnt_reducer_join(t->red) : mnt_reducer_finish(t->red);
  mnt_trace_pop();
  MNT_CHECK(st);
  if (!graph) {
    tt[2] = mnt_now();
    if (t->w->size > 1) t->comm_span += tt[2] - mnt_reducer_first_start(t->red);
  }
  /* the gradients are identical on every rank now: every rank decides the same. The update and the
   * interval's sums read the non-finite flag where they run (on a GPU: no round trip to the host
   * between the allreduce and the update) */
  mnt_trace_push("optimizer", 0);
  st = update_part(t);
  mnt_trace_pop();
  return st;
}

/* what the step reads from the host, in the backend's memory before its work: the step's scalars
 * (the learning rate, the blend) and, where the host augments (cpu), the batch's images and labels */
static int step_inputs(mnt_trainer *t, const mnt_batch *b) {
  mnt_resnet *m = t->m;
  mnt_step_hp hp; /* pageable: the copy has read it when it returns (backend.h) */
  mnt_optim_scalars(&t->opt, (double)t->s.step / t->per_epoch, &hp);
  MNT_CHECK(mnt_be_copy(t->be, t->hp_dev, &hp, sizeof hp, MNT_COPY_H2D));
  if (t->raw) return MNT_OK;
  MNT_CHECK(mnt_act_upload(t->be, b->images, mnt_resnet_input(m), b->n, 3, t->cfg.size, t->cfg.size));
  return mnt_be_copy(t->be, m->labels, b->labels, (size_t)b->n * sizeof *b->labels, MNT_COPY_H2D);
}

static void graphs_free(mnt_trainer *t) {
  for (int i = 0; i < 2; i++) {
    mnt_be_graph_free(t->be, t->graph[i]);
    t->graph[i] = NULL;
  }
}

/* the step's body as a graph: captured for this lane unless it was, then launched (cuda); run as
 * captured (cpu). Then the lane's buffers are freed for the next upload and the host waits for the
 * step's end against the communicator's deadline (its errors watched meanwhile) */
typedef struct graph_body {
  mnt_trainer *t;
  const mnt_batch *b;
} graph_body;
static int graph_body_run(void *ctx) {
  graph_body *g = ctx;
  return step_body(g->t, g->b, 1, NULL);
}

static int step_graph(mnt_trainer *t, const mnt_batch *b) {
  mnt_backend *be = t->be;
  int lane = t->raw ? t->cur_lane : 0, captured;
  graph_body ctx = {t, b};
  MNT_CHECK(mnt_be_graph_run(be, &t->graph[lane], graph_body_run, &ctx, &captured));
  if (captured && t->w->rank == 0 && !t->graph[lane ^ 1])
    MNT_INFO("step %lld: the step is captured as a CUDA graph (one per upload lane) and replayed from here",
             (long long)t->s.step + 1);
  if (t->raw && mnt_be_has_upload(be)) MNT_CHECK(mnt_upload_release(be, t->cur_lane));
  return mnt_comm_settle(t->c, be->stream);
}

/* the step's data phase: the next batch, and the step's inputs in place */
static int data_part(mnt_trainer *t, const mnt_batch **b) {
  MNT_CHECK(data_phase(t, b));
  return step_inputs(t, *b);
}

static int step_phases(mnt_trainer *t, mnt_step_out *out) {
  mnt_resnet *m = t->m;
  mnt_backend *be = t->be;
  double t0 = mnt_now();
  const mnt_batch *b = NULL;
  mnt_trace_push("data", 0);
  int st = data_part(t, &b);
  mnt_trace_pop();
  MNT_CHECK(st);
  double t1 = mnt_now(), tt[3];
  if (t->cfg.cuda_graph && t->s.step > 0) { /* the first step starts the momentum: not the same work */
    MNT_CHECK(step_graph(t, b));
    tt[0] = tt[1] = tt[2] = mnt_now(); /* one span: the forward's */
  } else {
    MNT_CHECK(step_body(t, b, 0, tt));
  }
  /* the one wait of the step: the flag is final once the update has run (the optimizer's time is its own) */
  int32_t bad = 0;
  MNT_CHECK(mnt_be_copy(be, &bad, m->flag, sizeof bad, MNT_COPY_D2H));
  if (bad) { /* the update was not made: w and the momentum are the last good step's */
    int32_t own[2] = {0, 0};
    char what[300];
    MNT_CHECK(mnt_be_copy(be, own, t->own_flag, sizeof own, MNT_COPY_D2H));
    name_nonfinite(t, 1, what, sizeof what);
    /* and the BN statistics this step's forward moved go back to what they were */
    if (m->nbn) MNT_CHECK(mnt_be_copy(be, m->bn, t->bn_prev, m->nbn * sizeof(float), MNT_COPY_D2D));
    int64_t at = t->s.step + 1; /* the step as the progress lines number it */
    if (!t->cfg.skip_nonfinite) {
      if (own[0] || own[1] || t->w->rank == 0)
        MNT_ERR("step %lld (epoch %.3f): NaN or Inf in %s; the run stops here, its last checkpoint kept "
                "(--skip-nonfinite skips such steps)", (long long)at, (double)at / t->per_epoch,
                what[0] ? what : "the averaged gradients");
      return mnt_world_agree(t->w, MNT_EDATA); /* every rank found it: they stop together */
    }
    t->s.skipped++;
    if ((own[0] || own[1] || t->w->rank == 0) && (t->s.skipped <= 10 || t->s.skipped % 100 == 0))
      MNT_WARN("step %lld: NaN or Inf in %s: the step is skipped (no update, batch-norm statistics restored; %lld "
               "skipped so far%s)", (long long)at, what[0] ? what : "the averaged gradients", (long long)t->s.skipped,
               t->s.skipped == 10 ? ": from now on every 100th is said" : "");
  } else {
    t->s.iv_n += b->n;
  }
  double t5 = mnt_now();
  t->s.step++;
  if (t->raw) { /* the position after the batch trained, not after the one on its way up */
    struct mnt_up_lane *L = &t->lane[t->cur_lane];
    t->s.epoch = L->epoch, t->s.cursor = L->cursor;
    L->full = 0;
    t->cur_lane ^= 1;
  } else {
    mnt_loader_position(t->ld, &t->s.epoch, &t->s.cursor);
  }
  *out = (mnt_step_out){.phase = {t1 - t0, tt[0] - t1, tt[1] - tt[0], tt[2] - tt[1], t5 - tt[2]},
                        .n = b->n,
                        .skipped = bad != 0};
  return MNT_OK;
}

int mnt_trainer_interval(mnt_trainer *t, double *loss, double *top1, double *images) {
  MNT_CHECK(pull_interval(t));
  int bad = 0;
  MNT_CHECK(state_nonfinite(t, &bad)); /* what the updates made: checked once an interval, agreed below */
  /* in double: exact for any sum a float holds exactly, and the order of ranks fixed by the ring */
  float agg[4] = {(float)t->s.iv_loss, (float)t->s.iv_top1, (float)t->s.iv_n, (float)bad};
  MNT_CHECK(mnt_allreduce(t->c, agg, 4, MNT_FP32, MNT_SUM));
  if (agg[3] > 0) return state_failed(t, "checked at the log interval");
  *loss = agg[0] / agg[2];
  *top1 = agg[1] / agg[2];
  *images = agg[2];
  t->s.iv_loss = t->s.iv_top1 = t->s.iv_n = 0;
  return MNT_OK;
}

/* ---- batch-norm statistics for evaluation (mnt_bn_eval) -------------------------------------- */

const char *const mnt_bn_eval_names[MNT_NBN_EVAL] = {"running", "last", "recompute"};

const char *mnt_bn_eval_name(mnt_bn_eval e) { return e >= 0 && e < MNT_NBN_EVAL ? mnt_bn_eval_names[e] : "?"; }

/* --bn-eval recompute, this rank: the BN statistics become the mean, over the training batches of
 * the last N steps (this rank's shares, augmented as they were trained; the first N steps' before
 * step N), of each batch's mean and (unbiased) variance, through the current weights: batch k enters
 * with momentum 1/(k+1). Its own loader, started at step s0's position (epoch s0 / per_epoch, cursor
 * (s0 mod per_epoch) global batches: the order is the same on any rank count), augmenting on the host
 * on every backend; the training's loader is not touched. */
/* bn_recompute's N forward passes in training mode, the k-th with momentum 1/(k+1) */
static int bn_passes(mnt_trainer *t, mnt_loader *ld, int N) {
  mnt_resnet *m = t->m;
  for (int k = 0; k < N; k++) {
    const mnt_batch *b = NULL;
    MNT_CHECK(mnt_loader_next(ld, &b));
    if (b->n != m->batch) {
      MNT_ERR("internal: a batch of %d images for BN statistics, the model takes %d", b->n, m->batch);
      return MNT_EARG;
    }
    m->bn_momentum = 1.0f / (float)(k + 1);
    MNT_CHECK(mnt_resnet_forward(m, b->images, 1));
  }
  return MNT_OK;
}

static int bn_recompute(mnt_trainer *t) {
  graphs_free(t); /* forward passes of their own between two steps: the graphs are captured again after */
  mnt_resnet *m = t->m;
  int N = t->cfg.bn_batches > 0 ? t->cfg.bn_batches : 16;
  int64_t s0 = t->s.step > N ? t->s.step - N : 0;
  mnt_loader_cfg lc;
  loader_cfg(t, (int)t->s.global_batch, 1, &lc);
  lc.raw = 0, lc.host_alloc = NULL, lc.host_free = NULL, lc.alloc_ctx = NULL;
  mnt_loader *ld = NULL;
  MNT_CHECK(mnt_loader_open(&ld, &t->train, &lc, s0 / t->per_epoch, (s0 % t->per_epoch) * t->s.global_batch));
  float keep = m->bn_momentum;
  int st = bn_passes(t, ld, N);
  m->bn_momentum = keep;
  mnt_loader_close(ld);
  MNT_CHECK(st);
  return mnt_be_sync(t->be);
}

int mnt_trainer_bn_final(mnt_trainer *t) {
  return t->cfg.bn_eval == MNT_BN_EVAL_RECOMPUTE && t->m->nbn ? bn_recompute(t) : MNT_OK;
}

/* this rank's validation samples r, r+R, ... in batches of the model's: the sums of loss, top-1 and
 * top-5, and the count, into sums[4] */
static int eval_batches(mnt_trainer *t, float *x, int32_t *y, mnt_sample_ws *ws, double sums[4]) {
  mnt_resnet *m = t->m;
  mnt_dataset *val = &t->val;
  const mnt_world *w = t->w;
  int B = m->batch, size = t->cfg.size;
  size_t per = (size_t)3 * size * size;
  for (int64_t g0 = w->rank; g0 < val->total; g0 += (int64_t)B * w->size) {
    int n = 0;
    for (int64_t g = g0; g < val->total && n < B; g += w->size, n++)
      MNT_CHECK(mnt_loader_val_sample_ws(val, g, size, 3, t->cfg.val_crop, ws, x + (size_t)n * per, &y[n]));
    for (int i = n; i < B; i++) { /* pad the last batch; padded samples are not counted */
      memcpy(x + (size_t)i * per, x, per * sizeof(float));
      y[i] = y[0];
    }
    float l3[3];
    MNT_CHECK(mnt_resnet_forward(m, x, 0));
    MNT_CHECK(mnt_resnet_loss(m, y, n, 0)); /* plain loss for validation */
    MNT_CHECK(mnt_resnet_read_loss(m, l3));
    sums[0] += l3[0];
    sums[1] += l3[1];
    sums[2] += l3[2];
    sums[3] += n;
  }
  return MNT_OK;
}

/* eval_batches with its buffers (the batch's images and labels, the read and decode workspace) */
static int eval_sums(mnt_trainer *t, double sums[4]) {
  size_t B = (size_t)t->m->batch, per = (size_t)3 * t->cfg.size * t->cfg.size;
  float *x = calloc(B * per, sizeof(float));
  int32_t *y = calloc(B, sizeof *y);
  mnt_sample_ws *ws = NULL; /* kept across samples */
  int st = MNT_ENOMEM;
  if (!x || !y) goto out;
  MNT_CHECK_GOTO(mnt_sample_ws_create(&ws), st, out);
  st = eval_batches(t, x, y, ws, sums);
out:
  free(x);
  free(y);
  mnt_sample_ws_destroy(ws);
  return st;
}

/* exact multi-node evaluation: rank r takes samples r, r+R, ...; sums and counts are reduced */
int mnt_trainer_evaluate(mnt_trainer *t, double *loss, double *top1, double *top5) {
  graphs_free(t); /* evaluation's own passes may grow scratch a graph holds: captured again after */
  mnt_resnet *m = t->m;
  int recompute = t->cfg.bn_eval == MNT_BN_EVAL_RECOMPUTE && m->nbn;
  if (recompute) { /* the running statistics put back after (bn_prev is free between steps) */
    MNT_CHECK(mnt_be_copy(t->be, t->bn_prev, m->bn, m->nbn * sizeof(float), MNT_COPY_D2D));
    MNT_CHECK(bn_recompute(t));
  }
  MNT_CHECK(mnt_be_sync(t->be)); /* blocking collectives start after the caller's work */
  MNT_CHECK(mnt_allreduce(t->c, m->bn, m->nbn, MNT_FP32, MNT_AVG)); /* BN statistics agree before evaluation */
  double sums[4] = {0, 0, 0, 0};                                    /* loss sum, top-1, top-5, count */
  MNT_CHECK(eval_sums(t, sums));
  float f[4] = {(float)sums[0], (float)sums[1], (float)sums[2], (float)sums[3]};
  MNT_CHECK(mnt_allreduce(t->c, f, 4, MNT_FP32, MNT_SUM));
  if (recompute) MNT_CHECK(mnt_be_copy(t->be, m->bn, t->bn_prev, m->nbn * sizeof(float), MNT_COPY_D2D));
  *loss = f[0] / f[3];
  *top1 = f[1] / f[3];
  *top5 = f[2] / f[3];
  return MNT_OK;
}

/* ---- checkpoints -------------------------------------------------------------------------- */

/* the tensors of a checkpoint: /model/<name>, /optim/<state>/<name> for each of the optimizer's state
 * tensors (momentum; second_moment), /bn/<name> */
static mnt_ckpt_tensor *tensors(const mnt_trainer *t, float *hw, float *hm, float *hbn, int *nt) {
  const mnt_resnet *m = t->m;
  const mnt_optim_desc *od = &mnt_optims[t->opt.optimizer];
  int n = (1 + m->nstate) * m->nparams + m->nstats, k = 0;
  mnt_ckpt_tensor *v = calloc((size_t)n, sizeof *v);
  if (!v) return NULL;
  for (int pass = 0; pass <= m->nstate; pass++)
    for (int i = 0; i < m->nparams; i++, k++) {
      const mnt_param *p = &m->params[i];
      if (pass) snprintf(v[k].name, sizeof v[k].name, "/optim/%s/%s", od->state[pass - 1], p->name);
      else snprintf(v[k].name, sizeof v[k].name, "/model/%s", p->name);
      v[k].data = (pass ? hm + (size_t)(pass - 1) * m->nw : hw) + p->off;
      v[k].n = p->n;
      v[k].ndims = p->ndims;
      memcpy(v[k].dims, p->dims, sizeof v[k].dims);
    }
  for (int i = 0; i < m->nstats; i++, k++) {
    const mnt_param *p = &m->stats[i];
    snprintf(v[k].name, sizeof v[k].name, "/bn/%s", p->name);
    v[k].data = hbn + p->off;
    v[k].n = p->n;
    v[k].ndims = 1;
    v[k].dims[0] = (int)p->n;
  }
  *nt = n;
  return v;
}

int mnt_trainer_save(mnt_trainer *t, mnt_ckpt_writer *wr, json_t *config) {
  /* BN statistics averaged over ranks first (ChainerMN's AllreducePersistent): the file holds one model */
  MNT_CHECK(mnt_be_sync(t->be));
  MNT_CHECK(mnt_allreduce(t->c, t->m->bn, t->m->nbn, MNT_FP32, MNT_AVG));
  MNT_CHECK(pull_interval(t));
  MNT_CHECK(mnt_trainer_check_state(t, "checked before its checkpoint")); /* finite values only */
  float *hw, *hm, *hbn;
  MNT_CHECK(mnt_trainer_host_model(t, &hw, &hm, &hbn));
  int nt;
  mnt_ckpt_tensor *v = tensors(t, hw, hm, hbn, &nt);
  if (!v) return MNT_ENOMEM;
  /* the log interval's sums over all ranks, and rank 0's wall time (each rank's own clock differs; a
   * double as two floats, the others adding 0): one state, the same on every rank */
  double e0 = t->w->rank == 0 ? t->s.elapsed_s : 0;
  float hi = (float)e0, iv[5] = {(float)t->s.iv_loss, (float)t->s.iv_top1, (float)t->s.iv_n, hi, (float)(e0 - hi)};
  MNT_CHECK(mnt_allreduce(t->c, iv, 5, MNT_FP32, MNT_SUM));
  mnt_train_state s = t->s;
  s.iv_loss = iv[0];
  s.iv_top1 = iv[1];
  s.iv_n = iv[2];
  s.elapsed_s = (double)iv[3] + (double)iv[4];
  json_t *state = mnt_train_state_json(&s);
  json_object_set_new(state, "lr", json_real(mnt_trainer_lr(t)));
  const mnt_dataset *d = &t->train; /* what makes the file self-describing; fixed for the run */
  json_t *attrs = json_pack("{s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:s, s:[f, f, f], s:[f, f, f]}", "arch", t->cfg.arch,
                            "classes", d->nclasses, "image_size", t->cfg.size, "world_size", t->w->size, "seed",
                            t->cfg.seed, "total_steps", (json_int_t)t->total, "global_batch",
                            (json_int_t)t->s.global_batch, "data_fingerprint", d->fingerprint, "mean", d->mean[0],
                            d->mean[1], d->mean[2], "std", d->std[0], d->std[1], d->std[2]);
  int st = mnt_ckpt_begin(wr, t->s.step, v, nt, state, attrs, config, NULL);
  json_decref(attrs);
  json_decref(state);
  free(v);
  return st;
}

int mnt_trainer_load(mnt_trainer *t, const mnt_ckpt *ck) {
  float *hw, *hm, *hbn;
  MNT_CHECK(mnt_trainer_host_model(t, &hw, &hm, &hbn));
  int nt;
  mnt_ckpt_tensor *v = tensors(t, hw, hm, hbn, &nt);
  if (!v) return MNT_ENOMEM;
  int st = MNT_OK;
  for (int i = 0; i < nt && st == MNT_OK; i++) st = mnt_ckpt_get(ck, v[i].name, v[i].data, v[i].n, v[i].ndims, v[i].dims);
  free(v);
  return st == MNT_OK ? mnt_trainer_upload(t) : st;
}

int mnt_trainer_init_from(mnt_trainer *t, const char *path) {
  float *hw, *hm, *hbn;
  MNT_CHECK(mnt_trainer_host_model(t, &hw, &hm, &hbn));
  MNT_CHECK(mnt_import_h5(t->m, path, hw, hbn));
  return mnt_trainer_upload(t);
}
