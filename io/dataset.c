/* dataset.c — HDF5 shards and index.json; see dataset.h. */
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

uint64_t mnt_mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void mnt_permutation(int64_t *perm, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  uint64_t s = seed;
  for (int64_t i = n - 1; i > 0; i--) {
    s = mnt_mix(s, (uint64_t)i);
    int64_t j = (int64_t)(s % (uint64_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

void mnt_shard_name(char *out, size_t n, int shard, int nshards) {
  snprintf(out, n, "shard-%05d-of-%05d.h5", shard, nshards);
}

static int attr_int(hid_t obj, const char *name, long long v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_LLONG, &v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return e < 0 ? -1 : 0;
}

static int attr_get_int(hid_t obj, const char *name, long long *v) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_LLONG, v);
  if (a >= 0) H5Aclose(a);
  return e < 0 ? -1 : 0;
}

int mnt_shard_create(mnt_shard_writer *w, const char *path, int64_t n, int size, int channels, int nclasses,
                     int shard, int nshards, long long seed) {
  memset(w, 0, sizeof *w);
  snprintf(w->path, sizeof w->path, "%s", path);
  w->n = n;
  w->size = size;
  w->channels = channels;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  w->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (w->file < 0) {
    MNT_ERR("%s: cannot create the shard file (%s)", path, strerror(errno));
    return MNT_ESYS;
  }
  hsize_t dims[4] = {(hsize_t)n, (hsize_t)size, (hsize_t)size, (hsize_t)channels};
  hsize_t chunk[4] = {1, (hsize_t)size, (hsize_t)size, (hsize_t)channels};
  /* chunked (one image per chunk) so that a shard that skipped unreadable inputs can be shrunk */
  hid_t sp = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 4, chunk);
  w->images = H5Dcreate2(w->file, "images", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(sp);
  hsize_t d1 = (hsize_t)n, c1 = n > 4096 ? 4096 : (hsize_t)(n > 0 ? n : 1);
  sp = H5Screate_simple(1, &d1, NULL);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &c1);
  w->labels = H5Dcreate2(w->file, "labels", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  w->source = H5Dcreate2(w->file, "source_index", H5T_STD_I64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(sp);
  if (w->images < 0 || w->labels < 0 || w->source < 0 || attr_int(w->file, "samples", n) ||
      attr_int(w->file, "image_size", size) || attr_int(w->file, "channels", channels) ||
      attr_int(w->file, "num_classes", nclasses) || attr_int(w->file, "shard", shard) ||
      attr_int(w->file, "num_shards", nshards) || attr_int(w->file, "seed", seed) ||
      attr_int(w->file, "version", MNT_DATASET_VERSION)) {
    MNT_ERR("%s: cannot create the datasets of a shard", path);
    mnt_shard_close(w);
    return MNT_ESYS;
  }
  return MNT_OK;
}

static int write1(hid_t ds, int64_t i, hid_t memtype, const void *v, int rank, const hsize_t *count) {
  hid_t fs = H5Dget_space(ds);
  hsize_t start[4] = {(hsize_t)i, 0, 0, 0};
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
  hid_t ms = H5Screate_simple(rank, count, NULL);
  herr_t e = H5Dwrite(ds, memtype, ms, fs, H5P_DEFAULT, v);
  H5Sclose(ms);
  H5Sclose(fs);
  return e < 0 ? -1 : 0;
}

int mnt_shard_append(mnt_shard_writer *w, const uint8_t *pixels, int32_t label, int64_t source_index) {
  if (w->written >= w->n) {
    MNT_ERR("%s: more samples than the %lld announced", w->path, (long long)w->n);
    return MNT_EARG;
  }
  hsize_t ci[4] = {1, (hsize_t)w->size, (hsize_t)w->size, (hsize_t)w->channels}, c1 = 1;
  if (write1(w->images, w->written, H5T_NATIVE_UCHAR, pixels, 4, ci) ||
      write1(w->labels, w->written, H5T_NATIVE_INT32, &label, 1, &c1) ||
      write1(w->source, w->written, H5T_NATIVE_INT64, &source_index, 1, &c1)) {
    MNT_ERR("%s: writing sample %lld failed (disk full?)", w->path, (long long)w->written);
    return MNT_ESYS;
  }
  w->written++;
  return MNT_OK;
}

int mnt_shard_close(mnt_shard_writer *w) {
  int st = MNT_OK;
  if (w->file > 0 && w->written != w->n && !w->allow_short) {
    MNT_ERR("%s: %lld of %lld samples written", w->path, (long long)w->written, (long long)w->n);
    st = MNT_EDATA;
  } else if (w->file > 0 && w->written != w->n) { /* inputs were skipped: shrink to what is there */
    hsize_t d4[4] = {(hsize_t)w->written, (hsize_t)w->size, (hsize_t)w->size, (hsize_t)w->channels};
    hsize_t d1 = (hsize_t)w->written;
    long long v = w->written;
    hid_t a = H5Aopen(w->file, "samples", H5P_DEFAULT);
    if (H5Dset_extent(w->images, d4) < 0 || H5Dset_extent(w->labels, &d1) < 0 || H5Dset_extent(w->source, &d1) < 0 ||
        a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &v) < 0) {
      MNT_ERR("%s: cannot shrink the shard to %lld samples", w->path, v);
      st = MNT_ESYS;
    }
    if (a >= 0) H5Aclose(a);
  }
  if (w->images > 0) H5Dclose(w->images);
  if (w->labels > 0) H5Dclose(w->labels);
  if (w->source > 0) H5Dclose(w->source);
  if (w->file > 0 && H5Fclose(w->file) < 0 && st == MNT_OK) {
    MNT_ERR("%s: closing failed (disk full?)", w->path);
    st = MNT_ESYS;
  }
  w->file = w->images = w->labels = w->source = 0;
  return st;
}

int mnt_index_write(const char *dir, int nclasses, char **class_names, int size, int channels, const float *mean,
                    const float *std, long long seed, int nshards, const int64_t *shard_count) {
  json_t *o = json_object(), *cl = json_array(), *sh = json_array(), *m = json_array(), *s = json_array();
  int64_t total = 0;
  for (int i = 0; i < nclasses; i++) json_array_append_new(cl, json_string(class_names[i]));
  for (int i = 0; i < nshards; i++) {
    char name[64];
    mnt_shard_name(name, sizeof name, i, nshards);
    json_array_append_new(sh, json_pack("{s:s, s:I}", "file", name, "samples", (json_int_t)shard_count[i]));
    total += shard_count[i];
  }
  for (int c = 0; c < channels; c++) {
    json_array_append_new(m, json_real(mean[c]));
    json_array_append_new(s, json_real(std[c]));
  }
  json_object_set_new(o, "format", json_string(MNT_DATASET_FORMAT));
  json_object_set_new(o, "version", json_integer(MNT_DATASET_VERSION));
  json_object_set_new(o, "num_classes", json_integer(nclasses));
  json_object_set_new(o, "classes", cl);
  json_object_set_new(o, "image_size", json_integer(size));
  json_object_set_new(o, "channels", json_integer(channels));
  json_object_set_new(o, "samples", json_integer(total));
  json_object_set_new(o, "seed", json_integer(seed));
  json_object_set_new(o, "mean", m);
  json_object_set_new(o, "std", s);
  json_object_set_new(o, "shards", sh);
  int st = mnt_json_save(dir, "index.json", o);
  json_decref(o);
  return st;
}

int mnt_json_save(const char *dir, const char *name, struct json_t *o) {
  char tmp[1200], path[1200];
  snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (json_dump_file(o, tmp, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(15)) != 0) {
    MNT_ERR("%s: cannot write (%s)", tmp, strerror(errno));
    return MNT_ESYS;
  }
  int fd = open(tmp, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  if (rename(tmp, path) != 0) {
    MNT_ERR("rename %s -> %s: %s", tmp, path, strerror(errno));
    return MNT_ESYS;
  }
  return MNT_OK;
}

static int bad_index(const char *path, const char *what) {
  MNT_ERR("%s: %s", path, what);
  return MNT_EDATA;
}

int mnt_dataset_open(const char *dir, mnt_dataset *d) {
  memset(d, 0, sizeof *d);
  snprintf(d->dir, sizeof d->dir, "%s", dir);
  char path[1200];
  snprintf(path, sizeof path, "%s/index.json", dir);
  json_error_t jerr;
  json_t *o = json_load_file(path, 0, &jerr);
  if (!o) {
    if (access(path, R_OK) != 0) MNT_ERR("%s: %s (is %s a dataset made by mntrain convert?)", path, strerror(errno), dir);
    else MNT_ERR("%s:%d: not valid JSON: %s", path, jerr.line, jerr.text);
    return MNT_EDATA;
  }
  int st = MNT_EDATA;
  json_t *cl = json_object_get(o, "classes"), *sh = json_object_get(o, "shards");
  json_t *m = json_object_get(o, "mean"), *s = json_object_get(o, "std");
  const char *fmt = json_string_value(json_object_get(o, "format"));
  d->nclasses = (int)json_integer_value(json_object_get(o, "num_classes"));
  d->size = (int)json_integer_value(json_object_get(o, "image_size"));
  d->channels = (int)json_integer_value(json_object_get(o, "channels"));
  d->seed = (long long)json_integer_value(json_object_get(o, "seed"));
  if (!fmt || strcmp(fmt, MNT_DATASET_FORMAT) != 0) { bad_index(path, "not an mntrain-shards index (\"format\")"); goto done; }
  if (!json_is_array(cl) || (int)json_array_size(cl) != d->nclasses || d->nclasses < 1) { bad_index(path, "\"classes\" and \"num_classes\" disagree"); goto done; }
  if (d->size < 1 || (d->channels != 1 && d->channels != 3)) { bad_index(path, "bad \"image_size\" or \"channels\" (1 or 3)"); goto done; }
  if (!json_is_array(sh) || json_array_size(sh) < 1) { bad_index(path, "no \"shards\""); goto done; }
  if (!json_is_array(m) || !json_is_array(s) || (int)json_array_size(m) != d->channels || (int)json_array_size(s) != d->channels) {
    bad_index(path, "\"mean\"/\"std\" need one value per channel");
    goto done;
  }
  for (int c = 0; c < d->channels; c++) {
    d->mean[c] = (float)json_number_value(json_array_get(m, (size_t)c));
    d->std[c] = (float)json_number_value(json_array_get(s, (size_t)c));
    if (!(d->std[c] > 0)) { bad_index(path, "\"std\" must be positive"); goto done; }
  }
  d->class_names = calloc((size_t)d->nclasses, sizeof *d->class_names);
  for (int i = 0; i < d->nclasses; i++) d->class_names[i] = strdup(json_string_value(json_array_get(cl, (size_t)i)) ? json_string_value(json_array_get(cl, (size_t)i)) : "");
  d->nshards = (int)json_array_size(sh);
  d->shard_path = calloc((size_t)d->nshards, sizeof *d->shard_path);
  d->shard_count = calloc((size_t)d->nshards, sizeof *d->shard_count);
  d->shard_start = calloc((size_t)d->nshards, sizeof *d->shard_start);
  d->hids = calloc((size_t)d->nshards * 3, sizeof *d->hids);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  for (int i = 0; i < d->nshards; i++) {
    json_t *e = json_array_get(sh, (size_t)i);
    const char *file = json_string_value(json_object_get(e, "file"));
    d->shard_count[i] = (int64_t)json_integer_value(json_object_get(e, "samples"));
    if (!file || d->shard_count[i] < 0) { bad_index(path, "a shard entry lacks \"file\" or \"samples\""); goto done; }
    char sp[1200];
    snprintf(sp, sizeof sp, "%s/%s", dir, file);
    d->shard_path[i] = strdup(sp);
    d->shard_start[i] = d->total;
    d->total += d->shard_count[i];
    if (access(sp, R_OK) != 0) { MNT_ERR("%s: missing shard (listed in %s): %s", sp, path, strerror(errno)); goto done; }
    hid_t f = H5Fopen(sp, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) { MNT_ERR("%s: not a readable HDF5 file (truncated or corrupt?)", sp); goto done; }
    d->hids[3 * i] = f;
    hid_t im = H5Dopen2(f, "images", H5P_DEFAULT), lb = H5Dopen2(f, "labels", H5P_DEFAULT);
    d->hids[3 * i + 1] = im;
    d->hids[3 * i + 2] = lb;
    if (im < 0 || lb < 0) { MNT_ERR("%s: no \"images\" or \"labels\" dataset", sp); goto done; }
    hid_t isp = H5Dget_space(im), lsp = H5Dget_space(lb), it = H5Dget_type(im), lt = H5Dget_type(lb);
    hsize_t dims[4] = {0}, ld = 0;
    int r1 = H5Sget_simple_extent_ndims(isp), r2 = H5Sget_simple_extent_ndims(lsp);
    if (r1 == 4) H5Sget_simple_extent_dims(isp, dims, NULL);
    if (r2 == 1) H5Sget_simple_extent_dims(lsp, &ld, NULL);
    int type_ok = H5Tget_class(it) == H5T_INTEGER && H5Tget_size(it) == 1 && H5Tget_sign(it) == H5T_SGN_NONE &&
                  H5Tget_class(lt) == H5T_INTEGER && H5Tget_size(lt) == 4;
    H5Sclose(isp); H5Sclose(lsp); H5Tclose(it); H5Tclose(lt);
    if (!type_ok) { MNT_ERR("%s: images must be uint8 and labels int32", sp); goto done; }
    if (r1 != 4 || r2 != 1 || (int64_t)dims[0] != d->shard_count[i] || (int)dims[1] != d->size ||
        (int)dims[2] != d->size || (int)dims[3] != d->channels || (int64_t)ld != d->shard_count[i]) {
      MNT_ERR("%s: images %llux%llux%llux%llu and %llu labels, but the index says %lld samples of %dx%dx%d", sp,
              (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
              (unsigned long long)dims[3], (unsigned long long)ld, (long long)d->shard_count[i], d->size, d->size,
              d->channels);
      goto done;
    }
    long long nc = -1;
    if (attr_get_int(f, "num_classes", &nc) == 0 && nc != d->nclasses) {
      MNT_ERR("%s: made for %lld classes, the index has %d", sp, nc, d->nclasses);
      goto done;
    }
  }
  st = MNT_OK;
done:
  json_decref(o);
  if (st != MNT_OK) mnt_dataset_close(d);
  return st;
}

void mnt_dataset_close(mnt_dataset *d) {
  for (int i = 0; i < d->nshards && d->hids; i++) {
    if (d->hids[3 * i + 1] > 0) H5Dclose(d->hids[3 * i + 1]);
    if (d->hids[3 * i + 2] > 0) H5Dclose(d->hids[3 * i + 2]);
    if (d->hids[3 * i] > 0) H5Fclose(d->hids[3 * i]);
  }
  for (int i = 0; i < d->nclasses && d->class_names; i++) free(d->class_names[i]);
  for (int i = 0; i < d->nshards && d->shard_path; i++) free(d->shard_path[i]);
  free(d->class_names); free(d->shard_path); free(d->shard_count); free(d->shard_start); free(d->hids);
  memset(d, 0, sizeof *d);
}

int mnt_dataset_read(mnt_dataset *d, int64_t g, uint8_t *pixels, int32_t *label) {
  if (g < 0 || g >= d->total) {
    MNT_ERR("%s: sample %lld is outside the dataset (%lld samples)", d->dir, (long long)g, (long long)d->total);
    return MNT_EARG;
  }
  int lo = 0, hi = d->nshards - 1; /* the shard holding g */
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (d->shard_start[mid] <= g) lo = mid;
    else hi = mid - 1;
  }
  int64_t i = g - d->shard_start[lo];
  hid_t im = d->hids[3 * lo + 1], lb = d->hids[3 * lo + 2];
  hsize_t start[4] = {(hsize_t)i, 0, 0, 0}, count[4] = {1, (hsize_t)d->size, (hsize_t)d->size, (hsize_t)d->channels};
  hsize_t c1 = 1;
  hid_t fs = H5Dget_space(im), ms = H5Screate_simple(4, count, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
  herr_t e1 = H5Dread(im, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, pixels);
  H5Sclose(ms); H5Sclose(fs);
  fs = H5Dget_space(lb);
  ms = H5Screate_simple(1, &c1, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, &c1, NULL);
  herr_t e2 = H5Dread(lb, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, label);
  H5Sclose(ms); H5Sclose(fs);
  if (e1 < 0 || e2 < 0) {
    MNT_ERR("%s: sample %lld cannot be read (truncated or corrupt file?)", d->shard_path[lo], (long long)i);
    return MNT_EDATA;
  }
  if (*label < 0 || *label >= d->nclasses) {
    MNT_ERR("%s: sample %lld has label %d, outside 0..%d", d->shard_path[lo], (long long)i, *label, d->nclasses - 1);
    return MNT_EDATA;
  }
  return MNT_OK;
}
