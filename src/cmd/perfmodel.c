/* perfmodel.c — `mntrain model`, the performance model (src/model/ is the ResNet): predicted step
 * time and weak-scaling efficiency of data-parallel training for 1 ... 4,096 GPUs, from a measured
 * single-rank step and a network description.
 *
 * The model (every time in seconds, every size in bytes, GB = 1e9 B):
 *
 *   T(P) = T_data + T_fwd + T_bwd + T_opt + T_other + exposed(P)          (per-GPU batch fixed)
 *   E(P) = T(1) / T(P)              img/s per GPU = batch / T(P), job img/s = P * batch / T(P)
 *
 * T_* come from summary.json (phases_ms; T_other = step_ms.mean - comm_exposed - the phases, at
 * least 0), from a preset or from flags. The gradient has G elements of 4 bytes (fp32) or 2
 * (bf16): S = G * bytes per element. Ranks fill nodes of L = --gpus-per-node: N = ceil(P / L)
 * nodes of P / N ranks. A node has --nics-per-node NICs of bus bandwidth B (--bw-gbs each) and
 * latency a (--alpha-us); inside a node the bus bandwidth is Bi and the latency ai. Allreduce of
 * s bytes over P ranks (0 for P = 1):
 *   ring (flat, as nccl and mntrain's flat topology):
 *     N = 1: 2(P-1) ai + 2(P-1)/P s / Bi
 *     N > 1: 2(P-1) a  + 2(P-1)/P s / (nics B)      (every ring step waits for the slowest hop)
 *   tree (latency-bound, double binary tree): 2 log2(P) a + 2 s / (nics B)   (ai, Bi when N = 1)
 *   hier (ChainerMN's two-dimensional allreduce): reduce-scatter inside the node, allreduce of
 *     s/L across the N nodes by each of the L local ranks (sharing the node's NICs), allgather
 *     inside the node:  2(L-1) ai + 2(L-1)/L s / Bi  +  2(N-1) a + 2(N-1)/N s / (nics B)
 * Bus bandwidth is nccl-tests' busbw (algbw * 2(n-1)/n): what one link sustains.
 *
 * Buckets (the trainer's reducer): buckets of --bucket-mb * 1e6 / 4 elements (counted in
 * elements, as src/comm/reducer.c does, so a bf16 bucket has half the bytes), the remainder last.
 * With overlap, backward produces the gradient at a uniform rate: bucket i is ready at
 * T_bwd * (elements up to and including i) / G; allreduces run one at a time in order, each
 * starting at max(ready, end of the one before); exposed = max(0, end of the last - T_bwd). So
 * when every bucket's allreduce is shorter than the backward time it takes to produce the next,
 * only the last bucket's allreduce is exposed. Without overlap (ChainerMN 2017: the whole
 * gradient packed into one buffer after backward) the gradient is one allreduce of S and exposed
 * = that time. Casts to and from bf16 and the optimizer's share of memory bandwidth are ignored.
 *
 * Calibration (--calibrate): rows of `mntrain bench allreduce` or nccl-tests' all_reduce_perf
 * (size count type [redop root] time algbw busbw #wrong [time ...]: the out-of-place time in us, or
 * with --inplace the in-place one where the table has it) give (s, t) for a
 * run of P ranks on n nodes; the rows of all files of one level (n = 1: inside a node; n > 1:
 * between nodes) are fitted by weighted least squares, t = alpha * 2(P-1) + beta * 2(P-1)/P * s,
 * weights 1/t^2 (relative error, so small and large messages count alike); alpha < 0 is clamped
 * to 0. Bandwidth = 1/beta (divided by --nics-per-node between nodes). The tables are read and
 * fitted in cmd/perfmodel_fit.c; summary.json is read by src/runsum.c. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cmd/cmd.h"
#include "src/args.h"
#include "src/comm/comm.h" /* mnt_busbw_factor */
#include "src/check.h"
#include "src/log.h"
#include "src/cmd/perfmodel_fit.h"
#include "src/runsum.h"

enum { TOPO_RING, TOPO_TREE, TOPO_HIER, NTOPO };
static const char *const TOPO_NAME[NTOPO] = {"ring", "tree", "hier"};

/* one input of the model: its value and where it came from (printed with the table) */
typedef struct {
  double v;
  char from[512];
} input;

typedef struct {
  input data, fwd, bwd, opt, other; /* ms of one GPU's step, no communication */
  input grad_bytes;                 /* fp32 gradient bytes */
  input batch;                      /* images per GPU and step */
  input bucket_mb;
  input alpha_us, bw_gbs, intra_alpha_us, intra_bw_gbs, gpn, nics;
} inputs;

typedef struct {
  double alpha, bw, ialpha, ibw; /* seconds, bytes per second */
  double gpn, nics;
} net;

typedef struct {
  double t0;           /* seconds of the step without communication, backward included */
  double bwd;          /* seconds of backward */
  double elems;        /* gradient elements */
  double bucket_elems; /* elements per bucket */
  double batch;
} work;

/* ---- presets: every input with its source ------------------------------------------------- */
typedef struct {
  const char *name, *about;
  double data, fwd, bwd, opt, grad_bytes, batch, bucket_mb;
  const char *src_step, *src_grad, *src_batch;
  double alpha_us, bw_gbs, intra_alpha_us, intra_bw_gbs, gpn, nics;
  const char *src_inter, *src_intra, *src_node;
  const char *topology, *overlap, *grad_dtype, *src_algo;
} preset;

/* ResNet-50: 25,557,032 parameters (He et al. 2015, arXiv 1512.03385; torchvision resnet50) ->
 * 102,228,128 bytes of fp32 gradient. */
static const preset PRESETS[] = {
    {"chainermn-paper",
     "ChainerMN (Akiba, Fukuda, Suzuki, arXiv 1710.11351) as modelled here: ResNet-50, 32 images per GPU, 128 GPUs, "
     "4 per node, InfiniBand FDR 4X; the paper reports 90% parallel efficiency at 128 GPUs",
     0.0, 77.3, 154.5, 0.0, 102228128.0, 32, 25,
     "P100 step at 32 images: 231.8 ms = 32 / 138 img/s; 138 img/s per P100 = 90 epochs of ImageNet-1k "
     "(1,281,167 images) in 29 h on 8 P100 (Goyal et al., arXiv 1706.02677, Caffe2, real data; NVIDIA blog "
     "'Facebook trains ImageNet in 1 hour'); split forward:backward = 1:2 (backward ~ 2x forward FLOPs); data "
     "loading and the optimizer are inside it (assumption)",
     "ResNet-50 has 25,557,032 parameters (arXiv 1512.03385; torchvision): 102,228,128 B of fp32 gradient",
     "32 images per GPU (arXiv 1710.11351)",
     10.0, 6.0, 5.0, 10.0, 4, 1,
     "InfiniBand FDR 4X: 56 Gb/s signalling, 64b/66b coding -> 54.5 Gb/s = 6.8 GB/s per direction; bus bandwidth "
     "6.0 GB/s (~88% of it) and alpha 10 us per ring step of CUDA-aware MPI (assumptions); one NIC per node",
     "4 P100 per node on PCIe gen3 x16 (15.75 GB/s): NCCL ring bus bandwidth 10 GB/s, alpha 5 us (assumptions)",
     "4 GPUs per node, 32 nodes for 128 GPUs (128 GPUs: arXiv 1710.11351; 4 P100 per node: assumption)",
     "hier", "off", "fp32",
     "ChainerMN 2017: NCCL inside a node, MPI between nodes (hierarchical / two-dimensional communicators); "
     "allreduce after backward, fp32 (double buffering and FP16 allreduce came in ChainerMN v1.2/v1.3, 2018: "
     "chainer.org blog 2018-05-25)"},
    {"h200-ndr",
     "mntrain's design on H100/H200-class GPUs: ResNet-50, bf16 compute, 256 images per GPU, 8 GPUs per node "
     "on NVLink, one NDR 400 Gb/s NIC per GPU",
     0.0, 26.5, 53.0, 0.5, 102228128.0, 256, 25,
     "step 80 ms at 256 images = 3,200 img/s per GPU, bf16/mixed precision ResNet-50 (assumption, inside "
     "NVIDIA's published H100 range of ~3,000-3,500 img/s); forward:backward = 1:2, 0.5 ms fused SGD, data on "
     "prefetch threads (0 ms)",
     "ResNet-50 has 25,557,032 parameters (arXiv 1512.03385; torchvision): 102,228,128 B of fp32 gradient",
     "256 images per GPU (assumption: a size that fills an H100 for ResNet-50)",
     5.0, 47.0, 2.0, 450.0, 8, 8,
     "NDR InfiniBand 400 Gb/s = 50 GB/s per direction (line rate); bus bandwidth 47 GB/s per NIC, inside the 46-48 "
     "GB/s NCCL's developers expect nccl-tests to report on NDR (github.com/NVIDIA/nccl-tests/issues/290; not "
     "measured here); one NIC per GPU (8 per node, rail-optimized); alpha 5 us per inter-node ring step (assumption)",
     "NVLink 4 / NVSwitch: 900 GB/s per GPU in total (NVIDIA H100/H200 datasheets) = 450 GB/s per direction, taken "
     "as the bus bandwidth inside a node (assumption: NCCL's developers give ~370 GB/s for a ring, ~480 GB/s with "
     "NVLink SHARP on 8 GPUs, github.com/NVIDIA/nccl-tests/issues/212); alpha 2 us (assumption)",
     "8 GPUs per node (HGX H100/H200)", "hier", "both", "both",
     "mntrain: bucketed allreduce overlapped with backward (--bucket-mb 25), bf16 gradients (--grad-dtype bf16), "
     "hierarchical topology; each variant shown"},
};

static void set_in(input *in, double v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_in(input *in, double v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  in->v = v;
  vsnprintf(in->from, sizeof in->from, fmt, ap);
  va_end(ap);
}

/* ---- allreduce time -------------------------------------------------------------------------- */
/* nccl-tests' bus bandwidth factor 2(n-1)/n: mnt_busbw_factor of comm/comm.h, for a real n, as
 * hier's ranks per node P / N need not be whole (5 ranks, 4 per node: 2 nodes of 2.5) */
static double busbw_factor(double n) {
  return n >= 0 && n <= 1e9 && n == (int)n ? mnt_busbw_factor((int)n) : 2.0 * (n - 1) / n;
}

/* a ring over p ranks: 2(p-1) steps of latency alpha, and each rank moves 2(p-1)/p of the bytes at
 * bus bandwidth bw */
static double ring_time(double p, double bytes, double alpha, double bw) {
  return p <= 1 ? 0.0 : 2.0 * (p - 1) * alpha + busbw_factor(p) * bytes / bw;
}

static double allreduce_time(const net *n, int topo, int p, double bytes) {
  if (p <= 1 || bytes <= 0) return 0.0;
  double nodes = ceil((double)p / n->gpn), local = (double)p / nodes;
  double node_bw = n->nics * n->bw;
  if (nodes <= 1) {
    if (topo == TOPO_TREE) return 2.0 * log2((double)p) * n->ialpha + 2.0 * bytes / n->ibw;
    return ring_time(p, bytes, n->ialpha, n->ibw);
  }
  switch (topo) {
    case TOPO_TREE: return 2.0 * log2((double)p) * n->alpha + 2.0 * bytes / node_bw;
    case TOPO_HIER:
      return ring_time(local, bytes, n->ialpha, n->ibw) + 2.0 * (nodes - 1) * n->alpha +
             busbw_factor(nodes) * bytes / node_bw;
    default: return ring_time(p, bytes, n->alpha, node_bw);
  }
}

/* total allreduce time of a step and what of it backward does not hide (seconds) */
static void comm_time(const work *wk, const net *n, int topo, int p, double elem_bytes, int overlap, double *total,
                      double *exposed) {
  *total = *exposed = 0;
  if (p <= 1) return;
  if (!overlap) {
    *total = *exposed = allreduce_time(n, topo, p, wk->elems * elem_bytes);
    return;
  }
  double done = 0, end = 0;
  while (done < wk->elems) {
    double e = fmin(wk->bucket_elems, wk->elems - done);
    done += e;
    double ready = wk->bwd * done / wk->elems, t = allreduce_time(n, topo, p, e * elem_bytes);
    end = fmax(ready, end) + t;
    *total += t;
  }
  *exposed = fmax(0.0, end - wk->bwd);
}

/* ---- inputs from files ----------------------------------------------------------------------- */
static double jnum(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

/* the step of a run from its summary.json (read in s, src/runsum.h), and the bucket size and
 * gradient type from config.json beside it */
static int step_of_summary(const char *path, const mnt_run_summary *s, inputs *in, char *dtype, size_t ndtype) {
  const double *ph = s->num + MNT_RS_PHASE;
  double d = ph[0], f = ph[1], b = ph[2], c = ph[3], o = ph[4], mean = s->num[MNT_RS_STEP_MS_MEAN],
         g = s->num[MNT_RS_GRAD_BYTES], bt = s->num[MNT_RS_BATCH_PER_RANK], ranks = s->num[MNT_RS_RANKS];
  if (!(isfinite(d) && isfinite(f) && isfinite(b) && isfinite(o) && isfinite(mean) && g > 0 && bt > 0)) {
    MNT_ERR("%s: not a summary.json of mntrain train (phases_ms, step_ms.mean, grad_bytes, batch_per_rank)", path);
    return MNT_EARG;
  }
  if (!isfinite(c)) c = 0;
  double other = fmax(0.0, mean - c - d - f - b - o);
  set_in(&in->data, d, "%s phases_ms.data", path);
  set_in(&in->fwd, f, "%s phases_ms.forward", path);
  set_in(&in->bwd, b, "%s phases_ms.backward", path);
  set_in(&in->opt, o, "%s phases_ms.optimizer", path);
  set_in(&in->other, other, "%s: step_ms.mean - comm_exposed - phases (%g ranks)", path, ranks);
  set_in(&in->grad_bytes, g, "%s grad_bytes", path);
  set_in(&in->batch, bt, "%s batch_per_rank", path);
  /* config.json beside it: the bucket size and gradient type that run used */
  char cp[4096];
  const char *slash = strrchr(path, '/');
  snprintf(cp, sizeof cp, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
  json_t *cfg = json_load_file(cp, 0, NULL);
  if (cfg) {
    double bm = jnum(cfg, "bucket_mb");
    if (bm > 0) set_in(&in->bucket_mb, bm, "%s bucket_mb", cp);
    json_t *gd = json_object_get(cfg, "grad_dtype");
    if (json_is_string(gd) && dtype) snprintf(dtype, ndtype, "%s", json_string_value(gd));
    json_decref(cfg);
  }
  return MNT_OK;
}

/* --summary FILE: its step (step_of_summary) */
static int read_summary(const char *path, inputs *in, char *dtype, size_t ndtype) {
  mnt_run_summary s;
  if (mnt_run_summary_read(path, &s) != MNT_OK) {
    if (s.parsed) MNT_ERR("%s: not a summary.json of mntrain train (phases_ms, step_ms.mean, grad_bytes, "
                          "batch_per_rank)", path);
    else MNT_ERR("%s: %s (line %d)", path, s.err, s.err_line);
    return MNT_EARG;
  }
  return step_of_summary(path, &s, in, dtype, ndtype);
}

/* a network description: {"alpha_us", "bw_gbs", "intra_alpha_us", "intra_bw_gbs", "gpus_per_node",
 * "nics_per_node"}, any subset */
static int read_net(const char *path, inputs *in) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  if (!j || !json_is_object(j)) {
    MNT_ERR("%s: %s", path, j ? "not a JSON object" : je.text);
    json_decref(j);
    return MNT_EARG;
  }
  static const char *const keys[] = {"alpha_us", "bw_gbs", "intra_alpha_us", "intra_bw_gbs", "gpus_per_node",
                                     "nics_per_node"};
  input *dst[] = {&in->alpha_us, &in->bw_gbs, &in->intra_alpha_us, &in->intra_bw_gbs, &in->gpn, &in->nics};
  const char *key;
  json_t *v;
  int st = MNT_OK;
  json_object_foreach(j, key, v) {
    size_t k = 0;
    while (k < 6 && strcmp(key, keys[k])) k++;
    double x = json_is_number(v) ? json_number_value(v) : NAN;
    if (k == 6 || !(x >= 0) || (k != 0 && k != 2 && !(x > 0))) {
      MNT_ERR("%s: key '%s': %s", path, key, k == 6 ? "unknown (alpha_us, bw_gbs, intra_alpha_us, intra_bw_gbs, "
                                                      "gpus_per_node, nics_per_node)"
                                                    : "not a positive number");
      st = MNT_EARG;
      break;
    }
    set_in(dst[k], x, "%s %s", path, key);
  }
  json_decref(j);
  return st;
}

/* ---- calibration (cmd/perfmodel_fit.c): alpha and bandwidth of each level into the inputs ---------- */
static int calibrate(char *files, int inplace, inputs *in, FILE *out) {
  mnt_calib acc[2];
  memset(acc, 0, sizeof acc);
  int st = MNT_OK;
  char *save = NULL;
  for (char *f = strtok_r(files, ",", &save); f && st == MNT_OK; f = strtok_r(NULL, ",", &save))
    st = mnt_calib_read(f, in->gpn.v, inplace, acc);
  for (int lv = 0; lv < 2 && st == MNT_OK; lv++) {
    if (!acc[lv].files) continue;
    double alpha, beta, rms;
    if ((st = mnt_calib_fit(&acc[lv], &alpha, &beta, &rms)) != MNT_OK) break;
    input *ia = lv ? &in->alpha_us : &in->intra_alpha_us, *ib = lv ? &in->bw_gbs : &in->intra_bw_gbs;
    double bw = 1.0 / beta / 1e9 / (lv ? in->nics.v : 1.0);
    set_in(ia, alpha * 1e6, "fitted to %d rows of %s; rms relative residual %.2f%%", acc[lv].rows, acc[lv].names,
           100 * rms);
    set_in(ib, bw, "fitted to %d rows of %s%s", acc[lv].rows, acc[lv].names, lv ? ", per NIC" : "");
    fprintf(out,
            "# calibration, %s: alpha %.9g us, bus bandwidth %.9g GB/s%s (%d rows, rms relative residual %.3g%%)\n",
            lv ? "between nodes" : "inside a node", ia->v, bw, lv ? " per NIC" : "", acc[lv].rows, 100 * rms);
  }
  mnt_calib_free(acc);
  return st;
}

/* ---- output ---------------------------------------------------------------------------------- */
static void net_of(const inputs *in, net *n) {
  n->alpha = in->alpha_us.v * 1e-6;
  n->bw = in->bw_gbs.v * 1e9;
  n->ialpha = in->intra_alpha_us.v * 1e-6;
  n->ibw = in->intra_bw_gbs.v * 1e9;
  n->gpn = in->gpn.v;
  n->nics = in->nics.v;
}

static void work_of(const inputs *in, work *wk) {
  wk->t0 = (in->data.v + in->fwd.v + in->bwd.v + in->opt.v + in->other.v) * 1e-3;
  wk->bwd = in->bwd.v * 1e-3;
  wk->elems = in->grad_bytes.v / 4.0;
  wk->bucket_elems = fmax(1.0, floor(in->bucket_mb.v * 1e6 / 4.0));
  wk->batch = in->batch.v;
}

/* the inputs from the first row on (0: all; NET_ROWS: the network's only) */
enum { NET_ROWS = 8 };
static void print_inputs(const inputs *in, const char *about, size_t first) {
  if (about) printf("# %s\n", about);
  struct {
    const char *name, *unit;
    const input *in;
  } rows[] = {{"data", "ms", &in->data},
              {"forward", "ms", &in->fwd},
              {"backward", "ms", &in->bwd},
              {"optimizer", "ms", &in->opt},
              {"other", "ms", &in->other},
              {"gradient", "B fp32", &in->grad_bytes},
              {"batch", "img/GPU", &in->batch},
              {"bucket", "MB", &in->bucket_mb},
              {"gpus/node", "", &in->gpn},
              {"nics/node", "", &in->nics},
              {"alpha", "us between nodes", &in->alpha_us},
              {"bus bw", "GB/s per NIC", &in->bw_gbs},
              {"intra alpha", "us inside a node", &in->intra_alpha_us},
              {"intra bus bw", "GB/s inside a node", &in->intra_bw_gbs}};
  /* each input with a note number; each distinct source once, below */
  const char *notes[16];
  int nn = 0;
  size_t nrows = sizeof rows / sizeof rows[0];
  for (size_t i = first; i < nrows; i++) {
    int k = 0;
    while (k < nn && strcmp(notes[k], rows[i].in->from)) k++;
    if (k == nn) notes[nn++] = rows[i].in->from;
    printf("#   %-12s %14.10g %-18s [%d]\n", rows[i].name, rows[i].in->v, rows[i].unit, k + 1);
  }
  for (int k = 0; k < nn; k++) printf("#   [%d] %s\n", k + 1, notes[k]);
}

static int parse_gpus(const char *s, int *out, int max, int *n) {
  *n = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > (1 << 20) || *n == max || (*end && *end != ',')) return -1;
    out[(*n)++] = (int)v;
    s = *end ? end + 1 : end;
  }
  return *n ? 0 : -1;
}

/* "a|b|both" (or "all") -> a bit mask of the choices */
static int parse_choice(const char *s, const char *const *names, int n, const char *all) {
  if (!strcmp(s, all)) return (1 << n) - 1;
  for (int i = 0; i < n; i++)
    if (!strcmp(s, names[i])) return 1 << i;
  return 0;
}

/* predicted against measured: each summary.json of a sweep at its own ranks and ranks per node */
static int compare(char *files, const inputs *in0, double tol) {
  int st = MNT_OK, worse = 0;
  char *save = NULL;
  printf("# measured (summary.json) against predicted: overlap on (the trainer's reducer), the run's topology,"
         " gradient type and ranks per node\n");
  printf("# %-5s %5s %5s %5s %12s %12s %8s  %s\n", "ranks", "nodes", "topo", "grad", "measured(ms)", "model(ms)",
         "error", "run");
  for (char *f = strtok_r(files, ",", &save); f && st == MNT_OK; f = strtok_r(NULL, ",", &save)) {
    mnt_run_summary s;
    if (mnt_run_summary_read(f, &s) != MNT_OK && !s.parsed) {
      MNT_ERR("%s: %s", f, s.err);
      st = MNT_EARG;
      break;
    }
    double ranks = s.num[MNT_RS_RANKS], rpn = s.num[MNT_RS_RANKS_PER_NODE], mean = s.num[MNT_RS_STEP_MS_MEAN];
    int topo = !strcmp(s.topology, "hier") ? TOPO_HIER : TOPO_RING;
    if (!(ranks >= 1 && rpn >= 1 && mean > 0)) {
      MNT_ERR("%s: no ranks, ranks_per_node or step_ms.mean", f);
      st = MNT_EARG;
      break;
    }
    inputs in = *in0;
    char dtype[16] = "fp32";
    inputs dummy = in;
    /* the run's own config.json says its gradient type; its phases are not used */
    if ((st = step_of_summary(f, &s, &dummy, dtype, sizeof dtype)) != MNT_OK) break;
    in.bucket_mb = dummy.bucket_mb;
    in.gpn.v = rpn;
    net n;
    work wk;
    net_of(&in, &n);
    work_of(&in, &wk);
    double total, exposed, eb = strcmp(dtype, "fp32") ? 2.0 : 4.0;
    comm_time(&wk, &n, topo, (int)ranks, eb, 1, &total, &exposed);
    double pred = (wk.t0 + exposed) * 1e3, err = (pred - mean) / mean * 100;
    if (tol > 0 && fabs(err) > tol) worse++;
    printf("%-7d %5.0f %5s %5s %12.2f %12.2f %+7.1f%%  %s\n", (int)ranks, ceil(ranks / rpn), TOPO_NAME[topo], dtype,
           mean, pred, err, f);
  }
  if (st == MNT_OK && worse) {
    MNT_ERR("%d run(s) off by more than --tolerance %g%%", worse, tol);
    st = MNT_EDATA;
  }
  return st;
}

/* ---- mnt_perfmodel_main: the command's steps ----------------------------------------------------- */
/* the command line: where the inputs come from, flag overrides and what to print */
typedef struct {
  const char *preset_s, *summary, *netfile, *calib, *measured, *gpus_s, *topo_s, *overlap_s, *dtype_s, *allreduce_s;
  double f_data, f_fwd, f_bwd, f_opt, f_grad, f_bucket, f_alpha, f_bw, f_ialpha, f_ibw, tol;
  int f_batch, f_gpn, f_nics, csv, inplace, help;
} model_args;

/* the variants and GPU counts of the tables */
typedef struct {
  int topos, ovs, dts; /* bit masks of TOPO_NAME, ONOFF, DT */
  int gpus[64], ngpus;
} variants;

static const char *const ONOFF[] = {"off", "on"}, *const DT[] = {"fp32", "bf16"};

/* parse the options into *a (a->help set: --help printed); nonzero: the parser's error status */
static int parse_options(model_args *a, int argc, char **argv) {
  memset(a, 0, sizeof *a);
  a->gpus_s = "1,2,4,8,16,32,64,128,256,512,1024,2048,4096";
  a->f_data = a->f_fwd = a->f_bwd = a->f_opt = a->f_grad = a->f_bucket = NAN;
  a->f_alpha = a->f_bw = a->f_ialpha = a->f_ibw = NAN;
  a->f_batch = a->f_gpn = a->f_nics = -1;
  const mnt_opt opts[] = {
      {"preset", 0, MNT_OPT_STRING, &a->preset_s, "NAME",
       "inputs with their sources: chainermn-paper (the paper's 128-GPU run) or h200-ndr", 0, 0},
      {"summary", 0, MNT_OPT_PATH, &a->summary, "FILE",
       "summary.json of a run: phases, step time, gradient bytes, batch (and config.json beside it)", 0, 0},
      {"net", 0, MNT_OPT_PATH, &a->netfile, "FILE",
       "network JSON: alpha_us, bw_gbs, intra_alpha_us, intra_bw_gbs, gpus_per_node, nics_per_node", 0, 0},
      {"calibrate", 0, MNT_OPT_STRING, &a->calib, "F1,F2,..",
       "fit alpha and bandwidth to `mntrain bench allreduce` or nccl-tests outputs (one node: intra, more: inter)",
       0, 0},
      {"inplace", 0, MNT_OPT_FLAG, &a->inplace, NULL,
       "--calibrate from the in-place columns (as the trainer's reducer runs; default out-of-place)", 0, 0},
      {"measured", 0, MNT_OPT_STRING, &a->measured, "S1,S2,..",
       "summary.json files of runs to compare with the model's step time (a fit to a sweep)", 0, 0},
      {"tolerance", 0, MNT_OPT_DOUBLE, &a->tol, "PCT",
       "with --measured: exit 1 when a run is off by more (0: no check)", MNT_RANGE(0, 1e6)},
      {"gpus", 0, MNT_OPT_STRING, &a->gpus_s, "LIST", "GPU counts of the rows (default 1,2,4,...,4096)", 0, 0},
      {"topology", 0, MNT_OPT_CHOICE, &a->topo_s, "ring|tree|hier|all", "allreduce algorithm (default: the preset's, else ring)",
       0, 0},
      {"overlap", 0, MNT_OPT_CHOICE, &a->overlap_s, "on|off|both",
       "allreduce buckets during backward (default: the preset's, else both)", 0, 0},
      {"grad-dtype", 0, MNT_OPT_CHOICE, &a->dtype_s, "fp32|bf16|both",
       "gradient type of the allreduce (default: the preset's or the run's, else both)", 0, 0},
      {"bucket-mb", 0, MNT_OPT_DOUBLE, &a->f_bucket, "MB", "bucket size in MB of fp32 elements (default 25)",
       MNT_RANGE(1e-6, 1e9)},
      {"alpha-us", 0, MNT_OPT_DOUBLE, &a->f_alpha, "US", "latency per allreduce step between nodes",
       MNT_RANGE(0, 1e9)},
      {"bw-gbs", 0, MNT_OPT_DOUBLE, &a->f_bw, "GB/s", "bus bandwidth per NIC between nodes", MNT_RANGE(1e-9, 1e9)},
      {"intra-alpha-us", 0, MNT_OPT_DOUBLE, &a->f_ialpha, "US", "latency per allreduce step inside a node",
       MNT_RANGE(0, 1e9)},
      {"intra-bw-gbs", 0, MNT_OPT_DOUBLE, &a->f_ibw, "GB/s", "bus bandwidth inside a node", MNT_RANGE(1e-9, 1e9)},
      {"gpus-per-node", 0, MNT_OPT_INT, &a->f_gpn, "L", "ranks per node (default 1)", MNT_RANGE(1, 1 << 20)},
      {"nics-per-node", 0, MNT_OPT_INT, &a->f_nics, "K", "NICs per node, each of --bw-gbs (default 1)",
       MNT_RANGE(1, 1024)},
      {"data-ms", 0, MNT_OPT_DOUBLE, &a->f_data, "MS", "data wait per step", MNT_RANGE(0, 1e9)},
      {"forward-ms", 0, MNT_OPT_DOUBLE, &a->f_fwd, "MS", "forward per step", MNT_RANGE(0, 1e9)},
      {"backward-ms", 0, MNT_OPT_DOUBLE, &a->f_bwd, "MS", "backward per step (the window overlap can use)",
       MNT_RANGE(0, 1e9)},
      {"optimizer-ms", 0, MNT_OPT_DOUBLE, &a->f_opt, "MS", "optimizer per step", MNT_RANGE(0, 1e9)},
      {"grad-bytes", 0, MNT_OPT_DOUBLE, &a->f_grad, "B", "fp32 gradient bytes (4 per parameter)",
       MNT_RANGE(4, 1e15)},
      {"batch", 0, MNT_OPT_INT, &a->f_batch, "B", "images per GPU and step", MNT_RANGE(1, 1e9)},
      {"csv", 0, MNT_OPT_FLAG, &a->csv, NULL, "comma-separated rows, full precision, no header comments", 0, 0},
      {"allreduce", 0, MNT_OPT_STRING, &a->allreduce_s, "SIZES",
       "instead of step times: the predicted time and bus bandwidth of one allreduce of each size (8,64M) per GPU "
       "count, to set against `mntrain bench allreduce`",
       0, 0},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int st = mnt_parse_opts("model", opts, argc, argv, &a->help, 0);
  if (st || !a->help) return st;
  mnt_print_help(
      stdout, "mntrain model (--preset NAME | --summary summary.json | --forward-ms .. --backward-ms ..) [options]",
      "Predict step time and weak-scaling efficiency E(P) = T(1)/T(P) of data-parallel training (fixed batch\n"
      "per GPU) from a measured single-rank step and a network description; runs anywhere, no job needed.\n"
      "  T(P) = data + forward + backward + optimizer + other + exposed allreduce time\n"
      "  allreduce of s bytes, P ranks, N nodes of L, link latency a (ai inside a node), bus bandwidth B per\n"
      "  NIC x K NICs (Bi inside a node):\n"
      "    ring: 2(P-1) a + 2(P-1)/P s/(K B)          (ai, Bi when N = 1)\n"
      "    tree: 2 log2(P) a + 2 s/(K B)\n"
      "    hier: 2(L-1) ai + 2(L-1)/L s/Bi + 2(N-1) a + 2(N-1)/N s/(K B)   (reduce-scatter, allreduce, allgather)\n"
      "  overlap on: buckets of --bucket-mb become ready at a uniform rate over backward, allreduces run one\n"
      "  at a time; exposed = end of the last one - end of backward. overlap off: one allreduce of the whole\n"
      "  gradient after backward, all exposed. bf16 halves the bytes. Bus bandwidth as nccl-tests' busbw.\n"
      "Inputs, later ones win: --preset, --summary, --net, --calibrate, flags; each is printed with its source.\n"
      "--calibrate fits a and B by weighted least squares (relative error) to allreduce tables, mntrain's or\n"
      "nccl-tests' layout; --measured compares the model with runs of a sweep.\n"
      "Rows start with the GPU count and end with the efficiency as NN.N%; one table per variant.",
      opts);
  return MNT_OK;
}

/* the built-in defaults, each with its source */
static void set_defaults(inputs *in) {
  memset(in, 0, sizeof *in);
  set_in(&in->bucket_mb, 25, "default (mntrain train --bucket-mb)");
  set_in(&in->gpn, 1, "default");
  set_in(&in->nics, 1, "default");
  set_in(&in->alpha_us, 0, "default: no network given");
  set_in(&in->bw_gbs, 1, "default: no network given");
  set_in(&in->intra_alpha_us, 0, "default: no network given");
  set_in(&in->intra_bw_gbs, 1, "default: no network given");
}

/* --preset NAME: every input from the preset, with its source; NULL: no such preset */
static const preset *apply_preset(const char *name, inputs *in) {
  const preset *ps = NULL;
  for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
    if (!strcmp(name, PRESETS[i].name)) ps = &PRESETS[i];
  if (!ps) return NULL;
  set_in(&in->data, ps->data, "%s", ps->src_step);
  set_in(&in->fwd, ps->fwd, "%s", ps->src_step);
  set_in(&in->bwd, ps->bwd, "%s", ps->src_step);
  set_in(&in->opt, ps->opt, "%s", ps->src_step);
  set_in(&in->other, 0, "%s", ps->src_step);
  set_in(&in->grad_bytes, ps->grad_bytes, "%s", ps->src_grad);
  set_in(&in->batch, ps->batch, "%s", ps->src_batch);
  set_in(&in->bucket_mb, ps->bucket_mb, "%s", ps->src_algo);
  set_in(&in->gpn, ps->gpn, "%s", ps->src_node);
  set_in(&in->nics, ps->nics, "%s", ps->src_inter);
  set_in(&in->alpha_us, ps->alpha_us, "%s", ps->src_inter);
  set_in(&in->bw_gbs, ps->bw_gbs, "%s", ps->src_inter);
  set_in(&in->intra_alpha_us, ps->intra_alpha_us, "%s", ps->src_intra);
  set_in(&in->intra_bw_gbs, ps->intra_bw_gbs, "%s", ps->src_intra);
  return ps;
}

/* the per-input flags over everything before them; 1 when one of them gives a step phase */
static int apply_flags(const model_args *a, inputs *in) {
  struct {
    double v;
    input *in;
    const char *flag;
  } fl[] = {{a->f_data, &in->data, "--data-ms"},
            {a->f_fwd, &in->fwd, "--forward-ms"},
            {a->f_bwd, &in->bwd, "--backward-ms"},
            {a->f_opt, &in->opt, "--optimizer-ms"},
            {a->f_grad, &in->grad_bytes, "--grad-bytes"},
            {a->f_bucket, &in->bucket_mb, "--bucket-mb"},
            {a->f_alpha, &in->alpha_us, "--alpha-us"},
            {a->f_bw, &in->bw_gbs, "--bw-gbs"},
            {a->f_ialpha, &in->intra_alpha_us, "--intra-alpha-us"},
            {a->f_ibw, &in->intra_bw_gbs, "--intra-bw-gbs"},
            {a->f_batch > 0 ? a->f_batch : NAN, &in->batch, "--batch"}};
  int have_step = 0;
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
    if (!isnan(fl[i].v)) {
      set_in(fl[i].in, fl[i].v, "%s", fl[i].flag);
      if (i < 4) have_step = 1;
    }
  return have_step;
}

/* the inputs, later sources winning: defaults, --preset, --summary, --net, --calibrate, flags; checked */
static int gather_inputs(const model_args *a, inputs *in, const preset **ps, char *run_dtype, size_t ndtype) {
  int st, have_step = 0;
  set_defaults(in);
  *ps = NULL;
  if (a->preset_s) {
    if (!(*ps = apply_preset(a->preset_s, in)))
      return mnt_usage_error("model", "--preset: chainermn-paper or h200-ndr");
    have_step = 1;
  }
  if (a->summary) {
    MNT_CHECK(read_summary(a->summary, in, run_dtype, ndtype));
    have_step = 1;
  }
  if (a->netfile && (st = read_net(a->netfile, in)) != MNT_OK) return st;
  /* flags: the network shape first (calibration needs gpus and NICs per node), then the rest */
  if (a->f_gpn > 0) set_in(&in->gpn, a->f_gpn, "--gpus-per-node");
  if (a->f_nics > 0) set_in(&in->nics, a->f_nics, "--nics-per-node");
  if (a->calib) {
    char *c = strdup(a->calib);
    if (!c) return MNT_ENOMEM;
    st = calibrate(c, a->inplace, in, a->csv ? stderr : stdout);
    free(c);
    if (st) return st;
  }
  if (apply_flags(a, in)) have_step = 1;
  if (!in->other.from[0]) set_in(&in->other, 0, "none");
  for (input *p = &in->data; p <= &in->opt; p++)
    if (!p->from[0]) set_in(p, 0, "not given: 0");
  const char *bad = NULL;
  if (a->allreduce_s) bad = NULL; /* one allreduce needs the network only */
  else if (!have_step) bad = "give the step: --preset, --summary or --forward-ms/--backward-ms";
  else if (!(in->grad_bytes.v >= 4)) bad = "give the gradient: --grad-bytes (or --summary, --preset)";
  else if (!(in->batch.v >= 1)) bad = "give the batch per GPU: --batch (or --summary, --preset)";
  else if (!(in->fwd.v + in->bwd.v + in->data.v + in->opt.v + in->other.v > 0)) bad = "the step takes no time";
  if (bad) return mnt_usage_error("model", "%s (see mntrain model --help)", bad);
  return MNT_OK;
}

/* --measured: the inputs, then each run's measured step against the model's */
static int run_measured(const char *measured, const inputs *in, double tol) {
  char *m = strdup(measured);
  if (!m) return MNT_ENOMEM;
  print_inputs(in, NULL, 0);
  int st = compare(m, in, tol);
  free(m);
  return st;
}

/* --topology, --overlap, --grad-dtype (defaults: the preset's or the run's) and --gpus into *v */
static int parse_variants(const model_args *a, const preset *ps, const char *run_dtype, variants *v) {
  const char *topo_s = a->topo_s, *overlap_s = a->overlap_s, *dtype_s = a->dtype_s, *bad = NULL;
  if (!topo_s) topo_s = ps ? ps->topology : "ring";
  if (!overlap_s) overlap_s = ps ? ps->overlap : "both";
  if (!dtype_s) dtype_s = ps ? ps->grad_dtype : run_dtype[0] ? run_dtype : "both";
  v->topos = parse_choice(topo_s, TOPO_NAME, NTOPO, "all");
  v->ovs = parse_choice(overlap_s, ONOFF, 2, "both");
  v->dts = parse_choice(dtype_s, DT, 2, "both");
  if (!v->topos) bad = "--topology: ring, tree, hier or all";
  else if (!v->ovs) bad = "--overlap: on, off or both";
  else if (!v->dts) bad = "--grad-dtype: fp32, bf16 or both";
  else if (parse_gpus(a->gpus_s, v->gpus, 64, &v->ngpus))
    bad = "--gpus: up to 64 counts from 1 to 1048576, e.g. 1,8,128";
  if (bad) return mnt_usage_error("model", "%s", bad);
  return MNT_OK;
}

/* the CSV header line, or the comment header: what the inputs came from and each input */
static void print_header(const model_args *a, const preset *ps, const inputs *in) {
  if (a->csv) {
    printf("topology,overlap,grad_dtype,gpus,nodes,step_ms,comm_ms,exposed_ms,img_per_s_per_gpu,img_per_s,"
           "efficiency\n");
    return;
  }
  printf("# mntrain model: %s%s\n", ps ? "preset " : "", ps ? ps->name : a->summary ? a->summary : "flags");
  print_inputs(in, ps ? ps->about : NULL, 0);
  if (ps) printf("#   %-12s %s\n", "algorithm", ps->src_algo);
}

/* one table: a row per GPU count for topology t, overlap ov, gradient type dt */
static void print_table(const work *wk, const net *n, const variants *v, int t, int ov, int dt, int csv) {
  double eb = dt ? 2.0 : 4.0, t1 = wk->t0;
  double nb = ceil(wk->elems / wk->bucket_elems);
  if (!csv) {
    printf("#\n# topology %s, overlap %s, gradients %s: %.1f MB in %s%.0f bucket%s\n", TOPO_NAME[t], ONOFF[ov],
           DT[dt], wk->elems * eb / 1e6, ov ? "" : "one allreduce (", ov ? nb : 1.0, ov ? (nb == 1 ? "" : "s") : ")");
    printf("# %-5s %6s %10s %10s %11s %10s %11s %10s\n", "gpus", "nodes", "step(ms)", "comm(ms)", "exposed(ms)",
           "img/s/GPU", "img/s", "efficiency");
  }
  for (int i = 0; i < v->ngpus; i++) {
    int p = v->gpus[i];
    double total, exposed;
    comm_time(wk, n, t, p, eb, ov, &total, &exposed);
    double tp = t1 + exposed, nodes = ceil((double)p / n->gpn), eff = 100.0 * t1 / tp;
    if (csv)
      printf("%s,%s,%s,%d,%.0f,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g\n", TOPO_NAME[t], ONOFF[ov], DT[dt], p, nodes,
             tp * 1e3, total * 1e3, exposed * 1e3, wk->batch / tp, p * wk->batch / tp, eff);
    else
      printf("%-7d %6.0f %10.2f %10.2f %11.2f %10.1f %11.0f %9.1f%%\n", p, nodes, tp * 1e3, total * 1e3,
             exposed * 1e3, wk->batch / tp, p * wk->batch / tp, eff);
  }
}

/* --allreduce: one allreduce of each size per GPU count and chosen topology, as bench allreduce
 * reports it (time in us, busbw = size / time * 2(P-1)/P) */
static int print_allreduce(const model_args *a, const inputs *in, const variants *v) {
  net n;
  net_of(in, &n);
  if (!a->csv) {
    print_inputs(in, NULL, NET_ROWS);
    printf("# %-5s %6s %-9s %12s %12s %10s\n", "gpus", "nodes", "topology", "size(B)", "time(us)", "busbw(GB/s)");
  } else {
    printf("topology,gpus,nodes,bytes,time_us,busbw_gbs\n");
  }
  char list[256];
  snprintf(list, sizeof list, "%s", a->allreduce_s);
  char *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t bytes;
    if (mnt_parse_size(tok, &bytes) != 0 || bytes == 0)
      return mnt_usage_error("model", "--allreduce: '%s' is not a size (e.g. 8, 1K, 64M)", tok);
    for (int t = 0; t < NTOPO; t++) {
      if (!(v->topos >> t & 1)) continue;
      for (int i = 0; i < v->ngpus; i++) {
        int p = v->gpus[i];
        double s = allreduce_time(&n, t, p, (double)bytes), nodes = ceil((double)p / n.gpn);
        double busbw = s > 0 ? (double)bytes / s * busbw_factor(p) / 1e9 : 0;
        if (a->csv)
          printf("%s,%d,%.0f,%zu,%.9g,%.9g\n", TOPO_NAME[t], p, nodes, bytes, s * 1e6, busbw);
        else
          printf("%-7d %6.0f %-9s %12zu %12.2f %10.3f\n", p, nodes, TOPO_NAME[t], bytes, s * 1e6, busbw);
      }
    }
  }
  return MNT_OK;
}

/* the header, then one table per chosen variant: topologies in order, overlap on before off, fp32 first */
static void print_tables(const model_args *a, const preset *ps, const inputs *in, const variants *v) {
  net n;
  work wk;
  net_of(in, &n);
  work_of(in, &wk);
  print_header(a, ps, in);
  for (int t = 0; t < NTOPO; t++)
    for (int ov = 1; ov >= 0; ov--)
      for (int dt = 0; dt < 2; dt++)
        if ((v->topos >> t & 1) && (v->ovs >> ov & 1) && (v->dts >> dt & 1)) print_table(&wk, &n, v, t, ov, dt, a->csv);
}

int mnt_perfmodel_main(mnt_world *w, int argc, char **argv) {
  (void)w;
  model_args a;
  int st = parse_options(&a, argc, argv);
  if (st || a.help) return st;
  inputs in;
  const preset *ps;
  char run_dtype[16] = "";
  MNT_CHECK(gather_inputs(&a, &in, &ps, run_dtype, sizeof run_dtype));
  if (a.measured) return run_measured(a.measured, &in, a.tol);
  variants v;
  MNT_CHECK(parse_variants(&a, ps, run_dtype, &v));
  if (a.allreduce_s) return print_allreduce(&a, &in, &v);
  print_tables(&a, ps, &in, &v);
  return MNT_OK;
}
