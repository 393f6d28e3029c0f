/* inspect.c — `mntrain inspect`: a dataset's (or a lone shard's directory's) index, the labels'
 * histogram, and with verify every image read and its checksum checked; see convert.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/convert.h"
#include "io/dataset.h"
#include "check.h"
#include "log.h"
#include "path.h"
#include "progress.h"

int mnt_inspect(const char *path, int verify) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    MNT_SYSERR("%s", path);
    return MNT_EARG;
  }
  char dir[MNT_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path); /* fits: stat took it */
  if (!S_ISDIR(sb.st_mode)) { /* a lone shard: inspect its directory's dataset if there is one */
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
  }
  mnt_dataset d;
  MNT_CHECK(mnt_dataset_open(dir, &d));
  int st = MNT_OK;
  printf("dataset %s: %lld samples, %d classes, %dx%dx%d uint8, %d shards, seed %lld, format %d, fingerprint %s\n",
         dir, (long long)d.total, d.nclasses, d.size, d.size, d.channels, d.nshards, d.seed, d.version, d.fingerprint);
  printf("mean");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.mean[c]);
  printf(", std");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.std[c]);
  printf("\n");
  int64_t *hist = calloc((size_t)d.nclasses, sizeof *hist);
  uint8_t *pix = malloc((size_t)d.size * d.size * d.channels);
  int64_t bad = 0;
  if (!hist || !pix) {
    st = MNT_ENOMEM;
    goto out;
  }
  /* the histogram reads the labels; --verify reads every image too, and HDF5 checks each one's
   * checksum: a bad sample is named by file and index */
  mnt_progress prog;
  mnt_progress_start(&prog, "inspect --verify", "samples", d.total);
  for (int64_t g = 0; g < d.total; g++) {
    int32_t label;
    if (mnt_dataset_read(&d, g, verify ? pix : NULL, &label) != MNT_OK) {
      bad++;
      continue;
    }
    hist[label]++;
    if (verify) mnt_progress_update(&prog, g + 1, NULL);
  }
  mnt_progress_end(&prog);
  printf("%-6s %-24s %10s\n", "label", "class", "samples");
  for (int c = 0; c < d.nclasses; c++) printf("%-6d %-24s %10lld\n", c, d.class_names[c], (long long)hist[c]);
  if (verify)
    printf("verify: %lld samples read%s, %lld bad\n", (long long)d.total,
           d.version >= 2 ? " and their checksums checked" : " (format 1: no checksums to check)", (long long)bad);
  else
    printf("labels: %lld read, %lld bad (--verify reads every image and checks its checksum)\n", (long long)d.total,
           (long long)bad);
  st = bad ? MNT_EDATA : MNT_OK;
out:
  free(hist);
  free(pix);
  mnt_dataset_close(&d);
  return st;
}

