/* cmd.h — the commands of the mntrain binary, one entry point each (main.c dispatches to them).
 * defines: mnt_train_main, mnt_convert_main, mnt_inspect_main, mnt_report_main, mnt_perfmodel_main,
 *          mnt_bench_allreduce_main, mnt_bench_step_main, mnt_bench_loader_main,
 *          mnt_bench_ckpt_main.
 * Each parses its options (argv after the command's words), initialises the world w when it
 * needs one (a collective command under srun), and returns an mnt_status, which main alone maps
 * to the exit code (log.h). MNT_EARG: bad arguments; MNT_EDATA: wrong results, corrupt data or a
 * threshold missed; MNT_EPREEMPT: train stopped with a checkpoint. */
#ifndef MNT_CMD_H
#define MNT_CMD_H

#include "src/world.h"

/* cmd/train.c: data-parallel training (the trainer is src/train/trainer.h) */
int mnt_train_main(mnt_world *w, int argc, char **argv);
/* cmd/convert.c: datasets into sharded HDF5 (io/convert/convert.h), and inspect of a dataset or checkpoint */
int mnt_convert_main(mnt_world *w, int argc, char **argv);
int mnt_inspect_main(mnt_world *w, int argc, char **argv);
/* cmd/report.c, cmd/perfmodel.c: commands that read runs rather than train; no world needed */
int mnt_report_main(mnt_world *w, int argc, char **argv);
int mnt_perfmodel_main(mnt_world *w, int argc, char **argv);
/* cmd/bench_*.c: allreduce (nccl-tests style, collective), a training step and the loader (one
 * process), checkpoint write/read MB/s next to dd conv=fsync (collective) */
int mnt_bench_allreduce_main(mnt_world *w, int argc, char **argv);
int mnt_bench_step_main(mnt_world *w, int argc, char **argv);
int mnt_bench_loader_main(mnt_world *w, int argc, char **argv);
int mnt_bench_ckpt_main(mnt_world *w, int argc, char **argv);

#endif
