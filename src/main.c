/* main.c — the mntrain command: subcommands, exit codes, and the only place that exits.
 * A failed collective on a multi-rank job takes the whole job down (PMIx_Abort) with the error,
 * so no rank is left waiting in a collective. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "convert.h"
#include "comm.h"
#include "log.h"
#include "train.h"
#include "world.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mntrain <command> [options]      (mntrain <command> --help for its options)\n"
          "\n"
          "A Slurm/PMIx-native data-parallel trainer. Run it under srun --mpi=pmix: every process\n"
          "learns its rank, node and peers from PMIx; without a PMIx server it runs as one process.\n"
          "\n"
          "commands:\n"
          "  train             data-parallel training across the ranks of the job\n"
          "  info              print what PMIx says about every rank (rank, node, local rank)\n"
          "  convert           write a sharded HDF5 dataset (idx: Fashion-MNIST/MNIST, synth)\n"
          "  inspect           shards, samples, classes, histogram of a dataset; reads every sample\n"
          "  bench allreduce   measure the allreduce of the CPU communicator (nccl-tests style)\n"
          "  bench step        training-step throughput of one process (img/s, memory per image)\n"
          "  bench loader      images per second the data loader delivers\n"
          "\n"
          "options:\n"
          "  -h, --help        show this help\n"
          "  -V, --version     print the version and build features\n"
          "\n"
          "environment:\n"
          "  MNT_COMM_TIMEOUT  seconds a collective may wait without progress (default 300)\n"
          "  MNT_COMM_IFACE    network interface (name or prefix) for TCP between nodes\n"
          "  MNT_LOG_LEVEL     error, warn, info (default) or debug\n");
}

static int cmd_info(mnt_world *w, int argc, char **argv) {
  if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
    if (w->rank == 0)
      printf("usage: srun --mpi=pmix mntrain info\n\nEach rank prints one line: rank, size, node, "
             "node index, local rank and local size as PMIx reports them, and its pid.\n");
    return 0;
  }
  if (argc > 0) {
    if (w->rank == 0) fprintf(stderr, "mntrain info: unexpected argument '%s'\n", argv[0]);
    return MNT_EARG;
  }
  printf("rank %d of %d on %s: node %d of %d, local rank %d of %d, pid %d%s\n", w->rank, w->size,
         w->hostname, w->node_rank, w->nnodes, w->local_rank, w->local_size, (int)getpid(),
         w->have_pmix ? "" : " (no PMIx)");
  fflush(stdout);
  return mnt_world_barrier(w);
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("mntrain %s (CUDA parts: %s)\n", MNT_VERSION, MNT_HAVE_CUDA ? "yes" : "no");
    return 0;
  }
  if (!strcmp(argv[1], "convert")) return mnt_convert_main(argc - 2, argv + 2);
  if (!strcmp(argv[1], "inspect")) return mnt_inspect_main(argc - 2, argv + 2);
  int is_info = !strcmp(argv[1], "info");
  int is_train = !strcmp(argv[1], "train");
  int is_bench = !strcmp(argv[1], "bench");
  if (!is_info && !is_bench && !is_train) {
    fprintf(stderr, "mntrain: unknown command '%s' (see mntrain --help)\n", argv[1]);
    return 2;
  }
  if (is_bench && argc >= 3 && (!strcmp(argv[2], "step") || !strcmp(argv[2], "loader"))) {
    int st = !strcmp(argv[2], "step") ? mnt_bench_step(argc - 3, argv + 3) : mnt_bench_loader(argc - 3, argv + 3);
    return st == MNT_OK ? 0 : st == MNT_EARG ? 2 : 1;
  }
  if (is_bench && (argc < 3 || strcmp(argv[2], "allreduce") != 0)) {
    if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
      printf("usage: mntrain bench <benchmark> [options]\n\nbenchmarks:\n"
             "  allreduce   collective bandwidth of the communicator (nccl-tests columns)\n"
             "  step        training-step throughput of one process\n"
             "  loader      images per second of the data loader\n");
      return 0;
    }
    fprintf(stderr, "mntrain bench: %s (available: allreduce, step, loader)\n",
            argc < 3 ? "which benchmark?" : "unknown benchmark");
    return 2;
  }

  mnt_world w;
  int st = mnt_world_init(&w);
  if (st != MNT_OK) {
    fprintf(stderr, "mntrain: cannot start: %s\n", mnt_last_error());
    return 1;
  }
  if (is_info) st = cmd_info(&w, argc - 2, argv + 2);
  else if (is_train) st = mnt_train_main(&w, argc - 2, argv + 2);
  else st = mnt_bench_allreduce(&w, argc - 3, argv + 3);

  if (st > MNT_EARG && w.size > 1) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s (%s)", mnt_last_error()[0] ? mnt_last_error() : "a collective failed",
             mnt_status_str(st));
    mnt_world_abort(&w, st, msg);
  }
  mnt_world_finalize(&w);
  return st;
}
