/* dataset.c — HDF5 shards and index.json; see dataset.h. */
#include "io/data/dataset.h"
#include "io/data/dataset_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/path.h"
#include "src/rng.h" /* mnt_splitmix64_mix */
#include "src/sysmem.h"

/* Descriptors a training run opens beside its datasets' shards (which stay open): outputs and their
 * temporary files, a checkpoint, the connections and listeners of the communicator, a validation
 * set's index. mnt_dataset_open refuses up front what would run out later. */
enum { FD_RESERVE = 32 };

uint64_t mnt_mix(uint64_t a, uint64_t b) {
  return mnt_splitmix64_mix(a * MNT_SPLITMIX64_GAMMA + b + 0x632be59bd9b4e019ull);
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

int mnt_h5_attr_int(hid_t obj, const char *name, long long v) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_LLONG, &v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return e < 0 ? -1 : 0;
}

int mnt_h5_attr_get_int(hid_t obj, const char *name, long long *v) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Aread(a, H5T_NATIVE_LLONG, v);
  if (a >= 0) H5Aclose(a);
  return e < 0 ? -1 : 0;
}

int mnt_h5_attr_f64s(hid_t f, const char *name, double *v, int channels, int write) {
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

/* HDF5 prints its error stack (HDF5-DIAG, about 20 lines) on every failed call unless told not to, and
 * that setting, like the stack, is kept per thread: it is turned off here in each thread that calls
 * HDF5 through these functions (the loader's workers and evaluation read samples in threads of their
 * own), once per thread; mntrain reports the error itself, naming the file and the sample */
static void h5_quiet(void) {
  static _Thread_local int quiet;
  if (quiet) return;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  quiet = 1;
}

void mnt_h5_init(void) {
  /* No clean-up at exit: after a write failed (disk full) HDF5 1.10 cannot close the file, and its
   * exit-time clean-up would then crash (SIGSEGV in H5F__close_cb) instead of letting mntrain exit
   * with the error. Every file is closed explicitly, once, on every path. This does not start the
   * library: commands that never touch HDF5 pay nothing. */
  H5dont_atexit();
}

const char *mnt_h5_version(void) {
  static char s[32];
  unsigned maj = 0, min = 0, rel = 0;
  if (H5get_libversion(&maj, &min, &rel) < 0) return "?";
  snprintf(s, sizeof s, "%u.%u.%u", maj, min, rel);
  return s;
}

int mnt_h5_attr_str(hid_t obj, const char *name, const char *v) {
  hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
  H5Tset_size(t, strlen(v) + 1);
  hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Awrite(a, t, v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  H5Tclose(t);
  return e < 0 ? -1 : 0;
}

int mnt_h5_attr_get_str(hid_t obj, const char *name, char *out, size_t n) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  hid_t ft = a < 0 ? -1 : H5Aget_type(a);
  int ok = -1;
  if (ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) && H5Tget_size(ft) < n) {
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5Tget_size(ft));
    memset(out, 0, n);
    if (H5Aread(a, mt, out) >= 0) ok = 0;
    H5Tclose(mt);
  }
  if (ft >= 0) H5Tclose(ft);
  if (a >= 0) H5Aclose(a);
  return ok;
}

hid_t mnt_h5_checked_dataset(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
                             const hsize_t *max, const hsize_t *chunk) {
  hid_t sp = H5Screate_simple(rank, dims, max), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hid_t ds = -1;
  if (sp >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 && H5Pset_fletcher32(dcpl) >= 0)
    ds = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  return ds;
}

hid_t mnt_h5_create_shard(const char *path, hid_t fapl) {
  h5_quiet(); /* errors are reported here, with the file named */
  /* exclusively (O_EXCL: never through a symlink, never into another writer's file); the caller
   * removes what an interrupted run left (io/convert/shard_write.c removes stale *.partial before writing) */
  errno = 0;
  hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  if (f >= 0) return f;
  int err = errno, fd_err = mnt_fd_exhausted(err) ? err : mnt_fd_probe(NULL);
  struct stat sb;
  if (fd_err) {
    char why[300];
    mnt_fd_advice(fd_err, why, sizeof why);
    MNT_ERR("out of file descriptors creating %s: %s", path, why);
  } else if (lstat(path, &sb) == 0) {
    MNT_ERR("%s: cannot create the shard file: it exists (another mntrain convert writing into this directory?)",
            path);
  } else if (err) {
    errno = err;
    MNT_SYSERR("%s: cannot create the shard file", path);
  } else {
    MNT_ERR("%s: cannot create the shard file (HDF5 refused)", path);
  }
  return -1;
}

int mnt_shard_create(mnt_shard_writer *w, const char *path, int64_t n, int size, int channels, int nclasses,
                     int shard, int nshards, long long seed, const char *fingerprint) {
  memset(w, 0, sizeof *w);
  w->file = w->images = w->labels = w->source = -1;
  if (strlen(path) >= sizeof w->path) {
    MNT_ERR("%s: path too long: at most %d bytes are possible", path, MNT_PATH_MAX - 1);
    return MNT_EARG;
  }
  snprintf(w->path, sizeof w->path, "%s", path);
  w->n = n;
  w->size = size;
  w->channels = channels;
  if ((w->file = mnt_h5_create_shard(path, H5P_DEFAULT)) < 0) {
    w->path[0] = '\0'; /* not ours: mnt_shard_abort must not remove it */
    return MNT_ESYS;
  }
  /* one image per chunk, so that a shard that skipped unreadable inputs can be shrunk and every
   * image read is one checksummed chunk */
  hsize_t dims[4] = {(hsize_t)n, (hsize_t)size, (hsize_t)size, (hsize_t)channels};
  hsize_t chunk[4] = {1, (hsize_t)size, (hsize_t)size, (hsize_t)channels};
  hsize_t d1 = (hsize_t)n, c1 = n > 4096 ? 4096 : (hsize_t)(n > 0 ? n : 1);
  w->images = mnt_h5_checked_dataset(w->file, "images", H5T_STD_U8LE, 4, dims, NULL, chunk);
  w->labels = mnt_h5_checked_dataset(w->file, "labels", H5T_STD_I32LE, 1, &d1, NULL, &c1);
  w->source = mnt_h5_checked_dataset(w->file, "source_index", H5T_STD_I64LE, 1, &d1, NULL, &c1);
  if (w->images < 0 || w->labels < 0 || w->source < 0 || mnt_h5_attr_int(w->file, "samples", n) ||
      mnt_h5_attr_int(w->file, "image_size", size) || mnt_h5_attr_int(w->file, "channels", channels) ||
      mnt_h5_attr_int(w->file, "num_classes", nclasses) || mnt_h5_attr_int(w->file, "shard", shard) ||
      mnt_h5_attr_int(w->file, "num_shards", nshards) || mnt_h5_attr_int(w->file, "seed", seed) ||
      mnt_h5_attr_int(w->file, "version", MNT_FORMAT_SQUARE) || mnt_h5_attr_str(w->file, "fingerprint", fingerprint)) {
    MNT_ERR("%s: cannot create the datasets of a shard (disk full?)", path);
    mnt_shard_abort(w);
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

/* close each handle exactly once; -1 marks what is closed (or was never opened) */
static int close_handles(mnt_shard_writer *w) {
  int bad = 0;
  hid_t *ds[3] = {&w->images, &w->labels, &w->source};
  for (int i = 0; i < 3; i++)
    if (*ds[i] >= 0) {
      bad |= H5Dclose(*ds[i]) < 0;
      *ds[i] = -1;
    }
  if (w->file >= 0) {
    bad |= H5Fclose(w->file) < 0;
    w->file = -1;
  }
  return bad;
}

int mnt_shard_close(mnt_shard_writer *w) {
  int st = MNT_OK;
  if (w->file >= 0 && w->written != w->n && !w->allow_short) {
    MNT_ERR("%s: %lld of %lld samples written", w->path, (long long)w->written, (long long)w->n);
    st = MNT_EDATA;
  } else if (w->file >= 0 && w->written != w->n) { /* inputs were skipped: shrink to what is there */
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
  if (close_handles(w) && st == MNT_OK) {
    MNT_ERR("%s: closing failed (disk full?)", w->path);
    st = MNT_ESYS;
  }
  return st;
}

void mnt_shard_abort(mnt_shard_writer *w) {
  close_handles(w); /* may fail (that is why we are here); the file goes either way */
  if (w->path[0]) unlink(w->path);
}

int mnt_shard_fingerprint(const char *path, char *out, size_t n) {
  h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return mnt_fd_short(path, NULL) ? -2 : -1;
  int r = mnt_h5_attr_get_str(f, "fingerprint", out, n);
  if (r) snprintf(out, n, "none");
  H5Fclose(f);
  return 0;
}

int mnt_index_write(const char *dir, const mnt_index_info *ix) {
  json_t *o = json_object(), *cl = json_array(), *sh = json_array(), *m = json_array(), *s = json_array();
  int64_t total = 0;
  /* every string must encode (JSON text is UTF-8: json_string gives NULL otherwise, which the
   * setters below would drop without a word, leaving an index that cannot be opened) */
  const char *bad = NULL;
  for (int i = 0; i < ix->nclasses && !bad; i++)
    if (json_array_append_new(cl, json_string(ix->class_names[i])) != 0) bad = ix->class_names[i];
  json_t *fp = json_string(ix->fingerprint), *src = json_string(ix->source);
  if (!bad && !fp) bad = ix->fingerprint;
  if (!bad && !src) bad = ix->source;
  if (bad || !o || !cl || !sh || !m || !s) {
    MNT_ERR("%s/index.json: not written: %s", dir, bad ? "a class name, the fingerprint or the source is not UTF-8"
                                                       : "out of memory");
    json_t *all[] = {o, cl, sh, m, s, fp, src};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) json_decref(all[i]);
    return bad ? MNT_EARG : MNT_ENOMEM;
  }
  for (int i = 0; i < ix->nshards; i++) {
    char name[64];
    mnt_shard_name(name, sizeof name, i, ix->nshards);
    json_array_append_new(sh, json_pack("{s:s, s:I}", "file", name, "samples", (json_int_t)ix->shard_count[i]));
    total += ix->shard_count[i];
  }
  for (int c = 0; c < ix->channels; c++) {
    json_array_append_new(m, json_real(ix->mean[c]));
    json_array_append_new(s, json_real(ix->std[c]));
  }
  json_object_set_new(o, "format", json_string(MNT_DATASET_FORMAT));
  int v3 = ix->version == MNT_FORMAT_RECORDS;
  json_object_set_new(o, "version", json_integer(v3 ? MNT_FORMAT_RECORDS : MNT_FORMAT_SQUARE));
  json_object_set_new(o, "num_classes", json_integer(ix->nclasses));
  json_object_set_new(o, "classes", cl);
  json_object_set_new(o, "image_size", json_integer(ix->size));
  json_object_set_new(o, "channels", json_integer(ix->channels));
  json_object_set_new(o, "samples", json_integer(total));
  json_object_set_new(o, "seed", json_integer(ix->seed));
  json_object_set_new(o, "mean", m);
  json_object_set_new(o, "std", s);
  json_object_set_new(o, "shards", sh);
  json_object_set_new(o, "fingerprint", fp);
  json_object_set_new(o, "source", src);
  if (v3) { /* image_size is the resize: the stored shorter side, at most */
    json_object_set_new(o, "codec", json_string(mnt_codec_name(ix->codec)));
    json_object_set_new(o, "quality", json_integer(ix->codec == MNT_CODEC_JPEG ? ix->quality : 0));
    json_object_set_new(o, "resize", json_integer(ix->resize));
    json_object_set_new(o, "max_side", json_integer(ix->max_side));
    json_object_set_new(o, "record_bytes", json_integer(ix->record_bytes));
  }
  int st = mnt_json_save(dir, "index.json", o);
  json_decref(o);
  return st;
}

static int bad_index(const char *path, const char *what) {
  MNT_ERR("%s: %s", path, what);
  return MNT_EDATA;
}

/* shard i's entry e of index.json at path: its file and count */
static int shard_entry(mnt_dataset *d, int i, json_t *e, const char *dir, const char *path) {
  const char *file = json_string_value(json_object_get(e, "file"));
  d->shard_count[i] = (int64_t)json_integer_value(json_object_get(e, "samples"));
  if (!file || d->shard_count[i] < 0) return bad_index(path, "a shard entry lacks \"file\" or \"samples\"");
  char sp[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(sp, dir, file));
  if (!(d->shard_path[i] = strdup(sp))) return MNT_ENOMEM;
  d->shard_start[i] = d->total;
  d->total += d->shard_count[i];
  return MNT_OK;
}

/* format 1/2: the images and labels datasets of shard i (file f) opened and kept, checked against
 * the index (uint8 images and int32 labels, the counts and shapes); format 2 (mapped: map) through
 * mnt_h5_open_checked (every image stored once, at its size, with its Fletcher-32 checksum) */
static int open_square(mnt_dataset *d, int i, const char *sp, hid_t f, const mnt_h5_map *map) {
  hsize_t n = (hsize_t)d->shard_count[i], S = (hsize_t)d->size, C = (hsize_t)d->channels;
  hsize_t want[4] = {n, S, S, C};
  if (map) {
    MNT_CHECK(mnt_h5_open_checked(map, f, "images", H5T_STD_U8LE, 4, want, 1, &d->hids[3 * i + 1]));
    MNT_CHECK(mnt_h5_open_checked(map, f, "labels", H5T_STD_I32LE, 1, want, 1, &d->hids[3 * i + 2]));
    return MNT_OK;
  }
  hid_t im = H5Dopen2(f, "images", H5P_DEFAULT), lb = H5Dopen2(f, "labels", H5P_DEFAULT);
  d->hids[3 * i + 1] = im;
  d->hids[3 * i + 2] = lb;
  if (im < 0 || lb < 0) { MNT_ERR("%s: no \"images\" or \"labels\" dataset", sp); return MNT_EDATA; }
  hid_t isp = H5Dget_space(im), lsp = H5Dget_space(lb), it = H5Dget_type(im), lt = H5Dget_type(lb);
  hsize_t dims[4] = {0}, ld = 0;
  int r1 = H5Sget_simple_extent_ndims(isp), r2 = H5Sget_simple_extent_ndims(lsp);
  if (r1 == 4) H5Sget_simple_extent_dims(isp, dims, NULL);
  if (r2 == 1) H5Sget_simple_extent_dims(lsp, &ld, NULL);
  int type_ok = H5Tget_class(it) == H5T_INTEGER && H5Tget_size(it) == 1 && H5Tget_sign(it) == H5T_SGN_NONE &&
                H5Tget_class(lt) == H5T_INTEGER && H5Tget_size(lt) == 4;
  H5Sclose(isp); H5Sclose(lsp); H5Tclose(it); H5Tclose(lt);
  if (!type_ok) { MNT_ERR("%s: images must be uint8 and labels int32", sp); return MNT_EDATA; }
  if (r1 != 4 || r2 != 1 || dims[0] != n || dims[1] != S || dims[2] != S || dims[3] != C || ld != n) {
    MNT_ERR("%s: images %llux%llux%llux%llu and %llu labels, but the index says %lld samples of %dx%dx%d", sp,
            (unsigned long long)dims[0], (unsigned long long)dims[1], (unsigned long long)dims[2],
            (unsigned long long)dims[3], (unsigned long long)ld, (long long)d->shard_count[i], d->size, d->size,
            d->channels);
    return MNT_EDATA;
  }
  return MNT_OK;
}

/* shard i: its HDF5 structures read and checked before HDF5 reads them (format 2 and 3: io/data/h5check.c),
 * then opened, checked against the index (format, fingerprint, classes, then its datasets); format 1/2
 * keep it open in HDF5, format 3 as a plain descriptor. MNT_EDATA naming it, or MNT_ESYS when this
 * process ran out of file descriptors */
static int open_shard(mnt_dataset *d, int i, const char *path) {
  const char *sp = d->shard_path[i];
  if (access(sp, R_OK) != 0) {
    MNT_SYSERR("%s: missing shard (listed in %s)", sp, path);
    return MNT_EDATA;
  }
  mnt_h5_map *map = NULL;
  if (d->version >= MNT_FORMAT_SQUARE) MNT_CHECK(mnt_h5_map_shard(sp, &map));
  int st = MNT_OK;
  hid_t f = H5Fopen(sp, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    if (mnt_fd_short(sp, ", or convert the data into fewer shards (--shards)")) {
      st = MNT_ESYS;
      goto out;
    }
    MNT_ERR("%s: not a readable HDF5 file (truncated or corrupt?)", sp);
    st = MNT_EDATA;
    goto out;
  }
  d->hids[3 * i] = f;
  long long nc = -1, v = -1;
  char fp[40];
  if (mnt_h5_attr_get_int(f, "num_classes", &nc) == 0 && nc != d->nclasses) {
    MNT_ERR("%s: made for %lld classes, the index has %d", sp, nc, d->nclasses);
    st = MNT_EDATA;
    goto out;
  }
  if (d->version >= MNT_FORMAT_SQUARE && (mnt_h5_attr_get_int(f, "version", &v) || v != d->version ||
                                          mnt_h5_attr_get_str(f, "fingerprint", fp, sizeof fp) ||
                                          strcmp(fp, d->fingerprint))) {
    MNT_ERR("%s: a shard of another conversion (format %lld, fingerprint %s; the index says format %d, %s): "
            "shards of different conversions mixed in one directory; convert again",
            sp, v, v >= MNT_FORMAT_SQUARE ? fp : "none", d->version, d->fingerprint);
    st = MNT_EDATA;
    goto out;
  }
  if (d->version < MNT_FORMAT_RECORDS) {
    MNT_CHECK_GOTO(open_square(d, i, sp, f, map), st, out);
  } else {
    d->hids[3 * i] = -1; /* closed by mnt_rec_open_shard, whatever happens */
    MNT_CHECK_GOTO(mnt_rec_open_shard(d, i, sp, f, map), st, out);
  }
out:
  mnt_h5_map_free(map);
  return st;
}

/* format 3's settings in the index: codec, quality, resize, max_side, record_bytes */
static int index_records(mnt_dataset *d, json_t *o, const char *path) {
  const char *codec = json_string_value(json_object_get(o, "codec"));
  d->codec = codec ? mnt_codec_of(codec) : -1;
  d->quality = (int)json_integer_value(json_object_get(o, "quality"));
  d->resize = (int)json_integer_value(json_object_get(o, "resize"));
  d->max_side = (int)json_integer_value(json_object_get(o, "max_side"));
  d->record_bytes = (int64_t)json_integer_value(json_object_get(o, "record_bytes"));
  if (d->codec < 0) return bad_index(path, "format 3 needs a \"codec\" (raw or jpeg)");
  if (d->resize != d->size || d->max_side < 0 || d->record_bytes < 0)
    return bad_index(path, "format 3 needs \"resize\" (= \"image_size\"), \"max_side\" and \"record_bytes\"");
  return MNT_OK;
}

/* what index.json (o, at path) says besides the shards: version, classes, size, channels, mean/std */
static int parse_index(mnt_dataset *d, json_t *o, const char *path) {
  d->version = (int)json_integer_value(json_object_get(o, "version"));
  const char *fp = json_string_value(json_object_get(o, "fingerprint"));
  snprintf(d->fingerprint, sizeof d->fingerprint, "%s", fp ? fp : "none");
  json_t *cl = json_object_get(o, "classes"), *sh = json_object_get(o, "shards");
  json_t *m = json_object_get(o, "mean"), *s = json_object_get(o, "std");
  const char *fmt = json_string_value(json_object_get(o, "format"));
  d->nclasses = (int)json_integer_value(json_object_get(o, "num_classes"));
  d->size = (int)json_integer_value(json_object_get(o, "image_size"));
  d->channels = (int)json_integer_value(json_object_get(o, "channels"));
  d->seed = (long long)json_integer_value(json_object_get(o, "seed"));
  if (!fmt || strcmp(fmt, MNT_DATASET_FORMAT) != 0) return bad_index(path, "not an mntrain-shards index (\"format\")");
  if (d->version < 1 || d->version > MNT_DATASET_VERSION) {
    MNT_ERR("%s: format version %d; this mntrain reads versions 1 to %d (convert the data again)", path, d->version,
            MNT_DATASET_VERSION);
    return MNT_EDATA;
  }
  if (!json_is_array(cl) || (int)json_array_size(cl) != d->nclasses || d->nclasses < 1) return bad_index(path, "\"classes\" and \"num_classes\" disagree");
  if (d->size < 1 || (d->channels != 1 && d->channels != 3)) return bad_index(path, "bad \"image_size\" or \"channels\" (1 or 3)");
  if (!json_is_array(sh) || json_array_size(sh) < 1) return bad_index(path, "no \"shards\"");
  if (!json_is_array(m) || !json_is_array(s) || (int)json_array_size(m) != d->channels || (int)json_array_size(s) != d->channels)
    return bad_index(path, "\"mean\"/\"std\" need one value per channel");
  for (int c = 0; c < d->channels; c++) {
    d->mean[c] = (float)json_number_value(json_array_get(m, (size_t)c));
    d->std[c] = (float)json_number_value(json_array_get(s, (size_t)c));
    if (!(d->std[c] > 0)) return bad_index(path, "\"std\" must be positive");
  }
  if (d->version >= MNT_FORMAT_RECORDS) MNT_CHECK(index_records(d, o, path));
  d->class_names = calloc((size_t)d->nclasses, sizeof *d->class_names);
  if (!d->class_names) return MNT_ENOMEM;
  for (int i = 0; i < d->nclasses; i++) {
    const char *name = json_string_value(json_array_get(cl, (size_t)i));
    if (!name || !name[0]) return bad_index(path, "an entry of \"classes\" is not a class name");
    if (!(d->class_names[i] = strdup(name))) return MNT_ENOMEM;
  }
  return MNT_OK;
}

/* format 3's tables for d->total samples (filled shard by shard) */
static int alloc_tables(mnt_dataset *d) {
  size_t n = (size_t)d->total;
  d->rec_off = calloc(n + (size_t)d->nshards, sizeof *d->rec_off);
  d->rec_base = calloc((size_t)d->nshards, sizeof *d->rec_base);
  d->rec_wh = calloc(2 * n + 1, sizeof *d->rec_wh);
  d->rec_label = calloc(n + 1, sizeof *d->rec_label);
  d->rec_sum = calloc(n + 1, sizeof *d->rec_sum);
  d->fds = malloc((size_t)d->nshards * sizeof *d->fds);
  if (!d->rec_off || !d->rec_base || !d->rec_wh || !d->rec_label || !d->rec_sum || !d->fds) {
    MNT_ERR("%s: out of memory for the tables of %lld samples", d->dir, (long long)d->total);
    return MNT_ENOMEM;
  }
  for (int i = 0; i < d->nshards; i++) d->fds[i] = -1;
  return MNT_OK;
}

int mnt_dataset_open(const char *dir, mnt_dataset *d) {
  memset(d, 0, sizeof *d);
  char path[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(path, dir, "index.json"));
  snprintf(d->dir, sizeof d->dir, "%s", dir); /* fits: the join did */
  json_error_t jerr;
  json_t *o = json_load_file(path, 0, &jerr);
  if (!o) {
    if (access(path, R_OK) != 0) {
      MNT_SYSERR("is %s a dataset made by mntrain convert? %s", dir, path);
      return MNT_EARG;
    }
    if (mnt_fd_short(path, NULL)) return MNT_ESYS;
    MNT_ERR("%s:%d: not valid JSON: %s", path, jerr.line, jerr.text);
    return MNT_EDATA;
  }
  int st = MNT_OK;
  json_t *sh = json_object_get(o, "shards");
  MNT_CHECK_GOTO(parse_index(d, o, path), st, out);
  d->nshards = (int)json_array_size(sh);
  d->shard_path = calloc((size_t)d->nshards, sizeof *d->shard_path);
  d->shard_count = calloc((size_t)d->nshards, sizeof *d->shard_count);
  d->shard_start = calloc((size_t)d->nshards, sizeof *d->shard_start);
  d->hids = calloc((size_t)d->nshards * 3, sizeof *d->hids);
  if (!d->shard_path || !d->shard_count || !d->shard_start || !d->hids) {
    st = MNT_ENOMEM;
    goto out;
  }
  for (int i = 0; i < d->nshards; i++)
    MNT_CHECK_GOTO(shard_entry(d, i, json_array_get(sh, (size_t)i), dir, path), st, out);
  if (d->version < MNT_FORMAT_RECORDS) d->record_bytes = d->total * d->size * d->size * d->channels;
  else MNT_CHECK_GOTO(alloc_tables(d), st, out);
  char what[1200];
  snprintf(what, sizeof what, "opening %s (%d shards kept open, %d for other files)", dir, d->nshards, FD_RESERVE);
  if (mnt_fd_check(d->nshards + FD_RESERVE, what, "convert the data into fewer shards (--shards)")) {
    st = MNT_EARG;
    goto out;
  }
  h5_quiet();
  for (int i = 0; i < d->nshards; i++) MNT_CHECK_GOTO(open_shard(d, i, path), st, out);
  int64_t bytes = 0;
  for (int i = 0; i < d->nshards && d->version >= MNT_FORMAT_RECORDS; i++)
    bytes += d->rec_off[d->shard_start[i] + d->shard_count[i] + i];
  if (d->version >= MNT_FORMAT_RECORDS && bytes != d->record_bytes) {
    MNT_ERR("%s: \"record_bytes\" is %lld, its shards hold %lld bytes of records", path, (long long)d->record_bytes,
            (long long)bytes);
    st = MNT_EDATA;
    goto out;
  }
  if (d->total == 0) {
    MNT_ERR("%s: the dataset has no samples", dir);
    st = MNT_EARG;
    goto out;
  }
  if (d->version == 1)
    MNT_WARN("%s: format version 1 has no checksums, so corrupt images would go unnoticed; convert it again "
             "(mntrain convert ... --force) to get a Fletcher-32 checksum on every image", dir);
out:
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
  mnt_rec_close_all(d);
  free(d->class_names); free(d->shard_path); free(d->shard_count); free(d->shard_start); free(d->hids);
  memset(d, 0, sizeof *d);
}

int mnt_dataset_shard_of(const mnt_dataset *d, int64_t g) {
  if (g < 0 || g >= d->total) {
    MNT_ERR("%s: sample %lld is outside the dataset (%lld samples)", d->dir, (long long)g, (long long)d->total);
    return -1;
  }
  int lo = 0, hi = d->nshards - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (d->shard_start[mid] <= g) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

int mnt_dataset_read(mnt_dataset *d, int64_t g, uint8_t *pixels, int32_t *label) {
  int lo = mnt_dataset_shard_of(d, g);
  if (lo < 0) return MNT_EARG;
  if (d->version >= MNT_FORMAT_RECORDS) {
    if (pixels) {
      MNT_ERR("%s: format 3 records have their own sizes: use mnt_dataset_read_record (sample %lld)", d->dir,
              (long long)g);
      return MNT_EARG;
    }
    *label = d->rec_label[g]; /* checked against the classes at open */
    return MNT_OK;
  }
  h5_quiet(); /* this thread's HDF5 error printing: perhaps a loader worker's first read */
  int64_t i = g - d->shard_start[lo];
  hid_t im = d->hids[3 * lo + 1], lb = d->hids[3 * lo + 2];
  hsize_t start[4] = {(hsize_t)i, 0, 0, 0}, count[4] = {1, (hsize_t)d->size, (hsize_t)d->size, (hsize_t)d->channels};
  hsize_t c1 = 1;
  herr_t e1 = 0;
  if (pixels) {
    hid_t fs = H5Dget_space(im), ms = H5Screate_simple(4, count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    e1 = H5Dread(im, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, pixels);
    H5Sclose(ms);
    H5Sclose(fs);
  }
  hid_t fs = H5Dget_space(lb), ms = H5Screate_simple(1, &c1, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, &c1, NULL);
  herr_t e2 = H5Dread(lb, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, label);
  H5Sclose(ms); H5Sclose(fs);
  if (e1 < 0 || e2 < 0) {
    MNT_ERR("%s: sample %lld cannot be read: its checksum does not match (the file is corrupt) or the file is "
            "truncated", d->shard_path[lo], (long long)i);
    return MNT_EDATA;
  }
  if (*label < 0 || *label >= d->nclasses) {
    MNT_ERR("%s: sample %lld has label %d, outside 0..%d", d->shard_path[lo], (long long)i, *label, d->nclasses - 1);
    return MNT_EDATA;
  }
  return MNT_OK;
}

int mnt_dataset_dims(const mnt_dataset *d, int64_t g, int *w, int *h) {
  if (mnt_dataset_shard_of(d, g) < 0) return MNT_EARG;
  if (d->version >= MNT_FORMAT_RECORDS) {
    *w = d->rec_wh[2 * g];
    *h = d->rec_wh[2 * g + 1];
  } else {
    *w = *h = d->size;
  }
  return MNT_OK;
}

int mnt_dataset_read_record(mnt_dataset *d, int64_t g, uint8_t **buf, size_t *cap, size_t *len, int32_t *label) {
  if (d->version >= MNT_FORMAT_RECORDS) {
    int64_t n = 1;
    size_t off[2];
    MNT_CHECK(mnt_dataset_read_run(d, g, &n, buf, cap, off, label));
    *len = off[1];
    return MNT_OK;
  }
  size_t px = (size_t)d->size * d->size * d->channels;
  if (*cap < px || !*buf) {
    uint8_t *nb = realloc(*buf, px);
    if (!nb) {
      MNT_ERR("out of memory for a sample of %zu bytes", px);
      return MNT_ENOMEM;
    }
    *buf = nb;
    *cap = px;
  }
  MNT_CHECK(mnt_dataset_read(d, g, *buf, label));
  *len = px;
  return MNT_OK;
}
