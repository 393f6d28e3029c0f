/* shard_write.h — the shard writer every converter ends in (io/convert/imagenet.c, io/convert/idx.c, io/convert/synth.c;
 * io/convert/shard_write.c): a source of samples in, shards and index.json out.
 * defines: mnt_convert_source (samples in their own order, and what they were made from), mnt_convert_record
 *          (a format 3 sample), MNT_SKIP_SAMPLE, MNT_CONVERT_PREFETCH, mnt_convert_write. */
#ifndef MNT_SHARD_WRITE_H
#define MNT_SHARD_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* a format 3 sample as a source gives it: its record (raw HWC pixels or a JPEG; the source's until
 * its next call), the stored width and height, and the sums of the stored pixels / 255 and of
 * their squares per channel (before coding), for the index's mean and std */
typedef struct mnt_convert_record {
  const uint8_t *data;
  size_t len;
  int w, h;
  int32_t label;
  double sum[3], sum2[3];
} mnt_convert_record;

/* a source of samples, in its own order */
#define MNT_SKIP_SAMPLE (-1) /* get(): this input is unreadable; it was reported and is left out */
typedef struct mnt_convert_source {
  int64_t n;
  int size, channels, nclasses; /* format 3: size is the resize (the stored shorter side, at most) */
  char **class_names;
  void *ctx;
  int version;                  /* MNT_FORMAT_SQUARE (0 means it too): get; MNT_FORMAT_RECORDS: get_record */
  int codec, quality, max_side; /* format 3: how records are coded, the cap on the longer side */
  int (*get)(void *ctx, int64_t i, uint8_t *pixels, int32_t *label);
  int (*get_record)(void *ctx, int64_t i, mnt_convert_record *r);
  /* optional: prepare samples ids[0..n) in parallel before they are asked for in that order */
  void (*prefetch)(void *ctx, const int64_t *ids, int n);
  /* what the samples are made from: a hash of the inputs (contents, or names, sizes and times of
   * files) and how they are decoded; it enters the conversion's fingerprint */
  uint64_t inputs;
  const char *description; /* for index.json's "source": "idx FILE FILE", ... */
  int64_t ignored;         /* files found but not taken as inputs (reported by the converter) */
} mnt_convert_source;

enum { MNT_CONVERT_PREFETCH = 256 };

/* write src into OUT as nshards shards in a seeded random order, then index.json. An OUT that
 * holds shards or an index of another conversion (other inputs or settings) is refused, or with
 * force emptied of them first. */
int mnt_convert_write(const mnt_convert_source *src, const char *out, int nshards, long long seed, int force);

#endif
