/* bench_loader.c — `mntrain bench loader`: images per second the loader delivers (one rank),
 * like benchmarks/peer_loader_torch.py does for a PyTorch DataLoader over the same shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/args.h"
#include "src/cmd/cmd.h"
#include "io/data/dataset.h"
#include "io/data/loader.h"
#include "src/check.h"
#include "src/log.h"

int mnt_bench_loader_main(mnt_world *w, int argc, char **argv) {
  const char *data = NULL;
  int size = 224, threads = 1, batch = 64, batches = 0, val = 0, raw = 0, encoded = 0, help = 0;
  double seconds = 5;
  const mnt_opt opts[] =
      {{"data", 0, MNT_OPT_PATH, &data, "DIR", "dataset directory (mntrain convert), required", 0, 0},
       {"size", 0, MNT_OPT_INT, &size, "S", "output crop in pixels (default 224)", MNT_RANGE(1, 4096)},
       {"loader-threads", 0, MNT_OPT_INT, &threads, "T", "prefetch threads (default 1), as train's --loader-threads",
        MNT_RANGE(1, 256)},
       {"threads", 0, MNT_OPT_ALIAS, NULL, "loader-threads", NULL, 0, 0},
       {"batch", 0, MNT_OPT_INT, &batch, "B", "images per batch (default 64)", MNT_RANGE(1, 1 << 20)},
       {"batches", 0, MNT_OPT_INT, &batches, "N", "batches to time (default: as many as fit in --seconds)",
        MNT_RANGE(0, 2e9)},
       {"seconds", 0, MNT_OPT_DOUBLE, &seconds, "S", "how long to run when --batches is not given (default 5)",
        MNT_RANGE(0.01, 1e6)},
       {"val", 0, MNT_OPT_FLAG, &val, NULL, "validation transform (resize + centre crop) instead of training", 0, 0},
       {"raw", 0, MNT_OPT_FLAG, &raw, NULL,
        "the GPU path's raw mode: stored pixels and crop boxes only (the device augments)", 0, 0},
       {"encoded", 0, MNT_OPT_FLAG, &encoded, NULL,
        "format 3 JPEG: the records as stored (read and verified) and their boxes, not decoded: a CPU core's share "
        "when the device decodes (nvJPEG)",
        0, 0},
       {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int st = mnt_parse_opts("bench loader", opts, argc, argv, &help, 0);
  if (st) return st;
  if (help) {
    mnt_print_help(stdout, "mntrain bench loader --data DIR [--size S] [--loader-threads T] [--batch B]",
                   "Images per second delivered by the loader (read from the shards, RandomResizedCrop, flip,\n"
                   "normalise to float32 NCHW) with T prefetch threads, and per thread.",
                   opts);
    return MNT_OK;
  }
  if (!data) return mnt_usage_error("bench loader", "--data DIR is required (see mntrain bench loader --help)");
  mnt_dataset d;
  MNT_CHECK(mnt_dataset_open(data, &d));
  mnt_loader_cfg c = {.out_size = size,
                      .train = !val,
                      .global_batch = batch,
                      .rank = 0,
                      .nranks = 1,
                      .seed = 1,
                      .threads = threads,
                      .raw = raw,
                      .encoded = encoded};
  mnt_loader *l;
  if ((st = mnt_loader_open(&l, &d, &c, 0, 0)) != MNT_OK) {
    mnt_dataset_close(&d);
    return st;
  }
  const char *mode = encoded ? (val ? "encoded validation" : "encoded") : raw ? "raw" : val ? "validation" : "training";
  printf("# mntrain bench loader: %s (%dx%dx%d, %lld samples) -> %d px %s, batch %d, %d threads\n", data, d.size,
         d.size, d.channels, (long long)d.total, size, mode, batch, threads);
  const mnt_batch *b;
  MNT_CHECK_GOTO(mnt_loader_next(l, &b), st, out); /* warm-up: the first batch */
  double t0 = mnt_now();
  int n = 0;
  while (batches ? n < batches : mnt_now() - t0 < seconds) {
    MNT_CHECK_GOTO(mnt_loader_next(l, &b), st, out);
    n++;
  }
  double dt = mnt_now() - t0, rate = (double)n * batch / dt;
  printf("loader %d px %s threads %d: %.1f img/s, %.1f img/s per thread (%d batches in %.2f s)\n", size, mode,
         threads, rate, rate / threads, n, dt);
out:
  mnt_loader_close(l);
  mnt_dataset_close(&d);
  return st;
}
