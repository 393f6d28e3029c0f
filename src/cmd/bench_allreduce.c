/* bench_allreduce.c — `mntrain bench allreduce`: nccl-tests' all_reduce_perf for mntrain's
 * communicators, printed in all_reduce_perf's layout (nccl-tests 2.13–2.17: the header lines, the
 * columns "size count type redop root", then "time algbw busbw #wrong" out of place and again in
 * place, "# Out of bounds values : N OK" and "# Avg bus bandwidth    : X" with nothing after the
 * number), so that a script written for nccl-tests parses it unchanged.
 * Per size and per set: one checked run, warm-up, timed iterations; time is the slowest rank's
 * mean (nccl-tests' -a 3; its default averages the ranks); algbw = bytes / time;
 * busbw = algbw * 2(n-1)/n; #wrong summed over ranks; the average busbw is over every measurement
 * of the table, out-of-place and in-place, as nccl-tests takes it.
 * Out of place: the communicator (comm.h) reduces in place only, so out-of-place is what a caller
 * with a separate receive buffer has to do with it: copy send into recv, then the in-place
 * allreduce of recv, timed together. nccl-tests' ncclAllReduce(send, recv) needs no copy; ours
 * does, and the out-of-place columns show what it costs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "src/args.h"
#include "src/cmd/cmd.h"
#include "src/comm/comm.h"
#include "src/backend/backend.h" /* mnt_copy_kind */
#include "src/cuda_module.h"
#include "src/check.h"
#include "src/log.h"

enum { CHUNK = 4096 }; /* elements converted at a time */

typedef struct bench {
  mnt_comm *c;
  mnt_dtype t;
  mnt_redop op;
  int rank, size, gpu; /* gpu: send and recv are GPU memory (nccl), host is the staging copy */
  const mnt_cuda_module *cu; /* gpu: the CUDA module's memory calls (the communicator loaded it) */
  void *host, *send, *recv;
} bench;

/* nccl reduces GPU memory: the buffers live there; the check copies in and out */
static int to_device(const bench *b, void *dev, const void *host, size_t bytes) {
  if (dev == host) return MNT_OK;
  if (!b->gpu) {
    memcpy(dev, host, bytes);
    return MNT_OK;
  }
  if (b->cu->mem_copy(dev, host, bytes, MNT_COPY_H2D) == MNT_OK) return MNT_OK;
  MNT_ERR("copying %zu bytes to the GPU failed", bytes);
  return MNT_ESYS;
}
static int from_device(const bench *b, void *host, const void *dev, size_t bytes) {
  if (b->cu->mem_copy(host, dev, bytes, MNT_COPY_D2H) == MNT_OK) return MNT_OK;
  MNT_ERR("copying %zu bytes from the GPU failed", bytes);
  return MNT_ESYS;
}
/* send -> recv before an out-of-place allreduce. On the GPU the copy is on the default stream and
 * the communicator's stream does not wait for it (comm.h: stream NULL means "synchronised"), so
 * the copy is waited for here. */
static int copy_send_recv(const bench *b, size_t bytes) {
  if (!b->gpu) {
    memcpy(b->recv, b->send, bytes);
    return MNT_OK;
  }
  if (b->cu->mem_copy(b->recv, b->send, bytes, MNT_COPY_D2D) == MNT_OK) return MNT_OK;
  MNT_ERR("copying %zu bytes on the GPU failed", bytes);
  return MNT_ESYS;
}

/* Small integers: every partial sum is exact in every type (bf16 up to 15 ranks per value of 8),
 * so the expected result is known exactly on every rank. */
static float pattern(size_t i, int rank) { return (float)((int)((i * 131u + (size_t)rank * 31u) % 17u) - 8); }

static void fill(mnt_dtype t, void *buf, size_t count, int rank) {
  float tmp[CHUNK];
  for (size_t i = 0; i < count; i += CHUNK) {
    size_t n = count - i < CHUNK ? count - i : CHUNK;
    for (size_t j = 0; j < n; j++) tmp[j] = pattern(i + j, rank);
    mnt_from_f32(t, tmp, (char *)buf + i * mnt_dtype_size(t), n); /* exact in every type */
  }
}

/* Elements of buf that differ, bit for bit, from the sum (or average) over ranks rounded the way
 * the communicator rounds it: in fp32 and once to the type, or in fp64 for double. */
static long long count_wrong(mnt_dtype t, mnt_redop op, const void *buf, size_t count, int size) {
  long long wrong = 0;
  size_t es = mnt_dtype_size(t);
  float want_f[CHUNK];
  double want_d[CHUNK];
  uint8_t want[CHUNK * 8];
  for (size_t i = 0; i < count; i += CHUNK) {
    size_t n = count - i < CHUNK ? count - i : CHUNK;
    for (size_t j = 0; j < n; j++) {
      float s = 0; /* exact: small integers */
      for (int r = 0; r < size; r++) s += pattern(i + j, r);
      if (t == MNT_FP64) want_d[j] = op == MNT_AVG ? (double)s / (double)size : (double)s;
      else want_f[j] = op == MNT_AVG ? s / (float)size : s;
    }
    if (t == MNT_FP64) memcpy(want, want_d, n * es);
    else mnt_from_f32(t, want_f, want, n);
    const uint8_t *got = (const uint8_t *)buf + i * es;
    for (size_t j = 0; j < n; j++) wrong += memcmp(got + j * es, want + j * es, es) != 0;
  }
  return wrong;
}

/* One measurement of a row (in place: allreduce(recv); out of place: send -> recv, allreduce(recv)):
 * *sec = this rank's mean time, *wrong = this rank's wrong elements (check) */
static int measure(bench *b, size_t count, int in_place, int check, int warmup, int iters, double *sec,
                   long long *wrong) {
  size_t bytes = count * mnt_dtype_size(b->t);
  *wrong = 0;
  if (check) {
    fill(b->t, b->host, count, b->rank);
    MNT_CHECK(to_device(b, in_place ? b->recv : b->send, b->host, bytes));
    if (!in_place) MNT_CHECK(copy_send_recv(b, bytes));
    MNT_CHECK(mnt_allreduce(b->c, b->recv, count, b->t, b->op));
    const void *result = b->recv;
    if (b->gpu) {
      MNT_CHECK(from_device(b, b->host, b->recv, bytes));
      result = b->host;
    }
    *wrong = count_wrong(b->t, b->op, result, count, b->size);
  }
  for (int i = 0; i < warmup + iters; i++) {
    if (i == warmup) {
      MNT_CHECK(mnt_barrier(b->c));
      *sec = mnt_now();
    }
    if (!in_place) MNT_CHECK(copy_send_recv(b, bytes));
    MNT_CHECK(mnt_allreduce(b->c, b->recv, count, b->t, b->op));
  }
  *sec = (mnt_now() - *sec) / iters;
  return MNT_OK;
}

/* "  time  algbw  busbw  #wrong" of one set, as nccl-tests 2.17 prints it */
static void print_set(double usec, double algbw, double busbw, int check, long long wrong) {
  char ts[32];
  if (usec >= 10000.0) snprintf(ts, sizeof ts, "%7.0f", usec);
  else if (usec >= 100.0) snprintf(ts, sizeof ts, "%7.1f", usec);
  else snprintf(ts, sizeof ts, "%7.2f", usec);
  if (check) printf("  %7s  %6.2f  %6.2f  %5g", ts, algbw, busbw, (double)wrong);
  else printf("  %7s  %6.2f  %6.2f  %5s", ts, algbw, busbw, "N/A");
}

/* "#  Rank  0 Group  0 Pid  1234 on     node1 device  0 [0000:17:00] NVIDIA H100": gathered from every
 * rank, printed by rank 0. The CPU communicator has no device: -1 [0000:00:00] "host memory". */
typedef struct rank_info {
  int pid, device;
  unsigned pci[3];
  char name[96];
} rank_info;

static int print_ranks(mnt_world *w, const bench *b) {
  rank_info me = {.pid = (int)getpid(), .device = -1};
  snprintf(me.name, sizeof me.name, "host memory (comm %s)", b->c->ops->name);
  if (b->gpu && b->cu->device_info(&me.device, me.pci, me.name, sizeof me.name) != MNT_OK) {
    me.device = -1; /* logged; the table says "unknown" */
    snprintf(me.name, sizeof me.name, "unknown GPU (comm %s)", b->c->ops->name);
  }
  rank_info *all = calloc((size_t)w->size, sizeof *all);
  if (!all) return MNT_ENOMEM;
  int st = mnt_world_allgather(w, &me, sizeof me, all);
  if (st == MNT_OK && w->rank == 0) {
    printf("# Using devices\n");
    for (int r = 0; r < w->size; r++) {
      all[r].name[sizeof all[r].name - 1] = 0;
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", r, 0, all[r].pid,
             w->node_name[w->node_of[r]], all[r].device, all[r].pci[0], all[r].pci[1], all[r].pci[2], all[r].name);
    }
  }
  free(all);
  return st;
}

/* the send and receive buffers of the largest message: host memory (cpu), or GPU memory through
 * the CUDA module the communicator loaded (nccl) with b->host as the staging copy */
static int alloc_buffers(bench *b, mnt_world *w, size_t maxb) {
  size_t cap = (maxb + 4095) / 4096 * 4096;
  b->host = aligned_alloc(4096, cap);
  if (!b->host) {
    MNT_ERR("out of memory for a %zu-byte buffer", maxb);
    return MNT_ENOMEM;
  }
  memset(b->host, 0, cap);
  if (!strcmp(b->c->ops->name, "nccl")) {
    b->gpu = 1;
    int st = mnt_cuda_module_load("--comm nccl", &b->cu);
    if (st == MNT_OK && (b->cu->mem_alloc(cap, &b->send) != MNT_OK || b->cu->mem_alloc(cap, &b->recv) != MNT_OK)) {
      MNT_ERR("out of GPU memory for two %zu-byte buffers", maxb);
      st = MNT_ENOMEM;
    }
    return mnt_world_agree(w, st);
  }
  b->send = b->host; /* the check fills send directly and reads recv directly */
  b->recv = aligned_alloc(4096, cap);
  if (!b->recv) {
    MNT_ERR("out of memory for a %zu-byte buffer", maxb);
    return MNT_ENOMEM;
  }
  memset(b->recv, 0, cap);
  return MNT_OK;
}

/* rank 0: nccl-tests' opening lines, and what the ranks are */
static void print_preamble(const mnt_world *w, const bench *b, size_t minb, size_t maxb, double factor, int warmup,
                           int iters, int check) {
  printf("# Collective test starting: mntrain bench allreduce\n");
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d agg iters: %d "
         "validation: %d graph: %d\n",
         1, 1, minb, maxb, factor, "factor", warmup, iters, 1, check, 0);
  printf("# mntrain: %d ranks on %d nodes, comm %s, topology %s; out-of-place = copy to a second buffer + "
         "in-place allreduce\n",
         w->size, w->nnodes, b->c->ops->name, mnt_topology_name(b->c->topology));
  printf("#\n");
}

/* rank 0: the table's column heads */
static void print_columns(void) {
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
         "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
         "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
         "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

/* what the rows add up to */
typedef struct totals {
  double sum_busbw;
  int nbw;
  long long wrong;
} totals;

/* one row: count elements out of place and in place on every rank, the slowest rank's time and
 * every rank's wrong values gathered (over PMIx: host values, whatever memory is reduced) */
static int one_size(bench *b, mnt_world *w, size_t count, int check, int warmup, int iters, double *times,
                    long long *wrongs, totals *tot) {
  size_t bytes = count * mnt_dtype_size(b->t);
  double mine[2];
  long long wr[2];
  for (int in_place = 0; in_place < 2; in_place++)
    MNT_CHECK(measure(b, count, in_place, check, warmup, iters, &mine[in_place], &wr[in_place]));
  MNT_CHECK(mnt_world_allgather(w, mine, sizeof mine, times));
  MNT_CHECK(mnt_world_allgather(w, wr, sizeof wr, wrongs));
  if (w->rank == 0) printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, mnt_dtype_name(b->t), mnt_redop_name(b->op), -1);
  for (int k = 0; k < 2; k++) {
    double tmax = 0;
    long long wrong = 0;
    for (int r = 0; r < w->size; r++) {
      if (times[2 * r + k] > tmax) tmax = times[2 * r + k];
      wrong += wrongs[2 * r + k];
    }
    double algbw = tmax > 0 ? (double)bytes / tmax / 1e9 : 0;
    double busbw = algbw * mnt_busbw_factor(w->size);
    tot->sum_busbw += busbw;
    tot->nbw++;
    tot->wrong += wrong;
    if (w->rank == 0) print_set(tmax * 1e6, algbw, busbw, check, wrong);
  }
  if (w->rank == 0) {
    printf("\n");
    fflush(stdout);
  }
  return MNT_OK;
}

/* the closing lines and the verdict: every rank knows both (wrong counts and times were gathered),
 * so they fail together */
static int conclude(mnt_world *w, const totals *tot, double min_busbw) {
  double avg = tot->nbw ? tot->sum_busbw / tot->nbw : 0;
  int slow = min_busbw > 0 && avg < min_busbw;
  if (w->rank == 0) {
    printf("# Out of bounds values : %lld %s\n", tot->wrong, tot->wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g %s\n", avg, min_busbw > 0 ? (slow ? "FAILED" : "OK") : "");
    printf("#\n# Collective test concluded: mntrain bench allreduce\n");
    fflush(stdout);
  }
  int st = tot->wrong || slow ? MNT_EDATA : MNT_OK;
  if (st && w->rank == 0 && tot->wrong)
    MNT_ERR("%lld wrong values in the results", tot->wrong);
  else if (st && w->rank == 0)
    MNT_ERR("average busbw %.3f GB/s is under --min-busbw %.3f", avg, min_busbw);
  if (st) w->failed_together = st;
  return st;
}

int mnt_bench_allreduce_main(mnt_world *w, int argc, char **argv) {
  size_t minb = 1024, maxb = 64u << 20;
  double factor = 4, min_busbw = 0;
  int iters = 20, warmup = 5, check = 1, help = 0;
  const char *dts = "float", *ops = "sum", *topo_s = "flat"; /* topology: any case, as nccl-tests' words */
  int topo = -1, comm = MNT_COMM_AUTO;
  char topos[64], comms[64]; /* the choices' words from their name tables (comm.h) */
  mnt_choices(topos, sizeof topos, mnt_topology_names, MNT_NTOPO);
  mnt_choices(comms, sizeof comms, mnt_comm_names, MNT_NCOMM);
  const mnt_opt opts[] = {
      {"minbytes", 'b', MNT_OPT_SIZE, &minb, "SIZE", "smallest message in bytes (default 1K)",
       MNT_RANGE(1, 1ull << 40)},
      {"maxbytes", 'e', MNT_OPT_SIZE, &maxb, "SIZE", "largest message in bytes (default 64M)",
       MNT_RANGE(1, 1ull << 40)},
      {"stepfactor", 'f', MNT_OPT_DOUBLE, &factor, "F", "multiply the size by F each row (default 4)",
       MNT_RANGE(1.01, 1024)},
      {"iters", 'n', MNT_OPT_INT, &iters, "N", "timed iterations per size (default 20)", MNT_RANGE(1, 1e7)},
      {"warmup_iters", 'w', MNT_OPT_INT, &warmup, "N", "untimed warm-up iterations (default 5)", MNT_RANGE(0, 1e7)},
      {"datatype", 'd', MNT_OPT_STRING, &dts, "T",
       "float, double, bfloat16 or half (also fp32, fp64, bf16, fp16; default float)", 0, 0},
      {"op", 'o', MNT_OPT_STRING, &ops, "OP", "sum or avg (default sum)", 0, 0},
      {"check", 'c', MNT_OPT_INT, &check, "0|1", "check results (default 1; 0 prints N/A for #wrong)", MNT_RANGE(0, 1)},
      {"topology", 0, MNT_OPT_STRING, &topo_s, topos, "allreduce topology (default flat)", 0, 0},
      {"comm", 0, MNT_OPT_ENUM, &comm, comms, "communicator backend (nccl: GPU buffers; default auto: cpu)", 0, 0},
      {"min-busbw", 0, MNT_OPT_DOUBLE, &min_busbw, "GB/s",
       "fail when the average busbw is lower (then OK or FAILED follows it, as with nccl-tests' NCCL_TESTS_MIN_BW)",
       MNT_RANGE(0, 1e6)},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int quiet = mnt_opts_quiet();
  int st = mnt_parse_opts("bench allreduce", opts, argc, argv, &help, quiet);
  if (st) return st;
  if (help) {
    if (!quiet)
      mnt_print_help(stdout, "srun --mpi=pmix [-N nodes -n ranks] mntrain bench allreduce [options]",
                     "Measure allreduce over all ranks of the job and print nccl-tests' all_reduce_perf table,\n"
                     "so that scripts written for nccl-tests read it unchanged: per size, size count type redop\n"
                     "root, then time(us) algbw busbw(GB/s) #wrong out of place and again in place; then\n"
                     "'# Out of bounds values : N OK' and '# Avg bus bandwidth    : X' (the mean busbw of both\n"
                     "sets; awk '/Avg bus bandwidth/{print $NF}' prints it). The communicator reduces in place:\n"
                     "out of place is a copy into a second buffer and the in-place allreduce, timed together.\n"
                     "Exits 1 when any result is wrong (or the average is under --min-busbw).",
                     opts);
    return MNT_OK;
  }
  bench b = {.gpu = 0};
  for (int i = 0; i < MNT_NTOPO; i++)
    if (!strcasecmp(topo_s, mnt_topology_names[i])) topo = i;
  const char *bad = NULL;
  if (mnt_dtype_parse_comm(dts, &b.t)) bad = "--datatype (float, double, bfloat16, half)";
  else if (mnt_redop_parse(ops, &b.op)) bad = "--op (sum, avg)";
  else if (topo < 0) bad = "--topology (flat, hier)";
  else if (maxb < minb) bad = "-b/-e (need minbytes <= maxbytes)";
  if (bad) return mnt_usage_error("bench allreduce", "bad value for %s", bad);
  MNT_CHECK(mnt_world_init(w));
  MNT_CHECK(mnt_comm_create(w, mnt_comm_names[comm], (mnt_topology)topo, &b.c));
  b.rank = w->rank;
  b.size = w->size;
  size_t es = mnt_dtype_size(b.t);
  double *times = calloc(2 * (size_t)w->size, sizeof *times);
  long long *wrongs = calloc(2 * (size_t)w->size, sizeof *wrongs);
  if (!times || !wrongs) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
    goto out;
  }
  MNT_CHECK_GOTO(alloc_buffers(&b, w, maxb), st, out);
  if (w->rank == 0) print_preamble(w, &b, minb, maxb, factor, warmup, iters, check);
  MNT_CHECK_GOTO(print_ranks(w, &b), st, out);
  char setup[512]; /* where the set-up went, up to the communicator (the slowest rank's phases) */
  MNT_CHECK_GOTO(mnt_world_phases(w, setup, sizeof setup), st, out);
  if (w->rank == 0) printf("# set-up (slowest rank): %s\n", setup);
  if (w->rank == 0) print_columns();
  totals tot = {0};
  for (double sz = (double)minb; sz <= (double)maxb * 1.0000001; sz *= factor)
    MNT_CHECK_GOTO(one_size(&b, w, (size_t)sz / es, check, warmup, iters, times, wrongs, &tot), st, out);
  st = conclude(w, &tot, min_busbw);
out:
  if (b.gpu && b.cu) {
    b.cu->mem_free(b.send);
    b.cu->mem_free(b.recv);
  }
  if (!b.gpu) free(b.recv);
  free(b.host);
  free(times);
  free(wrongs);
  mnt_comm_destroy(b.c);
  return st;
}
