/* test_augment.c — the data path of the GPU: raw loader batches (stored pixels in page-locked
 * buffers, each sample's box) copied to the device and augmented there (the backend's augment_u8,
 * kernels/augment.cu) must equal the CPU loader's augmentation (mnt_crop_resize) of the same
 * samples: in fp32 to float rounding, in bf16 to bf16's rounding; RandomResizedCrop and the
 * small-image padded crop, over several batches. Exit 77 when no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/backend.h"
#include "src/backend/cuda/device.h"
#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "io/data/loader.h"
#include "src/log.h"

#include "tests/gpu/gpu_test.h"

enum { N = 96, B = 16, S = 40, OUT = 32 };

static int host_alloc(void *ctx, size_t bytes, void **p) { return mnt_be_host_alloc(ctx, bytes, p); }
static void host_free(void *ctx, void *p) { mnt_be_host_free(ctx, p); }

static void run(mnt_dataset *d, mnt_precision prec, int pad, double tol) {
  mnt_backend_opts bo = {.precision = prec, .device = -1};
  mnt_backend *be;
  if (mnt_backend_create("cuda", &bo, &be)) {
    failures++;
    return;
  }
  mnt_loader_cfg c = {.out_size = OUT, .train = 1, .global_batch = B, .rank = 0, .nranks = 1, .seed = 3, .threads = 2,
                      .pad_crop = pad, .raw = 1, .host_alloc = host_alloc, .host_free = host_free, .alloc_ctx = be};
  mnt_loader *l;
  size_t px = (size_t)S * S * 3, per = 3 * OUT * OUT;
  uint8_t *raw = NULL;
  float *boxes = NULL, *act = NULL, *got = malloc(B * per * sizeof(float)), *want = malloc(per * sizeof(float));
  if (mnt_loader_open(&l, d, &c, 0, 0) || mnt_be_alloc(be, B * px, (void **)&raw) ||
      mnt_be_alloc(be, B * MNT_BOX_FLOATS * sizeof(float), (void **)&boxes) ||
      mnt_be_alloc(be, B * per * be->act_bytes, (void **)&act)) {
    failures++;
    return;
  }
  double worst = 0;
  for (int k = 0; k < 4; k++) {
    const mnt_batch *b;
    if (mnt_loader_next(l, &b) || mnt_be_copy(be, raw, b->raw, B * px, MNT_COPY_H2D) ||
        mnt_be_copy(be, boxes, b->boxes, B * MNT_BOX_FLOATS * sizeof(float), MNT_COPY_H2D) ||
        be->ops->augment_u8(be, raw, B, S, 3, boxes, pad > 0, OUT, 3, d->mean, d->std, act) ||
        mnt_act_download(be, act, got, B, 3, OUT, OUT)) {
      failures++;
      break;
    }
    for (int i = 0; i < B; i++) {
      mnt_crop_resize(b->raw + i * px, S, 3, b->boxes + (size_t)i * MNT_BOX_FLOATS, pad > 0, OUT, 3, d->mean, d->std,
                      want);
      for (size_t j = 0; j < per; j++) {
        double e = fabs((double)got[i * per + j] - want[j]) / (1.0 + fabs(want[j]));
        if (!(e <= worst)) worst = e;
      }
    }
  }
  if (!(worst <= tol)) {
    fprintf(stderr, "FAIL: augment %s pad %d: worst error %.3g > %.3g\n", mnt_precision_name(prec), pad, worst, tol);
    failures++;
  } else {
    printf("  augment %s pad %d: ok (worst error %.2g, tolerance %.2g)\n", mnt_precision_name(prec), pad, worst, tol);
  }
  mnt_loader_close(l);
  mnt_be_free(be, raw);
  mnt_be_free(be, boxes);
  mnt_be_free(be, act);
  mnt_backend_destroy(be);
  free(got);
  free(want);
}

int main(void) {
  if (mnt_cuda_device_count() == 0) {
    printf("SKIP: no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)\n",
           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    return 77;
  }
  char dir[] = "/tmp/mntrain-test-augment-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char ds[600];
  snprintf(ds, sizeof ds, "%s/synth", dir);
  mnt_dataset d;
  if (mnt_convert_synth(ds, 10, N, S, 2, 4, 0) || mnt_dataset_open(ds, &d)) return 1;
  run(&d, MNT_PREC_FP32, 0, 1e-5);
  run(&d, MNT_PREC_FP32, 4, 1e-5);
  run(&d, MNT_PREC_BF16, 0, 1e-2); /* bf16 keeps 8 bits of mantissa: 2^-8 of the value */
  mnt_dataset_close(&d);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "test_augment: could not remove %s\n", dir);
  return gpu_test_end("test_augment");
}
