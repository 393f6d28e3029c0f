/* export.h — model tensors to HDF5 under torchvision's names (readable by h5py, loadable into a
 * torchvision state_dict), and read back for --init. defines: mnt_h5_put_f32 (one float32 dataset,
 * intermediate groups created), mnt_import_h5 (--init's reader), mnt_export_h5 (/model/<name> for every parameter, /bn/<name> for BN statistics;
 * written as DIR/.NAME.XXXXXX and renamed when whole; whether it can be written is checked when a
 * run starts, io/rundir/rundir.h's mnt_output_probe). */
#ifndef MNT_EXPORT_H
#define MNT_EXPORT_H

#include <stdint.h>

#include "io/data/dataset.h"
#include "src/model/resnet.h"

int mnt_h5_put_f32(int64_t file, const char *path, const float *data, int ndims, const int *dims);
/* root attributes describe the model: arch, classes, image_size, mean, std (of the dataset d) */
/* w, bn: host copies of r's weights and BN statistics (mnt_trainer_host_model) */
int mnt_export_h5(const mnt_resnet *r, const float *w, const float *bn, const mnt_dataset *d, const char *path);
/* --init: r's weights and BN statistics read into the host arrays w and bn (mnt_trainer_host_model's)
 * from an export or a checkpoint's state.h5: /model/<name> and /bn/<name>, each checked by name and
 * shape and refused when it holds NaN or Inf. MNT_EARG naming the file and the dataset. */
int mnt_import_h5(const mnt_resnet *r, const char *path, float *w, float *bn);

#endif
