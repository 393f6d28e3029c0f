/* aug_tool.c — the augmentation (io/data/augment.h) as a command, for tests/unit/augment_torchvision.py,
 * which compares it with torchvision:
 *   aug_tool boxes W H SEED EPOCH N [MIN_SCALE]   N training boxes of a W×H image (samples 0..N-1):
 *                                                 lines "x0 y0 w h flip"
 *   aug_tool valbox W H OUT CROP                  the validation box (Resize + CenterCrop): one line
 *   aug_tool crop FILE W H OUT x0 y0 w h flip     FILE: W×H×3 uint8 HWC; the box cut out and
 *                                                 resampled to OUT×OUT (the loader's training
 *                                                 path), flipped, normalised with ImageNet's
 *                                                 mean/std: 3×OUT×OUT float32 (CHW) on stdout
 *   aug_tool val FILE W H OUT CROP                the validation transform, the same way
 * Exit 2 on bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/data/augment.h"

static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

static int usage(void) {
  fprintf(stderr, "usage: aug_tool boxes W H SEED EPOCH N [MIN_SCALE] | valbox W H OUT CROP |\n"
                  "       crop FILE W H OUT x0 y0 w h flip | val FILE W H OUT CROP\n");
  return 2;
}

/* FILE's W*H*3 bytes (NULL: missing or short) */
static uint8_t *load(const char *path, int W, int H) {
  size_t n = (size_t)W * H * 3;
  uint8_t *p = malloc(n);
  FILE *f = fopen(path, "rb");
  int ok = p && f && fread(p, 1, n, f) == n;
  if (f) fclose(f);
  if (!ok) {
    fprintf(stderr, "aug_tool: %s: cannot read %zu bytes\n", path, n);
    free(p);
    return NULL;
  }
  return p;
}

/* the image resampled with box to out×out floats on stdout (to_box: as mnt_crop_resize_wh) */
static int emit(const char *path, int W, int H, int out, const float *box, int to_box) {
  uint8_t *img = load(path, W, H);
  float *dst = malloc(sizeof(float) * 3 * out * out);
  int st = !img || !dst || out < 1 || out > MNT_AUG_MAX_OUT;
  if (!st) {
    mnt_crop_resize_wh(img, W, H, (size_t)W * 3, 3, box, to_box, out, 3, MEAN, STD, dst);
    st = fwrite(dst, sizeof(float), (size_t)3 * out * out, stdout) != (size_t)3 * out * out;
  }
  free(img);
  free(dst);
  return st;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const char *cmd = argv[1];
  float box[MNT_BOX_FLOATS];
  if (!strcmp(cmd, "boxes") && (argc == 7 || argc == 8)) {
    int W = atoi(argv[2]), H = atoi(argv[3]);
    long n = atol(argv[6]);
    mnt_aug_cfg a = {.train = 1, .seed = atoll(argv[4]), .min_scale = argc == 8 ? atof(argv[7]) : 0};
    if (W < 1 || H < 1) return usage();
    for (long i = 0; i < n; i++) {
      mnt_aug_box_wh(&a, W, H, atoll(argv[5]), i, box);
      printf("%.9g %.9g %.9g %.9g %d\n", box[0], box[1], box[2], box[3], box[4] != 0);
    }
    return 0;
  }
  if (!strcmp(cmd, "valbox") && argc == 6) {
    mnt_val_box(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atof(argv[5]), box);
    printf("%.9g %.9g %.9g %.9g %d\n", box[0], box[1], box[2], box[3], box[4] != 0);
    return 0;
  }
  if (!strcmp(cmd, "crop") && argc == 11) {
    for (int k = 0; k < MNT_BOX_FLOATS; k++) box[k] = (float)atof(argv[6 + k]);
    return emit(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), box, 1);
  }
  if (!strcmp(cmd, "val") && argc == 7) {
    int W = atoi(argv[3]), H = atoi(argv[4]), out = atoi(argv[5]);
    mnt_val_box(W, H, out, atof(argv[6]), box);
    return emit(argv[2], W, H, out, box, 0);
  }
  return usage();
}
