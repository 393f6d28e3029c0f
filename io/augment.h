/* augment.h — one sample's augmentation on the CPU: its crop box and the resampler.
 * defines: MNT_BOX_FLOATS, MNT_AUG_MAX_OUT, MNT_AUG_MAX_C, mnt_aug_cfg, mnt_aug_box (the box of a
 *          sample in an epoch), mnt_crop_resize (a box resampled, normalised), mnt_centre_crop (the
 *          validation transform).
 * The box is drawn from (seed, epoch, sample) alone: the same on every rank, whatever the rank
 * count, so a resumed or elastic run augments every sample as an uninterrupted one. The loader
 * (io/loader.h) schedules the samples; the GPU path takes the boxes and resamples on the device
 * (kernels/augment.cu computes the same expression). */
#ifndef MNT_AUGMENT_H
#define MNT_AUGMENT_H

#include <stdint.h>

/* One sample's augmentation: the box (x0, y0, w, h) of the S×S source resampled bilinearly to
 * out×out, flipped when flip != 0 (stored as floats: x0, y0, w, h, flip). */
enum { MNT_BOX_FLOATS = 5 };
enum { MNT_AUG_MAX_OUT = 4096, MNT_AUG_MAX_C = 3 }; /* the largest output side and channel count */

typedef struct mnt_aug_cfg {
  int train;          /* 1: RandomResizedCrop (or padded RandomCrop) + flip; 0: the centre box */
  long long seed;
  int S;              /* the source images' side */
  double min_scale;   /* RandomResizedCrop's smallest area fraction (0: 0.08) */
  int pad_crop;       /* > 0: torchvision's RandomCrop(S, padding=pad_crop) instead */
  double val_crop;    /* train = 0: the centre box's side as a fraction of S (0: 0.875) */
} mnt_aug_cfg;

/* the box of sample id in epoch (torchvision's RandomResizedCrop: scale (min_scale, 1), ratio
 * (3/4, 4/3), 10 tries, then the whole image; then a flip with probability 1/2) */
void mnt_aug_box(const mnt_aug_cfg *a, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]);
/* The loader's resampling (the reference for devices that augment): the box of the S×S×C uint8
 * HWC src, flipped, with zeros outside it when pad (else the edge repeated), normalised with
 * mean/std (C entries; a grey source feeds every one of outC channels), into outC×out×out
 * floats at dst (out <= MNT_AUG_MAX_OUT, outC <= MNT_AUG_MAX_C: anything else writes nothing).
 * It runs in the CPU's best vector variant (simd.h), each giving the same floats. */
void mnt_crop_resize(const uint8_t *src, int S, int C, const float box[MNT_BOX_FLOATS], int pad, int out, int outC,
                     const float *mean, const float *std, float *dst);
/* the validation transform: the centred box of `crop` × S (0: 0.875) resampled to out × out */
void mnt_centre_crop(const uint8_t *src, int S, int C, double crop, int out, int outC, const float *mean,
                     const float *std, float *dst);

#endif
