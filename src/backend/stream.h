/* stream.h — mnt_stream: an ordered queue of device work, shared by the compute backend and the
 * communicator. It is opaque and never allocated by itself: on the CUDA backend a mnt_stream *
 * is the cudaStream_t (mnt_cuda_stream() in backend/cuda/cuda_check.h converts it back); NULL
 * means "the caller's default": synchronous host work on the CPU backend, the communicator's own
 * stream on NCCL. Typed so that a stream cannot be confused with a data pointer. */
#ifndef MNT_STREAM_H
#define MNT_STREAM_H

typedef struct mnt_stream mnt_stream;

#endif
