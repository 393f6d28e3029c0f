/* inspect.c — `mntrain inspect`: a dataset's (or a lone shard's directory's) index, its codec, bytes
 * per image and size on disk, the labels' histogram, and with verify every image read and its
 * checksum checked (format 3 JPEG records: their headers checked against the stored sizes too); see
 * dataset.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <xxhash.h>

#include "io/data/dataset.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/progress.h"
#include "src/sysmem.h"

enum { VERIFY_RUN = 4 << 20 }; /* format 3 --verify reads records in runs of about this many bytes */

/* the index's settings, bytes per image (mean, min, max), stored sizes and the files' size */
static void describe(const mnt_dataset *d) {
  double files = 0;
  for (int k = 0; k < d->nshards; k++) {
    struct stat sb;
    if (stat(d->shard_path[k], &sb) == 0) files += (double)sb.st_size;
  }
  char fb[32], rb[32], mean[32];
  mnt_format_bytes(files, fb, sizeof fb);
  mnt_format_bytes((double)d->record_bytes, rb, sizeof rb);
  mnt_format_bytes((double)d->record_bytes / (double)d->total, mean, sizeof mean);
  if (d->version < MNT_FORMAT_RECORDS) {
    printf("codec raw (format %d: %dx%dx%d squares), %s per image, %s of images, %s of shard files\n", d->version,
           d->size, d->size, d->channels, mean, rb, fb);
    return;
  }
  int64_t lo = INT64_MAX, hi = 0;
  int wmin = INT32_MAX, hmin = INT32_MAX, wmax = 0, hmax = 0;
  for (int k = 0; k < d->nshards; k++)
    for (int64_t j = 0; j < d->shard_count[k]; j++) {
      int64_t g = d->shard_start[k] + j, len = d->rec_off[g + k + 1] - d->rec_off[g + k];
      int w = d->rec_wh[2 * g], h = d->rec_wh[2 * g + 1];
      lo = len < lo ? len : lo;
      hi = len > hi ? len : hi;
      wmin = w < wmin ? w : wmin, hmin = h < hmin ? h : hmin, wmax = w > wmax ? w : wmax, hmax = h > hmax ? h : hmax;
    }
  char q[24] = "", cap[32] = "not capped";
  if (d->codec == MNT_CODEC_JPEG) snprintf(q, sizeof q, " quality %d", d->quality);
  if (d->max_side) snprintf(cap, sizeof cap, "at most %d", d->max_side);
  printf("codec %s%s (format 3: shorter side %d or less, longer side %s), %s per image (min %lld, max %lld bytes), "
         "%s of records, %s of shard files; stored widths %d..%d, heights %d..%d\n",
         mnt_codec_name(d->codec), q, d->resize, cap, mean, (long long)lo, (long long)hi, rb, fb, wmin, wmax, hmin,
         hmax);
}

/* a JPEG record's header against its stored size: 0, or 1 (logged) */
static int bad_header(tjhandle tj, const mnt_dataset *d, int k, int64_t g, const uint8_t *rec, size_t len) {
  int w, h, sub, cs, ww = d->rec_wh[2 * g], wh = d->rec_wh[2 * g + 1];
  if (tjDecompressHeader3(tj, rec, len, &w, &h, &sub, &cs) == 0 && w == ww && h == wh) return 0;
  MNT_ERR("%s: sample %lld: its JPEG is not the %dx%d image the shapes say (its checksum matched: written so)",
          d->shard_path[k], (long long)(g - d->shard_start[k]), ww, wh);
  return 1;
}

/* format 3 --verify: every record read in runs of about VERIFY_RUN bytes, checksums checked; JPEG
 * headers against the stored sizes. Bad samples are named (logged) and counted into *bad, labels
 * into hist; every sample's label and record bytes into dig. */
static int verify_records(mnt_dataset *d, int64_t *hist, int64_t *bad, mnt_progress *prog, XXH3_state_t *dig) {
  enum { MAX_RUN = 1024 };
  uint8_t *buf = NULL;
  size_t cap = 0, off[MAX_RUN + 1];
  int32_t labels[MAX_RUN];
  tjhandle tj = d->codec == MNT_CODEC_JPEG ? tjInitDecompress() : NULL;
  int st = d->codec == MNT_CODEC_JPEG && !tj ? MNT_ENOMEM : MNT_OK;
  for (int64_t g = 0; g < d->total && st == MNT_OK;) {
    int k = 0;
    while (k + 1 < d->nshards && d->shard_start[k + 1] <= g) k++;
    int64_t n = 1, end = d->shard_start[k] + d->shard_count[k];
    while (n < MAX_RUN && g + n < end && d->rec_off[g + n + 1 + k] - d->rec_off[g + k] <= VERIFY_RUN) n++;
    int r = mnt_dataset_read_run(d, g, &n, &buf, &cap, off, labels);
    if (r != MNT_OK && r != MNT_EDATA) {
      st = r;
      break;
    }
    for (int64_t j = 0; j < n; j++) {
      hist[labels[j]]++;
      XXH3_64bits_update(dig, &labels[j], sizeof labels[j]);
      XXH3_64bits_update(dig, buf + off[j], off[j + 1] - off[j]);
      if (tj) *bad += bad_header(tj, d, k, g + j, buf + off[j], off[j + 1] - off[j]);
    }
    g += n + (r == MNT_EDATA); /* past the bad one */
    *bad += r == MNT_EDATA;
    mnt_progress_update(prog, g, NULL);
  }
  if (tj) tjDestroy(tj);
  free(buf);
  return st;
}

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
  char shape[64];
  if (d.version >= MNT_FORMAT_RECORDS) snprintf(shape, sizeof shape, "%d-channel images of their own sizes,", d.channels);
  else snprintf(shape, sizeof shape, "%dx%dx%d", d.size, d.size, d.channels);
  printf("dataset %s: %lld samples, %d classes, %s uint8, %d shards, seed %lld, format %d, fingerprint %s\n", dir,
         (long long)d.total, d.nclasses, shape, d.nshards, d.seed, d.version, d.fingerprint);
  describe(&d);
  printf("mean");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.mean[c]);
  printf(", std");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.std[c]);
  printf("\n");
  int64_t *hist = calloc((size_t)d.nclasses, sizeof *hist);
  int records = d.version >= MNT_FORMAT_RECORDS;
  uint8_t *pix = records ? NULL : malloc((size_t)d.size * d.size * d.channels);
  int64_t bad = 0;
  XXH3_state_t *dig = XXH3_createState();
  if (!hist || (!records && !pix) || !dig) {
    st = MNT_ENOMEM;
    goto out;
  }
  /* the histogram reads the labels; --verify reads every image too, and its checksum is checked
   * (format 2 by HDF5, format 3 here): a bad sample is named by file and index */
  XXH3_64bits_reset(dig);
  mnt_progress prog;
  mnt_progress_start(&prog, "inspect --verify", "samples", d.total);
  if (records && verify) {
    MNT_CHECK_GOTO(verify_records(&d, hist, &bad, &prog, dig), st, out);
  } else {
    for (int64_t g = 0; g < d.total; g++) {
      int32_t label;
      if (mnt_dataset_read(&d, g, verify ? pix : NULL, &label) != MNT_OK) {
        bad++;
        continue;
      }
      hist[label]++;
      XXH3_64bits_update(dig, &label, sizeof label);
      if (verify) XXH3_64bits_update(dig, pix, (size_t)d.size * d.size * d.channels);
      if (verify) mnt_progress_update(&prog, g + 1, NULL);
    }
  }
  mnt_progress_end(&prog);
  printf("%-6s %-24s %10s\n", "label", "class", "samples");
  for (int c = 0; c < d.nclasses; c++) printf("%-6d %-24s %10lld\n", c, d.class_names[c], (long long)hist[c]);
  if (verify)
    printf("verify: %lld samples read%s, %lld bad\n", (long long)d.total,
           d.version >= 2 ? " and their checksums checked" : " (format 1: no checksums to check)", (long long)bad);
  if (verify && !bad) /* one number for the whole set as read: a copy compares with its original */
    printf("content: xxh3 %016llx (every label and %s, in order)\n", (unsigned long long)XXH3_64bits_digest(dig),
           records ? "record as stored" : "image");
  else
    printf("labels: %lld read, %lld bad (--verify reads every image and checks its checksum)\n", (long long)d.total,
           (long long)bad);
  st = bad ? MNT_EDATA : MNT_OK;
out:
  XXH3_freeState(dig);
  free(hist);
  free(pix);
  mnt_dataset_close(&d);
  return st;
}
