/* bench_ckpt.c — `mntrain bench ckpt`: collective checkpoint write and read bandwidth for a state
 * of --mb MB (default: ResNet-50's weights + momentum + BN statistics, about 205 MB), next to the
 * raw bandwidth of the same filesystem measured in the same run with `dd conv=fsync`.
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

#include "args.h"
#include "bench.h"
#include "ckpt.h"
#include "comm.h"
#include "log.h"
#include "model/resnet.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* rank 0: `dd if=/dev/zero of=DIR/dd-bench.tmp bs=1M count=MB conv=fsync`, MB/s from its own
 * byte count and elapsed time (0 when dd fails) */
static double dd_mbs(const char *dir, int mb) {
  char cmd[1400], line[512], path[1200];
  snprintf(path, sizeof path, "%s/dd-bench.tmp", dir);
  snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s' bs=1M count=%d conv=fsync 2>&1", path, mb);
  double t0 = mnt_now();
  FILE *p = popen(cmd, "r");
  int ok = 0;
  while (p && fgets(line, sizeof line, p))
    if (strstr(line, "copied")) ok = 1;
  int rc = p ? pclose(p) : -1;
  double dt = mnt_now() - t0;
  unlink(path);
  return ok && rc == 0 ? mb * 1048576.0 / 1e6 / dt : 0.0;
}

static void drop_cache(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

int mnt_bench_ckpt(mnt_world *w, int argc, char **argv) {
  const char *dir = NULL, *stripe_s = "1M";
  int mb = 0, repeat = 3, help = 0;
  const mnt_opt opts[] = {
      {"dir", 0, MNT_OPT_STRING, &dir, "D", "checkpoint directory on the filesystem to measure, required", 0, 0},
      {"mb", 0, MNT_OPT_INT, &mb, "M", "state size in MB (default: ResNet-50 with momentum, about 205)",
       MNT_RANGE(1, 1 << 20)},
      {"stripe", 0, MNT_OPT_STRING, &stripe_s, "BYTES", "alignment and share granularity (default 1M)", 0, 0},
      {"repeat", 0, MNT_OPT_INT, &repeat, "N", "checkpoints written and read (default 3; the median is shown)",
       MNT_RANGE(1, 1000)},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int quiet = mnt_world_guess_rank() != 0;
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
  size_t stripe;
  if (!dir || mnt_parse_size(stripe_s, &stripe) || stripe < 4096 || (stripe & (stripe - 1))) {
    if (!quiet)
      fprintf(stderr, "mntrain bench ckpt: %s (see mntrain bench ckpt --help)\n",
              dir ? "--stripe: a power of two of at least 4096" : "--dir D is required");
    return MNT_EARG;
  }
  MNT_CHECK(mnt_world_init(w));
  mnt_comm *c = NULL;
  mnt_backend *be = NULL;
  mnt_resnet *m = NULL;
  mnt_ckpt_writer *wr = NULL;
  mnt_ckpt_tensor *t = NULL;
  float *slab = NULL;
  char root[1100];
  snprintf(root, sizeof root, "%s/bench-ckpt", dir);
  /* the tensors: ResNet-50's (weights, momentum, BN statistics), scaled to --mb */
  if ((st = mnt_comm_create(w, "auto", MNT_TOPO_FLAT, &c)) != MNT_OK) return st;
  if ((st = mnt_backend_create("cpu", NULL, &be)) == MNT_OK) st = mnt_resnet_create(be, "resnet50", 1000, 32, 1, 1, 0, &m);
  int nt = 0;
  size_t total = 0;
  if (st == MNT_OK) {
    size_t base = 2 * m->nw + m->nbn;
    double scale = mb ? mb * 1e6 / 4.0 / (double)base : 1.0;
    t = calloc((size_t)(2 * m->nparams + m->nstats), sizeof *t);
    for (int pass = 0; t && pass < 3; pass++) {
      int np = pass < 2 ? m->nparams : m->nstats;
      for (int i = 0; i < np; i++, nt++) {
        const mnt_param *p = pass < 2 ? &m->params[i] : &m->stats[i];
        snprintf(t[nt].name, sizeof t[nt].name, "%s/%s", pass == 0 ? "/model" : pass == 1 ? "/optim/momentum" : "/bn",
                 p->name);
        size_t n = (size_t)((double)p->n * scale);
        t[nt].n = n ? n : 1;
        t[nt].ndims = 1;
        t[nt].dims[0] = (int)t[nt].n;
        total += t[nt].n;
      }
    }
    slab = t ? malloc(total * sizeof(float)) : NULL;
    if (!slab) st = MNT_ENOMEM;
    size_t off = 0;
    for (int i = 0; slab && i < nt; i++) {
      t[i].data = slab + off;
      for (size_t k = 0; k < t[i].n; k++) slab[off + k] = (float)((off + k) % 1000) * 1e-3f;
      off += t[i].n;
    }
  }
  double state_mb = (double)total * 4 / 1e6;
  mnt_resnet_destroy(m);
  m = NULL;
  if ((st = mnt_world_agree(w, st)) != MNT_OK) goto done;
  if ((st = mnt_ckpt_writer_create(c, root, stripe, repeat + 1, -1, &wr)) != MNT_OK) goto done;
  if (w->rank == 0) {
    printf("# mntrain bench ckpt: %s, %d ranks on %d nodes, state %.1f MB in %d tensors, stripe %zu KiB\n", dir, w->size,
           w->nnodes, state_mb, nt, stripe / 1024);
    fflush(stdout);
  }
  double *wt = calloc((size_t)repeat, sizeof *wt), *rt = calloc((size_t)repeat, sizeof *rt),
         *bt = calloc((size_t)repeat, sizeof *bt), *stall = calloc((size_t)repeat, sizeof *stall),
         *dd = calloc((size_t)repeat, sizeof *dd);
  uint8_t *img = malloc(total * sizeof(float));
  if (!wt || !rt || !bt || !stall || !dd || !img) st = MNT_ENOMEM;
  json_t *state = json_pack("{s:i}", "bench", 1), *attrs = json_pack("{s:s}", "arch", "bench"),
         *cfg = json_pack("{s:i}", "mb", mb);
  double mc = 0;
  for (int i = 0; i < repeat && st == MNT_OK; i++) {
    if (w->rank == 0) dd[i] = dd_mbs(dir, (int)(state_mb + 0.5)); /* raw, before each write */
    if ((st = mnt_barrier(c)) != MNT_OK) break;
    double t0 = mnt_now();
    if ((st = mnt_ckpt_begin(wr, i + 1, t, nt, state, attrs, cfg, &stall[i])) != MNT_OK) break;
    if ((st = mnt_ckpt_finish(wr)) != MNT_OK) break;
    wt[i] = mnt_now() - t0;
    /* read as a resuming job does: rank 0 reads and verifies, then everyone gets the state */
    char sdir[1200], path[1300];
    mnt_ckpt_step_dir(sdir, sizeof sdir, root, i + 1);
    snprintf(path, sizeof path, "%s/%s", sdir, MNT_CKPT_FILE);
    if (w->rank == 0) drop_cache(path);
    if ((st = mnt_barrier(c)) != MNT_OK) break;
    double r0 = mnt_now();
    if (w->rank == 0) {
      mnt_ckpt ck;
      int found;
      st = mnt_ckpt_open(sdir, 1, &ck, &found);
      if (st == MNT_OK) memcpy(img, ck.image, total * sizeof(float) < ck.image_bytes ? total * 4 : ck.image_bytes);
      mnt_ckpt_close(&ck);
      rt[i] = mnt_now() - r0;
    }
    if ((st = mnt_world_agree(w, st)) != MNT_OK) break;
    if ((st = mnt_broadcast(c, img, total * sizeof(float), 0)) != MNT_OK) break;
    bt[i] = mnt_now() - r0;
  }
  if (st == MNT_OK) { /* one plain copy of the whole state: what the stall is held against */
    double m0 = mnt_now();
    memcpy(img, slab, total * sizeof(float));
    mc = mnt_now() - m0;
  }
  if (st == MNT_OK && w->rank == 0) {
    qsort(wt, (size_t)repeat, sizeof *wt, cmp_d);
    qsort(rt, (size_t)repeat, sizeof *rt, cmp_d);
    qsort(bt, (size_t)repeat, sizeof *bt, cmp_d);
    qsort(stall, (size_t)repeat, sizeof *stall, cmp_d);
    qsort(dd, (size_t)repeat, sizeof *dd, cmp_d);
    double wm = state_mb / wt[repeat / 2], raw = dd[repeat / 2];
    printf("dd conv=fsync: write %.1f MB/s (%d MB, median of %d)\n", raw, (int)(state_mb + 0.5), repeat);
    printf("checkpoint: write %.1f MB/s (%.3f s; %.0f%% of dd) by %d rank%s\n", wm, wt[repeat / 2],
           raw > 0 ? 100.0 * wm / raw : 0.0, w->size, w->size == 1 ? "" : "s");
    printf("checkpoint: read %.1f MB/s (%.3f s, rank 0, checksums verified, page cache dropped); with the "
           "broadcast to %d rank%s %.3f s\n",
           state_mb / rt[repeat / 2], rt[repeat / 2], w->size, w->size == 1 ? "" : "s", bt[repeat / 2]);
    printf("checkpoint: stall %.1f ms (this rank's staging copy of %.1f MB), one memcpy of the whole state %.1f ms\n",
           stall[repeat / 2] * 1e3, state_mb / w->size, mc * 1e3);
    fflush(stdout);
  }
  json_decref(state);
  json_decref(attrs);
  json_decref(cfg);
  free(wt);
  free(rt);
  free(bt);
  free(stall);
  free(dd);
  free(img);
  if (st == MNT_OK) st = mnt_barrier(c);
  if (st == MNT_OK && w->rank == 0) { /* leave nothing behind */
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) MNT_WARN("could not remove %s", root);
  }
done:
  mnt_ckpt_writer_destroy(wr);
  free(t);
  free(slab);
  mnt_resnet_destroy(m);
  mnt_backend_destroy(be);
  mnt_comm_destroy(c);
  return st;
}
