/* idx.c — `mntrain convert idx`: MNIST / Fashion-MNIST IDX files (gzip or plain) to shards through
 * io/convert/shard_write.h; see convert.h. The contents are the inputs: the same files under another path
 * convert to the same dataset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>

#include "io/convert/convert.h"
#include "io/convert/shard_write.h"
#include "src/check.h"
#include "src/log.h"

typedef struct idx_data {
  uint8_t *images, *labels;
  int64_t n;
  int rows, cols;
} idx_data;

static int read_idx(const char *path, int want_dims, uint8_t **data, int64_t *n, int *rows, int *cols) {
  gzFile f = gzopen(path, "rb"); /* reads gzip and plain files alike */
  if (!f) {
    MNT_SYSERR("%s", path);
    return MNT_EARG;
  }
  uint8_t hdr[16];
  int hl = 4 + 4 * want_dims, st = MNT_EDATA;
  if (gzread(f, hdr, (unsigned)hl) != hl || hdr[0] || hdr[1] || hdr[2] != 0x08 || hdr[3] != want_dims) {
    MNT_ERR("%s: not an IDX file of unsigned bytes with %d dimensions", path, want_dims);
    goto out;
  }
  uint32_t d[3] = {1, 1, 1};
  for (int i = 0; i < want_dims; i++)
    d[i] = (uint32_t)hdr[4 + 4 * i] << 24 | (uint32_t)hdr[5 + 4 * i] << 16 | (uint32_t)hdr[6 + 4 * i] << 8 | hdr[7 + 4 * i];
  size_t bytes = (size_t)d[0] * d[1] * d[2];
  *data = malloc(bytes ? bytes : 1);
  if (!*data) { st = MNT_ENOMEM; goto out; }
  size_t got = 0;
  while (got < bytes) {
    int r = gzread(f, *data + got, (unsigned)(bytes - got > (1u << 30) ? (1u << 30) : bytes - got));
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got != bytes) {
    MNT_ERR("%s: truncated: %zu of %zu bytes of data", path, got, bytes);
    free(*data);
    *data = NULL;
    goto out;
  }
  *n = d[0];
  if (rows) *rows = (int)d[1];
  if (cols) *cols = (int)d[2];
  st = MNT_OK;
out:
  gzclose(f);
  return st;
}

static int idx_get(void *ctx, int64_t i, uint8_t *pixels, int32_t *label) {
  idx_data *d = ctx;
  memcpy(pixels, d->images + (size_t)i * d->rows * d->cols, (size_t)d->rows * d->cols);
  *label = d->labels[i];
  return MNT_OK;
}

int mnt_convert_idx(const char *images, const char *labels, const char *out, int nshards, long long seed, int force) {
  idx_data d = {0};
  int64_t nl = 0;
  int st = read_idx(images, 3, &d.images, &d.n, &d.rows, &d.cols);
  if (st == MNT_OK) st = read_idx(labels, 1, &d.labels, &nl, NULL, NULL);
  if (st == MNT_OK && nl != d.n) {
    MNT_ERR("%s has %lld images but %s has %lld labels", images, (long long)d.n, labels, (long long)nl);
    st = MNT_EARG;
  }
  if (st == MNT_OK && d.n == 0) {
    MNT_ERR("%s holds no images; an empty dataset is refused", images);
    st = MNT_EARG;
  }
  if (st == MNT_OK && d.rows != d.cols) {
    MNT_ERR("%s: images are %dx%d; only square images are supported", images, d.rows, d.cols);
    st = MNT_EARG;
  }
  int maxl = -1;
  for (int64_t i = 0; st == MNT_OK && i < nl; i++) maxl = d.labels[i] > maxl ? d.labels[i] : maxl;
  if (st == MNT_OK) {
    /* Fashion-MNIST's names when there are 10 classes and the file says fashion; digits otherwise */
    static const char *fashion[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                      "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    int nclasses = maxl + 1, is_fashion = strstr(images, "fashion") != NULL && nclasses == 10;
    char **names = calloc((size_t)nclasses, sizeof *names);
    for (int c = 0; c < nclasses; c++) {
      names[c] = malloc(32);
      snprintf(names[c], 32, "%s", is_fashion ? fashion[c] : "");
      if (!is_fashion) snprintf(names[c], 32, "%d", c);
    }
    char desc[2200];
    snprintf(desc, sizeof desc, "idx %s %s", images, labels);
    /* the contents decide, not the names: the same files under another path are the same inputs */
    XXH3_state_t *h = XXH3_createState();
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, "idx", 4);
    XXH3_64bits_update(h, d.images, (size_t)d.n * d.rows * d.cols);
    XXH3_64bits_update(h, d.labels, (size_t)nl);
    mnt_convert_source src = {.n = d.n, .size = d.rows, .channels = 1, .nclasses = nclasses, .class_names = names,
                              .ctx = &d, .get = idx_get, .inputs = XXH3_64bits_digest(h), .description = desc};
    XXH3_freeState(h);
    st = mnt_convert_write(&src, out, nshards, seed, force);
    for (int c = 0; c < nclasses; c++) free(names[c]);
    free(names);
  }
  free(d.images);
  free(d.labels);
  return st;
}

