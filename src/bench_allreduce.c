/* bench_allreduce.c — `mntrain bench allreduce`: nccl-tests' all_reduce_perf for mntrain's
 * communicators. Per size: one checked run, warm-up, timed iterations; time is the slowest
 * rank's mean; algbw = bytes / time; busbw = algbw * 2(n-1)/n; #wrong summed over ranks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "comm.h"
#if MNT_HAVE_NCCL
#include <cuda_runtime.h>
#endif
#include "log.h"

/* Small integers: every partial sum is exact in fp32, bf16 and fp16 up to 15 ranks per
 * value of 8, so the expected result is known exactly on every rank. */
/* nccl reduces GPU memory: the buffer lives there and is copied in and out for the check */
static int to_device(void *dev, const void *host, size_t bytes) {
  if (dev == host) return MNT_OK;
#if MNT_HAVE_NCCL
  if (cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess) return MNT_OK;
#endif
  MNT_ERR("copying %zu bytes to the GPU failed", bytes);
  return MNT_ESYS;
}
static int from_device(void *host, const void *dev, size_t bytes) {
  if (dev == host) return MNT_OK;
#if MNT_HAVE_NCCL
  if (cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess) return MNT_OK;
#endif
  MNT_ERR("copying %zu bytes from the GPU failed", bytes);
  return MNT_ESYS;
}

static float pattern(size_t i, int rank) { return (float)((int)((i * 131u + (size_t)rank * 31u) % 17u) - 8); }

static void fill(mnt_dtype t, void *buf, size_t count, int rank) {
  size_t chunk = 4096;
  float tmp[4096];
  for (size_t i = 0; i < count; i += chunk) {
    size_t n = count - i < chunk ? count - i : chunk;
    for (size_t j = 0; j < n; j++) tmp[j] = pattern(i + j, rank);
    mnt_from_f32(t, tmp, (char *)buf + i * mnt_dtype_size(t), n);
  }
}

static long long count_wrong(mnt_dtype t, mnt_redop op, const void *buf, size_t count, int size) {
  long long wrong = 0;
  float got[4096], want_f[4096];
  uint8_t want[4096 * 4];
  for (size_t i = 0; i < count; i += 4096) {
    size_t n = count - i < 4096 ? count - i : 4096;
    for (size_t j = 0; j < n; j++) {
      float s = 0;
      for (int r = 0; r < size; r++) s += pattern(i + j, r);
      want_f[j] = op == MNT_AVG ? s / (float)size : s;
    }
    mnt_from_f32(t, want_f, want, n); /* round the reference like the result */
    mnt_to_f32(t, want, want_f, n);
    mnt_to_f32(t, (const char *)buf + i * mnt_dtype_size(t), got, n);
    for (size_t j = 0; j < n; j++) wrong += memcmp(&got[j], &want_f[j], sizeof(float)) != 0;
  }
  return wrong;
}

int mnt_bench_allreduce(mnt_world *w, int argc, char **argv) {
  size_t minb = 1024, maxb = 64u << 20;
  double factor = 4, min_busbw = 0;
  int iters = 20, warmup = 5, check = 1, help = 0;
  const char *dts = "float", *ops = "sum", *topos = "flat", *backend = "auto";
  const mnt_opt opts[] = {
      {"minbytes", 'b', MNT_OPT_SIZE, &minb, "SIZE", "smallest message in bytes (default 1K)", MNT_RANGE(1, 1ull << 40)},
      {"maxbytes", 'e', MNT_OPT_SIZE, &maxb, "SIZE", "largest message in bytes (default 64M)", MNT_RANGE(1, 1ull << 40)},
      {"stepfactor", 'f', MNT_OPT_DOUBLE, &factor, "F", "multiply the size by F each row (default 4)", MNT_RANGE(1.01, 1024)},
      {"iters", 'n', MNT_OPT_INT, &iters, "N", "timed iterations per size (default 20)", MNT_RANGE(1, 1e7)},
      {"warmup_iters", 'w', MNT_OPT_INT, &warmup, "N", "untimed warm-up iterations (default 5)", MNT_RANGE(0, 1e7)},
      {"datatype", 'd', MNT_OPT_STRING, &dts, "T", "float, bf16 or half (default float)", 0, 0},
      {"op", 'o', MNT_OPT_STRING, &ops, "OP", "sum or avg (default sum)", 0, 0},
      {"check", 'c', MNT_OPT_INT, &check, "0|1", "check results (default 1)", MNT_RANGE(0, 1)},
      {"topology", 0, MNT_OPT_STRING, &topos, "T", "flat or hier (default flat)", 0, 0},
      {"comm", 0, MNT_OPT_STRING, &backend, "B", "communicator backend: auto, cpu or nccl (GPU buffers; default auto: cpu)", 0, 0},
      {"min-busbw", 0, MNT_OPT_DOUBLE, &min_busbw, "GB/s", "fail when the average busbw is lower", MNT_RANGE(0, 1e6)},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int quiet = mnt_world_guess_rank() != 0;
  int st = mnt_parse_opts("bench allreduce", opts, argc, argv, &help, quiet);
  if (st) return st;
  if (help) {
    if (!quiet)
      mnt_print_help(stdout, "srun --mpi=pmix [-N nodes -n ranks] mntrain bench allreduce [options]",
                     "Measure in-place allreduce over all ranks of the job, as nccl-tests does:\n"
                     "size count type time(us) algbw busbw(GB/s) #wrong per row, then the average busbw.\n"
                     "Exits 1 when any result is wrong (or the average is under --min-busbw).",
                     opts);
    return MNT_OK;
  }
  mnt_dtype t;
  mnt_redop op;
  mnt_topology topo;
  const char *bad = NULL;
  if (mnt_dtype_parse(dts, &t)) bad = "--datatype (float, bf16, half)";
  else if (mnt_redop_parse(ops, &op)) bad = "--op (sum, avg)";
  else if (mnt_topology_parse(topos, &topo)) bad = "--topology (flat, hier)";
  else if (maxb < minb) bad = "-b/-e (need minbytes <= maxbytes)";
  if (bad) {
    if (!quiet) fprintf(stderr, "mntrain bench allreduce: bad value for %s\n", bad);
    return MNT_EARG;
  }
  MNT_CHECK(mnt_world_init(w));
  mnt_comm *c;
  if ((st = mnt_comm_create(w, backend, topo, &c)) != MNT_OK) return st;
  size_t es = mnt_dtype_size(t);
  void *buf = aligned_alloc(4096, (maxb + 4095) / 4096 * 4096);
  double *times = calloc((size_t)w->size, sizeof *times);
  long long *wrongs = calloc((size_t)w->size, sizeof *wrongs);
  void *dev = buf; /* where the collectives run: buf, or GPU memory for nccl */
  if (!buf || !times || !wrongs) {
    MNT_ERR("out of memory for a %zu-byte buffer", maxb);
    st = MNT_ENOMEM;
    goto done;
  }
#if MNT_HAVE_NCCL
  if (!strcmp(c->ops->name, "nccl") && cudaMalloc(&dev, maxb) != cudaSuccess) {
    MNT_ERR("out of GPU memory for a %zu-byte buffer", maxb);
    dev = buf;
    st = MNT_ENOMEM;
  }
  if ((st = mnt_world_agree(w, st)) != MNT_OK) goto done;
#endif
  if (w->rank == 0) {
    printf("# mntrain bench allreduce: %d ranks on %d nodes, comm %s, topology %s, %s %s\n", w->size,
           w->nnodes, c->ops->name, mnt_topology_name(c->topology), mnt_dtype_name(t), mnt_redop_name(op));
    for (int node = 0; node < w->nnodes; node++) {
      printf("#   %-16s ranks", w->node_name[node]);
      for (int r = 0; r < w->size; r++)
        if (w->node_of[r] == node) printf(" %d", r);
      printf("\n");
    }
    printf("# iterations %d, warm-up %d, check %d\n#\n", iters, warmup, check);
    printf("# %12s %12s %6s %10s %8s %8s %7s\n", "size", "count", "type", "time", "algbw", "busbw", "#wrong");
    printf("# %12s %12s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
  }
  double sum_busbw = 0;
  int rows = 0;
  long long total_wrong = 0;
  for (double sz = (double)minb; sz <= (double)maxb * 1.0000001; sz *= factor) {
    size_t count = (size_t)sz / es;
    size_t bytes = count * es;
    long long wrong = 0;
    if (check) {
      fill(t, buf, count, w->rank);
      if ((st = to_device(dev, buf, bytes)) != MNT_OK) goto done;
      if ((st = mnt_allreduce(c, dev, count, t, op)) != MNT_OK) goto done;
      if ((st = from_device(buf, dev, bytes)) != MNT_OK) goto done;
      wrong = count_wrong(t, op, buf, count, w->size);
    }
    for (int i = 0; i < warmup; i++)
      if ((st = mnt_allreduce(c, dev, count, t, op)) != MNT_OK) goto done;
    if ((st = mnt_barrier(c)) != MNT_OK) goto done;
    double t0 = mnt_now();
    for (int i = 0; i < iters; i++)
      if ((st = mnt_allreduce(c, dev, count, t, op)) != MNT_OK) goto done;
    double mine = (mnt_now() - t0) / iters;
    /* host values: over PMIx, whatever memory the communicator reduces */
    if ((st = mnt_world_allgather(w, &mine, sizeof mine, times)) != MNT_OK) goto done;
    if ((st = mnt_world_allgather(w, &wrong, sizeof wrong, wrongs)) != MNT_OK) goto done;
    double tmax = 0;
    wrong = 0;
    for (int r = 0; r < w->size; r++) {
      if (times[r] > tmax) tmax = times[r];
      wrong += wrongs[r];
    }
    double algbw = (double)bytes / tmax / 1e9;
    double busbw = algbw * 2.0 * (w->size - 1) / w->size;
    sum_busbw += busbw;
    rows++;
    total_wrong += wrong;
    if (w->rank == 0) {
      char wr[24];
      if (check) snprintf(wr, sizeof wr, "%lld", wrong);
      else snprintf(wr, sizeof wr, "N/A");
      printf("  %12zu %12zu %6s %10.1f %8.3f %8.3f %7s\n", bytes, count, mnt_dtype_name(t), tmax * 1e6,
             algbw, busbw, wr);
      fflush(stdout);
    }
  }
  double avg = rows ? sum_busbw / rows : 0;
  if (w->rank == 0) {
    printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.4f GB/s\n#\n", avg);
    fflush(stdout);
  }
  /* every rank knows both verdicts (wrong counts and times were gathered): they fail together */
  st = total_wrong || (min_busbw > 0 && avg < min_busbw) ? MNT_EDATA : MNT_OK;
  if (st && w->rank == 0 && total_wrong)
    MNT_ERR("%lld wrong values in the results", total_wrong);
  else if (st && w->rank == 0)
    MNT_ERR("average busbw %.3f GB/s is under --min-busbw %.3f", avg, min_busbw);
  if (st) w->failed_together = st;
done:
#if MNT_HAVE_NCCL
  if (dev != buf) cudaFree(dev);
#endif
  free(buf);
  free(times);
  free(wrongs);
  mnt_comm_destroy(c);
  return st;
}
