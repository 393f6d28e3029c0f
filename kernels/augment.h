/* augment.h — host launcher of kernels/augment.cu: the loader's training augmentation on the GPU
 * (C linkage; the stream is the cudaStream_t passed as void *). Returns the cudaError_t of the
 * launch as an int (0: queued). */
#ifndef MNT_KERNELS_AUGMENT_H
#define MNT_KERNELS_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MNT_K_AUG_MAX_C 4
/* n uint8 HWC images of S×S×C (device) -> n×outC×out×out model input (device, fp32 NCHW when
 * !bf16, bf16 NHWC when bf16): each image's box (x0, y0, w, h, flip: 5 floats per image, device)
 * resampled bilinearly with half-pixel centres, flipped, edge-repeated (pad: zeros outside the
 * image), then (x / 255 - mean) / std per channel (mean/std: host arrays of C; a grey source,
 * C = 1, feeds all outC <= MNT_K_AUG_MAX_C channels). The arithmetic is io/data/loader.c's
 * crop_resize, so the two agree to float rounding. n and out: at most 65535 (grid limits). */
int mnt_k_augment_u8(int bf16, const uint8_t *src, int n, int S, int C, const float *boxes, int pad, int out, int outC,
                     const float *mean, const float *std, void *act, void *stream);

#ifdef __cplusplus
}
#endif

#endif
