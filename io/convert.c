/* convert.c — converters to the shard format and `inspect`; see convert.h.
 * Samples are written in a seeded global random order: output position j holds source sample
 * perm[j]; shard k holds positions [k*n/N, (k+1)*n/N). A shard is written under a temporary
 * name and renamed when complete, so an interrupted run restarted with the same arguments skips
 * the shards it finished. */
#include "convert.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <hdf5.h>
#include <zlib.h>

#include "args.h"
#include "convert_internal.h"
#include "dataset.h"
#include "log.h"



/* Each shard keeps the sums of its pixels (/255) and of their squares per channel, so that the
 * index's mean/std cover every shard, also when a resumed run wrote only some of them. */
static int stats_attr(hid_t f, const char *name, double *v, int channels, int write) {
  hsize_t d = (hsize_t)channels;
  hid_t a;
  if (write) {
    hid_t sp = H5Screate_simple(1, &d, NULL);
    a = H5Acreate2(f, name, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sp);
  } else {
    a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
  }
  herr_t e = a < 0 ? -1 : write ? H5Awrite(a, H5T_NATIVE_DOUBLE, v) : H5Aread(a, H5T_NATIVE_DOUBLE, v);
  if (a >= 0) H5Aclose(a);
  return e < 0 ? -1 : 0;
}

/* samples and pixel sums of a finished shard; -1 if it is not one */
static long long shard_done(const char *path, double *sum, double *sum2, int channels) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  long long v = -1;
  if (f < 0) return -1;
  if (H5Aexists(f, "samples") > 0) {
    hid_t a = H5Aopen(f, "samples", H5P_DEFAULT);
    if (a < 0 || H5Aread(a, H5T_NATIVE_LLONG, &v) < 0) v = -1;
    if (a >= 0) H5Aclose(a);
  }
  if (stats_attr(f, "pixel_sum", sum, channels, 0) || stats_attr(f, "pixel_sum2", sum2, channels, 0)) v = -1;
  H5Fclose(f);
  return v;
}

int mnt_convert_write(const source *src, const char *out, int nshards, long long seed) {
  if (nshards < 1 || nshards > 99999 || (int64_t)nshards > (src->n > 0 ? src->n : 1)) {
    MNT_ERR("--shards %d: need 1..%lld shards for %lld samples", nshards, (long long)src->n, (long long)src->n);
    return MNT_EARG;
  }
  if (mkdir(out, 0755) != 0 && errno != EEXIST) {
    MNT_ERR("%s: cannot create the output directory: %s", out, strerror(errno));
    return MNT_ESYS;
  }
  int64_t *perm = malloc((size_t)(src->n > 0 ? src->n : 1) * sizeof *perm);
  int64_t *counts = calloc((size_t)nshards, sizeof *counts);
  size_t px = (size_t)src->size * (size_t)src->size * (size_t)src->channels;
  uint8_t *pix = malloc(px);
  double sum[3] = {0}, sum2[3] = {0};
  int st = MNT_OK, skipped = 0, tty = isatty(2);
  int64_t bad_inputs = 0;
  if (!perm || !counts || !pix) { st = MNT_ENOMEM; goto done; }
  mnt_permutation(perm, src->n, mnt_mix((uint64_t)seed, 0x5ca1ab1eull));
  double t0 = mnt_now();
  int64_t done_samples = 0;
  for (int k = 0; k < nshards && st == MNT_OK; k++) {
    int64_t a = src->n * k / nshards, b = src->n * (k + 1) / nshards;
    counts[k] = b - a;
    char name[64], path[1200], tmp[1300];
    mnt_shard_name(name, sizeof name, k, nshards);
    snprintf(path, sizeof path, "%s/%s", out, name);
    snprintf(tmp, sizeof tmp, "%s.partial", path);
    int exists = access(path, R_OK) == 0;
    double ssum[3] = {0}, ssum2[3] = {0};
    mnt_shard_writer w;
    if (!exists && (st = mnt_shard_create(&w, tmp, b - a, src->size, src->channels, src->nclasses, k, nshards, seed)))
      break;
    w.allow_short = src->prefetch != NULL; /* converters that may skip unreadable inputs */
    for (int64_t j = a; j < b && !exists; j++) { /* a shard finished by an earlier run is kept */
      int32_t label;
      if (src->prefetch && (j - a) % PREFETCH == 0)
        src->prefetch(src->ctx, perm + j, (int)(b - j < PREFETCH ? b - j : PREFETCH));
      st = src->get(src->ctx, perm[j], pix, &label);
      if (st == SKIP_SAMPLE) {
        st = MNT_OK;
        bad_inputs++;
        continue;
      }
      if (st != MNT_OK) break;
      for (size_t p = 0; p < px; p++) { /* statistics for mean/std, over every sample */
        double v = pix[p] / 255.0;
        ssum[p % (size_t)src->channels] += v;
        ssum2[p % (size_t)src->channels] += v * v;
      }
      if ((st = mnt_shard_append(&w, pix, label, perm[j])) != MNT_OK) break;
      done_samples++;
      if (tty && (done_samples % 500 == 0 || j == b - 1)) {
        double el = mnt_now() - t0, rate = done_samples / (el > 0 ? el : 1e-9);
        fprintf(stderr, "\rconvert: shard %d/%d, %lld/%lld images, %.0f img/s, ETA %.0f s   ", k + 1, nshards,
                (long long)done_samples, (long long)src->n, rate, (double)(src->n - done_samples) / rate);
      }
    }
    if (exists) { /* its samples count as written: read the count back from the shard */
      skipped++;
      done_samples += b - a;
      long long cnt = shard_done(path, ssum, ssum2, src->channels);
      if (cnt < 0) {
        MNT_ERR("%s exists but is not a finished shard; remove it and run again", path);
        st = MNT_EDATA;
        break;
      }
      counts[k] = cnt;
      for (int c = 0; c < src->channels; c++) sum[c] += ssum[c], sum2[c] += ssum2[c];
      continue;
    }
    counts[k] = w.written;
    if (st == MNT_OK && (stats_attr(w.file, "pixel_sum", ssum, src->channels, 1) ||
                         stats_attr(w.file, "pixel_sum2", ssum2, src->channels, 1))) {
      MNT_ERR("%s: cannot write the pixel statistics", tmp);
      st = MNT_ESYS;
    }
    for (int c = 0; c < src->channels; c++) sum[c] += ssum[c], sum2[c] += ssum2[c];
    int cst = mnt_shard_close(&w);
    if (st == MNT_OK) st = cst;
    if (st == MNT_OK && rename(tmp, path) != 0) {
      MNT_ERR("rename %s -> %s: %s", tmp, path, strerror(errno));
      st = MNT_ESYS;
    }
    if (st != MNT_OK) unlink(tmp);
  }
  if (tty) fprintf(stderr, "\n");
  if (st == MNT_OK) {
    float mean[3], std[3];
    int64_t written = 0;
    for (int k = 0; k < nshards; k++) written += counts[k];
    double m = (double)(written > 0 ? written : 1) * src->size * src->size;
    for (int c = 0; c < src->channels; c++) {
      mean[c] = (float)(sum[c] / m);
      double var = sum2[c] / m - (sum[c] / m) * (sum[c] / m);
      std[c] = (float)sqrt(var > 1e-12 ? var : 1e-12);
    }
    st = mnt_index_write(out, src->nclasses, src->class_names, src->size, src->channels, mean, std, seed, nshards,
                         counts);
    if (st == MNT_OK)
      printf("convert: %lld samples of %dx%dx%d, %d classes, into %d shards in %s (%d already there), "
             "%lld unreadable inputs skipped, %.1f s\n",
             (long long)written, src->size, src->size, src->channels, src->nclasses, nshards, out,
             skipped, (long long)bad_inputs, mnt_now() - t0);
  }
done:
  free(perm);
  free(counts);
  free(pix);
  return st;
}

/* ---- IDX (MNIST, Fashion-MNIST) ------------------------------------------------------------- */
typedef struct idx_data {
  uint8_t *images, *labels;
  int64_t n;
  int rows, cols;
} idx_data;

static int read_idx(const char *path, int want_dims, uint8_t **data, int64_t *n, int *rows, int *cols) {
  gzFile f = gzopen(path, "rb"); /* reads gzip and plain files alike */
  if (!f) {
    MNT_ERR("%s: %s", path, strerror(errno));
    return MNT_EARG;
  }
  uint8_t hdr[16];
  int hl = 4 + 4 * want_dims, st = MNT_EDATA;
  if (gzread(f, hdr, (unsigned)hl) != hl || hdr[0] || hdr[1] || hdr[2] != 0x08 || hdr[3] != want_dims) {
    MNT_ERR("%s: not an IDX file of unsigned bytes with %d dimensions", path, want_dims);
    goto done;
  }
  uint32_t d[3] = {1, 1, 1};
  for (int i = 0; i < want_dims; i++)
    d[i] = (uint32_t)hdr[4 + 4 * i] << 24 | (uint32_t)hdr[5 + 4 * i] << 16 | (uint32_t)hdr[6 + 4 * i] << 8 | hdr[7 + 4 * i];
  size_t bytes = (size_t)d[0] * d[1] * d[2];
  *data = malloc(bytes ? bytes : 1);
  if (!*data) { st = MNT_ENOMEM; goto done; }
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
    goto done;
  }
  *n = d[0];
  if (rows) *rows = (int)d[1];
  if (cols) *cols = (int)d[2];
  st = MNT_OK;
done:
  gzclose(f);
  return st;
}

static int idx_get(void *ctx, int64_t i, uint8_t *pixels, int32_t *label) {
  idx_data *d = ctx;
  memcpy(pixels, d->images + (size_t)i * d->rows * d->cols, (size_t)d->rows * d->cols);
  *label = d->labels[i];
  return MNT_OK;
}

int mnt_convert_idx(const char *images, const char *labels, const char *out, int nshards, long long seed) {
  idx_data d = {0};
  int64_t nl = 0;
  int st = read_idx(images, 3, &d.images, &d.n, &d.rows, &d.cols);
  if (st == MNT_OK) st = read_idx(labels, 1, &d.labels, &nl, NULL, NULL);
  if (st == MNT_OK && nl != d.n) {
    MNT_ERR("%s has %lld images but %s has %lld labels", images, (long long)d.n, labels, (long long)nl);
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
    source src = {.n = d.n, .size = d.rows, .channels = 1, .nclasses = nclasses, .class_names = names, .ctx = &d,
                  .get = idx_get};
    st = mnt_convert_write(&src, out, nshards, seed);
    for (int c = 0; c < nclasses; c++) free(names[c]);
    free(names);
  }
  free(d.images);
  free(d.labels);
  return st;
}

/* ---- synthetic: class-dependent stripes and colours plus noise, learnable at any size --------- */
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

int mnt_convert_synth(const char *out, int classes, int64_t n, int size, int nshards, long long seed) {
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
  source src = {.n = n, .size = size, .channels = 3, .nclasses = classes, .class_names = names, .ctx = &s,
                .get = synth_get};
  int st = mnt_convert_write(&src, out, nshards, seed);
  for (int c = 0; c < classes; c++) free(names[c]);
  free(names);
  return st;
}

/* ---- inspect ---------------------------------------------------------------------------------- */
int mnt_inspect(const char *path, int verify) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    MNT_ERR("%s: %s", path, strerror(errno));
    return MNT_EARG;
  }
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  if (!S_ISDIR(sb.st_mode)) { /* a lone shard: inspect its directory's dataset if there is one */
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
  }
  mnt_dataset d;
  int st = mnt_dataset_open(dir, &d);
  if (st != MNT_OK) return st;
  printf("dataset %s: %lld samples, %d classes, %dx%dx%d uint8, %d shards, seed %lld\n", dir, (long long)d.total,
         d.nclasses, d.size, d.size, d.channels, d.nshards, d.seed);
  printf("mean");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.mean[c]);
  printf(", std");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.std[c]);
  printf("\n");
  int64_t *hist = calloc((size_t)d.nclasses, sizeof *hist);
  uint8_t *pix = malloc((size_t)d.size * d.size * d.channels);
  int64_t bad = 0;
  for (int64_t g = 0; g < d.total; g++) {
    int32_t label; /* every sample is read: a bad one is reported by file and index */
    if (mnt_dataset_read(&d, g, pix, &label) != MNT_OK) {
      bad++;
      continue;
    }
    hist[label]++;
  }
  printf("%-6s %-24s %10s\n", "label", "class", "samples");
  for (int c = 0; c < d.nclasses; c++) printf("%-6d %-24s %10lld\n", c, d.class_names[c], (long long)hist[c]);
  if (verify) printf("verify: %lld samples read, %lld bad\n", (long long)d.total, (long long)bad);
  free(hist);
  free(pix);
  mnt_dataset_close(&d);
  return bad ? MNT_EDATA : MNT_OK;
}

/* ---- the subcommands ------------------------------------------------------------------------ */
static int positional(int argc, char **argv, int want, const char *usage) {
  int n = 0;
  while (n < argc && argv[n][0] != '-') n++;
  if (n != want) {
    fprintf(stderr, "usage: %s\n", usage);
    return -1;
  }
  return n;
}

int mnt_convert_main(int argc, char **argv) {
  static const char *usage_idx = "mntrain convert idx IMAGES LABELS OUT [--shards N] [--seed S]";
  static const char *usage_inet =
      "mntrain convert imagenet SRC OUT --size S [--shards N] [--val [--labels FILE]] [--seed S]";
  static const char *usage_synth =
      "mntrain convert synth OUT --classes C --images N --size S [--shards K] [--seed S]";
  if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
    printf("usage: %s\n       %s\n       %s\n\n"
           "Write a sharded HDF5 dataset (index.json + shard-KKKKK-of-NNNNN.h5) in a seeded random order.\n"
           "  imagenet  JPEG class folders SRC/<wnid>/*.JPEG (labels in sorted wnid order, as torchvision's\n"
           "            ImageFolder), or with --val --labels FILE a flat folder and \"FILE WNID\" lines;\n"
           "            shorter side resized to S (area filter), centre S×S kept; grayscale and CMYK\n"
           "            JPEGs are converted to RGB, unreadable files are reported and skipped\n"
           "  idx    MNIST / Fashion-MNIST IDX files, gzip or plain (Debian: dataset-fashion-mnist,\n"
           "         /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ...)\n"
           "  synth  a learnable synthetic set (class-dependent stripes and colours, noise), any size\n"
           "A run restarted with the same arguments keeps the shards it finished.\n",
           usage_inet, usage_idx, usage_synth);
    return argc < 1 ? 2 : 0;
  }
  int shards = 4, classes = 0, images = 0, size = 0, help = 0, val = 0;
  const char *labels = NULL;
  long long seed = 0;
  int seed_i = 1;
  mnt_opt opts[] = {{"shards", 0, MNT_OPT_INT, &shards, "N", "number of shard files (default 4)"},
                    {"seed", 0, MNT_OPT_INT, &seed_i, "S", "seed of the sample order (default 1)"},
                    {"classes", 0, MNT_OPT_INT, &classes, "C", "synth: classes"},
                    {"images", 0, MNT_OPT_INT, &images, "N", "synth: samples"},
                    {"size", 0, MNT_OPT_INT, &size, "S", "image size in pixels (imagenet: 256 is usual)"},
                    {"val", 0, MNT_OPT_FLAG, &val, NULL, "imagenet: the validation split"},
                    {"labels", 0, MNT_OPT_STRING, &labels, "FILE", "imagenet --val: \"FILE WNID\" lines for a flat folder"},
                    {NULL, 0, 0, NULL, NULL, NULL}};
  int st;
  if (!strcmp(argv[0], "idx")) {
    int np = positional(argc - 1, argv + 1, 3, usage_idx);
    if (np < 0) return 2;
    if ((st = mnt_parse_opts("convert idx", opts, argc - 1 - np, argv + 1 + np, &help, 0))) return st;
    seed = seed_i;
    st = mnt_convert_idx(argv[1], argv[2], argv[3], shards, seed);
  } else if (!strcmp(argv[0], "imagenet")) {
    int np = positional(argc - 1, argv + 1, 2, usage_inet);
    if (np < 0) return 2;
    if ((st = mnt_parse_opts("convert imagenet", opts, argc - 1 - np, argv + 1 + np, &help, 0))) return st;
    if (labels && !val) {
      fprintf(stderr, "mntrain convert imagenet: --labels is for the validation split (--val)\n");
      return 2;
    }
    st = mnt_convert_imagenet(argv[1], argv[2], shards, size, labels, seed_i);
  } else if (!strcmp(argv[0], "synth")) {
    int np = positional(argc - 1, argv + 1, 1, usage_synth);
    if (np < 0) return 2;
    if ((st = mnt_parse_opts("convert synth", opts, argc - 1 - np, argv + 1 + np, &help, 0))) return st;
    seed = seed_i;
    st = mnt_convert_synth(argv[1], classes, images, size, shards, seed);
  } else {
    fprintf(stderr, "mntrain convert: unknown source '%s' (imagenet, idx, synth)\n", argv[0]);
    return 2;
  }
  return st == MNT_OK ? 0 : st == MNT_EARG ? 2 : 1;
}

int mnt_inspect_main(int argc, char **argv) {
  int verify = 0, help = 0;
  mnt_opt opts[] = {{"verify", 0, MNT_OPT_FLAG, &verify, NULL, "read every sample and check it"},
                    {NULL, 0, 0, NULL, NULL, NULL}};
  int np = argc > 0 && argv[0][0] != '-' ? 1 : 0;
  if (mnt_parse_opts("inspect", opts, argc - np, argv + np, &help, 0)) return 2;
  if (help || np == 0) {
    printf("usage: mntrain inspect DIR|SHARD [--verify]\n\nShards, samples, classes, image size, mean/std and the\n"
           "per-class histogram of a dataset made by mntrain convert; every sample is read and checked\n"
           "against the index (a bad one is named by file and index, and the exit code is 1).\n");
    return help ? 0 : 2;
  }
  int st = mnt_inspect(argv[0], verify);
  return st == MNT_OK ? 0 : st == MNT_EARG ? 2 : 1;
}
