/* cmd/train_options.c — `mntrain train`'s command line: the option table (each choice an
 * MNT_OPT_ENUM whose words come from its name table: help, parsing and config.json read the same
 * names), the defaults, and the options checked against each other (see train_internal.h). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "src/args.h"
#include "src/check.h"
#include "src/cmd/train_internal.h"
#include "src/env.h"
#include "src/log.h"

const char *const mnt_train_loss_names[MNT_NLOSS] = {"abort", "shrink"};

/* the choices' words, made from their name tables; they outlive the parse (--help prints them) */
static struct {
  char sched[128], bn_eval[128], device[64], prec[64], comm[64], topo[64], gdt[64], loss[64];
  char optim_help[2200]; /* from the optimizers' table (train/optim.h) */
} mv;

static void make_metavars(void) {
  static const char *const prec[MNT_NPREC] = MNT_PRECISION_NAMES;
  mnt_choices(mv.sched, sizeof mv.sched, mnt_sched_names, MNT_NSCHED);
  mnt_choices(mv.bn_eval, sizeof mv.bn_eval, mnt_bn_eval_names, MNT_NBN_EVAL);
  mnt_choices(mv.device, sizeof mv.device, mnt_device_names, MNT_NDEVICE);
  mnt_choices(mv.prec, sizeof mv.prec, prec, MNT_NPREC);
  mnt_choices(mv.comm, sizeof mv.comm, mnt_comm_names, MNT_NCOMM);
  mnt_choices(mv.topo, sizeof mv.topo, mnt_topology_names, MNT_NTOPO);
  mnt_choices(mv.gdt, sizeof mv.gdt, mnt_grad_dtype_names, 3);
  mnt_choices(mv.loss, sizeof mv.loss, mnt_train_loss_names, MNT_NLOSS);
  snprintf(mv.optim_help, sizeof mv.optim_help, "%s (default %s)", mnt_optim_help(), mnt_optim_name(MNT_OPTIM_SGD));
}

/* rows[0..k) appended to table at n; the new count */
static int append(mnt_opt *table, int n, const mnt_opt *rows, size_t k) {
  memcpy(table + n, rows, k * sizeof *rows);
  return n + (int)k;
}
#define APPEND(table, n, rows) append(table, n, rows, sizeof rows / sizeof rows[0])

/* the data, the model, the schedule and the optimizer */
static int model_rows(opts *o, mnt_opt *table, int n) {
  mnt_train_cfg *c = &o->t;
  const mnt_opt rows[] = {
      {"data", 0, MNT_OPT_PATH, &c->data, "DIR", "training set (mntrain convert), required", 0, 0},
      {"val", 0, MNT_OPT_PATH, &c->val, "DIR", "validation set, evaluated every --eval-every epochs and at the end", 0,
       0},
      {"eval-every", 0, MNT_OPT_DOUBLE, &o->eval_every, "E",
       "epochs between evaluations of --val, fractions allowed "
       "(default 1)",
       MNT_RANGE(1e-6, 1e6)},
      {"target-top1", 0, MNT_OPT_DOUBLE, &o->target_top1, "X",
       "stop when validation top-1 reaches X (a fraction: 0.759), recording the step, epoch and wall time "
       "(MLPerf's time to accuracy) in metrics.jsonl and summary.json; needs --val; a run keeps its target",
       MNT_RANGE(0, 1)},
      {"arch", 0, MNT_OPT_STRING, &c->arch, "A", "resnet8|20|18|34|50|101 (default resnet50)", 0, 0},
      {"size", 0, MNT_OPT_INT, &c->size, "S", "training crop in pixels (default 224)", MNT_RANGE(1, 4096)},
      {"batch-per-rank", 0, MNT_OPT_INT, &c->batch, "B",
       "images per rank per step (default 32; on resume: the checkpoint's global batch / ranks)",
       MNT_RANGE(1, 1 << 20)},
      {"epochs", 0, MNT_OPT_INT, &c->epochs, "E", "epochs to train (default 1 unless --steps)", MNT_RANGE(0, 1e6)},
      {"steps", 0, MNT_OPT_INT, &c->steps, "N", "steps to train instead of whole epochs", MNT_RANGE(0, 2e9)},
      {"lr", 0, MNT_OPT_DOUBLE, &c->lr, "LR", "learning rate per 256 images (linear scaling; default 0.1)",
       MNT_RANGE(0, 1000)},
      {"warmup-epochs", 0, MNT_OPT_DOUBLE, &c->warmup_epochs, "W", "linear warm-up (default 0)", MNT_RANGE(0, 1e6)},
      {"schedule", 0, MNT_OPT_ENUM, &c->schedule, mv.sched,
       "decay after warm-up: x0.1 at 1/3, 2/3, 8/9 of the run; cosine to 0; poly: (1-t)^2 to 0; slow-start (Akiba et "
       "al. "
       "2017): 0.5 of the peak to 40/90 of the run, then 0.075, 0.01 and 0.001 of it at 70/90 and 85/90 (default step)",
       0, 0},
      {"optimizer", 0, MNT_OPT_ENUM, &c->optimizer, mnt_optim_choices(), mv.optim_help, 0, 0},
      {"lars-eta", 0, MNT_OPT_DOUBLE, &c->lars_eta, "ETA", "LARS trust coefficient (default 0.001)",
       MNT_RANGE(1e-9, 1)},
      {"rmsprop-warmup", 0, MNT_OPT_STRING, &o->rmsprop_warmup, "C:P",
       "rmsprop-warmup's blend in epochs: SGD's weight exp(2(e-C)/P)/2 before epoch C, then 1/2 + (e-C)/P up to 1 "
       "(default: 10:5 of 90 epochs, Akiba et al. 2017, as fractions of the run)",
       0, 0},
      {"rmsprop-lr", 0, MNT_OPT_DOUBLE, &c->rms_lr, "LR",
       "rmsprop-warmup: the RMSprop term's rate, (1 - SGD's weight) x LR per unit of normalised gradient, not "
       "scaled with the batch; momentum makes its step about 1/(1 - momentum) times that (default 1e-4)",
       MNT_RANGE(0, 10)},
      {"momentum", 0, MNT_OPT_DOUBLE, &c->momentum, "M", "SGD momentum (default 0.9)", MNT_RANGE(0, 1)},
      {"wd", 0, MNT_OPT_DOUBLE, &c->wd, "WD", "weight decay (default 1e-4)", MNT_RANGE(0, 1)},
      {"no-bn-decay", 0, MNT_OPT_FLAG, &c->no_bn_decay, NULL, "no weight decay on BN parameters and biases", 0, 0},
      {"zero-init-residual", 0, MNT_OPT_FLAG, &c->zero_init, NULL, "zero the last BN of each residual branch", 0, 0},
      {"min-crop", 0, MNT_OPT_DOUBLE, &c->min_scale, "F", "RandomResizedCrop's smallest area (default 0.08)",
       MNT_RANGE(0.01, 1)},
      {"pad-crop", 0, MNT_OPT_INT, &c->pad_crop, "P", "RandomCrop(size, padding=P) + flip instead (small images)",
       MNT_RANGE(0, 4095)},
      {"val-crop", 0, MNT_OPT_DOUBLE, &c->val_crop, "F", "validation centre crop, fraction of the side (default 0.875)",
       MNT_RANGE(0.05, 1)},
      {"label-smoothing", 0, MNT_OPT_DOUBLE, &c->smoothing, "E", "train against (1-E) onehot + E/classes (default 0)",
       MNT_RANGE(0, 0.999)},
      {"bn-eval", 0, MNT_OPT_ENUM, &c->bn_eval, mv.bn_eval,
       "BN statistics for evaluation, checkpoints and --export: running averages (momentum 0.1); the last training "
       "batch's (Akiba et al. 2017); or recomputed from the current weights over the batches of the last "
       "--bn-recompute-batches steps before each evaluation and at the end (\"precise BN\"); averaged over ranks "
       "(default running)",
       0, 0},
      {"bn-recompute-batches", 0, MNT_OPT_INT, &c->bn_batches, "N",
       "--bn-eval recompute: training batches per rank (default 16)", MNT_RANGE(1, 1 << 20)},
  };
  return APPEND(table, n, rows);
}

/* the device, the communicator, the run's outputs */
static int run_rows(opts *o, mnt_opt *table, int n) {
  mnt_train_cfg *c = &o->t;
  const mnt_opt rows[] = {
      {"device", 0, MNT_OPT_ENUM, &c->device, mv.device,
       "where to compute: cpu (oneDNN) or cuda (cuDNN, one GPU per rank by local rank); auto, as in every command: "
       "cuda where a GPU is visible and this mntrain has the CUDA backend, else cpu; --comm cpu or nccl decides it "
       "(default auto)",
       0, 0},
      {"precision", 0, MNT_OPT_ENUM, &c->precision, mv.prec,
       "activations and the inputs of convolutions and the fully connected layer (weights, momentum, BN statistics, "
       "the loss and the gradients stay fp32); auto: bf16 on GPUs (Ampere and newer) and on CPUs with bf16 "
       "instructions, else fp32 (default fp32; "
       "README: Precision)",
       0, 0},
      {"cuda-graph", 0, MNT_OPT_ENUM, &c->cuda_graph, "off|on",
       "on: every step after the first runs from its forward to its update as one graph: with --device cuda captured "
       "once per upload lane as a CUDA graph (kernels, cuDNN, cuBLAS and NCCL's collectives; needs --comm nccl) and "
       "replayed, the host waiting once per step; with --device cpu run as a graph would hold it, its rules checked "
       "(the same results as off; default off)",
       0, 0},
      {"comm", 0, MNT_OPT_ENUM, &c->comm, mv.comm, "communicator (default auto: nccl with --device cuda)", 0, 0},
      {"topology", 0, MNT_OPT_ENUM, &c->topology, mv.topo, "allreduce topology (default flat)", 0, 0},
      {"grad-dtype", 0, MNT_OPT_ENUM, &c->grad_dtype, mv.gdt,
       "allreduce precision (default fp32; bf16 halves the bytes, but its partial sums are rounded at every ring step: "
       "~1.3% off at 128 ranks, see benchmarks/README.md)",
       0, 0},
      {"bucket-mb", 0, MNT_OPT_DOUBLE, &c->bucket_mb, "M", "allreduce bucket size in MB (default 25)",
       MNT_RANGE(0.001, 1e6)},
      {"threads", 0, MNT_OPT_INT, &o->threads, "T",
       "compute threads per rank (default: OMP_NUM_THREADS, else the rank's share of the node's CPUs: MNT_CPU_BIND)",
       MNT_RANGE(0, 4096)},
      {"loader-threads", 0, MNT_OPT_INT, &c->loader_threads, "T", "prefetch threads per rank (default 2)",
       MNT_RANGE(1, 256)},
      {"seed", 0, MNT_OPT_INT, &c->seed, "S", "seed of weights, data order and augmentation (default 1)", MNT_ANY_INT},
      {"out", 0, MNT_OPT_PATH, &o->out, "DIR", "output directory (default mntrain-out); must not hold an earlier run",
       0, 0},
      {"force", 0, MNT_OPT_FLAG, &o->force, NULL,
       "start over: replace an earlier run's outputs in --out and its checkpoints in --ckpt-dir", 0, 0},
      {"log-every", 0, MNT_OPT_INT, &o->log_every, "N", "progress and metrics every N steps (default 10)",
       MNT_RANGE(1, 2e9)},
      {"timestamps", 0, MNT_OPT_FLAG, &o->timestamps, NULL,
       "start each progress line (steps, validation, checkpoints) with the UTC time, as metrics.jsonl's \"time\"", 0,
       0},
      {"skip-nonfinite", 0, MNT_OPT_FLAG, &c->skip_nonfinite, NULL, "skip a step with NaN/Inf gradients", 0, 0},
      {"bn-batch", 0, MNT_OPT_INT, &c->bn_batch, "N",
       "batch-norm statistics over groups of N images (default: the batch per rank; on resume the checkpoint's)",
       MNT_RANGE(0, 1 << 20)},
      {"export", 0, MNT_OPT_PATH, &o->export_path, "FILE.h5", "write the final weights (torchvision names) to HDF5", 0,
       0},
      {"init", 0, MNT_OPT_PATH, &o->init, "FILE.h5",
       "start from these weights (an --export file or a checkpoint's state.h5; checked by name and shape)", 0, 0},
  };
  return APPEND(table, n, rows);
}

/* checkpoints, a lost rank, the trace */
static int ckpt_rows(opts *o, mnt_opt *table, int n) {
  const mnt_opt rows[] = {
      {"ckpt-dir", 0, MNT_OPT_PATH, &o->ckpt_dir, "DIR",
       "checkpoints (step-NNNNNNNN/state.h5 + MANIFEST.json) on a shared filesystem (default OUT/ckpt when any "
       "checkpoint flag is given)",
       0, 0},
      {"ckpt-every-steps", 0, MNT_OPT_INT, &o->ckpt_steps, "K", "a checkpoint every K steps (and at the end)",
       MNT_RANGE(0, 2e9)},
      {"ckpt-every-minutes", 0, MNT_OPT_DOUBLE, &o->ckpt_minutes, "M", "a checkpoint every M minutes (rank 0's clock)",
       MNT_RANGE(0, 1e7)},
      {"keep", 0, MNT_OPT_INT, &o->keep, "N", "checkpoints kept, newest first (default 2)", MNT_RANGE(1, 1e6)},
      {"resume", 0, MNT_OPT_PATH, &o->resume, "auto|PATH|none",
       "auto: the newest valid checkpoint in --ckpt-dir, else a fresh start (default with checkpoints); PATH: that "
       "checkpoint; none: never (default without)",
       0, 0},
      {"ckpt-stripe", 0, MNT_OPT_SIZE2, &o->stripe, "BYTES",
       "alignment and share granularity of checkpoint writes, a power of two (default 1M: a parallel filesystem's "
       "stripe)",
       MNT_RANGE(4096, 1ull << 30)},
      {"no-ckpt-verify", 0, MNT_OPT_FLAG, &o->no_verify, NULL, "resume without checking the checkpoint's checksums", 0,
       0},
      {"stop-after", 0, MNT_OPT_INT, &o->stop_after, "N",
       "stop after N steps of this job with a checkpoint, as if preempted (exit 3)", MNT_RANGE(0, 2e9)},
      {"sample-log", 0, MNT_OPT_FLAG, &o->sample_log, NULL,
       "each rank writes the global sample ids of every step to OUT/samples-rank-RRRRR.txt (audits)", 0, 0},
      {"on-rank-loss", 0, MNT_OPT_ENUM, &o->on_rank_loss, mv.loss,
       "when a rank dies or stops answering (MNT_COMM_TIMEOUT): abort takes the job down (the template requeues it "
       "and it resumes from its last checkpoint); shrink: the survivors agree on who is gone, split the same global "
       "batch among themselves, commit a checkpoint and go on (with nccl: not yet run on a GPU; default: "
       "MNT_ON_RANK_LOSS, else abort)",
       0, 0},
      {"min-ranks", 0, MNT_OPT_INT, &o->min_ranks, "N",
       "with shrink: fewer ranks left than N end the job with a checkpoint and exit 3, for a requeue at full size "
       "(default: half the ranks at the start)",
       MNT_RANGE(1, 1 << 24)},
      {"trace", 0, MNT_OPT_PATH, &o->trace_dir, "DIR",
       "each rank writes the timeline of --trace-steps (every thread's spans: the step's phases, the gradient "
       "buckets, the loader, the communicator) to DIR/trace-rank-RRRRR.json, at the end, at a stop and on a "
       "failure; mntrain report --trace DIR merges them (default: MNT_TRACE)",
       0, 0},
      {"trace-steps", 0, MNT_OPT_STRING, &o->trace_steps, "A:B",
       "the steps --trace records, as the progress lines number them (default: the three after warm-up)", 0, 0},
  };
  return APPEND(table, n, rows);
}

void mnt_train_defaults(opts *o) {
  *o = (opts){.t = {.arch = "resnet50",
                    .lars_eta = 0.001,
                    .rms_center = -1,
                    .rms_period = -1,
                    .rms_lr = 1e-4,
                    .bn_batches = 0,
                    .comm = MNT_COMM_AUTO,
                    .device = MNT_DEVICE_AUTO,
                    .precision = MNT_PREC_FP32,
                    .schedule = MNT_SCHED_STEP,
                    .optimizer = MNT_OPTIM_SGD,
                    .bn_eval = MNT_BN_EVAL_RUNNING,
                    .topology = MNT_TOPO_FLAT,
                    .grad_dtype = MNT_FP32,
                    .size = 224,
                    .batch = 0,
                    .epochs = 0,
                    .steps = 0,
                    .seed = 1,
                    .lr = 0.1,
                    .warmup_epochs = 0,
                    .bucket_mb = 25,
                    .momentum = 0.9,
                    .wd = 1e-4,
                    .min_scale = 0.08,
                    .val_crop = 0.875,
                    .loader_threads = 2},
              .on_rank_loss = -1, /* MNT_ON_RANK_LOSS, else abort (validate) */
              .out = "mntrain-out",
              .log_every = 10,
              .keep = 2,
              .stripe = 1 << 20,
              .eval_every = 1,
              .target_top1 = -1 /* none (0 given is refused) */};
}

/* the options checked against each other (a usage error, quiet on ranks other than 0), and the
 * defaults that follow from others filled in. *ckpt_on: checkpoints wanted */
static int validate(opts *o, int *ckpt_on) {
  mnt_train_cfg *c = &o->t;
  const char *bad = NULL;
  *ckpt_on =
      o->ckpt_dir || o->ckpt_steps || o->ckpt_minutes > 0 || o->stop_after || (o->resume && strcmp(o->resume, "none"));
  if (!c->data) bad = "--data DIR is required";
  else if (!mnt_resnet_known(c->arch))
    return mnt_usage_error("train", "--arch: one of %s, not '%s'", mnt_resnet_arch_names(), c->arch);
  else if (c->pad_crop >= c->size) bad = "--pad-crop must be smaller than --size";
  else if (c->bn_batch && c->batch && c->batch % c->bn_batch) bad = "--bn-batch must divide --batch-per-rank";
  else if (o->target_top1 == 0)
    bad = "--target-top1: a fraction above 0 and at most 1 (0.759): every evaluation reaches 0";
  else if (o->target_top1 > 0 && !c->val) bad = "--target-top1 needs --val DIR (the set it is measured on)";
  else if (o->force && o->resume && strcmp(o->resume, "none"))
    bad = "--force starts the run over: it cannot be combined with --resume auto|PATH";
  if (!o->trace_dir && mnt_env_trace() && mnt_env_trace()[0]) o->trace_dir = mnt_env_trace();
  if (o->on_rank_loss < 0) { /* not given: MNT_ON_RANK_LOSS (env.c checked its words, any case), else abort */
    const char *env = mnt_env_on_rank_loss();
    o->on_rank_loss = MNT_LOSS_ABORT;
    for (int i = 0; env && i < MNT_NLOSS; i++)
      if (!strcasecmp(env, mnt_train_loss_names[i])) o->on_rank_loss = i;
  }
  if (!bad && o->min_ranks && o->on_rank_loss != MNT_LOSS_SHRINK) bad = "--min-ranks goes with --on-rank-loss shrink";
  if (!bad && o->rmsprop_warmup) {
    double a = -1, b = -1;
    char tail = 0;
    if (sscanf(o->rmsprop_warmup, "%lf:%lf%c", &a, &b, &tail) != 2 || !(a >= 0) || !(b > 0) || a > 1e6 || b > 1e6)
      bad = "--rmsprop-warmup: C:P in epochs, C >= 0 and P > 0 (10:5 is the paper's for 90 epochs)";
    else c->rms_center = a, c->rms_period = b;
  }
  if (!bad && o->rmsprop_warmup && c->optimizer != MNT_OPTIM_RMSPROP_WARMUP)
    bad = "--rmsprop-warmup goes with --optimizer rmsprop-warmup";
  if (!bad && c->bn_batches && c->bn_eval != MNT_BN_EVAL_RECOMPUTE)
    bad = "--bn-recompute-batches goes with --bn-eval recompute";
  if (!bad && o->trace_steps) {
    long long a = 0, b = 0;
    char tail = 0;
    if (sscanf(o->trace_steps, "%lld:%lld%c", &a, &b, &tail) != 2 || a < 1 || b < a)
      bad = "--trace-steps: A:B, the first and the last step traced (1 <= A <= B)";
    else if (b - a >= 10000) bad = "--trace-steps: at most 10000 steps (a trace is for a window, not a run)";
    else o->trace_first = a, o->trace_last = b;
    if (!bad && !o->trace_dir) bad = "--trace-steps needs --trace DIR (or MNT_TRACE)";
  }
  if (bad) return mnt_usage_error("train", "%s (see mntrain train --help)", bad);
  /* the paths config.json and the checkpoints record: JSON text is UTF-8 */
  const struct {
    const char *flag, *v;
  } paths[] = {{"--data", c->data},          {"--val", c->val},   {"--out", o->out},       {"--ckpt-dir", o->ckpt_dir},
               {"--export", o->export_path}, {"--init", o->init}, {"--resume", o->resume}, {"--trace", o->trace_dir}};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    json_t *j = paths[i].v ? json_string(paths[i].v) : NULL;
    json_decref(j);
    if (paths[i].v && !j)
      return mnt_usage_error("train",
                             "%s: the path is not UTF-8 (config.json, which records it, is JSON text): "
                             "rename it, or reach it through a link whose name is UTF-8",
                             paths[i].flag);
  }
  if (!o->resume) o->resume = *ckpt_on && !o->force ? "auto" : "none";
  if (*ckpt_on && !o->ckpt_dir) {
    snprintf(o->ckpt_buf, sizeof o->ckpt_buf, "%s/ckpt", o->out);
    o->ckpt_dir = o->ckpt_buf;
  }
  if (!c->epochs && !c->steps) c->epochs = 1;
  if (c->bn_eval == MNT_BN_EVAL_RECOMPUTE && !c->bn_batches) c->bn_batches = 16;
  return MNT_OK;
}

int mnt_train_options(opts *o, int argc, char **argv, int quiet, int *help, int *ckpt_on) {
  mnt_opt table[64];
  make_metavars();
  int n = ckpt_rows(o, table, run_rows(o, table, model_rows(o, table, 0)));
  table[n] = (mnt_opt){NULL, 0, 0, NULL, NULL, NULL, 0, 0};
  MNT_CHECK(mnt_parse_opts("train", table, argc, argv, help, quiet));
  if (*help && !quiet)
    mnt_print_help(stdout,
                   "srun --mpi=pmix mntrain train --data DIR [--val DIR] --arch A --size S --batch-per-rank B ...",
                   "Data-parallel training over all ranks of the job (one process per CPU socket or GPU).\n"
                   "Writes OUT/config.json at the start, OUT/metrics.jsonl while it trains and OUT/summary.json\n"
                   "when it ends; an --out that holds an earlier run is refused unless --force or resumed.\n"
                   "--out and --ckpt-dir must be your own (not writable by others), and hold one run at a time\n"
                   "(DIR/mntrain.lock: a second job on them is refused, naming the first).\n"
                   "Checkpoints (any --ckpt-* flag): written by all ranks into one HDF5 file, committed by a\n"
                   "manifest; SIGUSR1/SIGTERM commit the checkpoint in flight at once, then stop every rank after\n"
                   "the same step with a checkpoint (exit 3), and the same command line resumes the run, on any\n"
                   "rank count that divides the global batch.",
                   table);
  if (*help) return MNT_OK;
  return validate(o, ckpt_on);
}
