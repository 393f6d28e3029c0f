/* bench_ckpt.c — `mntrain bench ckpt`: collective checkpoint write and read bandwidth for a state
 * of --mb MB (default: ResNet-50's weights + momentum + BN statistics, about 205 MB), next to the
 * raw bandwidth of the same filesystem measured in the same run with `dd conv=fsync` (write) and a dd
 * of that file after its pages were dropped (cold read).
 * Write: every rank stages its share and writes it (pwrite + fsync), rank 0 commits the manifest;
 * timed from the first rank's start to the commit. Read: what a resuming job does, rank 0 reads
 * the newest checkpoint and verifies every share's checksum, after its pages were dropped from
 * the page cache (posix_fadvise DONTNEED), then the state is broadcast to every rank. The stall is
 * what the training loop would lose to an asynchronous checkpoint (the staging copy), shown next
 * to one plain memcpy of the whole state. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/args.h"
#include "src/cmd/cmd.h"
#include "io/ckpt/ckpt.h"
#include "src/comm/comm.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/model/resnet.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void drop_cache(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* one dd command's MB/s from its elapsed time (0 when it fails) */
static double dd_run(const char *cmd, int mb) {
  char line[512];
  double t0 = mnt_now();
  FILE *p = popen(cmd, "r");
  int ok = 0;
  while (p && fgets(line, sizeof line, p))
    if (strstr(line, "copied")) ok = 1;
  int rc = p ? pclose(p) : -1;
  double dt = mnt_now() - t0;
  return ok && rc == 0 ? mb * 1048576.0 / 1e6 / dt : 0.0;
}

/* rank 0: `dd if=/dev/zero of=DIR/dd-bench.tmp bs=1M count=MB conv=fsync`, then, its pages dropped
 * from the page cache as the checkpoint's are, `dd if=DIR/dd-bench.tmp of=/dev/null bs=1M`: the
 * filesystem's raw write and cold read, MB/s */
static void dd_mbs(const char *dir, int mb, double *write_mbs, double *read_mbs) {
  char cmd[MNT_PATH_MAX + 64], path[MNT_PATH_MAX];
  snprintf(path, sizeof path, "%s/dd-bench.tmp", dir);
  snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=1M count=%d conv=fsync 2>&1", path, mb);
  *write_mbs = dd_run(cmd, mb);
  drop_cache(path);
  snprintf(cmd, sizeof cmd, "dd if='%s' of=/dev/null bs=1M 2>&1", path);
  *read_mbs = *write_mbs > 0 ? dd_run(cmd, mb) : 0.0;
  unlink(path);
}

/* one run of the benchmark: the state, the writer, and each round's times */
typedef struct bench {
  mnt_world *w;
  mnt_comm *c;
  mnt_ckpt_writer *wr;
  const char *dir;
  char root[MNT_PATH_MAX];
  mnt_ckpt_tensor *t;
  int nt, repeat;
  float *slab; /* every tensor's values */
  size_t total; /* floats */
  double state_mb;
  json_t *state, *attrs, *cfg;
  uint8_t *img; /* what a reader gets back */
  double *wt, *rt, *bt, *stall, *dd, *ddr; /* per round: write, read, read + broadcast, stall, dd write and
                                            * cold read MB/s */
} bench;

/* the tensors: ResNet-50's (weights, momentum, BN statistics), scaled to mb MB (0: as they are),
 * filled with a pattern, in one slab */
static int make_tensors(bench *b, mnt_backend *be, int mb) {
  mnt_resnet *m = NULL;
  int st = mnt_resnet_create(be, "resnet50", 1000, 32, 1, 1, 0, &m);
  if (st != MNT_OK) return st;
  size_t base = 2 * m->nw + m->nbn;
  double scale = mb ? mb * 1e6 / 4.0 / (double)base : 1.0;
  b->t = calloc((size_t)(2 * m->nparams + m->nstats), sizeof *b->t);
  for (int pass = 0; b->t && pass < 3; pass++) {
    int np = pass < 2 ? m->nparams : m->nstats;
    for (int i = 0; i < np; i++, b->nt++) {
      mnt_ckpt_tensor *x = &b->t[b->nt];
      const mnt_param *p = pass < 2 ? &m->params[i] : &m->stats[i];
      snprintf(x->name, sizeof x->name, "%s/%s", pass == 0 ? "/model" : pass == 1 ? "/optim/momentum" : "/bn", p->name);
      size_t n = (size_t)((double)p->n * scale);
      x->n = n ? n : 1;
      x->ndims = 1;
      x->dims[0] = (int)x->n;
      b->total += x->n;
    }
  }
  mnt_resnet_destroy(m);
  b->slab = b->t ? malloc(b->total * sizeof(float)) : NULL;
  if (!b->slab) return MNT_ENOMEM;
  size_t off = 0;
  for (int i = 0; i < b->nt; i++) {
    b->t[i].data = b->slab + off;
    for (size_t k = 0; k < b->t[i].n; k++) b->slab[off + k] = (float)((off + k) % 1000) * 1e-3f;
    off += b->t[i].n;
  }
  b->state_mb = (double)b->total * 4 / 1e6;
  return MNT_OK;
}

/* round i: dd on the same filesystem (rank 0), a checkpoint written and committed by every rank,
 * then read as a resuming job does: rank 0 reads and verifies (its pages dropped first), then
 * everyone gets the state */
static int one_round(bench *b, int i) {
  mnt_world *w = b->w;
  int st;
  if (w->rank == 0) dd_mbs(b->dir, (int)(b->state_mb + 0.5), &b->dd[i], &b->ddr[i]); /* raw, before each write */
  MNT_CHECK(mnt_barrier(b->c));
  double t0 = mnt_now();
  MNT_CHECK(mnt_ckpt_begin(b->wr, i + 1, b->t, b->nt, b->state, b->attrs, b->cfg, &b->stall[i]));
  MNT_CHECK(mnt_ckpt_finish(b->wr));
  b->wt[i] = mnt_now() - t0;
  char sdir[MNT_PATH_MAX], path[MNT_PATH_MAX];
  mnt_ckpt_step_dir(sdir, sizeof sdir, b->root, i + 1);
  MNT_CHECK(mnt_path_join(path, sdir, MNT_CKPT_FILE));
  if (w->rank == 0) drop_cache(path);
  MNT_CHECK(mnt_barrier(b->c));
  double r0 = mnt_now();
  st = MNT_OK;
  if (w->rank == 0) {
    mnt_ckpt ck;
    int found;
    size_t bytes = b->total * sizeof(float);
    st = mnt_ckpt_open(sdir, 1, &ck, &found);
    if (st == MNT_OK) memcpy(b->img, ck.image, bytes < ck.image_bytes ? bytes : ck.image_bytes);
    mnt_ckpt_close(&ck);
    b->rt[i] = mnt_now() - r0;
  }
  MNT_CHECK(mnt_world_agree(w, st));
  MNT_CHECK(mnt_broadcast(b->c, b->img, b->total * sizeof(float), 0));
  b->bt[i] = mnt_now() - r0;
  return MNT_OK;
}

/* rank 0: the medians, each next to what it is held against (dd; one memcpy of mc seconds) */
static void report(bench *b, double mc) {
  int n = b->repeat, size = b->w->size;
  double *all[] = {b->wt, b->rt, b->bt, b->stall, b->dd, b->ddr};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) qsort(all[k], (size_t)n, sizeof(double), cmp_d);
  double wm = b->state_mb / b->wt[n / 2], raw = b->dd[n / 2], rawr = b->ddr[n / 2], rm = b->state_mb / b->rt[n / 2];
  printf("dd conv=fsync: write %.1f MB/s; dd cold read %.1f MB/s (%d MB, page cache dropped; medians of %d)\n", raw,
         rawr, (int)(b->state_mb + 0.5), n);
  printf("checkpoint: write %.1f MB/s (%.3f s; %.0f%% of dd) by %d rank%s\n", wm, b->wt[n / 2],
         raw > 0 ? 100.0 * wm / raw : 0.0, size, size == 1 ? "" : "s");
  printf("checkpoint: read %.1f MB/s (%.3f s; %.0f%% of dd's cold read; rank 0, checksums verified, page cache "
         "dropped); with the broadcast to %d rank%s %.3f s\n",
         rm, b->rt[n / 2], rawr > 0 ? 100.0 * rm / rawr : 0.0, size, size == 1 ? "" : "s", b->bt[n / 2]);
  printf("checkpoint: stall %.1f ms (this rank's staging copy of %.1f MB), one memcpy of the whole state %.1f ms\n",
         b->stall[n / 2] * 1e3, b->state_mb / size, mc * 1e3);
  fflush(stdout);
}

int mnt_bench_ckpt_main(mnt_world *w, int argc, char **argv) {
  const char *dir = NULL;
  size_t stripe = 1 << 20;
  int mb = 0, repeat = 3, help = 0;
  const mnt_opt opts[] = {
      {"dir", 0, MNT_OPT_PATH, &dir, "D", "checkpoint directory on the filesystem to measure, required", 0, 0},
      {"mb", 0, MNT_OPT_INT, &mb, "M", "state size in MB (default: ResNet-50 with momentum, about 205)",
       MNT_RANGE(1, 1 << 20)},
      {"stripe", 0, MNT_OPT_SIZE2, &stripe, "BYTES", "alignment and share granularity, a power of two (default 1M)",
       MNT_RANGE(4096, 1ull << 30)},
      {"repeat", 0, MNT_OPT_INT, &repeat, "N", "checkpoints written and read (default 3; the median is shown)",
       MNT_RANGE(1, 1000)},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int quiet = mnt_opts_quiet();
  int st = mnt_parse_opts("bench ckpt", opts, argc, argv, &help, quiet);
  if (st) return st;
  if (help) {
    if (!quiet)
      mnt_print_help(stdout, "srun --mpi=pmix mntrain bench ckpt --dir D [--mb M] [--repeat N]",
                     "Checkpoint write and read bandwidth (MB/s) of every rank of the job writing one shared\n"
                     "HDF5 file in D, as mntrain train does, next to dd conv=fsync on the same filesystem.\n"
                     "Files are written under D/bench-ckpt and removed at the end.",
                     opts);
    return MNT_OK;
  }
  if (!dir) return mnt_usage_error("bench ckpt", "--dir D is required (see mntrain bench ckpt --help)");
  MNT_CHECK(mnt_world_init(w));
  bench b = {.w = w, .dir = dir, .repeat = repeat};
  mnt_backend *be = NULL;
  snprintf(b.root, sizeof b.root, "%s/bench-ckpt", dir);
  MNT_CHECK(mnt_comm_create(w, "auto", MNT_TOPO_FLAT, &b.c));
  if ((st = mnt_backend_create("cpu", NULL, &be)) == MNT_OK) st = make_tensors(&b, be, mb);
  if ((st = mnt_world_agree(w, st)) == MNT_OK) st = mnt_ckpt_writer_create(b.c, b.root, stripe, repeat + 1, -1, &b.wr);
  if (st == MNT_OK && w->rank == 0) {
    printf("# mntrain bench ckpt: %s, %d ranks on %d nodes, state %.1f MB in %d tensors, stripe %zu KiB\n", dir,
           w->size, w->nnodes, b.state_mb, b.nt, stripe / 1024);
    fflush(stdout);
  }
  int ran = st == MNT_OK; /* the rounds' buffers and the final clean-up */
  if (ran) {
    b.wt = calloc((size_t)repeat, sizeof *b.wt), b.rt = calloc((size_t)repeat, sizeof *b.rt);
    b.bt = calloc((size_t)repeat, sizeof *b.bt), b.stall = calloc((size_t)repeat, sizeof *b.stall);
    b.dd = calloc((size_t)repeat, sizeof *b.dd), b.ddr = calloc((size_t)repeat, sizeof *b.ddr);
    b.img = malloc(b.total * sizeof(float));
    if (!b.wt || !b.rt || !b.bt || !b.stall || !b.dd || !b.ddr || !b.img) st = MNT_ENOMEM;
    b.state = json_pack("{s:i}", "bench", 1), b.attrs = json_pack("{s:s}", "arch", "bench");
    b.cfg = json_pack("{s:i}", "mb", mb);
  }
  for (int i = 0; i < repeat && st == MNT_OK; i++) st = one_round(&b, i);
  double mc = 0;
  if (st == MNT_OK) { /* one plain copy of the whole state: what the stall is held against */
    double m0 = mnt_now();
    memcpy(b.img, b.slab, b.total * sizeof(float));
    mc = mnt_now() - m0;
  }
  if (st == MNT_OK && w->rank == 0) report(&b, mc);
  if (ran) {
    json_decref(b.state);
    json_decref(b.attrs);
    json_decref(b.cfg);
    free(b.wt);
    free(b.rt);
    free(b.bt);
    free(b.stall);
    free(b.dd);
    free(b.ddr);
    free(b.img);
    if (st == MNT_OK) st = mnt_barrier(b.c);
    if (st == MNT_OK && w->rank == 0) { /* leave nothing behind */
      char cmd[MNT_PATH_MAX + 16];
      snprintf(cmd, sizeof cmd, "rm -rf '%s'", b.root);
      if (system(cmd) != 0) MNT_WARN("could not remove %s", b.root);
    }
  }
  mnt_ckpt_writer_destroy(b.wr);
  free(b.t);
  free(b.slab);
  mnt_backend_destroy(be);
  mnt_comm_destroy(b.c);
  return st;
}
