/* perfmodel_fit.h — the calibration of `mntrain model --calibrate` (cmd/perfmodel_fit.c): the
 * latency and bus bandwidth of one level (inside a node, between nodes) fitted to allreduce tables of
 * `mntrain bench allreduce` or nccl-tests' all_reduce_perf. Not an interface outside the command.
 * Each row (s bytes, t seconds over P ranks) is t = alpha * 2(P-1) + beta * 2(P-1)/P * s (the
 * second factor nccl-tests' busbw factor, mnt_busbw_factor), fitted by weighted least squares with
 * weights 1/t^2 (relative error); alpha < 0 is clamped to 0.
 * defines: mnt_calib (one level's rows and sums), mnt_calib_read, mnt_calib_fit, mnt_calib_free */
#ifndef MNT_PERFMODEL_FIT_H
#define MNT_PERFMODEL_FIT_H

typedef struct mnt_calib {
  double sw[2][2], sy[2]; /* weighted normal equations of t = alpha x0 + beta x1 */
  double x1y, x1x1;       /* for the fit with alpha = 0 */
  int rows, files;
  double ranks_min, ranks_max;
  char names[512]; /* "FILE (P ranks, N nodes), ..." of the files read */
  double *x0, *x1, *t; /* the rows, for the residual */
  int cap;
} mnt_calib;

/* one `bench allreduce` / all_reduce_perf output (the out-of-place times, or with inplace the
 * in-place ones where the table has them): its rows go to acc[0] (one node) or acc[1]; gpn, the
 * ranks per node, places a table that does not say its node count. MNT_EARG logged. */
int mnt_calib_read(const char *path, double gpn, int inplace, mnt_calib acc[2]);
/* alpha (s), beta (s/B) and the rms relative residual of one level's rows; MNT_EARG logged */
int mnt_calib_fit(const mnt_calib *a, double *alpha, double *beta, double *rms);
/* the rows of both levels */
void mnt_calib_free(mnt_calib acc[2]);

#endif
