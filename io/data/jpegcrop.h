/* jpegcrop.h — crop-aware JPEG decoding: only the part of a stored image that a crop box samples.
 * defines: mnt_jpegcrop (a decoder and its buffer: one per thread), mnt_jpegcrop_create / destroy,
 *          mnt_jpeg_region (what a decode gives), mnt_jpeg_scale_for (the DCT scale a box needs),
 *          mnt_jpegcrop_decode.
 * libjpeg-turbo's libjpeg API: the image is decoded at the smallest DCT scale M/8 of 1/8, 2/8, 4/8
 * and 8/8 that keeps the box at least out × out pixels in both directions (the scales libjpeg-turbo
 * has SIMD code for: measured on ~500x375 photographs, decoding at 3/8, 5/8, 6/8 or 7/8 is slower
 * than at 8/8, 7/8 half as fast), only the columns of the box
 * (jpeg_crop_scanline, widened by the library to an iMCU boundary) and only its rows
 * (jpeg_skip_scanlines to the first, and the read stops after the last), as RGB (a grey JPEG's
 * value in all three channels). The box comes back in the decoded region's pixels, so that
 * resampling the region with it (mnt_crop_resize_wh, io/data/augment.h) samples the same points of the
 * picture as resampling the whole image with the original box. A scaled-down DCT is the block's
 * low frequencies, each output pixel covering 8/M source pixels with its centre where the
 * half-pixel convention puts it: a box edge at source x is at x M/8 in the scaled image.
 * libjpeg's errors and warnings (a corrupt or truncated record) never end the process and are not
 * printed by libjpeg: they come back as MNT_EDATA, logged naming the record. */
#ifndef MNT_JPEGCROP_H
#define MNT_JPEGCROP_H

#include <stddef.h>
#include <stdint.h>

#include "io/data/augment.h" /* MNT_BOX_FLOATS */

typedef struct mnt_jpegcrop mnt_jpegcrop;

typedef struct mnt_jpeg_region {
  const uint8_t *pix;        /* RGB rows of w pixels, stride bytes apart: the decoder's buffer, valid until its
                              * next decode */
  int w, h;
  size_t stride;
  int scale;                 /* M: decoded at M/8 of the stored size */
  int x, y;                  /* the region's first column and row in the image scaled by M/8 */
  float box[MNT_BOX_FLOATS]; /* the box in the region's pixels ((x0 M/8 - x, y0 M/8 - y, w M/8, h M/8), flip kept) */
} mnt_jpeg_region;

int mnt_jpegcrop_create(mnt_jpegcrop **out);
void mnt_jpegcrop_destroy(mnt_jpegcrop *j);

/* the smallest M of 1, 2, 4, 8 with box w M/8 >= out and box h M/8 >= out (8 when even the whole
 * scale is smaller: no upscaling in the IDCT) */
int mnt_jpeg_scale_for(const float box[MNT_BOX_FLOATS], int out);

/* Decode the part of the JPEG data[0..len) that resampling box to out × out reads (with two
 * pixels to spare each way) at the scale mnt_jpeg_scale_for(box, out), or at scale/8 when scale is
 * 1..8 (tests and benchmarks; 0: the chosen one); the image must be W × H
 * (anything else is a damaged record). MNT_EDATA, logged as "WHAT: sample INDEX: corrupt JPEG
 * record: REASON", for anything libjpeg rejects or warns about; MNT_ENOMEM when the buffer cannot
 * grow; MNT_EARG for an empty box, out < 1 or a scale outside 0..8. Parts of the box outside the
 * image read its edge, as the resampler does. */
int mnt_jpegcrop_decode(mnt_jpegcrop *j, const uint8_t *data, size_t len, int W, int H, const float box[MNT_BOX_FLOATS],
                        int out, int scale, const char *what, int64_t index, mnt_jpeg_region *r);

#endif
