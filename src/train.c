/* train.c — `mntrain train`: data-parallel training across the ranks of the job.
 * Each rank reads its slice of every global batch (io/loader), runs forward/backward on its CPU
 * (src/model), and averages gradients with the communicator in buckets of --bucket-mb, each
 * started as soon as backward has finished its slab range (decreasing offsets), so that the
 * allreduce overlaps the rest of backward; the step waits only for what is still in flight
 * ("exposed comm"). Weights start identical (broadcast from rank 0). Evaluation follows
 * ChainerMN's multi-node evaluator: BN statistics averaged over ranks, every validation sample
 * evaluated once by one rank, sums and counts reduced exactly. Rank 0 prints progress, writes
 * OUT/config.json, OUT/metrics.jsonl and OUT/summary.json (keys as DESIGN.md "Metrics"). */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "args.h"
#include "comm.h"
#include "dataset.h"
#include "export.h"
#include "loader.h"
#include "log.h"
#include "model/resnet.h"
#include "optim.h"
#include "train.h"

typedef struct opts {
  const char *data, *val, *arch, *schedule, *device, *comm, *topology, *grad_dtype, *out, *export_path;
  int bn_batch;
  int size, batch, epochs, steps, threads, seed, log_every, skip_nonfinite, zero_init, no_bn_decay;
  int loader_threads;
  double lr, warmup_epochs, bucket_mb, momentum, wd, min_scale, val_crop, smoothing;
  int pad_crop;
} opts;

static const char *const flag_dtype[] = {"fp32", "bf16", "fp16"}; /* by mnt_dtype, as --grad-dtype spells them */

/* ---- overlapped gradient allreduce ------------------------------------------------------ */
typedef struct bucket { size_t off, n; mnt_comm_req *req; uint16_t *half; } bucket;
typedef struct overlap {
  mnt_comm *c;
  float *g;
  mnt_dtype t;
  size_t limit;     /* floats per bucket */
  size_t lo, hi;    /* the range gathered so far: [lo, hi) */
  bucket *b;
  int nb, cap;
  int st;
  double t_first; /* when this step's first bucket started */
} overlap;

static void flush(overlap *o) {
  if (o->hi == o->lo || o->st) return;
  if (o->nb == o->cap) {
    o->cap = o->cap ? 2 * o->cap : 16;
    o->b = realloc(o->b, (size_t)o->cap * sizeof *o->b);
  }
  if (o->nb == 0) o->t_first = mnt_now();
  bucket *k = &o->b[o->nb++];
  k->off = o->lo;
  k->n = o->hi - o->lo;
  k->half = NULL;
  void *buf = o->g + k->off;
  if (o->t != MNT_FP32) { /* reduced-precision allreduce: cast, reduce (fp32 accumulation), cast back */
    k->half = malloc(k->n * 2);
    mnt_from_f32(o->t, o->g + k->off, k->half, k->n);
    buf = k->half;
  }
  o->st = o->c->ops->iallreduce(o->c, buf, k->n, o->t, MNT_AVG, NULL, &k->req);
  o->lo = o->hi;
}

/* backward's hook: [off, off+n) of the gradient slab is final. Ranges arrive in decreasing
 * offsets; a bucket is [lo, hi), the padding between views included (it stays zero). */
static void grad_ready(void *ctx, size_t off, size_t n) {
  overlap *o = ctx;
  if (o->hi == o->lo) o->hi = off + n; /* a new bucket */
  o->lo = off;
  if (o->hi - o->lo >= o->limit) flush(o);
}

static int finish(overlap *o) {
  flush(o);
  for (int i = 0; i < o->nb; i++) {
    bucket *k = &o->b[i];
    int st = k->req ? o->c->ops->wait(o->c, k->req) : MNT_OK;
    if (st && !o->st) o->st = st;
    if (k->half) {
      if (!st) mnt_to_f32(o->t, k->half, o->g + k->off, k->n);
      free(k->half);
    }
  }
  o->nb = 0;
  int st = o->st;
  o->st = 0;
  o->lo = o->hi = 0;
  return st;
}

/* ---- helpers ----------------------------------------------------------------------------- */
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* exact multi-node evaluation: rank r takes samples r, r+R, ...; sums and counts are reduced */
static int evaluate(mnt_world *w, mnt_comm *c, mnt_resnet *m, mnt_dataset *val, int size, int out_channels,
                    double crop, double *loss, double *top1, double *top5) {
  MNT_CHECK(mnt_allreduce(c, m->bn, m->nbn, MNT_FP32, MNT_AVG)); /* BN statistics agree before evaluation */
  int B = m->batch;
  size_t per = (size_t)(out_channels ? out_channels : val->channels) * size * size;
  float *x = calloc((size_t)B * per, sizeof(float));
  int32_t *y = calloc((size_t)B, sizeof *y);
  double sums[4] = {0, 0, 0, 0}; /* loss sum, top-1, top-5, count */
  int st = x && y ? MNT_OK : MNT_ENOMEM;
  for (int64_t g0 = w->rank; g0 < val->total && st == MNT_OK; g0 += (int64_t)B * w->size) {
    int n = 0;
    for (int64_t g = g0; g < val->total && n < B; g += w->size, n++)
      if ((st = mnt_loader_val_sample(val, g, size, out_channels, crop, x + (size_t)n * per, &y[n])) != MNT_OK) break;
    if (st) break;
    for (int i = n; i < B; i++) { /* pad the last batch; padded samples are not counted */
      memcpy(x + (size_t)i * per, x, per * sizeof(float));
      y[i] = y[0];
    }
    if ((st = mnt_resnet_forward(m, x, 0)) != MNT_OK) break;
    const float *z = mnt_resnet_logits(m);
    int t1, t5;
    float l = mnt_softmax_xent(z, y, NULL, n, m->classes, 0, &t1, &t5); /* plain loss for validation */
    sums[0] += (double)l * n;
    sums[1] += t1;
    sums[2] += t5;
    sums[3] += n;
  }
  float f[4] = {(float)sums[0], (float)sums[1], (float)sums[2], (float)sums[3]};
  if (st == MNT_OK) st = mnt_allreduce(c, f, 4, MNT_FP32, MNT_SUM);
  free(x);
  free(y);
  if (st == MNT_OK) {
    *loss = f[0] / f[3];
    *top1 = f[1] / f[3];
    *top5 = f[2] / f[3];
  }
  return st;
}

int mnt_train_main(mnt_world *w, int argc, char **argv) {
  opts o = {.arch = "resnet50", .schedule = "step", .device = "auto", .comm = "auto", .topology = "flat",
            .grad_dtype = "fp32", .out = "mntrain-out", .size = 224, .batch = 32, .epochs = 0, .steps = 0,
            .threads = 0, .seed = 1, .log_every = 10, .lr = 0.1, .warmup_epochs = 0, .bucket_mb = 25,
            .momentum = 0.9, .wd = 1e-4, .min_scale = 0.08, .val_crop = 0.875, .loader_threads = 2};
  int help = 0;
  const mnt_opt table[] = {
      {"data", 0, MNT_OPT_STRING, &o.data, "DIR", "training set (mntrain convert), required"},
      {"val", 0, MNT_OPT_STRING, &o.val, "DIR", "validation set, evaluated after every epoch"},
      {"arch", 0, MNT_OPT_STRING, &o.arch, "A", "resnet8|20|18|34|50|101 (default resnet50)"},
      {"size", 0, MNT_OPT_INT, &o.size, "S", "training crop in pixels (default 224)"},
      {"batch-per-rank", 0, MNT_OPT_INT, &o.batch, "B", "images per rank per step (default 32)"},
      {"epochs", 0, MNT_OPT_INT, &o.epochs, "E", "epochs to train (default 1 unless --steps)"},
      {"steps", 0, MNT_OPT_INT, &o.steps, "N", "steps to train instead of whole epochs"},
      {"lr", 0, MNT_OPT_DOUBLE, &o.lr, "LR", "learning rate per 256 images (linear scaling; default 0.1)"},
      {"warmup-epochs", 0, MNT_OPT_DOUBLE, &o.warmup_epochs, "W", "linear warm-up (default 0)"},
      {"schedule", 0, MNT_OPT_STRING, &o.schedule, "step|cosine", "decay after warm-up (default step)"},
      {"momentum", 0, MNT_OPT_DOUBLE, &o.momentum, "M", "SGD momentum (default 0.9)"},
      {"wd", 0, MNT_OPT_DOUBLE, &o.wd, "WD", "weight decay (default 1e-4)"},
      {"no-bn-decay", 0, MNT_OPT_FLAG, &o.no_bn_decay, NULL, "no weight decay on BN parameters and biases"},
      {"zero-init-residual", 0, MNT_OPT_FLAG, &o.zero_init, NULL, "zero the last BN of each residual branch"},
      {"min-crop", 0, MNT_OPT_DOUBLE, &o.min_scale, "F", "RandomResizedCrop's smallest area (default 0.08)"},
      {"pad-crop", 0, MNT_OPT_INT, &o.pad_crop, "P", "RandomCrop(size, padding=P) + flip instead (small images)"},
      {"val-crop", 0, MNT_OPT_DOUBLE, &o.val_crop, "F", "validation centre crop, fraction of the side (default 0.875)"},
      {"label-smoothing", 0, MNT_OPT_DOUBLE, &o.smoothing, "E", "train against (1-E) onehot + E/classes (default 0)"},
      {"device", 0, MNT_OPT_STRING, &o.device, "cpu|cuda|auto", "where to compute (default auto: cpu here)"},
      {"comm", 0, MNT_OPT_STRING, &o.comm, "auto|cpu|nccl", "communicator (default auto)"},
      {"topology", 0, MNT_OPT_STRING, &o.topology, "flat|hier", "allreduce topology (default flat)"},
      {"grad-dtype", 0, MNT_OPT_STRING, &o.grad_dtype, "fp32|bf16|fp16", "allreduce precision (default fp32)"},
      {"bucket-mb", 0, MNT_OPT_DOUBLE, &o.bucket_mb, "M", "allreduce bucket size in MB (default 25)"},
      {"threads", 0, MNT_OPT_INT, &o.threads, "T", "compute threads per rank (default: OpenMP's)"},
      {"loader-threads", 0, MNT_OPT_INT, &o.loader_threads, "T", "prefetch threads per rank (default 2)"},
      {"seed", 0, MNT_OPT_INT, &o.seed, "S", "seed of weights, data order and augmentation (default 1)"},
      {"out", 0, MNT_OPT_STRING, &o.out, "DIR", "output directory (default mntrain-out)"},
      {"log-every", 0, MNT_OPT_INT, &o.log_every, "N", "progress and metrics every N steps (default 10)"},
      {"skip-nonfinite", 0, MNT_OPT_FLAG, &o.skip_nonfinite, NULL, "skip a step with NaN/Inf gradients"},
      {"bn-batch", 0, MNT_OPT_INT, &o.bn_batch, "N", "batch-norm statistics over groups of N images (default: the batch per rank)"},
      {"export", 0, MNT_OPT_STRING, &o.export_path, "FILE.h5", "write the final weights (torchvision names) to HDF5"},
      {NULL, 0, 0, NULL, NULL, NULL}};
  int quiet = w->rank != 0;
  int st = mnt_parse_opts("train", table, argc, argv, &help, quiet);
  if (st) return st;
  if (help) {
    if (!quiet)
      mnt_print_help(stdout, "srun --mpi=pmix mntrain train --data DIR [--val DIR] --arch A --size S --batch-per-rank B ...",
                     "Data-parallel training over all ranks of the job (one process per CPU socket or GPU).", table);
    return 0;
  }
  mnt_sched sched;
  mnt_dtype gdt;
  mnt_topology topo;
  const char *bad = NULL;
  if (!o.data) bad = "--data DIR is required";
  else if (mnt_resnet_arch_ok(o.arch)) bad = "--arch: resnet8, resnet20, resnet18, resnet34, resnet50 or resnet101";
  else if (mnt_sched_parse(o.schedule, &sched)) bad = "--schedule: step or cosine";
  else if (mnt_dtype_parse(o.grad_dtype, &gdt)) bad = "--grad-dtype: fp32, bf16 or fp16";
  else if (mnt_topology_parse(o.topology, &topo)) bad = "--topology: flat or hier";
  else if (strcmp(o.device, "auto") && strcmp(o.device, "cpu")) bad = "--device: this build trains on cpu (cuda is not ready yet)";
  else if (strcmp(o.comm, "auto") && strcmp(o.comm, "cpu")) bad = "--comm: this build has the cpu communicator";
  else if (o.batch < 1 || o.size < 1 || o.epochs < 0 || o.steps < 0 || o.log_every < 1 || o.bucket_mb <= 0)
    bad = "--batch-per-rank, --size, --log-every, --bucket-mb must be positive";
  else if (o.min_scale <= 0 || o.min_scale > 1) bad = "--min-crop must be in (0, 1]";
  else if (o.val_crop <= 0 || o.val_crop > 1) bad = "--val-crop must be in (0, 1]";
  else if (o.pad_crop < 0 || o.pad_crop >= o.size) bad = "--pad-crop must be in [0, --size)";
  else if (o.smoothing < 0 || o.smoothing >= 1) bad = "--label-smoothing must be in [0, 1)";
  else if (o.bn_batch < 0 || (o.bn_batch && o.batch % o.bn_batch)) bad = "--bn-batch must divide --batch-per-rank";
  if (bad) {
    if (!quiet) fprintf(stderr, "mntrain train: %s (see mntrain train --help)\n", bad);
    return MNT_EARG;
  }
  if (!o.epochs && !o.steps) o.epochs = 1;
  if (o.threads > 0) omp_set_num_threads(o.threads);

  mnt_dataset train, val;
  int have_val = 0;
  mnt_backend *be = NULL;
  mnt_resnet *m = NULL;
  mnt_comm *c = NULL;
  mnt_loader *ld = NULL;
  FILE *metrics = NULL;
  double *step_ms = NULL;
  float *xbuf = NULL;
  overlap ov = {0};
  if ((st = mnt_dataset_open(o.data, &train)) != MNT_OK) return st;
  if (o.val && (st = mnt_dataset_open(o.val, &val)) != MNT_OK) goto out;
  have_val = o.val != NULL;
  if (have_val && val.nclasses != train.nclasses) {
    MNT_ERR("%s has %d classes, %s has %d", o.val, val.nclasses, o.data, train.nclasses);
    st = MNT_EARG;
    goto out;
  }
  int out_channels = 3; /* grey data sets are repeated into the network's 3 input channels */
  if ((st = mnt_backend_create(&be)) ||
      (st = mnt_resnet_create_ex(be, o.arch, train.nclasses, o.size, o.batch, o.bn_batch ? o.bn_batch : o.batch,
                                 (uint64_t)o.seed, o.zero_init, &m)))
    goto out;
  m->label_smoothing = (float)o.smoothing;
  if ((st = mnt_comm_create(w, o.comm, topo, &c)) != MNT_OK) goto out;
  /* identical start: rank 0's weights and statistics everywhere */
  if ((st = mnt_broadcast(c, m->w, m->nw * sizeof(float), 0)) || (st = mnt_broadcast(c, m->bn, m->nbn * sizeof(float), 0)))
    goto out;
  int64_t B = (int64_t)o.batch * w->size;
  mnt_loader_cfg lc = {.out_size = o.size, .train = 1, .global_batch = (int)B, .rank = w->rank, .nranks = w->size,
                       .seed = o.seed, .threads = o.loader_threads, .out_channels = out_channels,
                       .min_scale = o.min_scale, .pad_crop = o.pad_crop};
  if ((st = mnt_loader_open(&ld, &train, &lc, 0, 0)) != MNT_OK) goto out;
  int64_t per_epoch = mnt_loader_batches_per_epoch(ld);
  int64_t total = o.steps ? o.steps : per_epoch * o.epochs;
  mnt_sgd_cfg sc = {.base_lr = o.lr, .global_batch = (int)B, .warmup_epochs = o.warmup_epochs,
                    .epochs = (double)total / per_epoch, .schedule = sched, .momentum = o.momentum,
                    .weight_decay = o.wd, .no_bn_bias_decay = o.no_bn_decay};
  ov = (overlap){.c = c, .g = m->g, .t = gdt, .limit = (size_t)(o.bucket_mb * 1e6 / 4)};
  m->grad_ready = grad_ready;
  m->grad_ctx = &ov;
  size_t in_floats = (size_t)o.batch * 3 * o.size * o.size;
  xbuf = aligned_alloc(64, in_floats * sizeof(float));
  step_ms = calloc((size_t)total + 1, sizeof *step_ms);
  if (!xbuf || !step_ms) { st = MNT_ENOMEM; goto out; }

  if (w->rank == 0) { /* the effective configuration, once */
    mkdir(o.out, 0755);
    json_t *cfg = json_pack("{s:s, s:s?, s:s, s:i, s:i, s:I, s:i, s:I, s:f, s:f, s:s, s:f, s:f, s:b, s:b, s:f, s:s, s:s, s:s,"
                            " s:s, s:f, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:s, s:i, s:f, s:f}",
                            "data", o.data, "val", o.val, "arch", o.arch, "size", o.size, "batch_per_rank", o.batch,
                            "global_batch", (json_int_t)B, "epochs", o.epochs, "steps", (json_int_t)total, "lr", o.lr,
                            "warmup_epochs", o.warmup_epochs, "schedule", o.schedule, "momentum", o.momentum,
                            "wd", o.wd, "no_bn_decay", o.no_bn_decay, "zero_init_residual", o.zero_init,
                            "min_crop", o.min_scale, "device", "cpu", "comm", c->ops->name,
                            "topology", mnt_topology_name(c->topology), "grad_dtype", flag_dtype[gdt],
                            "bucket_mb", o.bucket_mb, "threads", o.threads > 0 ? o.threads : omp_get_max_threads(),
                            "loader_threads", o.loader_threads, "seed", o.seed, "out", o.out, "ranks", w->size,
                            "nodes", w->nnodes, "log_every", o.log_every, "skip_nonfinite", o.skip_nonfinite,
                            "version", MNT_VERSION, "pad_crop", o.pad_crop, "val_crop", o.val_crop,
                            "label_smoothing", o.smoothing);
    char *txt = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    printf("mntrain train: %s\n", txt);
    free(txt);
    st = mnt_json_save(o.out, "config.json", cfg);
    json_decref(cfg);
    if (st) goto out;
    char mp[1200];
    snprintf(mp, sizeof mp, "%s/metrics.jsonl", o.out);
    if (!(metrics = fopen(mp, "w"))) { MNT_ERR("%s: cannot write", mp); st = MNT_ESYS; goto out; }
    printf("mntrain train: %s, %d ranks on %d nodes, global batch %lld, %lld steps (%lld per epoch), %.1f M parameters\n",
           o.arch, w->size, w->nnodes, (long long)B, (long long)total, (long long)per_epoch, (double)m->nw / 1e6);
    fflush(stdout);
  }
  /* per-phase seconds over the log interval and the whole run (after warm-up) */
  double ph[5] = {0}, ph_all[5] = {0}; /* data, forward, backward, comm exposed, optimizer */
  double t_start = mnt_now(), t_after_warmup = 0, iv_loss = 0, iv_t1 = 0, iv_n = 0, last_loss = NAN, last_top1 = NAN;
  double val_top1 = NAN, comm_span = 0;
  int64_t warm = total > 20 ? 5 : total > 4 ? 1 : 0, skipped = 0;
  double iv_t0 = mnt_now();
  for (int64_t step = 0; step < total && st == MNT_OK; step++) {
    double t0 = mnt_now();
    const mnt_batch *b;
    if ((st = mnt_loader_next(ld, &b)) != MNT_OK) break;
    memcpy(xbuf, b->images, in_floats * sizeof(float));
    double epoch_f = (double)step / per_epoch, t1 = mnt_now();
    if ((st = mnt_resnet_forward(m, xbuf, 1)) != MNT_OK) break;
    int top1 = 0;
    float loss = mnt_resnet_loss(m, b->labels, &top1, NULL);
    double t2 = mnt_now();
    if ((st = mnt_resnet_backward(m)) != MNT_OK) break;
    double t3 = mnt_now();
    if ((st = finish(&ov)) != MNT_OK) break; /* what is still in flight after backward */
    double t4 = mnt_now();
    if (step >= warm && w->size > 1) comm_span += t4 - ov.t_first; /* first bucket start .. last done */
    int finite = 1; /* gradients are identical on every rank now: every rank decides the same */
    for (size_t i = 0; i < m->nw && finite; i++) finite = isfinite(m->g[i]);
    if (!finite) {
      if (!o.skip_nonfinite) {
        MNT_ERR("step %lld (epoch %.3f): NaN or Inf in the averaged gradients (local loss %g); stopping "
                "(--skip-nonfinite skips such steps)", (long long)step, epoch_f, (double)loss);
        st = MNT_EDATA;
        break;
      }
      skipped++;
      if (w->rank == 0) MNT_WARN("step %lld: NaN or Inf in the gradients: step skipped", (long long)step);
    } else {
      mnt_sgd_update(m, &sc, mnt_lr_at(&sc, epoch_f), step == 0);
    }
    double t5 = mnt_now();
    double d[5] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
    for (int k = 0; k < 5; k++) {
      ph[k] += d[k];
      if (step >= warm) ph_all[k] += d[k];
    }
    step_ms[step] = (t5 - t0) * 1e3;
    if (step + 1 == warm) t_after_warmup = t5;
    iv_loss += loss * b->n;
    iv_t1 += top1;
    iv_n += b->n;
    int end_epoch = (step + 1) % per_epoch == 0;
    if ((step + 1) % o.log_every == 0 || step + 1 == total || end_epoch) {
      float agg[3] = {(float)iv_loss, (float)iv_t1, (float)iv_n}; /* exact over ranks */
      if ((st = mnt_allreduce(c, agg, 3, MNT_FP32, MNT_SUM)) != MNT_OK) break;
      last_loss = agg[0] / agg[2];
      last_top1 = agg[1] / agg[2];
      double now = mnt_now(), ips = agg[2] / (now - iv_t0);
      double eta = (now - t_start) / (step + 1) * (total - step - 1);
      if (w->rank == 0) {
        printf("epoch %.2f step %lld/%lld loss %.4f top1 %.3f lr %.4g %.1f img/s ETA %.0f s\n", epoch_f + 1.0 / per_epoch,
               (long long)step + 1, (long long)total, last_loss, last_top1, mnt_lr_at(&sc, epoch_f), ips, eta);
        fprintf(metrics,
                "{\"step\": %lld, \"epoch\": %.4f, \"loss\": %.6f, \"top1\": %.5f, \"lr\": %.6g, \"img_per_s\": %.2f, "
                "\"ms\": {\"data\": %.3f, \"forward\": %.3f, \"backward\": %.3f, \"comm_exposed\": %.3f, "
                "\"optimizer\": %.3f}}\n",
                (long long)step + 1, epoch_f + 1.0 / per_epoch, last_loss, last_top1, mnt_lr_at(&sc, epoch_f), ips,
                ph[0] * 1e3 / agg[2] * B, ph[1] * 1e3 / agg[2] * B, ph[2] * 1e3 / agg[2] * B, ph[3] * 1e3 / agg[2] * B,
                ph[4] * 1e3 / agg[2] * B);
        fflush(metrics);
        fflush(stdout);
      }
      memset(ph, 0, sizeof ph);
      iv_loss = iv_t1 = iv_n = 0;
      iv_t0 = mnt_now();
    }
    if (have_val && (end_epoch || step + 1 == total)) {
      double vl, v1, v5;
      if ((st = evaluate(w, c, m, &val, o.size, out_channels, o.val_crop, &vl, &v1, &v5)) != MNT_OK) break;
      val_top1 = v1;
      if (w->rank == 0) {
        printf("epoch %.2f validation: loss %.4f top1 %.4f top5 %.4f (%lld samples)\n", epoch_f + 1.0 / per_epoch, vl, v1,
               v5, (long long)val.total);
        fprintf(metrics, "{\"step\": %lld, \"epoch\": %.4f, \"val_loss\": %.6f, \"val_top1\": %.5f, \"val_top5\": %.5f}\n",
                (long long)step + 1, epoch_f + 1.0 / per_epoch, vl, v1, v5);
        fflush(metrics);
      }
      iv_t0 = mnt_now(); /* evaluation time is not training throughput */
    }
  }
  if (st == MNT_OK) {
    double t_end = mnt_now();
    int64_t timed = total - warm;
    double span = timed > 0 && t_after_warmup > 0 ? t_end - t_after_warmup : t_end - t_start;
    if (timed <= 0) timed = total;
    double ips = (double)timed * B / span;
    /* bus bandwidth of the gradient allreduce as training saw it: bytes * 2(n-1)/n over the time from
     * a step's first bucket start to its last completion (overlapped with backward, so a lower bound) */
    double busbw = w->size > 1 && comm_span > 0
                       ? (double)m->nw * 4.0 * 2.0 * (w->size - 1) / w->size * (double)timed / comm_span / 1e9
                       : 0.0;
    qsort(step_ms + warm, (size_t)timed, sizeof *step_ms, cmp_d);
    double mean = 0;
    for (int64_t i = warm; i < total; i++) mean += step_ms[i];
    mean /= timed;
    if (w->rank == 0) {
      int rpn = w->size / w->nnodes;
      json_t *sm = json_pack(
          "{s:s, s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:f, s:f,"
          " s:{s:f, s:f, s:f}, s:{s:f, s:f, s:f, s:f, s:f}, s:I, s:f, s:s, s:f, s:f, s:I}",
          "version", MNT_VERSION, "arch", o.arch, "image_size", o.size, "device", "cpu", "comm", c->ops->name,
          "topology", mnt_topology_name(c->topology), "ranks", w->size, "nodes", w->nnodes, "ranks_per_node", rpn,
          "threads_per_rank", o.threads > 0 ? o.threads : omp_get_max_threads(), "batch_per_rank", o.batch,
          "global_batch", (json_int_t)B, "steps", (json_int_t)total, "img_per_s", ips, "img_per_s_per_rank",
          ips / w->size, "step_ms", "mean", mean, "p50", step_ms[warm + timed / 2], "p95",
          step_ms[warm + (int64_t)(0.95 * (double)(timed - 1))], "phases_ms", "data", ph_all[0] * 1e3 / timed,
          "forward", ph_all[1] * 1e3 / timed, "backward", ph_all[2] * 1e3 / timed, "comm_exposed",
          ph_all[3] * 1e3 / timed, "optimizer", ph_all[4] * 1e3 / timed, "grad_bytes", (json_int_t)(m->nw * 4),
          "allreduce_busbw_gbs", busbw, "slurm_job_id", w->jobid, "loss", last_loss, "top1", last_top1,
          "skipped_steps", (json_int_t)skipped);
      if (!isnan(val_top1)) json_object_set_new(sm, "val_top1", json_real(val_top1));
      st = mnt_json_save(o.out, "summary.json", sm);
      json_decref(sm);
      printf("mntrain train: done: %lld steps, %.1f img/s (%.1f per rank), loss %.4f, top1 %.4f%s; %s/summary.json\n",
             (long long)total, ips, ips / w->size, last_loss, last_top1, have_val ? "" : "", o.out);
      if (!isnan(val_top1)) printf("mntrain train: validation top1 %.4f\n", val_top1);
      if (st == MNT_OK && o.export_path) st = mnt_export_h5(m, o.export_path);
    }
  }
out:
  if (metrics) fclose(metrics);
  free(ov.b);
  free(xbuf);
  free(step_ms);
  mnt_loader_close(ld);
  mnt_comm_destroy(c);
  mnt_resnet_destroy(m);
  mnt_backend_destroy(be);
  if (have_val) mnt_dataset_close(&val);
  mnt_dataset_close(&train);
  return st;
}
