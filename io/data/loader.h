/* loader.h — this rank's slice of each global batch, read from the shards by prefetch threads
 * and augmented, in a global order that does not depend on the number of ranks.
 * defines: mnt_loader_cfg, mnt_batch, mnt_loader_open / next / position / close,
 *          mnt_loader_batches_per_epoch, mnt_loader_split, mnt_loader_raw_shape, mnt_sample_ws (a thread's read and
 *          decode buffers), mnt_loader_val_sample[_ws].
 * Order: epoch e visits the samples in a permutation of the whole dataset seeded by (seed, e);
 * global batch k of the epoch is positions [k*B, (k+1)*B) of it, and rank r of R takes positions
 * k*B + r*B/R ... (B must divide by R, unless cfg.uneven: then rank r takes positions
 * [r*B/R, (r+1)*B/R) of it, rounded down: the survivors of a lost rank keep the global batch). The last total mod B samples of an epoch are dropped
 * (drop-last; the next epoch's permutation is new). A position is (epoch, cursor = samples of the
 * epoch already consumed), the same on any number of ranks, so a run resumes on a different rank
 * count. Augmentation is seeded by (seed, epoch, sample): what a sample becomes does not depend
 * on which rank reads it (io/data/augment.h). Output: float32 NCHW, normalised with the index's
 * mean/std.
 * Format 3 (images at their own sizes, raw or JPEG records): the training box is drawn from each
 * image's own width and height (mnt_aug_box_wh: torchvision's RandomResizedCrop), the validation
 * box is Resize(out / crop) + CenterCrop(out) of it (mnt_val_box); a JPEG record is decoded in the
 * loader's threads, only where the box reads and at the smallest DCT scale that keeps it at least
 * out × out (io/data/jpegcrop.h), then resampled as a raw record is. --pad-crop is refused (it is for
 * small square images). Format 1/2 (squares): as before, boxes of the S×S images. */
#ifndef MNT_LOADER_H
#define MNT_LOADER_H

#include <stdint.h>

#include "io/data/augment.h" /* MNT_BOX_FLOATS, the boxes and the resampler the loader applies */
#include "io/data/dataset.h"

typedef struct mnt_loader_cfg {
  int out_size;      /* training crop / validation crop in pixels */
  int train;         /* 1: RandomResizedCrop(0.08-1, 3/4-4/3) + flip; 0: resize + centre crop */
  int global_batch;  /* B, over all ranks */
  int rank, nranks;
  int uneven;        /* 1: B need not divide by nranks (mnt_loader_split) */
  long long seed;
  int threads;       /* prefetch threads (default 2) */
  int depth;         /* batches read ahead (default 2 * threads) */
  int out_channels;  /* 0: the dataset's; 3: grey images are repeated into 3 channels */
  double min_scale;  /* RandomResizedCrop's smallest area fraction (0: 0.08, ImageNet's) */
  int pad_crop;      /* > 0: instead of RandomResizedCrop, the small-image (CIFAR) augmentation: the whole
                      * image shifted by up to pad_crop pixels each way, zeros around, + flip */
  double val_crop;   /* train = 0: side of the centre crop as a fraction of the image (0: 0.875); format 3:
                      * the resize before the centre crop is out_size / val_crop (224 / 0.875 = 256) */
  int raw;           /* 1: hand out uint8 images (HWC) in `raw`, with each sample's augmentation as a
                      * box, for a device that augments itself (the GPU path: mnt_k_augment_u8 in
                      * kernels/augment.h); images is then NULL. Format 1/2: the stored S×S images,
                      * unaugmented, and their boxes. Format 3 (images of many sizes, the device
                      * kernel takes one size): the CPU reads and decodes each image and resamples
                      * its box to out_size × out_size RGB, unflipped, rounded to uint8 (within half
                      * a grey level of the float path's values); its box is then the whole of that
                      * image, (0, 0, out, out), with the sample's flip: the device flips and
                      * normalises. mnt_loader_raw_shape gives the images' side and channels. */
  int encoded;       /* 1 (format 3 JPEG records only, not with raw): hand out each sample's record as
                      * stored, read and verified (its XXH3), in `enc` (sample i: bytes enc_off[i] to
                      * enc_off[i + 1]), its stored width and height in `wh`, and its box in those
                      * pixels (training: RandomResizedCrop's, with the flip; validation: the resize
                      * + centre crop's) in `boxes`, for a device that decodes JPEG itself (nvJPEG):
                      * what a CPU core still does per image when it does not decode. images and raw
                      * are NULL. */
  /* raw and encoded buffers' allocator (page-locked memory for fast copies to a GPU); NULL: aligned_alloc */
  int (*host_alloc)(void *ctx, size_t bytes, void **p);
  void (*host_free)(void *ctx, void *p);
  void *alloc_ctx;
} mnt_loader_cfg;


typedef struct mnt_batch {
  int n;             /* B / R images */
  int channels, size;
  float *images;     /* n × channels × size × size */
  int32_t *labels;
  int64_t *ids;      /* global sample indices */
  uint8_t *raw;      /* cfg.raw: n × size × size × channels (mnt_loader_raw_shape: format 1/2 the stored
                      * squares, format 3 the out_size crops) */
  float *boxes;      /* cfg.raw, cfg.encoded: n × MNT_BOX_FLOATS, each sample's augmentation */
  uint8_t *enc;      /* cfg.encoded: the n records, one after another */
  size_t *enc_off;   /* cfg.encoded: n + 1 offsets into enc */
  int32_t *wh;       /* cfg.encoded: n × 2, each record's stored width and height */
  size_t enc_cap;    /* cfg.encoded: bytes allocated at enc (grows to the largest batch) */
  int64_t epoch, cursor; /* position of this batch's global batch */
} mnt_batch;

typedef struct mnt_loader mnt_loader;

int mnt_loader_open(mnt_loader **out, mnt_dataset *d, const mnt_loader_cfg *cfg, int64_t epoch, int64_t cursor);
/* The next batch (valid until the next call); waits only if the prefetch threads are behind. */
int mnt_loader_next(mnt_loader *l, const mnt_batch **b);
/* the side and channels of the images of a cfg.raw batch: format 1/2 the dataset's (size, channels),
 * format 3 (out_size, 3) */
void mnt_loader_raw_shape(const mnt_dataset *d, int out_size, int *side, int *channels);

/* a thread's buffers for reading and decoding samples (the record, the JPEG decoder and its region);
 * each loader thread has its own; a caller of mnt_loader_val_sample_ws keeps one across samples */
typedef struct mnt_sample_ws mnt_sample_ws;
int mnt_sample_ws_create(mnt_sample_ws **w);
void mnt_sample_ws_destroy(mnt_sample_ws *w);

/* one sample through the validation transform, for evaluation: format 1/2 the centre crop of
 * `crop` × the side (0: 0.875) resized to out_size; format 3 torchvision's Resize(out_size / crop) +
 * CenterCrop(out_size) of the stored image (mnt_val_box). w: buffers kept across calls (NULL: made
 * for the call). crop must be in [0, 1]. */
int mnt_loader_val_sample_ws(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop,
                             mnt_sample_ws *w, float *dst, int32_t *label);
int mnt_loader_val_sample(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop, float *dst,
                          int32_t *label);
/* rank's share of a global batch: positions [first, first + n), r*B/R rounded down to (r+1)*B/R */
void mnt_loader_split(int global_batch, int nranks, int rank, int64_t *first, int *n);
/* where the next batch starts: what a checkpoint stores */
void mnt_loader_position(const mnt_loader *l, int64_t *epoch, int64_t *cursor);
int64_t mnt_loader_batches_per_epoch(const mnt_loader *l);
/* seconds mnt_loader_next spent waiting so far */
double mnt_loader_wait_s(const mnt_loader *l);
void mnt_loader_close(mnt_loader *l);

#endif
