/* train.c — `mntrain train`: data-parallel training across the ranks of the job.
 * Each rank reads its slice of every global batch (io/loader), runs forward/backward on its CPU
 * (src/model), and averages gradients with the communicator in buckets of --bucket-mb, each
 * started as soon as backward has finished its slab range (decreasing offsets), so that the
 * allreduce overlaps the rest of backward; the step waits only for what is still in flight
 * ("exposed comm"). Weights start identical (broadcast from rank 0). Evaluation follows
 * ChainerMN's multi-node evaluator: BN statistics averaged over ranks, every validation sample
 * evaluated once by one rank, sums and counts reduced exactly. Rank 0 prints progress, writes
 * OUT/config.json, OUT/metrics.jsonl and OUT/summary.json (keys as DESIGN.md "Metrics"). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "comm.h"
#include "dataset.h"
#include "export.h"
#include "jsonio.h"
#include "loader.h"
#include "log.h"
#include "model/resnet.h"
#include "optim.h"
#include "sysmem.h"
#include "train.h"

typedef struct opts {
  const char *data, *val, *arch, *schedule, *device, *comm, *topology, *grad_dtype, *out, *export_path;
  int bn_batch;
  int size, batch, epochs, steps, threads, seed, log_every, skip_nonfinite, zero_init, no_bn_decay;
  int loader_threads;
  double lr, warmup_epochs, bucket_mb, momentum, wd, min_scale, val_crop, smoothing;
  int pad_crop, force;
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

/* The files of a run in --out; a directory holding any of them holds an earlier run. */
static const char *const RUN_FILES[] = {"config.json", "metrics.jsonl", "summary.json", "config.json.tmp",
                                        "summary.json.tmp"};

/* rank 0, before anything is computed: --out can be written and holds no earlier run (or --force
 * removes it), and --export can be created. */
static int prepare_outputs(const opts *o) {
  if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
    MNT_ERR("--out %s: cannot create the directory: %s", o->out, strerror(errno));
    return MNT_EARG;
  }
  char found[200] = "", p[1200];
  for (size_t i = 0; i < sizeof RUN_FILES / sizeof RUN_FILES[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", o->out, RUN_FILES[i]);
    if (access(p, F_OK) != 0) continue;
    if (o->force) {
      if (unlink(p) != 0) {
        MNT_ERR("--force: cannot remove %s: %s", p, strerror(errno));
        return MNT_EARG;
      }
    } else {
      size_t n = strlen(found);
      snprintf(found + n, sizeof found - n, "%s%s", n ? ", " : "", RUN_FILES[i]);
    }
  }
  if (found[0]) {
    MNT_ERR("--out %s holds an earlier run (%s): choose another --out, or add --force to replace it", o->out,
            found);
    return MNT_EARG;
  }
  return o->export_path ? mnt_output_probe(o->export_path) : MNT_OK;
}

/* what the run will hold in memory per rank, from the model plan and the loader's buffers */
static int check_memory(const opts *o, const mnt_dataset *train, int have_val, int local_size) {
  size_t model;
  MNT_CHECK(mnt_resnet_plan_bytes(o->arch, train->nclasses, o->size, o->batch, o->bn_batch ? o->bn_batch : o->batch,
                                  &model));
  double img = 3.0 * o->size * o->size * sizeof(float) * o->batch; /* one batch of network input */
  double need = (double)model + img * (2.0 * o->loader_threads + 1 + have_val) + 2.0 * 8 * (double)train->total;
  char what[200];
  snprintf(what, sizeof what, "--arch %s at --size %d with --batch-per-rank %d", o->arch, o->size, o->batch);
  return mnt_mem_check(need > 1e19 ? SIZE_MAX : (size_t)need, what, local_size);
}

int mnt_train_main(mnt_world *w, int argc, char **argv) {
  opts o = {.arch = "resnet50", .schedule = "step", .device = "auto", .comm = "auto", .topology = "flat",
            .grad_dtype = "fp32", .out = "mntrain-out", .size = 224, .batch = 32, .epochs = 0, .steps = 0,
            .threads = 0, .seed = 1, .log_every = 10, .lr = 0.1, .warmup_epochs = 0, .bucket_mb = 25,
            .momentum = 0.9, .wd = 1e-4, .min_scale = 0.08, .val_crop = 0.875, .loader_threads = 2};
  int help = 0;
  const mnt_opt table[] = {
      {"data", 0, MNT_OPT_STRING, &o.data, "DIR", "training set (mntrain convert), required", 0, 0},
      {"val", 0, MNT_OPT_STRING, &o.val, "DIR", "validation set, evaluated after every epoch", 0, 0},
      {"arch", 0, MNT_OPT_STRING, &o.arch, "A", "resnet8|20|18|34|50|101 (default resnet50)", 0, 0},
      {"size", 0, MNT_OPT_INT, &o.size, "S", "training crop in pixels (default 224)", MNT_RANGE(1, 4096)},
      {"batch-per-rank", 0, MNT_OPT_INT, &o.batch, "B", "images per rank per step (default 32)", MNT_RANGE(1, 1 << 20)},
      {"epochs", 0, MNT_OPT_INT, &o.epochs, "E", "epochs to train (default 1 unless --steps)", MNT_RANGE(0, 1e6)},
      {"steps", 0, MNT_OPT_INT, &o.steps, "N", "steps to train instead of whole epochs", MNT_RANGE(0, 2e9)},
      {"lr", 0, MNT_OPT_DOUBLE, &o.lr, "LR", "learning rate per 256 images (linear scaling; default 0.1)",
       MNT_RANGE(0, 1000)},
      {"warmup-epochs", 0, MNT_OPT_DOUBLE, &o.warmup_epochs, "W", "linear warm-up (default 0)", MNT_RANGE(0, 1e6)},
      {"schedule", 0, MNT_OPT_STRING, &o.schedule, "step|cosine", "decay after warm-up (default step)", 0, 0},
      {"momentum", 0, MNT_OPT_DOUBLE, &o.momentum, "M", "SGD momentum (default 0.9)", MNT_RANGE(0, 1)},
      {"wd", 0, MNT_OPT_DOUBLE, &o.wd, "WD", "weight decay (default 1e-4)", MNT_RANGE(0, 1)},
      {"no-bn-decay", 0, MNT_OPT_FLAG, &o.no_bn_decay, NULL, "no weight decay on BN parameters and biases", 0, 0},
      {"zero-init-residual", 0, MNT_OPT_FLAG, &o.zero_init, NULL, "zero the last BN of each residual branch", 0, 0},
      {"min-crop", 0, MNT_OPT_DOUBLE, &o.min_scale, "F", "RandomResizedCrop's smallest area (default 0.08)",
       MNT_RANGE(0.01, 1)},
      {"pad-crop", 0, MNT_OPT_INT, &o.pad_crop, "P", "RandomCrop(size, padding=P) + flip instead (small images)",
       MNT_RANGE(0, 4095)},
      {"val-crop", 0, MNT_OPT_DOUBLE, &o.val_crop, "F", "validation centre crop, fraction of the side (default 0.875)",
       MNT_RANGE(0.05, 1)},
      {"label-smoothing", 0, MNT_OPT_DOUBLE, &o.smoothing, "E", "train against (1-E) onehot + E/classes (default 0)",
       MNT_RANGE(0, 0.999)},
      {"device", 0, MNT_OPT_STRING, &o.device, "cpu|cuda|auto", "where to compute (default auto: cpu here)", 0, 0},
      {"comm", 0, MNT_OPT_STRING, &o.comm, "auto|cpu|nccl", "communicator (default auto)", 0, 0},
      {"topology", 0, MNT_OPT_STRING, &o.topology, "flat|hier", "allreduce topology (default flat)", 0, 0},
      {"grad-dtype", 0, MNT_OPT_STRING, &o.grad_dtype, "fp32|bf16|fp16", "allreduce precision (default fp32)", 0, 0},
      {"bucket-mb", 0, MNT_OPT_DOUBLE, &o.bucket_mb, "M", "allreduce bucket size in MB (default 25)",
       MNT_RANGE(0.001, 1e6)},
      {"threads", 0, MNT_OPT_INT, &o.threads, "T", "compute threads per rank (default: OpenMP's)", MNT_RANGE(0, 4096)},
      {"loader-threads", 0, MNT_OPT_INT, &o.loader_threads, "T", "prefetch threads per rank (default 2)",
       MNT_RANGE(1, 256)},
      {"seed", 0, MNT_OPT_INT, &o.seed, "S", "seed of weights, data order and augmentation (default 1)", MNT_ANY_INT},
      {"out", 0, MNT_OPT_STRING, &o.out, "DIR", "output directory (default mntrain-out); must not hold an earlier run",
       0, 0},
      {"force", 0, MNT_OPT_FLAG, &o.force, NULL, "replace an earlier run's outputs in --out", 0, 0},
      {"log-every", 0, MNT_OPT_INT, &o.log_every, "N", "progress and metrics every N steps (default 10)",
       MNT_RANGE(1, 2e9)},
      {"skip-nonfinite", 0, MNT_OPT_FLAG, &o.skip_nonfinite, NULL, "skip a step with NaN/Inf gradients", 0, 0},
      {"bn-batch", 0, MNT_OPT_INT, &o.bn_batch, "N",
       "batch-norm statistics over groups of N images (default: the batch per rank)", MNT_RANGE(0, 1 << 20)},
      {"export", 0, MNT_OPT_STRING, &o.export_path, "FILE.h5", "write the final weights (torchvision names) to HDF5",
       0, 0},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int quiet = mnt_world_guess_rank() != 0;
  int st = mnt_parse_opts("train", table, argc, argv, &help, quiet);
  if (st) return st;
  if (help) {
    if (!quiet)
      mnt_print_help(stdout, "srun --mpi=pmix mntrain train --data DIR [--val DIR] --arch A --size S --batch-per-rank B ...",
                     "Data-parallel training over all ranks of the job (one process per CPU socket or GPU).\n"
                     "Writes OUT/config.json at the start, OUT/metrics.jsonl while it trains and OUT/summary.json\n"
                     "when it ends; an --out that holds an earlier run is refused unless --force.",
                     table);
    return MNT_OK;
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
  else if (o.pad_crop >= o.size) bad = "--pad-crop must be smaller than --size";
  else if (o.bn_batch && o.batch % o.bn_batch) bad = "--bn-batch must divide --batch-per-rank";
  if (bad) {
    if (!quiet) fprintf(stderr, "mntrain train: %s (see mntrain train --help)\n", bad);
    return MNT_EARG;
  }
  if (!o.epochs && !o.steps) o.epochs = 1;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  MNT_CHECK(mnt_world_init(w));

  mnt_dataset train, val;
  int have_train = 0, have_val = 0;
  mnt_backend *be = NULL;
  mnt_resnet *m = NULL;
  mnt_comm *c = NULL;
  mnt_loader *ld = NULL;
  FILE *metrics = NULL;
  double *step_ms = NULL;
  float *xbuf = NULL;
  overlap ov = {0};
  char mpath[1200];
  snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", o.out);
  /* set-up: a failure on any rank is agreed on by all, which then stop together */
  st = w->rank == 0 ? prepare_outputs(&o) : MNT_OK;
  if ((st = mnt_world_agree(w, st)) != MNT_OK) return st;
  st = mnt_dataset_open(o.data, &train);
  have_train = st == MNT_OK;
  if (st == MNT_OK && o.val && (st = mnt_dataset_open(o.val, &val)) == MNT_OK) have_val = 1;
  if (st == MNT_OK && have_val && val.nclasses != train.nclasses) {
    MNT_ERR("--val %s has %d classes, --data %s has %d", o.val, val.nclasses, o.data, train.nclasses);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = check_memory(&o, &train, have_val, w->local_size);
  int out_channels = 3; /* grey data sets are repeated into the network's 3 input channels */
  if (st == MNT_OK && (st = mnt_backend_create(&be)) == MNT_OK)
    st = mnt_resnet_create_ex(be, o.arch, train.nclasses, o.size, o.batch, o.bn_batch ? o.bn_batch : o.batch,
                              (uint64_t)o.seed, o.zero_init, &m);
  int64_t B = (int64_t)o.batch * w->size;
  mnt_loader_cfg lc = {.out_size = o.size, .train = 1, .global_batch = (int)B, .rank = w->rank, .nranks = w->size,
                       .seed = o.seed, .threads = o.loader_threads, .out_channels = out_channels,
                       .min_scale = o.min_scale, .pad_crop = o.pad_crop};
  if (st == MNT_OK) st = mnt_loader_open(&ld, &train, &lc, 0, 0);
  if ((st = mnt_world_agree(w, st)) != MNT_OK) goto out; /* data, memory, model and loader: one agreement */
  m->label_smoothing = (float)o.smoothing;
  if ((st = mnt_comm_create(w, o.comm, topo, &c)) != MNT_OK) goto out;
  /* identical start: rank 0's weights and statistics everywhere */
  if ((st = mnt_broadcast(c, m->w, m->nw * sizeof(float), 0)) || (st = mnt_broadcast(c, m->bn, m->nbn * sizeof(float), 0)))
    goto out;
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
  st = xbuf && step_ms ? MNT_OK : MNT_ENOMEM;
  if (st) MNT_ERR("out of memory for the input batch and %lld step times", (long long)total);

  if (w->rank == 0 && st == MNT_OK) { /* the effective configuration, once; the outputs open early */
    json_t *cfg = json_pack("{s:s, s:s?, s:s, s:i, s:i, s:I, s:i, s:I, s:o, s:o, s:s, s:o, s:o, s:b, s:b, s:o, s:s, s:s,"
                            " s:s, s:s, s:o, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:s, s:i, s:o, s:o}",
                            "data", o.data, "val", o.val, "arch", o.arch, "size", o.size, "batch_per_rank", o.batch,
                            "global_batch", (json_int_t)B, "epochs", o.epochs, "steps", (json_int_t)total,
                            "lr", mnt_json_num(o.lr), "warmup_epochs", mnt_json_num(o.warmup_epochs),
                            "schedule", o.schedule, "momentum", mnt_json_num(o.momentum), "wd", mnt_json_num(o.wd),
                            "no_bn_decay", o.no_bn_decay, "zero_init_residual", o.zero_init,
                            "min_crop", mnt_json_num(o.min_scale), "device", "cpu", "comm", c->ops->name,
                            "topology", mnt_topology_name(c->topology), "grad_dtype", flag_dtype[gdt],
                            "bucket_mb", mnt_json_num(o.bucket_mb),
                            "threads", o.threads > 0 ? o.threads : omp_get_max_threads(),
                            "loader_threads", o.loader_threads, "seed", o.seed, "out", o.out, "ranks", w->size,
                            "nodes", w->nnodes, "log_every", o.log_every, "skip_nonfinite", o.skip_nonfinite,
                            "version", MNT_VERSION, "pad_crop", o.pad_crop, "val_crop", mnt_json_num(o.val_crop),
                            "label_smoothing", mnt_json_num(o.smoothing));
    char *txt = cfg ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) : NULL;
    if (txt) printf("mntrain train: %s\n", txt);
    free(txt);
    st = mnt_json_save(o.out, "config.json", cfg);
    json_decref(cfg);
    if (st == MNT_OK && !(metrics = fopen(mpath, "w"))) {
      MNT_ERR("%s: cannot create: %s", mpath, strerror(errno));
      st = MNT_ESYS;
    }
    if (st == MNT_OK)
      printf("mntrain train: %s, %d ranks on %d nodes, global batch %lld, %lld steps (%lld per epoch), %.1f M "
             "parameters\n",
             o.arch, w->size, w->nnodes, (long long)B, (long long)total, (long long)per_epoch, (double)m->nw / 1e6);
    fflush(stdout);
  }
  if ((st = mnt_world_agree(w, st)) != MNT_OK) goto out;
  /* per-phase seconds over the log interval and the whole run (after warm-up) */
  double ph[5] = {0}, ph_all[5] = {0}; /* data, forward, backward, comm exposed, optimizer */
  double t_start = mnt_now(), t_after_warmup = 0, iv_loss = 0, iv_t1 = 0, iv_n = 0, last_loss = NAN, last_top1 = NAN;
  double val_top1 = NAN, comm_span = 0, eval_s = 0, eval_timed_s = 0;
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
        st = mnt_world_agree(w, MNT_EDATA); /* every rank found it: they stop together */
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
      double eta = (now - t_start - eval_s) / (step + 1) * (total - step - 1);
      if (w->rank == 0) {
        double lr = mnt_lr_at(&sc, epoch_f), ms = 1e3 / agg[2] * B;
        printf("epoch %.2f step %lld/%lld loss %.4f top1 %.3f lr %.4g %.1f img/s ETA %.0f s\n", epoch_f + 1.0 / per_epoch,
               (long long)step + 1, (long long)total, last_loss, last_top1, lr, ips, eta);
        fflush(stdout);
        json_t *line = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o}}", "step",
                                 (json_int_t)step + 1, "epoch", mnt_json_num(epoch_f + 1.0 / per_epoch), "loss",
                                 mnt_json_num(last_loss), "top1", mnt_json_num(last_top1), "lr", mnt_json_num(lr),
                                 "img_per_s", mnt_json_num(ips), "ms", "data", mnt_json_num(ph[0] * ms), "forward",
                                 mnt_json_num(ph[1] * ms), "backward", mnt_json_num(ph[2] * ms), "comm_exposed",
                                 mnt_json_num(ph[3] * ms), "optimizer", mnt_json_num(ph[4] * ms));
        st = mnt_json_append(metrics, mpath, line); /* a full disk stops the run here, loudly */
        json_decref(line);
        if (st) break;
      }
      memset(ph, 0, sizeof ph);
      iv_loss = iv_t1 = iv_n = 0;
      iv_t0 = mnt_now();
    }
    if (have_val && (end_epoch || step + 1 == total)) {
      double vl, v1, v5, te = mnt_now();
      if ((st = evaluate(w, c, m, &val, o.size, out_channels, o.val_crop, &vl, &v1, &v5)) != MNT_OK) break;
      val_top1 = v1;
      if (w->rank == 0) {
        printf("epoch %.2f validation: loss %.4f top1 %.4f top5 %.4f (%lld samples)\n", epoch_f + 1.0 / per_epoch, vl, v1,
               v5, (long long)val.total);
        fflush(stdout);
        json_t *line = json_pack("{s:I, s:o, s:o, s:o, s:o}", "step", (json_int_t)step + 1, "epoch",
                                 mnt_json_num(epoch_f + 1.0 / per_epoch), "val_loss", mnt_json_num(vl), "val_top1",
                                 mnt_json_num(v1), "val_top5", mnt_json_num(v5));
        st = mnt_json_append(metrics, mpath, line);
        json_decref(line);
        if (st) break;
      }
      double dt = mnt_now() - te; /* evaluation is not training: kept out of the throughput */
      eval_s += dt;
      if (step >= warm) eval_timed_s += dt;
      iv_t0 = mnt_now();
    }
  }
  if (st == MNT_OK) {
    double t_end = mnt_now();
    int64_t timed = total - warm;
    double span = (timed > 0 && t_after_warmup > 0 ? t_end - t_after_warmup : t_end - t_start) -
                  (timed > 0 && t_after_warmup > 0 ? eval_timed_s : eval_s);
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
          "{s:s, s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:o, s:o,"
          " s:{s:o, s:o, s:o}, s:{s:o, s:o, s:o, s:o, s:o}, s:I, s:o, s:s, s:o, s:o, s:I, s:o, s:o}",
          "version", MNT_VERSION, "arch", o.arch, "image_size", o.size, "device", "cpu", "comm", c->ops->name,
          "topology", mnt_topology_name(c->topology), "ranks", w->size, "nodes", w->nnodes, "ranks_per_node", rpn,
          "threads_per_rank", o.threads > 0 ? o.threads : omp_get_max_threads(), "batch_per_rank", o.batch,
          "global_batch", (json_int_t)B, "steps", (json_int_t)total, "img_per_s", mnt_json_num(ips),
          "img_per_s_per_rank", mnt_json_num(ips / w->size), "step_ms", "mean", mnt_json_num(mean), "p50",
          mnt_json_num(step_ms[warm + timed / 2]), "p95",
          mnt_json_num(step_ms[warm + (int64_t)(0.95 * (double)(timed - 1))]), "phases_ms", "data",
          mnt_json_num(ph_all[0] * 1e3 / timed), "forward", mnt_json_num(ph_all[1] * 1e3 / timed), "backward",
          mnt_json_num(ph_all[2] * 1e3 / timed), "comm_exposed", mnt_json_num(ph_all[3] * 1e3 / timed), "optimizer",
          mnt_json_num(ph_all[4] * 1e3 / timed), "grad_bytes", (json_int_t)(m->nw * 4), "allreduce_busbw_gbs",
          mnt_json_num(busbw), "slurm_job_id", w->jobid, "loss", mnt_json_num(last_loss), "top1",
          mnt_json_num(last_top1), "skipped_steps", (json_int_t)skipped, "train_seconds", mnt_json_num(span),
          "eval_seconds", mnt_json_num(eval_s));
      if (sm && !isnan(val_top1)) json_object_set_new(sm, "val_top1", mnt_json_num(val_top1));
      st = mnt_json_save(o.out, "summary.json", sm);
      json_decref(sm);
      if (st == MNT_OK && o.export_path) st = mnt_export_h5(m, o.export_path);
      if (st == MNT_OK) {
        printf("mntrain train: done: %lld steps, %.1f img/s (%.1f per rank; %.1f s of evaluation apart), loss %.4f, "
               "top1 %.4f; %s/summary.json\n",
               (long long)total, ips, ips / w->size, eval_s, last_loss, last_top1, o.out);
        if (!isnan(val_top1)) printf("mntrain train: validation top1 %.4f\n", val_top1);
        if (o.export_path) printf("mntrain train: weights in %s\n", o.export_path);
      }
    }
  }
out:
  if (metrics && fclose(metrics) != 0 && st == MNT_OK) {
    MNT_ERR("%s: cannot write: %s", mpath, strerror(errno));
    st = MNT_ESYS;
  }
  free(ov.b);
  free(xbuf);
  free(step_ms);
  mnt_loader_close(ld);
  mnt_comm_destroy(c);
  mnt_resnet_destroy(m);
  mnt_backend_destroy(be);
  if (have_val) mnt_dataset_close(&val);
  if (have_train) mnt_dataset_close(&train);
  return st;
}
