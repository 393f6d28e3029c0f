/* export.h — model tensors to HDF5 under torchvision's names (readable by h5py, loadable into a
 * torchvision state_dict). defines: mnt_h5_put_f32 (one float32 dataset, intermediate groups
 * created), mnt_export_h5 (/model/<name> for every parameter, /bn/<name> for BN statistics;
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

#endif
