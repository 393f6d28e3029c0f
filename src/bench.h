/* bench.h — benchmarks behind `mntrain bench ...`.
 * defines: mnt_bench_step (training-step throughput), mnt_bench_allreduce (nccl-tests style table; returns an exit status:
 *          0 correct, 1 wrong results or under --min-busbw, 2 bad arguments, or an mnt_status
 *          of a failed collective, which main turns into a job abort). */
#ifndef MNT_BENCH_H
#define MNT_BENCH_H

#include "world.h"

int mnt_bench_allreduce(mnt_world *w, int argc, char **argv);
/* `mntrain bench step`: one process, no communicator; 0, 2 (bad arguments) or an mnt_status */
int mnt_bench_step(int argc, char **argv);
/* `mntrain bench loader`: images/s of the loader; 0, 2 or an mnt_status */
int mnt_bench_loader(int argc, char **argv);

#endif
