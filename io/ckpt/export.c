/* export.c — see export.h. */
#include "io/ckpt/export.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/simd.h"
#include "src/tmpfile.h"
#include "src/log.h"
#include "src/path.h"

int mnt_h5_put_f32(int64_t file, const char *path, const float *data, int ndims, const int *dims) {
  hsize_t d[4];
  for (int i = 0; i < ndims; i++) d[i] = (hsize_t)dims[i];
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t sp = H5Screate_simple(ndims, d, NULL);
  hid_t ds = H5Dcreate2((hid_t)file, path, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = ds < 0 ? -1 : H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  if (ds >= 0) H5Dclose(ds);
  H5Sclose(sp);
  H5Pclose(lcpl);
  if (e < 0) {
    MNT_ERR("writing the dataset %s failed", path);
    return MNT_ESYS;
  }
  return MNT_OK;
}

static int attr(hid_t loc, const char *name, hid_t type, int n, const void *v) {
  hsize_t d = (hsize_t)n;
  hid_t sp = n > 1 ? H5Screate_simple(1, &d, NULL) : H5Screate(H5S_SCALAR);
  hid_t ft = type, a;
  if (type == H5T_C_S1) {
    ft = H5Tcopy(H5T_C_S1);
    H5Tset_size(ft, strlen(v));
  }
  a = H5Acreate2(loc, name, type == H5T_NATIVE_INT ? H5T_STD_I32LE : type == H5T_NATIVE_FLOAT ? H5T_IEEE_F32LE : ft,
                 sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a >= 0 ? H5Awrite(a, ft, v) : -1;
  if (a >= 0) H5Aclose(a);
  if (ft != type) H5Tclose(ft);
  H5Sclose(sp);
  return e < 0 ? MNT_ESYS : MNT_OK;
}

int mnt_export_h5(const mnt_resnet *r, const float *w, const float *bn, const mnt_dataset *d, const char *path) {
  const mnt_param *bad = mnt_resnet_first_nonfinite(r->params, r->nparams, w),
                  *badbn = bad ? NULL : mnt_resnet_first_nonfinite(r->stats, r->nstats, bn);
  if (bad || badbn) { /* weights of a diverged run are nobody's model */
    MNT_ERR("%s: not written: %s/%s holds NaN or Inf", path, bad ? "model" : "bn", bad ? bad->name : badbn->name);
    return MNT_EDATA;
  }
  char tmp[MNT_PATH_MAX]; /* DIR/.NAME.XXXXXX, created exclusively, renamed when complete: a file at path is whole */
  int fd = mnt_tmp_create(path, tmp, sizeof tmp);
  if (fd < 0) return MNT_ESYS;
  close(fd);
  int st = MNT_OK;
  hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT); /* our own file in a safe directory */
  if (f < 0) {
    st = MNT_SYSERR("%s: cannot create", tmp);
    goto out;
  }
  char name[200];
  st = attr(f, "format", H5T_C_S1, 1, "mntrain-weights");
  if (st == MNT_OK) st = attr(f, "arch", H5T_C_S1, 1, r->arch);
  if (st == MNT_OK) st = attr(f, "version", H5T_C_S1, 1, MNT_VERSION);
  if (st == MNT_OK) st = attr(f, "classes", H5T_NATIVE_INT, 1, &r->classes);
  if (st == MNT_OK) st = attr(f, "image_size", H5T_NATIVE_INT, 1, &r->size);
  if (st == MNT_OK && d) st = attr(f, "mean", H5T_NATIVE_FLOAT, 3, d->mean);
  if (st == MNT_OK && d) st = attr(f, "std", H5T_NATIVE_FLOAT, 3, d->std);
  if (st != MNT_OK) MNT_ERR("%s: cannot write the attributes", tmp);
  for (int i = 0; i < r->nparams && st == MNT_OK; i++) {
    snprintf(name, sizeof name, "/model/%s", r->params[i].name);
    st = mnt_h5_put_f32(f, name, w + r->params[i].off, r->params[i].ndims, r->params[i].dims);
  }
  for (int i = 0; i < r->nstats && st == MNT_OK; i++) {
    snprintf(name, sizeof name, "/bn/%s", r->stats[i].name);
    st = mnt_h5_put_f32(f, name, bn + r->stats[i].off, 1, r->stats[i].dims);
  }
  if (H5Fclose(f) < 0 && st == MNT_OK) {
    MNT_ERR("%s: closing failed (disk full?)", tmp);
    st = MNT_ESYS;
  }
out:
  if (st == MNT_OK) return mnt_tmp_commit(tmp, path); /* tmp is removed when that fails */
  unlink(tmp);
  return st;
}

/* ---- --init: the reader of what mnt_export_h5 (or a checkpoint's state.h5) holds ------------- */

/* one float32 dataset of f into dst, checked against the expected shape */
static int read_named(hid_t f, const char *path, const char *name, float *dst, int ndims, const int *dims) {
  if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
    MNT_ERR("--init %s: no dataset %s (is it a mntrain export or checkpoint of this --arch?)", path, name);
    return MNT_EARG;
  }
  hid_t ds = H5Dopen2(f, name, H5P_DEFAULT), sp = ds >= 0 ? H5Dget_space(ds) : -1;
  hsize_t d[8] = {0};
  int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, same = nd == ndims;
  if (same) H5Sget_simple_extent_dims(sp, d, NULL);
  for (int k = 0; k < ndims && same; k++) same = d[k] == (hsize_t)dims[k];
  int st = MNT_OK;
  if (!same) {
    MNT_ERR("--init %s: %s has %d dimensions (%llu x %llu ...), the model's has %d (%d x %d ...)", path, name, nd,
            (unsigned long long)d[0], (unsigned long long)d[1], ndims, dims[0], ndims > 1 ? dims[1] : 1);
    st = MNT_EARG;
  } else if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
    MNT_ERR("--init %s: reading %s failed", path, name);
    st = MNT_EDATA;
  } else {
    size_t n = 1;
    for (int k = 0; k < ndims; k++) n *= (size_t)dims[k];
    if (mnt_vec_nonfinite(dst, n)) {
      MNT_ERR("--init %s: %s holds NaN or Inf (weights of a run that had diverged): not a start", path, name);
      st = MNT_EARG;
    }
  }
  if (sp >= 0) H5Sclose(sp);
  if (ds >= 0) H5Dclose(ds);
  return st;
}

int mnt_import_h5(const mnt_resnet *m, const char *path, float *w, float *bn) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    MNT_ERR("--init %s: not an HDF5 file that can be read", path);
    return MNT_EARG;
  }
  char name[200];
  int st = MNT_OK;
  for (int i = 0; i < m->nparams; i++) {
    snprintf(name, sizeof name, "/model/%s", m->params[i].name);
    MNT_CHECK_GOTO(read_named(f, path, name, w + m->params[i].off, m->params[i].ndims, m->params[i].dims), st, out);
  }
  for (int i = 0; i < m->nstats; i++) {
    snprintf(name, sizeof name, "/bn/%s", m->stats[i].name);
    int dim = (int)m->stats[i].n;
    MNT_CHECK_GOTO(read_named(f, path, name, bn + m->stats[i].off, 1, &dim), st, out);
  }
out:
  H5Fclose(f);
  return st;
}
