/* ckpt_layout.c — the checkpoint file's layout, made once per writer: rank 0 builds the HDF5 skeleton
 * in a scratch file (every dataset allocated early and unfilled, objects of a stripe or more aligned
 * to the stripe, metadata in blocks of its own), broadcasts the datasets' offsets and the file's
 * size, and every rank finds its share of the data range; see ckpt_writer.h. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "io/ckpt/ckpt_writer.h"
#include "io/data/dataset.h"
#include "src/log.h"
#include "src/path.h"

/* a root attribute per member of obj: integers as int64, reals as double, arrays of numbers as
 * float64 vectors, strings as strings, anything else as its JSON text */
static int put_attrs(hid_t loc, json_t *obj) {
  const char *k;
  json_t *v;
  int bad = 0;
  json_object_foreach(obj, k, v) {
    hid_t sp = H5Screate(H5S_SCALAR), type = -1, a = -1;
    herr_t e = -1;
    size_t n = json_array_size(v), num = n > 0;
    for (size_t i = 0; i < n; i++) num = num && json_is_number(json_array_get(v, i));
    if (json_is_integer(v)) {
      long long x = json_integer_value(v);
      a = H5Acreate2(loc, k, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_LLONG, &x);
    } else if (json_is_real(v)) {
      double x = json_real_value(v);
      a = H5Acreate2(loc, k, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_DOUBLE, &x);
    } else if (num && n <= 64) {
      double x[64];
      hsize_t d = n;
      for (size_t i = 0; i < n; i++) x[i] = json_number_value(json_array_get(v, i));
      H5Sclose(sp);
      sp = H5Screate_simple(1, &d, NULL);
      a = H5Acreate2(loc, k, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_DOUBLE, x);
    } else {
      char *txt = json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
      type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, txt && txt[0] ? strlen(txt) : 1);
      a = H5Acreate2(loc, k, type, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0 && txt) e = H5Awrite(a, type, txt[0] ? txt : " ");
      free(txt);
    }
    if (a >= 0) H5Aclose(a);
    if (type >= 0) H5Tclose(type);
    H5Sclose(sp);
    if (e < 0) bad = 1;
  }
  return bad ? MNT_ESYS : MNT_OK;
}

/* The skeleton of state.h5 made as the file `scratch`: every dataset allocated early and unfilled,
 * objects of a stripe or more aligned to the stripe, metadata in blocks of its own; each
 * dataset's offset into wr->offsets. */
static int make_skeleton(mnt_ckpt_writer *wr, const char *scratch, const mnt_ckpt_tensor *t, int nt, json_t *attrs) {
  int st = MNT_OK;
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_alignment(fapl, wr->stripe, wr->stripe);
  H5Pset_meta_block_size(fapl, 1 << 20);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST); /* checksummed metadata */
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t f = H5Fcreate(scratch, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (f < 0 || put_attrs(f, attrs) != MNT_OK) st = MNT_ESYS;
  for (int i = 0; i < nt && st == MNT_OK; i++) {
    hsize_t d[4];
    for (int k = 0; k < t[i].ndims; k++) d[k] = (hsize_t)t[i].dims[k];
    hid_t sp = H5Screate_simple(t[i].ndims, d, NULL);
    hid_t ds = H5Dcreate2(f, t[i].name, t[i].bytes_per ? H5T_STD_U8LE : H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    haddr_t a = ds >= 0 ? H5Dget_offset(ds) : HADDR_UNDEF;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    if (a == HADDR_UNDEF) st = MNT_ESYS;
    wr->offsets[i] = (uint64_t)a;
  }
  if (f >= 0 && H5Fclose(f) < 0) st = MNT_ESYS;
  H5Pclose(fapl);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  return st;
}

/* one block of metadata (len non-zero bytes at off, in blk) into rank 0's list, merged with the one
 * before it when adjacent; *used of *cap bytes of wr->meta_bytes are taken */
static int add_meta(mnt_ckpt_writer *wr, const uint8_t *blk, uint64_t off, uint64_t len, size_t *cap, size_t *used) {
  if (wr->nmeta && wr->meta[wr->nmeta - 1].off + wr->meta[wr->nmeta - 1].bytes == off) {
    wr->meta[wr->nmeta - 1].bytes += len;
  } else {
    if (wr->nmeta % 64 == 0) {
      mnt_ckpt_extent *e = realloc(wr->meta, (size_t)(wr->nmeta + 64) * sizeof *e);
      if (!e) return MNT_ENOMEM;
      wr->meta = e;
    }
    wr->meta[wr->nmeta++] = (mnt_ckpt_extent){.off = off, .bytes = len, .packed = *used};
  }
  if (*used + len > *cap) {
    *cap = 2 * (*used + len);
    uint8_t *p = realloc(wr->meta_bytes, *cap);
    if (!p) return MNT_ENOMEM;
    wr->meta_bytes = p;
  }
  memcpy(wr->meta_bytes + *used, blk, len);
  *used += len;
  return MNT_OK;
}

/* the metadata of the skeleton (open as sfd): the non-zero bytes outside every dataset (only those
 * are read back), in pieces of up to 4 KiB, merged */
static int collect_meta(mnt_ckpt_writer *wr, int sfd, const mnt_ckpt_tensor *t, int nt) {
  uint8_t blk[4096];
  mnt_ckpt_extent *ext = calloc((size_t)nt + 1, sizeof *ext);
  if (!ext) return MNT_ENOMEM;
  for (int i = 0; i < nt; i++) ext[i] = (mnt_ckpt_extent){.off = wr->offsets[i], .bytes = mnt_ckpt_tensor_bytes(&t[i])};
  ext[nt] = (mnt_ckpt_extent){.off = wr->file_bytes}; /* the end of the file */
  qsort(ext, (size_t)nt + 1, sizeof *ext, mnt_ckpt_cmp_extent);
  size_t cap = 0, used = 0;
  uint64_t from = 0;
  int st = MNT_OK;
  for (int i = 0; i <= nt && st == MNT_OK; i++) {
    for (uint64_t off = from; off < ext[i].off && st == MNT_OK;) { /* the gap [from, ext[i].off) */
      uint64_t len = (off / 4096 + 1) * 4096 - off;
      if (off + len > ext[i].off) len = ext[i].off - off;
      if (mnt_ckpt_pread_all(sfd, blk, off, len) != 0) {
        st = MNT_ESYS;
        break;
      }
      int nz = 0;
      for (uint64_t j = 0; j < len && !nz; j++) nz = blk[j] != 0;
      if (nz) st = add_meta(wr, blk, off, len, &cap, &used);
      off += len;
    }
    if (ext[i].off + ext[i].bytes > from) from = ext[i].off + ext[i].bytes;
  }
  free(ext);
  return st;
}

/* The skeleton of state.h5, built once as a scratch file on local memory (/dev/shm, else TMPDIR
 * or /tmp; sparse: only the metadata takes space). Its bytes are the checkpoint file but for the
 * data: the datasets' offsets, the size, and the metadata (the non-zero bytes outside the
 * datasets) that rank 0 writes with its share. */
static int build_layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, json_t *attrs) {
  char scratch[MNT_PATH_MAX];
  const char *tmpdir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  MNT_CHECK(mnt_path_join(scratch, tmpdir, "mntrain-layout-XXXXXX"));
  int sfd = mkstemp(scratch);
  if (sfd < 0) return MNT_SYSERR("%s: cannot create the checkpoint's scratch layout", scratch);
  int st = make_skeleton(wr, scratch, t, nt, attrs);
  struct stat sb;
  if (st == MNT_OK && fstat(sfd, &sb) == 0 && sb.st_size > 0) wr->file_bytes = (uint64_t)sb.st_size;
  else if (st == MNT_OK) st = MNT_ESYS;
  if (st == MNT_OK) st = collect_meta(wr, sfd, t, nt);
  close(sfd);
  unlink(scratch);
  if (st != MNT_OK) MNT_ERR("the checkpoint's HDF5 layout cannot be built (%d tensors)", nt);
  return st;
}

/* Every rank's status, agreed over the communicator (a one-float allreduce, not a PMIx fence):
 * MNT_OK when all are, else this rank's failure (or MNT_ESYS for a rank that did not fail itself),
 * recorded as agreed so that it ends the job normally instead of aborting it. */
int mnt_ckpt_agree(mnt_ckpt_writer *wr, int st) {
  float bad = st != MNT_OK;
  MNT_CHECK(mnt_allreduce(wr->c, &bad, 1, MNT_FP32, MNT_SUM));
  if (bad == 0) return MNT_OK;
  if (st == MNT_OK) {
    st = MNT_ESYS;
    MNT_DBG("checkpoint: another rank failed (its error says why)");
  }
  wr->c->world->failed_together = st;
  return st;
}

/* this rank's share of the layout: the stripes [lo, hi) of the data range, cut evenly, and the
 * datasets' pieces in it (ext: room for nt extents) */
static int find_share(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, mnt_ckpt_extent *ext) {
  mnt_world *w = wr->c->world;
  uint64_t packed = 0;
  for (int i = 0; i < nt; i++)
    ext[i] = (mnt_ckpt_extent){.off = wr->offsets[i], .bytes = mnt_ckpt_tensor_bytes(&t[i]), .t = i};
  qsort(ext, (size_t)nt, sizeof *ext, mnt_ckpt_cmp_extent);
  for (int i = 0; i < nt; i++) {
    ext[i].packed = packed;
    packed += ext[i].bytes;
  }
  uint64_t S = wr->stripe, base = ext[0].off / S * S, end = ext[nt - 1].off + ext[nt - 1].bytes;
  uint64_t nb = (end - base + S - 1) / S, R = (uint64_t)w->size, r = (uint64_t)w->rank;
  uint64_t lo = base + nb * r / R * S, hi = r + 1 == R ? end : base + nb * (r + 1) / R * S;
  wr->share = (share_info){.lo = lo, .hi = hi};
  wr->mine = calloc((size_t)nt, sizeof *wr->mine);
  if (!wr->mine) return MNT_ENOMEM;
  for (int i = 0; i < nt; i++) { /* a contiguous range of the packed image */
    mnt_ckpt_extent e = ext[i];
    uint64_t a = e.off > lo ? e.off : lo, b = e.off + e.bytes < hi ? e.off + e.bytes : hi;
    if (a >= b) continue;
    if (wr->npieces == 0) wr->share.packed = e.packed + (a - e.off);
    wr->mine[wr->npieces++] = (mnt_ckpt_extent){.off = a, .bytes = b - a, .packed = e.packed + (a - e.off), .t = e.t};
    wr->share.bytes += b - a;
  }
  return MNT_OK;
}

/* rank 0: the manifest's list of datasets */
static json_t *manifest_datasets(const mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt) {
  json_t *list = json_array();
  for (int i = 0; i < nt; i++) {
    json_t *shape = json_array();
    for (int k = 0; k < t[i].ndims; k++) json_array_append_new(shape, json_integer(t[i].dims[k]));
    json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:I, s:o}", "name", t[i].name, "type",
                                          t[i].bytes_per ? "uint8" : "float32", "offset", (json_int_t)wr->offsets[i],
                                          "bytes", (json_int_t)mnt_ckpt_tensor_bytes(&t[i]), "shape", shape));
  }
  return list;
}

/* Collective, once per writer: rank 0 builds the layout and broadcasts it; every rank finds its
 * share and allocates the staging buffer for it. */
int mnt_ckpt_layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, json_t *attrs) {
  mnt_world *w = wr->c->world;
  wr->nt = nt;
  uint64_t *hdr = calloc((size_t)nt + 2, sizeof *hdr);
  wr->offsets = calloc((size_t)nt, sizeof *wr->offsets);
  mnt_ckpt_extent *ext = calloc((size_t)nt, sizeof *ext);
  int st = MNT_OK;
  MNT_CHECK_GOTO(mnt_ckpt_agree(wr, hdr && wr->offsets && ext ? MNT_OK : MNT_ENOMEM), st, out);
  if (w->rank == 0) { /* its status travels with the layout */
    hdr[0] = (uint64_t)build_layout(wr, t, nt, attrs);
    hdr[1] = wr->file_bytes;
    memcpy(hdr + 2, wr->offsets, (size_t)nt * sizeof *hdr);
  }
  MNT_CHECK_GOTO(mnt_broadcast(wr->c, hdr, ((size_t)nt + 2) * sizeof *hdr, 0), st, out);
  if (hdr[0] != MNT_OK) {
    st = w->failed_together = (int)hdr[0];
    goto out;
  }
  wr->file_bytes = hdr[1];
  memcpy(wr->offsets, hdr + 2, (size_t)nt * sizeof *hdr);
  st = find_share(wr, t, nt, ext);
  if (st == MNT_OK && w->rank == 0) wr->datasets = manifest_datasets(wr, t, nt);
  if (st == MNT_OK) { /* the staging buffer mirrors the share's file range (see stage_share) */
    size_t need = wr->share.bytes ? (wr->share.hi - wr->share.lo + 4095) / 4096 * 4096 : 0;
    if (need && !(wr->stage = aligned_alloc(4096, need))) st = MNT_ENOMEM;
    wr->stage_cap = need;
    if (st) MNT_ERR("out of memory for the checkpoint's staging buffer (%" PRIu64 " bytes)", wr->share.bytes);
  }
  st = mnt_ckpt_agree(wr, st);
out:
  free(hdr);
  free(ext);
  return st;
}
