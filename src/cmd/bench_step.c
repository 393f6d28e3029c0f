/* bench_step.c — `mntrain bench step`: training-step throughput of one process on synthetic input
 * (forward, softmax cross-entropy, backward, SGD update), like benchmarks/peer_step_torch.py. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/args.h"
#include "src/backend/profile.h"
#include "src/cmd/cmd.h"
#include "src/check.h"
#include "src/log.h"
#include "src/model/resnet.h"
#include "src/train/optim.h"
#include "src/sysmem.h"

static double peak_rss_mb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
  if (f) fclose(f);
  return kb / 1024.0;
}

/* what the layers run: the ISA on cpu, each kind's implementations, and the reference ones by name */
static void print_impls(const mnt_resnet *r) {
  static char buf[16384];
  static const struct { mnt_layer_kind kind; const char *what; } KINDS[] = {
      {MNT_LAYER_CONV, "convolution"}, {MNT_LAYER_BN, "batch norm"}, {MNT_LAYER_POOL, "max pool"}};
  if (!strcmp(r->be->name, "cpu")) printf("# CPU ISA (oneDNN): %s\n", mnt_cpu_isa_name());
  for (size_t k = 0; k < sizeof KINDS / sizeof *KINDS; k++)
    if (mnt_resnet_impls(r, KINDS[k].kind, buf, sizeof buf) > 0) printf("# %s: %s\n", KINDS[k].what, buf);
  int slow = mnt_resnet_slow_layers(r, buf, sizeof buf);
  if (slow) printf("# reference implementations (slow) in %d layers: %s\n", slow, buf);
  else printf("# reference implementations: none\n");
}

/* the synthetic batch: uniform [-1, 1) pixels from a seeded LCG, labels spread over the classes */
static void fill_batch(float *x, size_t nx, int32_t *y, int batch, int classes, int seed) {
  uint64_t s = (uint64_t)seed;
  for (size_t i = 0; i < nx; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  for (int i = 0; i < batch; i++) y[i] = (int32_t)((unsigned)(i * 7919) % (unsigned)classes);
}

typedef struct step_args {
  const char *arch;
  int device, precision, graph; /* MNT_DEVICE_*, MNT_PREC_*, 0 off 1 on: MNT_OPT_ENUM rows */
  int size, batch, steps, threads, classes, warmup, seed, profile;
  double seconds;
} step_args;

/* the options into *a; --help printed (*help set) */
static int parse_options(step_args *a, int argc, char **argv, int *help) {
  static const char *const prec[MNT_NPREC] = MNT_PRECISION_NAMES;
  static char devices[64], precisions[64]; /* the choices' words from their name tables (backend.h) */
  mnt_choices(devices, sizeof devices, mnt_device_names, MNT_NDEVICE);
  mnt_choices(precisions, sizeof precisions, prec, MNT_NPREC);
  const mnt_opt opts[] =
      {{"arch", 0, MNT_OPT_STRING, &a->arch, "A",
        "the model: resnet8, resnet20, resnet18, resnet34, resnet50 or resnet101 (default resnet50)", 0, 0},
       {"size", 0, MNT_OPT_INT, &a->size, "S", "image size in pixels (default 224)", MNT_RANGE(1, 4096)},
       {"batch", 0, MNT_OPT_INT, &a->batch, "B", "images per step (default 16)", MNT_RANGE(1, 1 << 20)},
       {"steps", 0, MNT_OPT_INT, &a->steps, "N", "timed steps (default 5)", MNT_RANGE(1, 1e6)},
       {"warmup", 0, MNT_OPT_INT, &a->warmup, "N", "untimed steps first (default 1)", MNT_RANGE(0, 1e6)},
       {"threads", 0, MNT_OPT_INT, &a->threads, "T", "compute threads (default: OpenMP's choice, all cores)",
        MNT_RANGE(0, 4096)},
       {"classes", 0, MNT_OPT_INT, &a->classes, "C", "output classes (default 1000)", MNT_RANGE(1, 1e6)},
       {"seed", 0, MNT_OPT_INT, &a->seed, "N", "seed of weights and data (default 1)", MNT_ANY_INT},
       {"device", 0, MNT_OPT_ENUM, &a->device, devices,
        "where to compute (default cpu; auto, as in every command: cuda where a GPU is visible and this mntrain has "
        "the CUDA backend, else cpu)",
        0, 0},
       {"precision", 0, MNT_OPT_ENUM, &a->precision, precisions,
        "activations and the inputs of convolutions and the fully connected layer (default fp32; auto: bf16 on GPUs "
        "and on CPUs with bf16 instructions)",
        0, 0},
       {"seconds", 0, MNT_OPT_DOUBLE, &a->seconds, "S", "time steps for about S seconds instead of --steps",
        MNT_RANGE(0, 1e6)},
       {"cuda-graph", 0, MNT_OPT_ENUM, &a->graph, "off|on",
        "on: the step after the first captured once as a CUDA graph and replayed (cuda), or run as a graph would hold "
        "it (cpu), as train --cuda-graph (default off)",
        0, 0},
       {"profile", 0, MNT_OPT_FLAG, &a->profile, NULL,
        "time each op alone (a device wait before and after it) and print where the step's time goes, per layer and "
        "per op kind (the step runs slower)",
        0, 0},
       {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  MNT_CHECK(mnt_parse_opts("bench step", opts, argc, argv, help, 0));
  if (*help)
    mnt_print_help(stdout,
                   "mntrain bench step [--arch A] [--size S] [--batch B] [--steps N | --seconds S] [--threads T] "
                   "[--device cpu|cuda|auto] [--precision fp32|bf16|auto] [--cuda-graph on|off] [--profile]",
                   "Training-step throughput on synthetic input: forward, softmax cross-entropy, backward\n"
                   "and SGD update of one process; prints img/s, GFLOP/s (the forward and backward\n"
                   "convolutions and fully connected layer), the peak memory per image, and what the\n"
                   "layers ran: the CPU ISA, each kind's implementations (oneDNN's on cpu, cuDNN's\n"
                   "algorithms and batch-norm mode on cuda) and any layer on a reference implementation.",
                   opts);
  else if (!mnt_resnet_known(a->arch))
    return mnt_usage_error("bench step", "unknown --arch '%s' (%s)", a->arch, mnt_resnet_arch_names());
  else if (a->profile && a->graph)
    return mnt_usage_error("bench step",
                           "--profile waits before and after every op: not inside a --cuda-graph on step");
  return MNT_OK;
}

static int steps(mnt_resnet *r, const step_args *a, const int32_t *y, const mnt_optim_cfg *cfg,
                 const mnt_step_hp *hp_dev, double *total, int *timed, long long reorders[2]);

/* --warmup untimed steps, then --steps (or about --seconds) timed ones of forward, loss, backward
 * and SGD update on the uploaded batch, each printed; the timed seconds and count out */
static int time_steps(mnt_resnet *r, const step_args *a, const int32_t *y, double *total, int *timed,
                      long long reorders[2]) {
  mnt_optim_cfg cfg = {.base_lr = 0.1, .global_batch = a->batch, .epochs = 90, .momentum = 0.9, .weight_decay = 1e-4};
  mnt_step_hp hp, *hp_dev = NULL; /* the step's scalars in backend memory, as the trainer's */
  mnt_optim_scalars(&cfg, 10.0, &hp);
  MNT_CHECK(mnt_be_alloc(r->be, sizeof hp, (void **)&hp_dev));
  int st = mnt_be_copy(r->be, hp_dev, &hp, sizeof hp, MNT_COPY_H2D);
  if (st == MNT_OK) st = steps(r, a, y, &cfg, hp_dev, total, timed, reorders);
  mnt_be_free(r->be, hp_dev);
  return st;
}

/* one step's work on the uploaded batch and labels: forward, loss, backward, update */
static int step_work(mnt_resnet *r, const step_args *a, const mnt_optim_cfg *cfg, const mnt_step_hp *hp_dev,
                     int first) {
  MNT_CHECK(mnt_resnet_forward(r, NULL, 1));
  MNT_CHECK(mnt_resnet_loss_dev(r, r->labels, a->batch, 1));
  MNT_CHECK(mnt_resnet_backward(r));
  return mnt_sgd_update(r, cfg, hp_dev, first, NULL);
}

/* the step as a graph (--cuda-graph on): captured at the first call and replayed (cuda), or run inside
 * a capture each time (cpu: the backend refuses what a graph cannot hold) */
typedef struct graph_step {
  mnt_resnet *r;
  const step_args *a;
  const mnt_optim_cfg *cfg;
  const mnt_step_hp *hp_dev;
} graph_step;
static int graph_step_run(void *ctx) {
  const graph_step *g = ctx;
  return step_work(g->r, g->a, g->cfg, g->hp_dev, 0);
}
static int step_graph(mnt_resnet *r, const step_args *a, const mnt_optim_cfg *cfg, const mnt_step_hp *hp_dev,
                      void **graph) {
  graph_step ctx = {r, a, cfg, hp_dev};
  int captured;
  MNT_CHECK(mnt_be_graph_run(r->be, graph, graph_step_run, &ctx, &captured));
  if (captured) printf("# the step is captured as a CUDA graph, replayed from here\n");
  return MNT_OK;
}

static int steps(mnt_resnet *r, const step_args *a, const int32_t *y, const mnt_optim_cfg *cfg,
                 const mnt_step_hp *hp_dev, double *total, int *timed, long long reorders[2]) {
  *total = 0;
  *timed = 0;
  void *graph = NULL;
  int st = MNT_OK, on = a->graph;
  MNT_CHECK(mnt_be_copy(r->be, r->labels, y, (size_t)a->batch * sizeof *y, MNT_COPY_H2D)); /* once, as the input */
  for (int k = 0; (k < a->warmup + a->steps || (a->seconds > 0 && *total < a->seconds)) && st == MNT_OK; k++) {
    if (k == a->warmup) mnt_be_reorders(r->be, reorders); /* the timed steps' count: after minus before */
    if (a->profile && k == a->warmup) mnt_backend_profile_reset(); /* the timed steps only */
    double t0 = mnt_now();
    float l3[3];
    /* the first step starts the momentum: other work than the rest, never in the graph */
    st = on && k > 0 ? step_graph(r, a, cfg, hp_dev, &graph) : step_work(r, a, cfg, hp_dev, k == 0);
    if (st == MNT_OK) st = mnt_resnet_read_loss(r, l3); /* the read waits for the step */
    if (st != MNT_OK) break;
    double dt = mnt_now() - t0;
    int warm = k < a->warmup;
    if (!warm) *total += dt, (*timed)++;
    if (a->seconds <= 0 || warm || *timed % 20 == 0)
      printf("%s %d/%d: %.3f s, %.2f img/s, loss %.4f\n", warm ? "warm-up" : "step", warm ? k + 1 : *timed,
             warm ? a->warmup : a->seconds > 0 ? 0 : a->steps, dt, a->batch / dt, (double)l3[0] / a->batch);
    fflush(stdout);
  }
  mnt_be_graph_free(r->be, graph);
  long long now[2];
  mnt_be_reorders(r->be, now);
  reorders[0] = now[0] - reorders[0];
  reorders[1] = now[1] - reorders[1];
  return st;
}

/* what --device auto (device_why: mnt_device_auto's reason) and --precision auto became and why
 * (mnt_backend_create's rule), once */
static void say_auto(const step_args *a, const mnt_backend *be, const char *device_why) {
  int cuda = !strcmp(be->name, "cuda"), bf16 = be->precision == MNT_PREC_BF16;
  if (a->device == MNT_DEVICE_AUTO) printf("# --device auto: %s (%s)\n", be->name, device_why);
  if (a->precision == MNT_PREC_AUTO) {
    if (cuda)
      printf("# --precision auto: %s (the GPU is %s)\n", mnt_precision_name(be->precision),
             bf16 ? "Ampere or newer: bf16 tensor cores" : "older than Ampere: no bf16 tensor cores");
    else
      printf("# --precision auto: %s (the CPU has %sbf16 instructions: %s)\n", mnt_precision_name(be->precision),
             bf16 ? "" : "no ", mnt_cpu_isa_name());
  }
  fflush(stdout);
}

int mnt_bench_step_main(mnt_world *w, int argc, char **argv) {
  (void)w; /* one process: no world */
  step_args a = {.arch = "resnet50",
                 .device = MNT_DEVICE_CPU,
                 .precision = MNT_PREC_FP32,
                 .graph = 0,
                 .size = 224,
                 .batch = 16,
                 .steps = 5,
                 .classes = 1000,
                 .warmup = 1,
                 .seed = 1};
  int help = 0, st = parse_options(&a, argc, argv, &help);
  if (st || help) return st;
  mnt_backend_opts bo = {.device = -1, .precision = (mnt_precision)a.precision};
  if (a.threads > 0) omp_set_num_threads(a.threads);
  int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  mnt_backend *be;
  mnt_resnet *r;
  size_t need, nx = (size_t)a.batch * 3 * (size_t)a.size * (size_t)a.size;
  char what[160];
  snprintf(what, sizeof what, "--arch %s at --size %d with --batch %d", a.arch, a.size, a.batch);
  const char *device_why = "";
  mnt_device dev = a.device == MNT_DEVICE_AUTO ? mnt_device_auto(&device_why, 1) : (mnt_device)a.device;
  MNT_CHECK(
      mnt_backend_create(mnt_device_names[dev], &bo, &be)); /* first: the precision auto resolves to sizes the plan */
  say_auto(&a, be, device_why);
  if ((st = mnt_resnet_plan_bytes(a.arch, a.classes, a.size, a.batch, a.batch, be->act_bytes, &need)) == MNT_OK &&
      !strcmp(be->name, "cpu"))
    st = mnt_mem_check(need + nx * sizeof(float), what, 1);
  if (st != MNT_OK) {
    mnt_backend_destroy(be);
    return st;
  }
  if (a.profile && (st = mnt_backend_profile_start(be)) != MNT_OK) { /* before the layers: they are named */
    mnt_backend_destroy(be);
    return st;
  }
  if ((st = mnt_resnet_create(be, a.arch, a.classes, a.size, a.batch, (uint64_t)a.seed, 0, &r)) != MNT_OK) {
    mnt_backend_destroy(be);
    return st; /* the message names the problem; MNT_EARG for bad shapes */
  }
  float *x = malloc(nx * sizeof *x);
  int32_t *y = malloc((size_t)a.batch * sizeof *y);
  if (!x || !y) {
    MNT_ERR("out of memory for a batch of %d images", a.batch);
    st = MNT_ENOMEM;
    goto out;
  }
  fill_batch(x, nx, y, a.batch, a.classes, a.seed);
  double ffwd, fbwd, total = 0;
  int timed = 0;
  long long re[2];
  MNT_CHECK_GOTO(mnt_resnet_flops(a.arch, a.classes, a.size, a.batch, &ffwd, &fbwd), st, out);
  printf("# mntrain bench step: %s, %d px, batch %d, %d classes, %s %s, %d threads, %.1f M parameters, "
         "%.2f GFLOP per step\n",
         a.arch, a.size, a.batch, a.classes, be->name, mnt_precision_name(be->precision), threads, (double)r->nw / 1e6,
         (ffwd + fbwd) / 1e9);
  /* the synthetic batch is uploaded once: the step is compute only, as in peer_step_torch.py */
  MNT_CHECK_GOTO(mnt_act_upload(be, x, mnt_resnet_input(r), a.batch, 3, a.size, a.size), st, out);
  MNT_CHECK_GOTO(time_steps(r, &a, y, &total, &timed, re), st, out);
  printf("%s %d px batch %d threads %d: %.2f img/s (mean of %d steps), %.1f GFLOP/s, peak memory %.1f MB per image "
         "(planned %.1f)\n",
         a.arch, a.size, a.batch, threads, a.batch * timed / total, timed, (ffwd + fbwd) * timed / total / 1e9,
         peak_rss_mb() / a.batch, (double)need / 1048576.0 / a.batch);
  print_impls(r); /* after the steps: a backend may fall back to another algorithm while it runs */
  if (be->ops->reorders)
    printf("# reorders per step: %.0f of weights (into each pass's layout%s), %.0f of activations (layouts that differ "
           "between layers)\n", (double)re[1] / timed, be->precision == MNT_PREC_BF16 ? " and bf16" : "",
           (double)re[0] / timed);
  if (a.profile) mnt_backend_profile_print(stdout, timed, total / timed);
out:
  free(x);
  free(y);
  mnt_resnet_destroy(r);
  mnt_backend_destroy(be);
  return st;
}
