/* convert.c — converters to the shard format and `inspect`; see convert.h.
 * Samples are written in a seeded global random order: output position j holds source sample
 * perm[j]; shard k holds positions [k*n/N, (k+1)*n/N). A shard is written under a temporary
 * name and renamed when complete, so an interrupted run restarted with the same arguments skips
 * the shards it finished. Whether they are "the same arguments" is not guessed from file names:
 * every shard and the index carry the conversion's fingerprint (XXH3 of the format version, the
 * inputs, the image size, the classes, the shard count and the seed), and a file with another
 * fingerprint stops the conversion before anything is written. */
#include "io/convert.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <hdf5.h>
#include <xxhash.h>
#include <zlib.h>

#include "io/convert_internal.h"
#include "io/dataset.h"
#include "check.h"
#include "log.h"
#include "io/safefs.h"
#include "progress.h"
#include "sysmem.h"

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

static void fingerprint(const mnt_convert_source *src, int nshards, long long seed, char out[17]) {
  XXH3_state_t *h = XXH3_createState();
  XXH3_64bits_reset(h);
  long long v[8] = {MNT_DATASET_VERSION, (long long)src->inputs, src->n, src->size, src->channels,
                    src->nclasses, nshards, seed};
  XXH3_64bits_update(h, v, sizeof v);
  for (int c = 0; c < src->nclasses; c++) XXH3_64bits_update(h, src->class_names[c], strlen(src->class_names[c]) + 1);
  snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(h));
  XXH3_freeState(h);
}

/* shard-KKKKK-of-NNNNN.h5 (and its .partial): N, or -1 when the name is something else */
static int shard_name_of(const char *name, int *partial) {
  int k, n, len = 0;
  if (sscanf(name, "shard-%5d-of-%5d.h5%n", &k, &n, &len) != 2 || len != 23) return -1;
  *partial = !strcmp(name + len, ".partial");
  return name[len] == '\0' || *partial ? n : -1;
}

/* OUT may hold only what this very conversion wrote before (a resumed run): shards and an index
 * with its fingerprint. Anything of another conversion is refused, or removed with force;
 * leftovers of an interrupted run (*.partial) are removed. *present_shards: finished shards kept. */
static int check_output(const char *out, const char *fp, int nshards, int force, int64_t *present_shards) {
  DIR *dir = opendir(out);
  if (!dir) {
    MNT_ERR("%s: cannot read the output directory: %s", out, strerror(errno));
    return MNT_EARG;
  }
  char conflict[1700] = "", why[160] = "";
  int nconflict = 0, nremoved = 0, present = 0;
  struct dirent *e;
  char **doomed = NULL;
  int ndoomed = 0, st = MNT_OK;
  while ((e = readdir(dir)) && st == MNT_OK) {
    char p[1400], got[40] = "";
    snprintf(p, sizeof p, "%s/%s", out, e->d_name);
    enum { KEEP, STALE, CLASH } what = KEEP; /* STALE: an interrupted write, always removed */
    int partial = 0, n = shard_name_of(e->d_name, &partial);
    if (!strcmp(e->d_name, "index.json")) {
      json_t *o = json_load_file(p, 0, NULL);
      const char *f = o ? json_string_value(json_object_get(o, "fingerprint")) : NULL;
      snprintf(got, sizeof got, "%s", f ? f : "none");
      json_decref(o);
      what = strcmp(got, fp) ? CLASH : KEEP;
    } else if (!strcmp(e->d_name, "index.json.tmp") || !strncmp(e->d_name, ".index.json.", 12) || (n >= 0 && partial)) {
      what = STALE;
    } else if (n >= 0 && n != nshards) {
      what = CLASH;
      snprintf(why, sizeof why, "a shard of a conversion into %d shards, this one writes %d", n, nshards);
    } else if (n >= 0) {
      int fr = mnt_shard_fingerprint(p, got, sizeof got);
      if (fr == -2) { /* out of file descriptors (logged): the shard may be fine, so it is not another's */
        st = MNT_ESYS;
        break;
      }
      if (fr != 0) snprintf(got, sizeof got, "unreadable");
      what = strcmp(got, fp) ? CLASH : KEEP;
      present += what == KEEP;
    } else {
      continue; /* not ours: left alone */
    }
    if (what == KEEP) continue;
    if (what == CLASH && got[0]) snprintf(why, sizeof why, "fingerprint %s, this conversion's is %s", got, fp);
    if (what == CLASH && !force) {
      if (!nconflict++) snprintf(conflict, sizeof conflict, "%s (%s)", p, why);
      continue;
    }
    char **nd = realloc(doomed, (size_t)(ndoomed + 1) * sizeof *doomed);
    if (!nd || !(nd[ndoomed] = strdup(p))) {
      st = MNT_ENOMEM;
      if (nd) doomed = nd;
      break;
    }
    doomed = nd;
    ndoomed++;
  }
  closedir(dir);
  if (st == MNT_OK && nconflict) {
    MNT_ERR("%s holds %d file%s of another conversion (other inputs or settings), e.g. %s: convert into another "
            "directory, or add --force to delete them and convert again",
            out, nconflict, nconflict > 1 ? "s" : "", conflict);
    st = MNT_EARG;
  }
  for (int i = 0; i < ndoomed; i++) {
    if (st == MNT_OK && unlink(doomed[i]) != 0) {
      MNT_ERR("%s: cannot remove: %s", doomed[i], strerror(errno));
      st = MNT_ESYS;
    }
    nremoved += st == MNT_OK;
    free(doomed[i]);
  }
  free(doomed);
  if (st == MNT_OK && force && nremoved) printf("convert: --force: removed %d files of an earlier conversion in %s\n", nremoved, out);
  *present_shards = present;
  return st;
}

/* one conversion in progress: what each shard's writer needs and what they add up */
typedef struct conv_run {
  const mnt_convert_source *src;
  const char *out, *fp;
  int nshards;
  long long seed;
  const int64_t *perm; /* the global order: sample perm[j] goes to position j */
  uint8_t *pix;        /* one sample's pixels */
  size_t px;
  mnt_progress prog;
  int64_t done_samples, bad_inputs;
  double sum[3], sum2[3]; /* pixel sums (in [0, 1]) for the mean and std, over every sample */
} conv_run;

/* enough room for what is still to be written (about: pixels, labels, source ids, checksums) */
static int check_space(const conv_run *r, int64_t present) {
  double need = (double)(r->px + 32) * (double)r->src->n * (double)(r->nshards - present) / r->nshards +
                65536.0 * r->nshards;
  struct statvfs vfs;
  if (statvfs(r->out, &vfs) == 0 && (double)vfs.f_bavail * vfs.f_frsize < need) {
    char a[32], b[32];
    mnt_format_bytes(need, a, sizeof a);
    mnt_format_bytes((double)vfs.f_bavail * vfs.f_frsize, b, sizeof b);
    MNT_ERR("%s: %s free, but the shards need about %s: free some space or convert elsewhere", r->out, b, a);
    return MNT_EARG;
  }
  return MNT_OK;
}

/* a shard finished by an earlier run of this conversion (the fingerprint said so): its count and
 * pixel sums are taken from it */
static int reuse_shard(conv_run *r, const char *path, int64_t *count) {
  double ssum[3] = {0}, ssum2[3] = {0};
  long long cnt = shard_done(path, ssum, ssum2, r->src->channels);
  if (cnt < 0) {
    MNT_ERR("%s exists but is not a finished shard; remove it and run again", path);
    return MNT_EDATA;
  }
  *count = cnt;
  for (int c = 0; c < r->src->channels; c++) r->sum[c] += ssum[c], r->sum2[c] += ssum2[c];
  return MNT_OK;
}

/* shard k: positions [a, b) of the order, written as PATH.partial and renamed when complete;
 * nothing of it stays on failure (a later run starts it again) */
static int write_shard(conv_run *r, int k, const char *path, int64_t a, int64_t b, int64_t *count) {
  const mnt_convert_source *src = r->src;
  char tmp[1300], where[48];
  snprintf(tmp, sizeof tmp, "%s.partial", path);
  snprintf(where, sizeof where, "shard %d/%d", k + 1, r->nshards);
  double ssum[3] = {0}, ssum2[3] = {0};
  mnt_shard_writer w;
  int st = mnt_shard_create(&w, tmp, b - a, src->size, src->channels, src->nclasses, k, r->nshards, r->seed, r->fp);
  if (st != MNT_OK) return st;
  w.allow_short = src->prefetch != NULL; /* converters that may skip unreadable inputs */
  for (int64_t j = a; j < b && st == MNT_OK; j++) {
    int32_t label;
    if (src->prefetch && (j - a) % MNT_CONVERT_PREFETCH == 0)
      src->prefetch(src->ctx, r->perm + j, (int)(b - j < MNT_CONVERT_PREFETCH ? b - j : MNT_CONVERT_PREFETCH));
    st = src->get(src->ctx, r->perm[j], r->pix, &label);
    if (st == MNT_SKIP_SAMPLE) {
      st = MNT_OK;
      r->bad_inputs++;
      continue;
    }
    if (st != MNT_OK) break;
    for (int c = 0; c < src->channels; c++) { /* statistics for mean/std, over every sample (exact) */
      uint64_t s1 = 0, s2 = 0;
      for (size_t p = (size_t)c; p < r->px; p += (size_t)src->channels)
        s1 += r->pix[p], s2 += (uint64_t)r->pix[p] * r->pix[p];
      ssum[c] += s1 / 255.0;
      ssum2[c] += s2 / (255.0 * 255.0);
    }
    if ((st = mnt_shard_append(&w, r->pix, label, r->perm[j])) != MNT_OK) break;
    mnt_progress_update(&r->prog, ++r->done_samples, where);
  }
  *count = w.written;
  if (st == MNT_OK && (stats_attr(w.file, "pixel_sum", ssum, src->channels, 1) ||
                       stats_attr(w.file, "pixel_sum2", ssum2, src->channels, 1))) {
    MNT_ERR("%s: cannot write the pixel statistics (disk full?)", tmp);
    st = MNT_ESYS;
  }
  if (st != MNT_OK) {
    mnt_shard_abort(&w);
    return st;
  }
  for (int c = 0; c < src->channels; c++) r->sum[c] += ssum[c], r->sum2[c] += ssum2[c];
  if ((st = mnt_shard_close(&w)) != MNT_OK || rename(tmp, path) != 0) {
    if (st == MNT_OK) MNT_ERR("rename %s -> %s: %s", tmp, path, strerror(errno));
    st = st ? st : MNT_ESYS;
    unlink(tmp);
  }
  return st;
}

/* index.json: the classes, the shards' counts, the mean and std of every channel */
static int write_index(const conv_run *r, const int64_t *counts, int skipped, double t0) {
  const mnt_convert_source *src = r->src;
  float mean[3], std[3];
  int64_t written = 0;
  for (int k = 0; k < r->nshards; k++) written += counts[k];
  if (written == 0) {
    MNT_ERR("%s: none of the %lld inputs could be read; no dataset was written", src->description, (long long)src->n);
    return MNT_EARG;
  }
  double m = (double)written * src->size * src->size;
  for (int c = 0; c < src->channels; c++) {
    mean[c] = (float)(r->sum[c] / m);
    double var = r->sum2[c] / m - (r->sum[c] / m) * (r->sum[c] / m);
    std[c] = (float)sqrt(var > 1e-12 ? var : 1e-12);
  }
  int st = mnt_index_write(r->out, src->nclasses, src->class_names, src->size, src->channels, mean, std, r->seed,
                           r->nshards, counts, r->fp, src->description);
  if (st == MNT_OK)
    printf("convert: %lld samples of %dx%dx%d, %d classes, into %d shards in %s (%d already there), "
           "%lld unreadable inputs skipped, %lld other files ignored, %.1f s\n",
           (long long)written, src->size, src->size, src->channels, src->nclasses, r->nshards, r->out, skipped,
           (long long)r->bad_inputs, (long long)src->ignored, mnt_now() - t0);
  return st;
}

int mnt_convert_write(const mnt_convert_source *src, const char *out, int nshards, long long seed, int force) {
  if (src->n < 1) {
    MNT_ERR("%s: no samples to convert; an empty dataset is refused", src->description);
    return MNT_EARG;
  }
  if (nshards < 1 || nshards > 99999 || (int64_t)nshards > src->n) {
    MNT_ERR("--shards %d: need 1..%lld shards for %lld samples", nshards,
            (long long)(src->n < 99999 ? src->n : 99999), (long long)src->n);
    return MNT_EARG;
  }
  MNT_CHECK(mnt_dir_secure(out, "the output directory", 1, MNT_DIR_RUN)); /* the user's own: io/safefs.h */
  char fp[17];
  fingerprint(src, nshards, seed, fp);
  int64_t present = 0;
  MNT_CHECK(check_output(out, fp, nshards, force, &present));
  conv_run r = {.src = src, .out = out, .fp = fp, .nshards = nshards, .seed = seed,
                .px = (size_t)src->size * (size_t)src->size * (size_t)src->channels};
  MNT_CHECK(check_space(&r, present));
  int64_t *perm = malloc((size_t)src->n * sizeof *perm);
  int64_t *counts = calloc((size_t)nshards, sizeof *counts);
  r.pix = malloc(r.px);
  r.perm = perm;
  int st = MNT_OK, skipped = 0;
  if (!perm || !counts || !r.pix) {
    MNT_ERR("out of memory for the order of %lld samples", (long long)src->n);
    st = MNT_ENOMEM;
  }
  double t0 = mnt_now();
  if (st == MNT_OK) {
    mnt_permutation(perm, src->n, mnt_mix((uint64_t)seed, 0x5ca1ab1eull));
    mnt_progress_start(&r.prog, "convert", "images", src->n);
    for (int k = 0; k < nshards && st == MNT_OK; k++) {
      int64_t a = src->n * k / nshards, b = src->n * (k + 1) / nshards;
      char name[64], path[1200];
      mnt_shard_name(name, sizeof name, k, nshards);
      snprintf(path, sizeof path, "%s/%s", out, name);
      counts[k] = b - a;
      if (access(path, R_OK) == 0) {
        skipped++;
        r.done_samples += b - a;
        st = reuse_shard(&r, path, &counts[k]);
      } else {
        st = write_shard(&r, k, path, a, b, &counts[k]);
      }
    }
    mnt_progress_end(&r.prog);
  }
  if (st == MNT_OK) st = write_index(&r, counts, skipped, t0);
  free(perm);
  free(counts);
  free(r.pix);
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
  printf("dataset %s: %lld samples, %d classes, %dx%dx%d uint8, %d shards, seed %lld, format %d, fingerprint %s\n",
         dir, (long long)d.total, d.nclasses, d.size, d.size, d.channels, d.nshards, d.seed, d.version, d.fingerprint);
  printf("mean");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.mean[c]);
  printf(", std");
  for (int c = 0; c < d.channels; c++) printf(" %.4f", (double)d.std[c]);
  printf("\n");
  int64_t *hist = calloc((size_t)d.nclasses, sizeof *hist);
  uint8_t *pix = malloc((size_t)d.size * d.size * d.channels);
  int64_t bad = 0;
  if (!hist || !pix) {
    st = MNT_ENOMEM;
    goto done;
  }
  /* the histogram reads the labels; --verify reads every image too, and HDF5 checks each one's
   * checksum: a bad sample is named by file and index */
  mnt_progress prog;
  mnt_progress_start(&prog, "inspect --verify", "samples", d.total);
  for (int64_t g = 0; g < d.total; g++) {
    int32_t label;
    if (mnt_dataset_read(&d, g, verify ? pix : NULL, &label) != MNT_OK) {
      bad++;
      continue;
    }
    hist[label]++;
    if (verify) mnt_progress_update(&prog, g + 1, NULL);
  }
  mnt_progress_end(&prog);
  printf("%-6s %-24s %10s\n", "label", "class", "samples");
  for (int c = 0; c < d.nclasses; c++) printf("%-6d %-24s %10lld\n", c, d.class_names[c], (long long)hist[c]);
  if (verify)
    printf("verify: %lld samples read%s, %lld bad\n", (long long)d.total,
           d.version >= 2 ? " and their checksums checked" : " (format 1: no checksums to check)", (long long)bad);
  else
    printf("labels: %lld read, %lld bad (--verify reads every image and checks its checksum)\n", (long long)d.total,
           (long long)bad);
  st = bad ? MNT_EDATA : MNT_OK;
done:
  free(hist);
  free(pix);
  mnt_dataset_close(&d);
  return st;
}
