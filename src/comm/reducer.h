/* reducer.h — the bucketed gradient allreduce that overlaps backward (the trainer's reducer).
 * defines: mnt_reducer, mnt_reducer_create / ready / finish / join / first_start / destroy.
 * Backward reports each final range of the gradient slab (mnt_reducer_ready, the model's
 * grad_ready hook), in decreasing offsets; ranges are gathered into buckets of about `limit`
 * floats and each bucket's allreduce (average over ranks) starts at once, on the communicator,
 * after the compute work queued so far on the backend's stream (NCCL waits for it with an event;
 * the CPU backend's work has finished when its ops return). With a reduced-precision gradient
 * type the bucket is cast on the backend first and cast back when it completes; the collective
 * reduces in that type: each ring step adds in fp32 and rounds the partial sum back (the cpu
 * communicator, dtype.c mnt_reduce), or adds in bf16 after scaling every input by 1/N held as a
 * bf16 (NCCL's ncclAvg), N-1 roundings either way: at 128 ranks the averaged gradient is ~1.3% off
 * in relative L2, 8x the cost of bf16 itself (benchmarks/allreduce_bf16_error.py). mnt_reducer_finish
 * waits for every bucket of the step. */
#ifndef MNT_REDUCER_H
#define MNT_REDUCER_H

#include <stddef.h>

#include "src/backend/backend.h"
#include "src/comm/comm.h"

typedef struct mnt_reducer mnt_reducer;

/* g: the backend's gradient slab of n floats */
int mnt_reducer_create(mnt_comm *c, mnt_backend *be, float *g, size_t n, mnt_dtype t, size_t limit, mnt_reducer **out);
/* the hook: [off, off + n) of the slab is final */
void mnt_reducer_ready(void *reducer, size_t off, size_t n);
/* start what is left, wait for every bucket of this step; the first failure's status */
int mnt_reducer_finish(mnt_reducer *o);
/* as finish, but the backend's stream waits for the buckets, not the host (mnt_comm_join: a captured
 * step); the host learns of their failure when it settles the stream (mnt_comm_settle) */
int mnt_reducer_join(mnt_reducer *o);
/* when this step's first bucket started (mnt_now), 0 when none did */
double mnt_reducer_first_start(const mnt_reducer *o);
void mnt_reducer_destroy(mnt_reducer *o);

#endif
