/* record.c — format 3 shards: images at their own sizes as variable-length records (raw pixels or
 * JPEG), written by mnt_rec_writer and read by mnt_dataset_read_run / _read_record; see dataset.h.
 * Layout: `records` is one contiguous uint8 dataset (no chunks, no filters) allocated at close, when
 * its size is known, and aligned to 4 KiB in the file; its file offset (H5Dget_offset) is kept at
 * open, the shard's HDF5 handle closed and the file kept open as a plain descriptor, so that reading
 * a record, or a run of consecutive records, is one pread without HDF5 (and without its global
 * lock: loader threads read in parallel). Each record's XXH3-64 is in `checksums` and checked on
 * every read; the small tables (offsets, shapes, labels, source_index, checksums) are chunked with
 * Fletcher-32, which HDF5 checks when they are loaded at open. While a shard is written its
 * records go to an unlinked spool file in the output directory (gone whatever happens) and its
 * tables to memory (40 bytes a sample).
 * Measured (2304 photographs stored at 256 px, 2 shards, one thread, local disk, pages evicted):
 * JPEG records (21 KiB) read one at a time in random order 10,000/s (220 MB/s), in runs of about
 * 1 MiB 19,000-23,000/s (410-500 MB/s); raw records (256 KiB) 1,400/s one at a time, 3,700-5,700/s
 * in 1 MiB runs. */
/* O_TMPFILE: _GNU_SOURCE comes from the build (CMakeLists.txt) */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/data/dataset.h"
#include "io/data/dataset_internal.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/sysmem.h"

enum { COPY_PIECE = 4 << 20, RECORDS_ALIGN = 4096 };

const char *mnt_codec_name(int codec) { return codec == MNT_CODEC_JPEG ? "jpeg" : "raw"; }

int mnt_codec_of(const char *name) {
  return !strcmp(name, "raw") ? MNT_CODEC_RAW : !strcmp(name, "jpeg") ? MNT_CODEC_JPEG : -1;
}

/* an unlinked file in the directory of path: O_TMPFILE, or a named file removed at once */
static int open_spool(const char *path) {
  char dir[MNT_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path); /* fits: the caller checked path's length */
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  char tmp[MNT_PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s.spool-XXXXXX", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG;
    return -1;
  }
  fd = mkostemp(tmp, O_CLOEXEC);
  if (fd >= 0) unlink(tmp);
  return fd;
}

static void free_tables(mnt_rec_writer *w) {
  free(w->offsets); free(w->source); free(w->shapes); free(w->labels); free(w->sums);
  w->offsets = w->source = NULL;
  w->shapes = w->labels = NULL;
  w->sums = NULL;
}

int mnt_rec_create(mnt_rec_writer *w, const char *path, int64_t n, const mnt_rec_settings *set) {
  memset(w, 0, sizeof *w);
  w->file = -1;
  w->spool = -1;
  w->set = *set;
  w->n = n;
  if (strlen(path) >= sizeof w->path) {
    MNT_ERR("%s: path too long: at most %d bytes are possible", path, MNT_PATH_MAX - 1);
    return MNT_EARG;
  }
  size_t m = (size_t)(n > 0 ? n : 1);
  w->offsets = calloc(m + 1, sizeof *w->offsets);
  w->source = malloc(m * sizeof *w->source);
  w->shapes = malloc(3 * m * sizeof *w->shapes);
  w->labels = malloc(m * sizeof *w->labels);
  w->sums = malloc(m * sizeof *w->sums);
  if (!w->offsets || !w->source || !w->shapes || !w->labels || !w->sums) {
    free_tables(w);
    MNT_ERR("out of memory for the tables of a shard of %lld samples", (long long)n);
    return MNT_ENOMEM;
  }
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl >= 0) H5Pset_alignment(fapl, 65536, RECORDS_ALIGN); /* the records start on a page */
  w->file = mnt_h5_create_shard(path, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  if (w->file < 0) {
    free_tables(w);
    return MNT_ESYS;
  }
  snprintf(w->path, sizeof w->path, "%s", path); /* ours from here: abort removes it */
  if ((w->spool = open_spool(path)) < 0) {
    int st = MNT_SYSERR("%s: cannot create a spool file for its records in the same directory", path);
    mnt_rec_abort(w);
    return st;
  }
  if (mnt_h5_attr_int(w->file, "image_size", set->resize) || mnt_h5_attr_int(w->file, "channels", set->channels) ||
      mnt_h5_attr_int(w->file, "num_classes", set->nclasses) || mnt_h5_attr_int(w->file, "shard", set->shard) ||
      mnt_h5_attr_int(w->file, "num_shards", set->nshards) || mnt_h5_attr_int(w->file, "seed", set->seed) ||
      mnt_h5_attr_int(w->file, "version", MNT_FORMAT_RECORDS) ||
      mnt_h5_attr_str(w->file, "fingerprint", set->fingerprint) ||
      mnt_h5_attr_str(w->file, "codec", mnt_codec_name(set->codec)) ||
      mnt_h5_attr_int(w->file, "quality", set->codec == MNT_CODEC_JPEG ? set->quality : 0) ||
      mnt_h5_attr_int(w->file, "resize", set->resize) || mnt_h5_attr_int(w->file, "max_side", set->max_side)) {
    MNT_ERR("%s: cannot write the attributes of a shard (disk full?)", path);
    mnt_rec_abort(w);
    return MNT_ESYS;
  }
  return MNT_OK;
}

int mnt_rec_append(mnt_rec_writer *w, const uint8_t *rec, size_t len, int h, int wd, int32_t label, int64_t source) {
  if (w->written >= w->n) {
    MNT_ERR("%s: more samples than the %lld announced", w->path, (long long)w->n);
    return MNT_EARG;
  }
  for (size_t done = 0; done < len;) {
    ssize_t r = write(w->spool, rec + done, len - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = ENOSPC;
      return MNT_SYSERR("%s: writing sample %lld failed (its record, to the shard's spool file)", w->path,
                        (long long)w->written);
    }
    done += (size_t)r;
  }
  int64_t i = w->written++;
  w->bytes += (int64_t)len;
  w->offsets[i + 1] = w->bytes;
  w->shapes[3 * i] = h;
  w->shapes[3 * i + 1] = wd;
  w->shapes[3 * i + 2] = w->set.channels;
  w->labels[i] = label;
  w->source[i] = source;
  w->sums[i] = XXH3_64bits(rec, len);
  return MNT_OK;
}

/* a table of rows × cols (cols 1: a vector), chunked with Fletcher-32, written whole */
static int table(hid_t f, const char *name, hid_t ftype, hid_t mtype, int64_t rows, int cols, const void *v) {
  int rank = cols > 1 ? 2 : 1;
  hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols}, max[2] = {H5S_UNLIMITED, (hsize_t)cols};
  hsize_t chunk[2] = {(hsize_t)(rows > 4096 ? 4096 : rows > 0 ? rows : 1), (hsize_t)cols};
  hid_t ds = mnt_h5_checked_dataset(f, name, ftype, rank, dims, max, chunk);
  herr_t e = ds < 0 ? -1 : rows > 0 ? H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) : 0;
  if (ds >= 0 && H5Dclose(ds) < 0) e = -1;
  return e < 0 ? -1 : 0;
}

/* the spool's bytes into `records`, a contiguous dataset of exactly that size */
static int copy_records(mnt_rec_writer *w) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t dims = (hsize_t)w->bytes;
  hid_t sp = H5Screate_simple(1, &dims, NULL);
  hid_t ds = -1;
  if (dcpl >= 0 && sp >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
      H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 && H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0)
    ds = H5Dcreate2(w->file, "records", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  if (ds < 0) {
    MNT_ERR("%s: cannot create its records dataset of %lld bytes (disk full?)", w->path, (long long)w->bytes);
    return MNT_ESYS;
  }
  int st = MNT_OK;
  uint8_t *buf = malloc(COPY_PIECE);
  if (!buf) st = MNT_ENOMEM;
  for (int64_t at = 0; at < w->bytes && st == MNT_OK;) {
    hsize_t n = (hsize_t)(w->bytes - at < COPY_PIECE ? w->bytes - at : COPY_PIECE), start = (hsize_t)at;
    ssize_t r = pread(w->spool, buf, n, at);
    if (r != (ssize_t)n) {
      if (r >= 0) errno = EIO;
      st = MNT_SYSERR("%s: reading back its spooled records at byte %lld", w->path, (long long)at);
      break;
    }
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL);
    if (H5Dwrite(ds, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, buf) < 0) {
      MNT_ERR("%s: writing its records failed at byte %lld (disk full?)", w->path, (long long)at);
      st = MNT_ESYS;
    }
    H5Sclose(ms);
    H5Sclose(fs);
    at += (int64_t)n;
  }
  free(buf);
  if (H5Dclose(ds) < 0 && st == MNT_OK) {
    MNT_ERR("%s: closing its records failed (disk full?)", w->path);
    st = MNT_ESYS;
  }
  return st;
}

int mnt_rec_close(mnt_rec_writer *w, const double *sum, const double *sum2, double pixels) {
  int st = MNT_OK, c = w->set.channels;
  int64_t n = w->written;
  if (table(w->file, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, n + 1, 1, w->offsets) ||
      table(w->file, "shapes", H5T_STD_I32LE, H5T_NATIVE_INT32, n, 3, w->shapes) ||
      table(w->file, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, n, 1, w->labels) ||
      table(w->file, "source_index", H5T_STD_I64LE, H5T_NATIVE_INT64, n, 1, w->source) ||
      table(w->file, "checksums", H5T_STD_U64LE, H5T_NATIVE_UINT64, n, 1, w->sums) ||
      mnt_h5_attr_int(w->file, "samples", n) || mnt_h5_attr_int(w->file, "record_bytes", w->bytes) ||
      mnt_h5_attr_int(w->file, "pixel_count", (long long)pixels) || mnt_h5_attr_f64s(w->file, "pixel_sum", (double *)sum, c, 1) ||
      mnt_h5_attr_f64s(w->file, "pixel_sum2", (double *)sum2, c, 1)) {
    MNT_ERR("%s: cannot write the tables of its %lld samples (disk full?)", w->path, (long long)n);
    st = MNT_ESYS;
  }
  if (st == MNT_OK) st = copy_records(w);
  if (st == MNT_OK) {
    herr_t e = H5Fclose(w->file);
    w->file = -1;
    if (e < 0) {
      MNT_ERR("%s: closing failed (disk full?)", w->path);
      st = MNT_ESYS;
    }
  }
  if (st != MNT_OK) {
    mnt_rec_abort(w);
    return st;
  }
  close(w->spool);
  w->spool = -1;
  free_tables(w);
  return MNT_OK;
}

void mnt_rec_abort(mnt_rec_writer *w) {
  if (w->file >= 0) H5Fclose(w->file); /* may fail (that is why we are here); the file goes either way */
  w->file = -1;
  if (w->spool >= 0) close(w->spool);
  w->spool = -1;
  if (w->path[0]) unlink(w->path);
  w->path[0] = '\0';
  free_tables(w);
}

/* ---- reading ------------------------------------------------------------------------------- */

/* dataset name of f (the file sp, mapped in map), rows × cols (cols 0: a vector) of integers of exactly
 * the type ftype in chunks with Fletcher-32, opened through mnt_h5_open_checked, read as mtype into v */
static int load_table(hid_t f, const char *sp, const mnt_h5_map *map, const char *name, hid_t ftype, hid_t mtype,
                      int64_t rows, int cols, void *v) {
  hsize_t dims[2] = {(hsize_t)rows, (hsize_t)cols};
  hid_t ds;
  MNT_CHECK(mnt_h5_open_checked(map, f, name, ftype, cols ? 2 : 1, dims, 1, &ds));
  int st = MNT_OK;
  if (rows > 0 && H5Dread(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) {
    MNT_ERR("%s: \"%s\" cannot be read: its checksum does not match (the file is corrupt) or the file is truncated",
            sp, name);
    st = MNT_EDATA;
  }
  H5Dclose(ds);
  return st;
}

/* the records dataset: contiguous, unfiltered uint8 of bytes bytes, inside the file
 * (mnt_h5_open_checked); *base its offset in the file */
static int records_at(hid_t f, const char *sp, const mnt_h5_map *map, int64_t bytes, int64_t *base) {
  hsize_t n = (hsize_t)bytes;
  hid_t ds;
  MNT_CHECK(mnt_h5_open_checked(map, f, "records", H5T_STD_U8LE, 1, &n, 0, &ds));
  haddr_t at = H5Dget_offset(ds);
  H5Dclose(ds);
  if (bytes > 0 && at == HADDR_UNDEF) {
    MNT_ERR("%s: \"records\" must be %lld bytes (its offsets say so); it is unallocated", sp, (long long)bytes);
    return MNT_EDATA;
  }
  *base = bytes > 0 ? (int64_t)at : 0;
  return MNT_OK;
}

/* the shard's attributes against the index: codec, channels, resize, max_side */
static int check_settings(const mnt_dataset *d, hid_t f, const char *sp) {
  char codec[16] = "";
  long long ch = -1, rs = -1, ms = -1;
  if (mnt_h5_attr_get_str(f, "codec", codec, sizeof codec) || mnt_codec_of(codec) != d->codec ||
      mnt_h5_attr_get_int(f, "channels", &ch) || ch != d->channels || mnt_h5_attr_get_int(f, "resize", &rs) ||
      rs != d->resize || mnt_h5_attr_get_int(f, "max_side", &ms) || ms != d->max_side) {
    MNT_ERR("%s: codec %s, %lld channels, resize %lld, max side %lld; the index says %s, %d, %d, %d", sp,
            codec[0] ? codec : "?", ch, rs, ms, mnt_codec_name(d->codec), d->channels, d->resize, d->max_side);
    return MNT_EDATA;
  }
  return MNT_OK;
}

/* the loaded tables of shard i make sense: offsets rising from 0, shapes positive with the index's
 * channels (raw: exactly h*w*c bytes), labels among the classes */
static int check_tables(mnt_dataset *d, int i, const char *sp, const int32_t *shapes) {
  int64_t n = d->shard_count[i], s0 = d->shard_start[i];
  const int64_t *off = d->rec_off + s0 + i;
  if (off[0] != 0) {
    MNT_ERR("%s: offsets[0] is %lld, not 0", sp, (long long)off[0]);
    return MNT_EDATA;
  }
  for (int64_t j = 0; j < n; j++) {
    int32_t h = shapes[3 * j], w = shapes[3 * j + 1], c = shapes[3 * j + 2], lab = d->rec_label[s0 + j];
    int64_t len = off[j + 1] - off[j];
    if (h < 1 || w < 1 || c != d->channels || len < 1 ||
        (d->codec == MNT_CODEC_RAW && len != (int64_t)h * w * c)) {
      MNT_ERR("%s: sample %lld: shape %dx%dx%d and %lld bytes do not agree (codec %s)", sp, (long long)j, h, w, c,
              (long long)len, mnt_codec_name(d->codec));
      return MNT_EDATA;
    }
    if (lab < 0 || lab >= d->nclasses) {
      MNT_ERR("%s: sample %lld has label %d, outside 0..%d", sp, (long long)j, lab, d->nclasses - 1);
      return MNT_EDATA;
    }
    d->rec_wh[2 * (s0 + j)] = w;
    d->rec_wh[2 * (s0 + j) + 1] = h;
  }
  return MNT_OK;
}

/* the file as a descriptor for pread, holding at least the records' end */
static int open_fd(mnt_dataset *d, int i, const char *sp, int64_t end) {
  int fd = open(sp, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (mnt_fd_short(sp, ", or convert the data into fewer shards (--shards)")) return MNT_ESYS;
    MNT_SYSERR("%s: cannot open the shard", sp);
    return MNT_EDATA;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (int64_t)sb.st_size < end) {
    MNT_ERR("%s: truncated: its records end at byte %lld, the file has %lld", sp, (long long)end,
            (long long)sb.st_size);
    close(fd);
    return MNT_EDATA;
  }
  d->fds[i] = fd;
  return MNT_OK;
}

int mnt_rec_open_shard(mnt_dataset *d, int i, const char *sp, hid_t f, const mnt_h5_map *map) {
  int64_t n = d->shard_count[i], s0 = d->shard_start[i], base = 0;
  int32_t *shapes = malloc((size_t)(3 * n + 3) * sizeof *shapes);
  int st = MNT_OK;
  if (!shapes) {
    st = MNT_ENOMEM;
    goto out;
  }
  MNT_CHECK_GOTO(check_settings(d, f, sp), st, out);
  MNT_CHECK_GOTO(load_table(f, sp, map, "offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, n + 1, 0, d->rec_off + s0 + i),
                 st, out);
  MNT_CHECK_GOTO(load_table(f, sp, map, "shapes", H5T_STD_I32LE, H5T_NATIVE_INT32, n, 3, shapes), st, out);
  MNT_CHECK_GOTO(load_table(f, sp, map, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, n, 0, d->rec_label + s0), st, out);
  MNT_CHECK_GOTO(load_table(f, sp, map, "checksums", H5T_STD_U64LE, H5T_NATIVE_UINT64, n, 0, d->rec_sum + s0), st,
                 out);
  MNT_CHECK_GOTO(check_tables(d, i, sp, shapes), st, out);
  MNT_CHECK_GOTO(records_at(f, sp, map, d->rec_off[s0 + i + n], &base), st, out);
  d->rec_base[i] = base;
  H5Fclose(f);
  f = -1;
  MNT_CHECK_GOTO(open_fd(d, i, sp, base + d->rec_off[s0 + i + n]), st, out);
out:
  if (f >= 0) H5Fclose(f);
  free(shapes);
  return st;
}

void mnt_rec_close_all(mnt_dataset *d) {
  for (int i = 0; i < d->nshards && d->fds; i++)
    if (d->fds[i] >= 0) close(d->fds[i]);
  free(d->fds); free(d->rec_off); free(d->rec_base); free(d->rec_wh); free(d->rec_label); free(d->rec_sum);
  d->fds = NULL;
  d->rec_off = d->rec_base = NULL;
  d->rec_wh = d->rec_label = NULL;
  d->rec_sum = NULL;
}

int mnt_dataset_read_run(mnt_dataset *d, int64_t g, int64_t *n, uint8_t **buf, size_t *cap, size_t *off,
                         int32_t *labels) {
  if (d->version < MNT_FORMAT_RECORDS) {
    MNT_ERR("%s: format %d has no records: use mnt_dataset_read or mnt_dataset_read_record", d->dir, d->version);
    return MNT_EARG;
  }
  int k = mnt_dataset_shard_of(d, g);
  if (k < 0 || *n < 1) return MNT_EARG;
  int64_t end = d->shard_start[k] + d->shard_count[k];
  if (*n > end - g) *n = end - g;
  const int64_t *o = d->rec_off + g + k;
  size_t len = (size_t)(o[*n] - o[0]);
  if (*cap < len || !*buf) {
    uint8_t *nb = realloc(*buf, len ? len : 1);
    if (!nb) {
      MNT_ERR("out of memory for %zu bytes of records", len);
      return MNT_ENOMEM;
    }
    *buf = nb;
    *cap = len ? len : 1;
  }
  int64_t i = g - d->shard_start[k];
  for (size_t done = 0; done < len;) {
    ssize_t r = pread(d->fds[k], *buf + done, len - done, (off_t)(d->rec_base[k] + o[0] + (int64_t)done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return MNT_SYSERR("%s: sample %lld cannot be read", d->shard_path[k], (long long)i);
    if (r == 0) {
      MNT_ERR("%s: sample %lld cannot be read: the file is truncated", d->shard_path[k], (long long)i);
      *n = 0;
      return MNT_EDATA;
    }
    done += (size_t)r;
  }
  for (int64_t j = 0; j < *n; j++) {
    off[j] = (size_t)(o[j] - o[0]);
    if (XXH3_64bits(*buf + off[j], (size_t)(o[j + 1] - o[j])) != d->rec_sum[g + j]) {
      MNT_ERR("%s: sample %lld cannot be read: its checksum does not match (the file is corrupt)", d->shard_path[k],
              (long long)(i + j));
      *n = j; /* the good ones before it stand */
      return MNT_EDATA;
    }
    if (labels) labels[j] = d->rec_label[g + j];
  }
  off[*n] = len;
  return MNT_OK;
}
