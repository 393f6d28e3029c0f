/* main.c — the mntrain command: the table of subcommands, the environment check, and the only
 * place that exits, through one mapping of status to exit code (mnt_exit_code in log.h: 0 ok,
 * 1 failure at run time, 2 usage). A command initialises the PMIx world itself, after its options
 * parsed (so that --help and usage errors need no PMIx); when a command fails on a multi-rank job
 * without every rank having agreed on the failure, main takes the whole job down (PMIx_Abort)
 * with the error, so that no rank is left waiting in a collective. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/cmd/cmd.h"
#include "src/args.h"
#include "src/backend/backend.h"
#include "src/cuda_module.h"
#include "io/data/dataset.h"
#include "src/env.h"
#include "src/check.h"
#include "src/log.h"
#include "src/simd.h"
#include "src/sysmem.h"
#include "src/world.h"

static int cmd_info(mnt_world *w, int argc, char **argv);

/* Descriptors every command may need before it opens its own files: PMIx (its libevent pipes and
 * the socket to the server, the plugins it dlopens), the libraries' files, the outputs. Below
 * this, PMIx_Init fails in ways that name no cause (libevent exits, or PMIx reports an error and
 * the rank would run alone), so the command is refused before it starts. */
enum { FD_FLOOR = 32 };

typedef struct command {
  const char *name, *sub; /* "bench" "allreduce"; sub NULL: one word */
  int (*run)(mnt_world *w, int argc, char **argv);
  const char *summary;
} command;

static const command COMMANDS[] = {
    {"train", NULL, mnt_train_main, "data-parallel training across the ranks of the job"},
    {"info", NULL, cmd_info, "print what PMIx says about every rank (rank, node, local rank)"},
    {"convert", NULL, mnt_convert_main, "write a sharded HDF5 dataset (imagenet: JPEG/PNG folders, idx, synth)"},
    {"inspect", NULL, mnt_inspect_main, "a dataset (--verify reads and checks all) or a checkpoint (verified)"},
    {"report", NULL, mnt_report_main, "scaling table, CSV and SVG of one run or a sweep of runs (summary.json)"},
    {"model", NULL, mnt_perfmodel_main, "predicted step time and parallel efficiency for 1 ... 4096 GPUs"},
    {"bench", "allreduce", mnt_bench_allreduce_main, "the allreduce of the communicator (nccl-tests style)"},
    {"bench", "step", mnt_bench_step_main, "training-step throughput of one process (img/s, memory per image)"},
    {"bench", "loader", mnt_bench_loader_main, "images per second the data loader delivers"},
    {"bench", "ckpt", mnt_bench_ckpt_main, "checkpoint write and read MB/s (all ranks), next to dd conv=fsync"},
};
enum { NCOMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

static void usage(FILE *f) {
  fprintf(f,
          "usage: mntrain <command> [options]      (mntrain <command> --help for its options)\n"
          "\n"
          "A Slurm/PMIx-native data-parallel trainer. Run it under srun --mpi=pmix: every process\n"
          "learns its rank, node and peers from PMIx; without a PMIx server it runs as one process.\n"
          "\n"
          "commands:\n");
  for (int i = 0; i < NCOMMANDS; i++) {
    char name[32];
    snprintf(name, sizeof name, "%s%s%s", COMMANDS[i].name, COMMANDS[i].sub ? " " : "",
             COMMANDS[i].sub ? COMMANDS[i].sub : "");
    fprintf(f, "  %-17s %s\n", name, COMMANDS[i].summary);
  }
  fprintf(f,
          "\n"
          "options:\n"
          "  -h, --help        show this help (anywhere on a command line: that command's help, and\n"
          "                    nothing else is done)\n"
          "  -V, --version     print the version and build features\n"
          "\n"
          "exit codes (every command):\n"
          "  0  success\n"
          "  1  failure at run time: I/O, corrupt data, a failed or timed-out collective (the job is\n"
          "     aborted through PMIx, naming the rank; with train --on-rank-loss shrink the others go\n"
          "     on and a rank they left out exits 1), out of memory, wrong benchmark results\n"
          "  2  usage: a bad flag, value, input path or environment variable, or a run that cannot\n"
          "     fit in this process's memory or its limit on open files (ulimit -n); rerunning it\n"
          "     unchanged fails the same way\n"
          "  3  preempted: train stopped on SIGUSR1/SIGTERM or --stop-after (or, with --on-rank-loss\n"
          "     shrink, fewer ranks left than --min-ranks) after committing a checkpoint; the same\n"
          "     command line resumes it (what a requeued job does)\n"
          "\n");
  mnt_env_print_help(f);
}

static int cmd_info(mnt_world *w, int argc, char **argv) {
  int help = 0;
  const mnt_opt opts[] = {{NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int st = mnt_parse_opts("info", opts, argc, argv, &help, mnt_opts_quiet());
  if (st) return st;
  if (help) {
    if (!mnt_opts_quiet())
      mnt_print_help(stdout, "srun --mpi=pmix mntrain info",
                     "Each rank prints one line: rank, size, node, node index, local rank and local size as\n"
                     "PMIx reports them, its pid, the CPU ISA oneDNN runs on and mntrain's own loops' (simd).",
                     opts);
    return MNT_OK;
  }
  MNT_CHECK(mnt_world_init(w));
  printf("rank %d of %d on %s: node %d of %d, local rank %d of %d, pid %d, cpu isa %s, simd %s%s\n", w->rank,
         w->size, w->hostname, w->node_rank, w->nnodes, w->local_rank, w->local_size, (int)getpid(),
         mnt_cpu_isa_name(), mnt_simd_variant(), w->have_pmix ? "" : " (no PMIx)");
  fflush(stdout);
  return mnt_world_barrier(w);
}

int main(int argc, char **argv) {
  int level = MNT_LOG_INFO; /* a bad MNT_LOG_LEVEL keeps info; mnt_env_check below reports it */
  mnt_env_log_level(&level);
  mnt_log_set_level(level);
  mnt_h5_init();
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? MNT_EXIT_USAGE : MNT_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("mntrain %s (CUDA parts: %s; devices: %s)\n", MNT_VERSION, MNT_HAVE_CUDA ? "yes" : "no", mnt_backend_names());
    /* what runs here: nodes of one cluster differ in their CPUs */
    printf("cpu isa: %s (oneDNN's kernels; ONEDNN_MAX_CPU_ISA caps it)\n", mnt_cpu_isa_name());
    printf("simd: %s (mntrain's own loops: loader, casts, optimizer; MNT_SIMD forces a lower one)\n",
           mnt_simd_variant());
    printf("libraries: oneDNN %s, HDF5 %s, %s\n", mnt_cpu_onednn_version(), mnt_h5_version(), mnt_world_pmix_version());
    mnt_cuda_module_describe(stdout); /* where, built against what: read, not loaded */
    return MNT_EXIT_OK;
  }
  const command *cmd = NULL;
  int known_name = 0;
  for (int i = 0; i < NCOMMANDS && !cmd; i++) {
    if (strcmp(COMMANDS[i].name, argv[1]) != 0) continue;
    known_name = 1;
    if (!COMMANDS[i].sub || (argc > 2 && !strcmp(COMMANDS[i].sub, argv[2]))) cmd = &COMMANDS[i];
  }
  if (!cmd) {
    if (!known_name) {
      fprintf(stderr, "mntrain: unknown command '%s' (see mntrain --help)\n", argv[1]);
      return MNT_EXIT_USAGE;
    }
    int help = argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"));
    FILE *f = help ? stdout : stderr;
    if (!help) fprintf(f, "mntrain %s: %s\n", argv[1], argc < 3 ? "which one?" : "unknown subcommand");
    fprintf(f, "usage: mntrain %s <%s> [options]\n\n", argv[1], argv[1]);
    for (int i = 0; i < NCOMMANDS; i++)
      if (!strcmp(COMMANDS[i].name, argv[1])) fprintf(f, "  %-12s %s\n", COMMANDS[i].sub, COMMANDS[i].summary);
    return help ? MNT_EXIT_OK : MNT_EXIT_USAGE;
  }
  int skip = cmd->sub ? 3 : 2;
  int st = mnt_env_check(); /* a bad variable fails every command before it does anything */
  if (st == MNT_OK) st = mnt_simd_env_check();          /* and MNT_SIMD above what this CPU runs */
  /* the soft limit on open files up to the hard one (a dataset keeps every shard open); then a
   * hard limit too low for anything is refused here, with the way out. The tests provoke running
   * out with a low hard limit (ulimit -Hn, or bash's plain ulimit -n, which sets both). */
  mnt_fd_raise_limit();
  int help = 0;
  for (int i = skip; i < argc && !help; i++) help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
  if (st == MNT_OK && !help) {
    char what[64];
    snprintf(what, sizeof what, "starting mntrain %s%s%s", cmd->name, cmd->sub ? " " : "", cmd->sub ? cmd->sub : "");
    st = mnt_fd_check(FD_FLOOR, what, NULL);
  }
  mnt_world w;
  memset(&w, 0, sizeof w);
  if (st == MNT_OK) st = cmd->run(&w, argc - skip, argv + skip);
  if (st != MNT_OK && st != MNT_EPREEMPT) mnt_trail_print(st); /* the way up, always (check.h) */
  if (st != MNT_OK && w.up && w.size > 1 && st != w.failed_together) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s (%s)", mnt_last_error()[0] ? mnt_last_error() : "a collective failed",
             mnt_status_str(st));
    mnt_world_abort(&w, mnt_exit_code(st), msg);
  }
  if (w.up) mnt_world_finalize(&w);
  return mnt_exit_code(st);
}
