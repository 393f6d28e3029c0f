/* dataset_internal.h — what the dataset's own files share (io/data/dataset.c, io/data/record.c, io/data/h5check.c,
 * io/convert/shard_write.c); nothing else includes it. The public API is io/data/dataset.h.
 * defines: mnt_h5_attr_int / _get_int / _str / _get_str (scalar attributes), mnt_h5_attr_f64s, mnt_h5_checked_dataset
 *          (chunked, Fletcher-32), mnt_h5_create_shard,
 *          mnt_rec_open_shard and mnt_rec_close_all (format 3's side of mnt_dataset_open / close),
 *          mnt_h5_map and mnt_h5_open_checked (a shard's structures checked without HDF5, then each dataset
 *          opened against them: io/data/h5check.c). */
#ifndef MNT_DATASET_INTERNAL_H
#define MNT_DATASET_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>

#include "io/data/dataset.h"

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
/* A shard file's HDF5 structures as io/data/h5check.c reads them without HDF5: the superblock, the root
 * group (B-tree, symbol nodes, heap of names), every object header, every dataset's extent and layout
 * and every entry of every chunk index. mnt_h5_map_shard maps the file at sp: MNT_EDATA naming it and
 * what is wrong when a structure is not as mntrain writes it, lies beyond the end of the file or
 * overlaps another (a chunk pointer moved onto an index node or the heap), when a chunk index lists a
 * chunk twice, misses one (HDF5 reads it as zeros), gives one another size (HDF5 hands it to Fletcher-32,
 * which reads out of bounds below 4 bytes) or marks one to skip its checksum, or when a chunk
 * dimension is 0 (HDF5 divides by it in H5Dopen); MNT_ESYS when the file cannot be read. HDF5 1.10
 * trusts all of these; Fletcher-32 covers a chunk's bytes, not the index. Costs one read of each
 * structure and under a microsecond per chunk (io/data/h5check.c: 5 ms to open a shard of 10,000 images). */
typedef struct mnt_h5_map mnt_h5_map;
int mnt_h5_map_shard(const char *sp, mnt_h5_map **map);
void mnt_h5_map_free(mnt_h5_map *map);
/* dataset name of the mapped shard file f opened into *ds: first the map's view of it is held against
 * what the shard must hold (rank × dims, as the index gives them; chunked with Fletcher-32 on every
 * chunk, or contiguous and unfiltered; elements of ftype's size), then HDF5 opens it and its own view
 * is held against the map's: the exact type ftype (HDF5 would convert any other into other values),
 * the extent, the layout, the filters, and HDF5's lookup in the chunk index finding every chunk (it
 * follows the index's keys, which the map's walk does not read). MNT_EDATA naming the file, name and,
 * for a chunk, the first sample it holds. */
int mnt_h5_open_checked(const mnt_h5_map *map, hid_t f, const char *name, hid_t ftype, int rank, const hsize_t *dims,
                        int chunked, hid_t *ds);
/* format 3: shard i (file sp, HDF5 handle f, which this closes; its structures mapped in map) checked
 * against the index and its tables loaded into d (d->rec_* allocated for d->total samples by the caller,
 * shard_start and shard_count set); the file then stays open as d->fds[i] for pread. MNT_EDATA naming sp. */
int mnt_rec_open_shard(mnt_dataset *d, int i, const char *sp, hid_t f, const mnt_h5_map *map);
void mnt_rec_close_all(mnt_dataset *d);

#endif
