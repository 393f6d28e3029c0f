/* cast.h — host launchers of kernels/cast.cu (C linkage, callable from C).
 * defines: mnt_cuda_cast (types as mnt_dtype: 0 fp32, 1 bf16, 2 fp16; one side must be fp32;
 *          returns 0, -1 for an unsupported pair, -2 for a launch error). A launch error (-2)
 *          stays the thread's last error for the caller to read, and clear, with
 *          cudaGetLastError(). The count of visible GPUs is backend/cuda/device.h's. */
#ifndef MNT_CAST_H
#define MNT_CAST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif
int mnt_cuda_cast(int from, int to, const void *in, void *out, size_t n, void *stream);
#ifdef __cplusplus
}
#endif

#endif
