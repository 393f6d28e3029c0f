/* cuda_check.h — private to the CUDA module: status checks of CUDA, cuDNN and cuBLAS calls and the
 * stream conversion, used by src/backend/cuda and src/comm/nccl (check.h's vocabulary).
 * defines: mnt_cuda_stream (mnt_stream * -> cudaStream_t, see stream.h), mnt_as_stream;
 *          MNT_CUDA_OK / MNT_CUDNN_OK / MNT_CUBLAS_OK (an expression: MNT_OK, or the call's text and
 *          the library's error string logged with MNT_ERR's file:line and a status returned),
 *          MNT_CUDA_CHECK / MNT_CUDNN_CHECK / MNT_CUBLAS_CHECK (return that status from the caller),
 *          MNT_CUDA_CHECK_GOTO / MNT_CUDNN_CHECK_GOTO / MNT_CUBLAS_CHECK_GOTO (call, st, out: store
 *          it in st and jump to out, as MNT_CHECK_GOTO),
 *          MNT_KERNEL_CHECK (a kernels/ops.h launcher, whose int is a cudaError_t),
 *          mnt_cuda_clear (a tolerated CUDA error: forget it), MNT_CUDA_WARN / MNT_CUDNN_WARN /
 *          MNT_CUBLAS_WARN (teardown: a failure logged as a warning, the rest still released).
 * The cuDNN and cuBLAS forms exist where the build has the CUDA backend (MNT_HAVE_CUDA_BACKEND):
 * the NCCL communicator and device.c, built without it too, use the CUDA ones only.
 *
 * The runtime keeps a failed call's error as the thread's "last error" until cudaGetLastError()
 * reads it, and every launcher of kernels/ checks cudaGetLastError() after its launch: an error
 * left behind fails the next, unrelated kernel. So every CUDA error is cleared where it is
 * handled: when reported (mnt_cuda_ok_at) and when tolerated (mnt_cuda_clear: a poll's
 * cudaErrorNotReady, a query that may fail, a cuDNN call refused before a fallback, whose own CUDA
 * calls may have failed), as NCCL's checks.h and PyTorch do. A sticky error (a fault that ruins
 * the context) survives the clearing and fails every later call. */
#ifndef MNT_CUDA_CHECK_H
#define MNT_CUDA_CHECK_H

#include <cuda_runtime.h>
#if MNT_HAVE_CUDA_BACKEND
#include <cublas_v2.h>
#include <cudnn.h>
#endif

#include "src/check.h"
#include "src/log.h"
#include "src/backend/stream.h"

/* a mnt_stream * is the cudaStream_t itself (stream.h) */
static inline cudaStream_t mnt_cuda_stream(mnt_stream *s) { return (cudaStream_t)(void *)s; }
static inline mnt_stream *mnt_as_stream(cudaStream_t s) { return (mnt_stream *)(void *)s; }

/* a tolerated error (or none): forgotten, e returned */
static inline cudaError_t mnt_cuda_clear(cudaError_t e) {
  if (e != cudaSuccess) (void)cudaGetLastError();
  return e;
}

static inline int mnt_cuda_ok_at(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess) return MNT_OK;
  (void)cudaGetLastError(); /* reported here, as a status: not left for the next launch */
  mnt_log_at(MNT_LOG_ERROR, file, line, "%s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
  return e == cudaErrorMemoryAllocation ? MNT_ENOMEM : MNT_ESYS;
}

#if MNT_HAVE_CUDA_BACKEND
static inline int mnt_cudnn_ok_at(cudnnStatus_t s, const char *call, const char *file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return MNT_OK;
  (void)cudaGetLastError(); /* whatever CUDA call of cuDNN's failed with it */
  char detail[512];
  detail[0] = '\0';
  cudnnGetLastErrorString(detail, sizeof detail);
  mnt_log_at(MNT_LOG_ERROR, file, line, "%s failed: %s (%d)%s%s", call, cudnnGetErrorString(s), (int)s,
             detail[0] ? ": " : "", detail);
  return s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                 s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
             ? MNT_ENOMEM
             : MNT_ESYS;
}

static inline int mnt_cublas_ok_at(cublasStatus_t s, const char *call, const char *file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return MNT_OK;
  (void)cudaGetLastError(); /* whatever CUDA call of cuBLAS's failed with it */
  mnt_log_at(MNT_LOG_ERROR, file, line, "%s failed: %s (%d)", call, cublasGetStatusString(s), (int)s);
  return s == CUBLAS_STATUS_ALLOC_FAILED ? MNT_ENOMEM : MNT_ESYS;
}
#endif

#define MNT_CUDA_OK(call) mnt_cuda_ok_at((call), #call, __FILE__, __LINE__)
#define MNT_CUDA_CHECK(call) MNT_CHECK(MNT_CUDA_OK(call))
#define MNT_CUDA_CHECK_GOTO(call, st, label) MNT_CHECK_GOTO(MNT_CUDA_OK(call), st, label)
#define MNT_KERNEL_CHECK(call) MNT_CHECK(mnt_cuda_ok_at((cudaError_t)(call), #call, __FILE__, __LINE__))
#if MNT_HAVE_CUDA_BACKEND
#define MNT_CUDNN_OK(call) mnt_cudnn_ok_at((call), #call, __FILE__, __LINE__)
#define MNT_CUBLAS_OK(call) mnt_cublas_ok_at((call), #call, __FILE__, __LINE__)
#define MNT_CUDNN_CHECK(call) MNT_CHECK(MNT_CUDNN_OK(call))
#define MNT_CUBLAS_CHECK(call) MNT_CHECK(MNT_CUBLAS_OK(call))
#define MNT_CUDNN_CHECK_GOTO(call, st, label) MNT_CHECK_GOTO(MNT_CUDNN_OK(call), st, label)
#define MNT_CUBLAS_CHECK_GOTO(call, st, label) MNT_CHECK_GOTO(MNT_CUBLAS_OK(call), st, label)
#endif

/* teardown: warn, clear, go on */
#define MNT_CUDA_WARN(call)                                                                                  \
  do {                                                                                                       \
    cudaError_t e_ = mnt_cuda_clear(call);                                                                   \
    if (e_ != cudaSuccess) MNT_WARN("%s failed: %s (%s)", #call, cudaGetErrorString(e_), cudaGetErrorName(e_)); \
  } while (0)
#if MNT_HAVE_CUDA_BACKEND
#define MNT_CUDNN_WARN(call)                                                                                 \
  do {                                                                                                       \
    cudnnStatus_t s_ = (call);                                                                               \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                                        \
      (void)cudaGetLastError();                                                                              \
      MNT_WARN("%s failed: %s (%d)", #call, cudnnGetErrorString(s_), (int)s_);                               \
    }                                                                                                        \
  } while (0)
#define MNT_CUBLAS_WARN(call)                                                                                \
  do {                                                                                                       \
    cublasStatus_t s_ = (call);                                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                       \
      (void)cudaGetLastError();                                                                              \
      MNT_WARN("%s failed: %s (%d)", #call, cublasGetStatusString(s_), (int)s_);                             \
    }                                                                                                        \
  } while (0)
#endif

#endif
