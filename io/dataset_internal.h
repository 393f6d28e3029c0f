/* dataset_internal.h — what the dataset's own files share (io/dataset.c, io/record.c,
 * io/shard_write.c); nothing else includes it. The public API is io/dataset.h.
 * defines: mnt_h5_attr_int / _get_int / _str / _get_str (scalar attributes), mnt_h5_attr_f64s, mnt_h5_checked_dataset
 *          (chunked, Fletcher-32), mnt_h5_create_shard, mnt_h5_fd_short (was a failed open for want of a descriptor?),
 *          mnt_rec_open_shard and mnt_rec_close_all (format 3's side of mnt_dataset_open / close). */
#ifndef MNT_DATASET_INTERNAL_H
#define MNT_DATASET_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>

#include "io/dataset.h"

/* 0, or -1 (nothing logged) */
int mnt_h5_attr_int(hid_t obj, const char *name, long long v);
int mnt_h5_attr_get_int(hid_t obj, const char *name, long long *v);
/* the float64 array attribute name of `channels` values: written from v (write = 1) or read into v */
int mnt_h5_attr_f64s(hid_t f, const char *name, double *v, int channels, int write);
int mnt_h5_attr_str(hid_t obj, const char *name, const char *v);
int mnt_h5_attr_get_str(hid_t obj, const char *name, char *out, size_t n);
/* a chunked dataset of maxdims max (NULL: dims) whose every chunk carries a Fletcher-32 checksum,
 * checked on every read; -1 on failure */
hid_t mnt_h5_checked_dataset(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims,
                             const hsize_t *max, const hsize_t *chunk);
/* a shard file created exclusively (O_EXCL: an existing file or link at path is an error); -1
 * logged, naming path (it exists, out of descriptors, the system's reason) */
hid_t mnt_h5_create_shard(const char *path, hid_t fapl);
/* after opening path failed: 1 (logged, with hint) if it was for want of a file descriptor, else 0 */
int mnt_h5_fd_short(const char *path, const char *hint);
/* format 3: shard i (file sp, HDF5 handle f, which this closes) checked against the index and its
 * tables loaded into d (d->rec_* allocated for d->total samples by the caller, shard_start and
 * shard_count set); the file then stays open as d->fds[i] for pread. MNT_EDATA naming sp. */
int mnt_rec_open_shard(mnt_dataset *d, int i, const char *sp, hid_t f);
void mnt_rec_close_all(mnt_dataset *d);

#endif
