/* dataset.h — the sharded HDF5 image dataset (DESIGN "Dataset").
 * defines: mnt_dataset (index.json + shard files), mnt_dataset_open / close / read, mnt_h5_init,
 *          mnt_shard_writer (create a shard, append samples, close or abort), mnt_shard_fingerprint,
 *          mnt_index_info (what index.json records), mnt_index_write,
 *          mnt_permutation (the seeded shuffles used by converters and the loader).
 * A directory holds index.json (classes, shard list, sample counts, image size, channels,
 * mean/std, seed) and shard-KKKKK-of-NNNNN.h5 files, each with `images` (uint8 N×H×W×C, one
 * chunk per image), `labels` (int32 N), `source_index` (int64 N: where each sample came from)
 * and attributes repeating the index (a lone shard describes itself), the fingerprint of the
 * conversion among them. */
#ifndef MNT_DATASET_H
#define MNT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "path.h"

#define MNT_DATASET_FORMAT "mntrain-shards"
/* 2: a Fletcher-32 checksum on every chunk (one image per chunk), verified by HDF5 on every read,
 *    and a "fingerprint" of the inputs and settings in the index and every shard;
 * 1: neither (still read, with a warning: nothing tells a corrupt image from a good one). */
#define MNT_DATASET_VERSION 2

typedef struct mnt_dataset {
  char dir[MNT_PATH_MAX];
  int nclasses;
  char **class_names;
  int size, channels;      /* images are size × size × channels, uint8 */
  float mean[3], std[3];   /* per channel, of pixel / 255 */
  long long seed;
  int nshards;
  char **shard_path;
  int64_t *shard_count, *shard_start; /* samples per shard, global index of its first sample */
  int64_t total;
  int64_t *hids;           /* per shard: file, images and labels handles (3 each), opened at open */
  int version;             /* MNT_DATASET_VERSION of the files */
  char fingerprint[32];    /* of the conversion's inputs and settings ("none" for version 1) */
} mnt_dataset;

/* Open DIR/index.json and every shard; checks each shard against the index (shape, type,
 * count, attributes). Errors name the file: MNT_EARG when DIR is no dataset or an empty one,
 * MNT_EDATA when it is damaged. Every shard stays open: when they and a reserve for the run's
 * other files do not fit under the limit on open files, MNT_EARG up front ("out of file
 * descriptors opening DIR ..."); running out anyway is MNT_ESYS, never blamed on a shard. */
int mnt_dataset_open(const char *dir, mnt_dataset *d);
void mnt_dataset_close(mnt_dataset *d);
/* Sample g (0 <= g < total): its pixels (size*size*channels bytes; NULL: the label only) and label
 * (checked against the class count). A checksum that does not match, a truncated file or a bad
 * label is MNT_EDATA with an error that names the file and the sample. Thread-safe. */
int mnt_dataset_read(mnt_dataset *d, int64_t g, uint8_t *pixels, int32_t *label);

typedef struct mnt_shard_writer {
  int64_t file, images, labels, source; /* HDF5 handles */
  int64_t n, written;
  int size, channels;
  int allow_short; /* close shrinks a shard with fewer samples than announced (skipped inputs) */
  char path[MNT_PATH_MAX];
} mnt_shard_writer;

/* What every process that uses HDF5 calls first (main does): no exit-time clean-up (see
 * dataset.c). HDF5's own error printing is turned off where files are opened or created. */
void mnt_h5_init(void);
/* a shard of exactly n samples; attrs repeat the index. The file is created exclusively (O_EXCL:
 * an existing file or symlink at path is an error, not overwritten or followed): remove stale
 * files first. */
int mnt_shard_create(mnt_shard_writer *w, const char *path, int64_t n, int size, int channels, int nclasses,
                     int shard, int nshards, long long seed, const char *fingerprint);
int mnt_shard_append(mnt_shard_writer *w, const uint8_t *pixels, int32_t label, int64_t source_index);
/* fails if fewer samples than announced were written, unless allow_short */
int mnt_shard_close(mnt_shard_writer *w);
/* after a failure: close what is open (once) and delete the file */
void mnt_shard_abort(mnt_shard_writer *w);
/* the "fingerprint" attribute of a shard file ("none" if it has none); -1 if it is not HDF5; -2
 * (logged: "out of file descriptors ...") if it could not be opened for want of a descriptor,
 * which says nothing about the file */
int mnt_shard_fingerprint(const char *path, char *out, size_t n);

/* what index.json records of a conversion */
typedef struct mnt_index_info {
  int nclasses;
  char *const *class_names;
  int size, channels;          /* images are size × size × channels, uint8 */
  const float *mean, *std;     /* per channel, of pixel / 255 */
  long long seed;
  int nshards;
  const int64_t *shard_count;  /* samples per shard */
  const char *fingerprint;     /* of the conversion's inputs and settings */
  const char *source;          /* what the samples were made from: "idx FILE FILE", ... */
} mnt_index_info;

/* write DIR/index.json (atomically: tmp file, fsync, rename) */
int mnt_index_write(const char *dir, const mnt_index_info *ix);
void mnt_shard_name(char *out, size_t n, int shard, int nshards);

/* perm[0..n) = a permutation of 0..n-1 drawn from seed (Fisher-Yates, splitmix64) */
void mnt_permutation(int64_t *perm, int64_t n, uint64_t seed);
/* a 64-bit hash of (a, b): splitmix64's finalizer (src/rng.h) of a * gamma + b + a constant; the
 * seeds of the data order and of augmentation, chained as mnt_mix(mnt_mix(seed, epoch), id) */
uint64_t mnt_mix(uint64_t a, uint64_t b);

#endif
