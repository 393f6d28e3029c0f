/* device.c — which GPU this process runs on (see device.h): the count of visible GPUs, a rank's
 * GPU for the NCCL communicator, and the CUDA backend's device. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "src/backend/cuda/device.h"
#include "src/backend/cuda/cuda_check.h"
#include "src/check.h"
#include "src/log.h"

/* The GPUs this process sees into *n (0 when they cannot be counted); the runtime's error, cleared
 * (leave no error behind: a CPU fallback may follow). */
static cudaError_t count_devices(int *n) {
  *n = 0;
  cudaError_t e = mnt_cuda_clear(cudaGetDeviceCount(n));
  if (e != cudaSuccess) *n = 0;
  return e;
}

int mnt_cuda_device_count(void) { return mnt_cuda_device_count_why(NULL, 0); }

int mnt_cuda_device_count_why(char *why, size_t len) {
  int n = 0;
  cudaError_t e = count_devices(&n);
  if (why && len) {
    if (e != cudaSuccess) /* e.g. a driver older than this runtime: say so, not "no GPU" */
      snprintf(why, len, "cudaGetDeviceCount: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    else
      why[0] = '\0';
  }
  return n;
}

int mnt_cuda_select_device(const mnt_world *w, int *device) {
  int n = 0;
  cudaError_t e = count_devices(&n);
  if (e != cudaSuccess || n == 0) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    MNT_ERR("no GPU visible to rank %d (%s%s%s): ask Slurm for one per task (--gpus-per-task=1 or --gpus-per-node)",
            w->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", vis ? ", CUDA_VISIBLE_DEVICES=" : "",
            vis ? vis : "");
    return MNT_EARG;
  }
  *device = w->local_rank % n;
  if (w->local_size > n && w->local_rank == 0)
    MNT_WARN("%d ranks on node %s share %d GPU%s (NCCL does not support two ranks on one GPU)", w->local_size,
             w->hostname, n, n == 1 ? "" : "s");
  MNT_CUDA_CHECK(cudaSetDevice(*device));
  return MNT_OK;
}

int mnt_cuda_use_device(int asked, int *device) {
  int count = 0;
  cudaError_t e = count_devices(&count);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (e != cudaSuccess || count <= 0) {
    MNT_ERR("no CUDA device visible to this process (CUDA_VISIBLE_DEVICES=%s): %s", vis ? vis : "<unset>",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return MNT_EARG;
  }
  if (asked < 0) {
    MNT_CUDA_CHECK(cudaGetDevice(device));
    return MNT_OK;
  }
  if (asked >= count) {
    MNT_ERR("CUDA device %d asked for, but this process sees %d (CUDA_VISIBLE_DEVICES=%s)", asked, count,
            vis ? vis : "<unset>");
    return MNT_EARG;
  }
  MNT_CUDA_CHECK(cudaSetDevice(asked));
  *device = asked;
  return MNT_OK;
}
