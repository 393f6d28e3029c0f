/* synth.c — `mntrain convert synth`: a learnable synthetic set at any size (class-dependent stripes
 * and colours plus noise), drawn from the seed and written through io/convert/shard_write.h; see convert.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "io/convert/shard_write.h"
#include "src/log.h"

typedef struct synth { int classes, size; uint64_t seed; } synth;

static int synth_get(void *ctx, int64_t i, uint8_t *pixels, int32_t *label) {
  synth *s = ctx;
  uint64_t r = mnt_mix(s->seed, (uint64_t)i);
  int c = (int)(r % (uint64_t)s->classes);
  *label = c;
  double ang = 3.14159265358979 * c / s->classes, fr = 2.0 + (c % 5) * 1.5;
  double ca = cos(ang), sa = sin(ang), phase = (double)(r >> 20 & 1023) / 1023.0 * 6.283;
  double col[3] = {0.5 + 0.4 * cos(c * 2.1), 0.5 + 0.4 * cos(c * 2.1 + 2.1), 0.5 + 0.4 * cos(c * 2.1 + 4.2)};
  uint64_t nz = r;
  for (int y = 0; y < s->size; y++)
    for (int x = 0; x < s->size; x++) {
      double u = (x * ca + y * sa) / s->size;
      double stripe = 0.5 + 0.5 * sin(6.283 * fr * u + phase);
      for (int ch = 0; ch < 3; ch++) {
        nz = nz * 6364136223846793005ull + 1442695040888963407ull;
        double noise = ((double)(nz >> 40) / 16777216.0 - 0.5) * 0.5;
        double v = 255.0 * (0.6 * stripe * col[ch] + 0.2 + noise * 0.5);
        pixels[((size_t)y * s->size + x) * 3 + ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
  return MNT_OK;
}

int mnt_convert_synth(const char *out, int classes, int64_t n, int size, int nshards, long long seed, int force) {
  if (classes < 1 || n < 1 || size < 1) {
    MNT_ERR("synth: need --classes >= 1, --images >= 1, --size >= 1 (got %d, %lld, %d)", classes, (long long)n, size);
    return MNT_EARG;
  }
  synth s = {classes, size, (uint64_t)seed};
  char **names = calloc((size_t)classes, sizeof *names);
  for (int c = 0; c < classes; c++) {
    names[c] = malloc(24);
    snprintf(names[c], 24, "class%04d", c);
  }
  char desc[96];
  snprintf(desc, sizeof desc, "synth (generator 1, seed %lld)", seed);
  long long p[4] = {1 /* generator version */, classes, n, size};
  mnt_convert_source src = {.n = n, .size = size, .channels = 3, .nclasses = classes, .class_names = names,
                            .ctx = &s, .get = synth_get, .inputs = XXH3_64bits(p, sizeof p), .description = desc};
  int st = mnt_convert_write(&src, out, nshards, seed, force);
  for (int c = 0; c < classes; c++) free(names[c]);
  free(names);
  return st;
}

