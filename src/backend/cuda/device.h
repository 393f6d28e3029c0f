/* device.h — which GPU this process runs on: the one place that counts the GPUs a process sees and
 * makes one of them current, for the CUDA backend (backend_cuda.c), the NCCL communicator
 * (comm/nccl/comm_nccl.c) and the module's table (cuda_module_entry.c: device_count). Built into
 * the CUDA module (lib/mntrain/mntrain-cuda.so) whatever else it holds; not in the executable.
 * defines: mnt_cuda_device_count (the GPUs this process sees: 0 without a GPU or driver, and no
 *          CUDA error left behind), mnt_cuda_device_count_why (the same, and why it could not count:
 *          the runtime's reason, e.g. a driver older than the runtime),
 *          mnt_cuda_select_device (a rank's GPU: its PMIx local rank modulo the GPUs it sees, made
 *          current; MNT_EARG naming CUDA_VISIBLE_DEVICES when it sees none),
 *          mnt_cuda_use_device (the backend's: the device asked for, or the current one).
 *
 * The GPUs counted are those CUDA_VISIBLE_DEVICES leaves, so that Slurm's --gpus-per-task (one
 * GPU seen, device 0), --gpus-per-node (all of the node's, one per local rank) and no binding at all
 * all work. A count that fails (no driver) leaves no CUDA error behind: a CPU fallback may follow,
 * and an error left as the thread's last one would fail the next kernel launched. */
#ifndef MNT_CUDA_DEVICE_H
#define MNT_CUDA_DEVICE_H

#include <stddef.h>

#include "src/world.h"

int mnt_cuda_device_count(void);
/* the count; why (len bytes, may be NULL): "" when the GPUs were counted (0 or more), else the
 * runtime's error ("cudaGetDeviceCount: CUDA driver version is insufficient ...") */
int mnt_cuda_device_count_why(char *why, size_t len);
/* cudaSetDevice(w->local_rank % the GPUs seen) into *device; rank 0 of a node warns when more
 * ranks than GPUs share it (NCCL refuses two ranks on one GPU). */
int mnt_cuda_select_device(const mnt_world *w, int *device);
/* asked >= 0: that device (MNT_EARG when this process does not see it), made current; asked < 0:
 * the current one (the communicator's choice, or 0). Its index into *device; MNT_EARG when no GPU
 * is visible. */
int mnt_cuda_use_device(int asked, int *device);

#endif
