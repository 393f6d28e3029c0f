/* dataset.h — the sharded HDF5 image dataset (io/data/README.md).
 * defines: mnt_dataset (index.json + shard files), mnt_dataset_open / close / read, mnt_inspect, mnt_dataset_dims, mnt_dataset_shard_of,
 *          mnt_dataset_read_record, mnt_dataset_read_run, MNT_CODEC_RAW / MNT_CODEC_JPEG, mnt_h5_init,
 *          mnt_shard_writer (create a format 2 shard, append samples, close or abort),
 *          mnt_rec_writer and mnt_rec_settings (the same for format 3 records, io/data/record.c),
 *          mnt_codec_name / mnt_codec_of, mnt_shard_fingerprint,
 *          mnt_index_info (what index.json records), mnt_index_write,
 *          mnt_permutation (the seeded shuffles used by converters and the loader).
 * A directory holds index.json (classes, shard list, sample counts, image size, channels,
 * mean/std, seed) and shard-KKKKK-of-NNNNN.h5 files with attributes repeating the index (a lone
 * shard describes itself), the fingerprint of the conversion among them.
 * Format 2: `images` (uint8 N×S×S×C, one chunk per image, Fletcher-32), `labels` (int32 N),
 * `source_index` (int64 N: where each sample came from).
 * Format 3 (io/data/record.c): every image at its own width and height, one record each, concatenated in
 * `records` (uint8, one contiguous dataset: a run of consecutive records is one pread at the file
 * offset H5Dget_offset gives), with `offsets` (int64 N+1: record i is records[offsets[i],
 * offsets[i+1])), `shapes` (int32 N×3: height, width, channels), `checksums` (uint64 N: XXH3-64 of
 * each record, verified on every read), `labels` and `source_index`; the small tables carry
 * Fletcher-32. A record is the raw HWC pixels or a JPEG (attribute and index "codec"). */
#ifndef MNT_DATASET_H
#define MNT_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "src/path.h"

#define MNT_DATASET_FORMAT "mntrain-shards"
/* 3: variable-size records (raw or JPEG), an XXH3-64 checksum per record (MNT_FORMAT_RECORDS);
 * 2: squares, a Fletcher-32 checksum on every chunk (one image per chunk), verified by HDF5 on
 *    every read, and a "fingerprint" of the inputs and settings in the index and every shard
 *    (MNT_FORMAT_SQUARE, what `convert idx|synth` and `convert imagenet --size` write);
 * 1: neither (still read, with a warning: nothing tells a corrupt image from a good one). */
#define MNT_DATASET_VERSION 3 /* the newest this mntrain reads */
#define MNT_FORMAT_SQUARE 2
#define MNT_FORMAT_RECORDS 3

enum { MNT_CODEC_RAW = 0, MNT_CODEC_JPEG = 1 };

typedef struct mnt_dataset {
  char dir[MNT_PATH_MAX];
  int nclasses;
  char **class_names;
  int size, channels;      /* format 1/2: images are size × size × channels, uint8; format 3: size =
                              resize (the stored shorter side, at most), channels of every record */
  float mean[3], std[3];   /* per channel, of pixel / 255 */
  long long seed;
  int nshards;
  char **shard_path;
  int64_t *shard_count, *shard_start; /* samples per shard, global index of its first sample */
  int64_t total;
  int64_t *hids;           /* per shard: file, images and labels handles (3 each), opened at open */
  int version;             /* format of the files: 1, 2 or 3 */
  char fingerprint[32];    /* of the conversion's inputs and settings ("none" for version 1) */
  int codec;               /* MNT_CODEC_RAW for format 1/2 */
  int quality;             /* format 3 JPEG: the encoder's quality (0 otherwise) */
  int resize, max_side;    /* format 3: shorter side scaled to resize (never enlarged), longer side
                              capped at max_side (0: no cap); 0 for format 1/2 */
  int64_t record_bytes;    /* format 3: bytes of all records; format 1/2: total * size² * channels */
  /* format 3, loaded at open (28 bytes per sample): record g of shard k is the bytes
   * [rec_off[g + k], rec_off[g + k + 1]) after rec_base[k] in its file */
  int64_t *rec_off, *rec_base;
  int32_t *rec_wh;         /* width, height of sample g at 2g, 2g+1 */
  int32_t *rec_label;
  uint64_t *rec_sum;       /* XXH3-64 of each record */
  int *fds;                /* format 3: per shard, the file opened for pread (HDF5 closed) */
} mnt_dataset;

/* Open DIR/index.json and every shard; checks each shard against the index (shape, type,
 * count, attributes). Errors name the file: MNT_EARG when DIR is no dataset or an empty one,
 * MNT_EDATA when it is damaged. Every shard stays open: when they and a reserve for the run's
 * other files do not fit under the limit on open files, MNT_EARG up front ("out of file
 * descriptors opening DIR ..."); running out anyway is MNT_ESYS, never blamed on a shard. */
int mnt_dataset_open(const char *dir, mnt_dataset *d);
/* `mntrain inspect` of a dataset (io/data/inspect.c): its index, codec, sizes and the labels'
 * histogram; verify: every image read and its checksum checked too */
int mnt_inspect(const char *path, int verify);
void mnt_dataset_close(mnt_dataset *d);
/* Sample g (0 <= g < total): its pixels (size*size*channels bytes; NULL: the label only) and label
 * (checked against the class count). A checksum that does not match, a truncated file or a bad
 * label is MNT_EDATA with an error that names the file and the sample. Thread-safe. */
int mnt_dataset_read(mnt_dataset *d, int64_t g, uint8_t *pixels, int32_t *label);
/* Format 3 has no fixed pixel size: there mnt_dataset_read with pixels is MNT_EARG ("format 3 records
 * have their own sizes: use mnt_dataset_read_record"); with pixels NULL it gives the label. */

/* sample g's stored width and height (format 1/2: size x size). Cheap: from tables loaded at open. */
int mnt_dataset_dims(const mnt_dataset *d, int64_t g, int *w, int *h);
/* the shard holding sample g (for messages: d->shard_path[k], sample g - d->shard_start[k]); -1
 * (logged) when g is outside the dataset */
int mnt_dataset_shard_of(const mnt_dataset *d, int64_t g);
/* sample g's stored record, checksum verified: format 3 the coded bytes (JPEG) or the raw h*w*c HWC
 * pixels; format 1/2 the size*size*channels pixels. *buf grows with realloc when *cap is short (the
 * caller owns it and frees it). MNT_EDATA naming the shard file and the sample when damaged.
 * Thread-safe (format 3: one pread, no lock; format 1/2: through HDF5). */
int mnt_dataset_read_record(mnt_dataset *d, int64_t g, uint8_t **buf, size_t *cap, size_t *len, int32_t *label);
/* Format 3: up to *n consecutive records from g on (cut at the end of g's shard; *n says how many)
 * in one pread, each checksum verified; record g+i is (*buf)[off[i], off[i+1]) (off holds *n + 1
 * entries), labels[i] (labels may be NULL) its label. The way to read records in large pieces
 * (inspect --verify reads 4 MiB at a time). A damaged record is MNT_EDATA as in
 * mnt_dataset_read_record, with *n set to the good records before it (delivered; the bad one is
 * g + *n). Format 1/2: MNT_EARG. Thread-safe. */
int mnt_dataset_read_run(mnt_dataset *d, int64_t g, int64_t *n, uint8_t **buf, size_t *cap, size_t *off,
                         int32_t *labels);

typedef struct mnt_shard_writer {
  int64_t file, images, labels, source; /* HDF5 handles */
  int64_t n, written;
  int size, channels;
  int allow_short; /* close shrinks a shard with fewer samples than announced (skipped inputs) */
  char path[MNT_PATH_MAX];
} mnt_shard_writer;

/* What every process that uses HDF5 calls first (main does): no exit-time clean-up (see
 * dataset.c). HDF5's own error printing (HDF5-DIAG) is turned off in every thread that opens, creates
 * or reads shards through these functions: HDF5 keeps that setting per thread. */
void mnt_h5_init(void);
/* the HDF5 release this process runs on, as the library reports it: "1.14.5" */
const char *mnt_h5_version(void);
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

/* a format 3 shard being written (io/data/record.c): the HDF5 file is created at once (exclusively, as
 * mnt_shard_create); records go to an unlinked spool file beside it and the tables to memory, and
 * close writes the tables and copies the spool into the contiguous `records` dataset, whose size is
 * then known. Nothing is left on disk after a failure but what mnt_rec_abort removes. */
typedef struct mnt_rec_settings {
  int channels, nclasses, shard, nshards, codec, quality, resize, max_side;
  long long seed;
  const char *fingerprint;
} mnt_rec_settings;
typedef struct mnt_rec_writer {
  int64_t file;       /* HDF5 handle */
  int spool;          /* the records so far */
  int64_t n, written, bytes;
  int64_t *offsets, *source;
  int32_t *shapes, *labels;
  uint64_t *sums;
  mnt_rec_settings set;
  char path[MNT_PATH_MAX];
} mnt_rec_writer;
/* a shard of at most n samples */
int mnt_rec_create(mnt_rec_writer *w, const char *path, int64_t n, const mnt_rec_settings *set);
/* one record: its bytes, its height and width (channels: the settings'), label and source */
int mnt_rec_append(mnt_rec_writer *w, const uint8_t *rec, size_t len, int h, int wd, int32_t label, int64_t source);
/* the tables, the records and the attributes: "samples" (= written), "record_bytes", and
 * pixel_sum, pixel_sum2 (per channel, of pixel / 255) and pixel_count of the stored pixels */
int mnt_rec_close(mnt_rec_writer *w, const double *sum, const double *sum2, double pixels);
void mnt_rec_abort(mnt_rec_writer *w);
/* "raw" / "jpeg" and back (-1: neither) */
const char *mnt_codec_name(int codec);
int mnt_codec_of(const char *name);
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
  int version;                 /* MNT_FORMAT_SQUARE, or MNT_FORMAT_RECORDS with what follows */
  int codec, quality, resize, max_side;
  int64_t record_bytes;        /* of every record, all shards */
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
