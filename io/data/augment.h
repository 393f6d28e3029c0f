/* augment.h — one sample's augmentation on the CPU: its crop box and the resampler.
 * defines: MNT_BOX_FLOATS, MNT_AUG_MAX_OUT, MNT_AUG_MAX_C, mnt_aug_cfg, mnt_aug_box (the box of a
 *          sample in an epoch), mnt_aug_box_wh (the same on an image of its own width and height),
 *          mnt_val_box (Resize + CenterCrop as a box), mnt_crop_resize (a box resampled, normalised),
 *          mnt_crop_resize_wh (the same from any W×H region), mnt_crop_resize_u8 (resampled to
 *          uint8, the GPU path of format 3), mnt_centre_crop (the validation transform of format 2).
 * The box is drawn from (seed, epoch, sample) alone: the same on every rank, whatever the rank
 * count, so a resumed or elastic run augments every sample as an uninterrupted one. The loader
 * (io/data/loader.h) schedules the samples; the GPU path takes the boxes and resamples on the device
 * (kernels/augment.cu computes the same expression). */
#ifndef MNT_AUGMENT_H
#define MNT_AUGMENT_H

#include <stddef.h>
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
/* The training box of sample id in epoch on a W×H image (format 3: each image its own size), exactly
 * as torchvision 0.14's RandomResizedCrop.get_params draws it: area = W H; 10 tries of a target area
 * W H U(min_scale, 1) and an aspect ratio exp(U(log 3/4, log 4/3)), w = round(sqrt(area ratio)),
 * h = round(sqrt(area / ratio)) (Python's round: halves to even), accepted when 0 < w <= W and
 * 0 < h <= H, then x0 uniform in 0..W-w and y0 in 0..H-h; else the fallback: the whole image with
 * its ratio clamped into (3/4, 4/3) (w = W, h = round(W / (3/4)) when W/H < 3/4; h = H,
 * w = round(H 4/3) when W/H > 4/3), centred with Python's //. Then a flip with probability 1/2.
 * Integer boxes; pad_crop > 0: RandomCrop's shift instead (as mnt_aug_box). a->train is not read.
 * mnt_aug_box(a, ...) is mnt_aug_box_wh(a, a->S, a->S, ...) when a->train: format 2 unchanged. */
void mnt_aug_box_wh(const mnt_aug_cfg *a, int W, int H, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]);
/* torchvision's Resize(R) + CenterCrop(out) on a W×H image as one box of it, R = floor(out / crop)
 * (crop 0: 0.875; 224 -> 256): the shorter side to R, the longer int(R long / short), the crop's
 * top-left round((rh - out) / 2.0), round((rw - out) / 2.0) in the resized image; the box is that
 * crop in source pixels, x and y scaled apart (W / rw, H / rh), so that resampling it to out×out
 * (mnt_crop_resize_wh) equals Resize-then-CenterCrop (bilinear, align_corners=False, no antialias,
 * as torchvision on tensors). No flip. crop must be in (0, 1]. */
void mnt_val_box(int W, int H, int out, double crop, float box[MNT_BOX_FLOATS]);
/* The loader's resampling (the reference for devices that augment): the box of the S×S×C uint8
 * HWC src, flipped, with zeros outside it when pad (else the edge repeated), normalised with
 * mean/std (C entries; a grey source feeds every one of outC channels), into outC×out×out
 * floats at dst (out <= MNT_AUG_MAX_OUT, outC <= MNT_AUG_MAX_C: anything else writes nothing).
 * It runs in the CPU's best vector variant (simd.h), each giving the same floats. */
void mnt_crop_resize(const uint8_t *src, int S, int C, const float box[MNT_BOX_FLOATS], int pad, int out, int outC,
                     const float *mean, const float *std, float *dst);
/* mnt_crop_resize of a W×H×C image whose rows are `stride` bytes apart (a decoded JPEG region),
 * never padded. to_box 0: positions beyond the image repeat its edge (Resize of the whole image,
 * then a crop: the validation transform, and mnt_crop_resize); to_box 1: the box is cut out first,
 * as torchvision's resized_crop does: positions beyond the outer centres of the pixels in the box
 * repeat those pixels (it matters when the box is upscaled: its edge pixels are not blended with
 * the image's next ones). */
void mnt_crop_resize_wh(const uint8_t *src, int W, int H, size_t stride, int C, const float box[MNT_BOX_FLOATS],
                        int to_box, int out, int outC, const float *mean, const float *std, float *dst);
/* The same interpolation (flipped when box[4] != 0), unnormalised, each value rounded to the nearest
 * whole number (halves up) into out×out×outC uint8 HWC at dst: what the loader hands the GPU for
 * format 3 (io/data/loader.h). Resampling that image with the box (0, 0, out, out) gives it back exactly. */
void mnt_crop_resize_u8(const uint8_t *src, int W, int H, size_t stride, int C, const float box[MNT_BOX_FLOATS],
                        int to_box, int out, int outC, uint8_t *dst);
/* the validation transform: the centred box of `crop` × S (0: 0.875) resampled to out × out */
void mnt_centre_crop(const uint8_t *src, int S, int C, double crop, int out, int outC, const float *mean,
                     const float *std, float *dst);

#endif
