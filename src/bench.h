/* bench.h — benchmarks behind `mntrain bench ...`.
 * defines: mnt_bench_allreduce (nccl-tests style table), mnt_bench_step (training-step
 *          throughput), mnt_bench_loader (images per second of the loader), mnt_bench_ckpt
 *          (checkpoint MB/s).
 * Each is a command (see main.c): it parses its options, initialises the world if it needs one,
 * and returns an mnt_status (MNT_EDATA for wrong results or a threshold missed, MNT_EARG for bad
 * arguments), which main maps to the exit code. */
#ifndef MNT_BENCH_H
#define MNT_BENCH_H

#include "world.h"

int mnt_bench_allreduce(mnt_world *w, int argc, char **argv);
/* one process, no world */
int mnt_bench_step(mnt_world *w, int argc, char **argv);
int mnt_bench_loader(mnt_world *w, int argc, char **argv);
/* collective (srun): checkpoint write / read MB/s next to dd conv=fsync */
int mnt_bench_ckpt(mnt_world *w, int argc, char **argv);

#endif
