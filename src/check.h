/* check.h — the one error vocabulary of src/ and io/: how a failure is passed up.
 * defines: MNT_CHECK, MNT_CHECK_GOTO, MNT_SYSERR, MNT_SYSCHECK, MNT_SYSCHECK_GOTO.
 *
 * A macro's suffix says its control flow, as in NCCL's checks.h (NCCLCHECK returns, NCCLCHECKGOTO
 * jumps):
 *   MNT_CHECK(call)                        a failing status is returned from the caller
 *   MNT_CHECK_GOTO(call, st, out)          a failing status is stored in st, control jumps to out
 *   MNT_SYSERR(fmt, ...)                   an expression: logs "fmt: strerror(errno)" at error
 *                                          level (Slurm's PMIXP_ERROR_STD), keeps errno, and is
 *                                          MNT_ENOMEM for ENOMEM, MNT_ESYS otherwise
 *   MNT_SYSCHECK(call, fmt, ...)           call < 0 (errno set): MNT_SYSERR, then return its status
 *   MNT_SYSCHECK_GOTO(call, st, out, fmt, ...)   the same, stored in st and jumping to out
 * The libraries' wrappers are built on these and named the same way: MNT_DNNL_CHECK[_GOTO]
 * (backend/cpu), MNT_CUDA_CHECK[_GOTO], MNT_CUDNN_CHECK[_GOTO], MNT_CUBLAS_CHECK[_GOTO], MNT_KERNEL_CHECK
 * (backend/cuda/cuda_check.h, also used by comm/nccl), MNT_NCCL_CHECK_GOTO (comm/nccl). Their
 * _OK forms are expressions (MNT_OK or a logged failure's status); their _WARN forms log a
 * teardown failure as a warning and go on.
 *
 * The clean-up label of a function is called `out` wherever it has one: it releases what the
 * function holds and returns st, whether reached by falling through or by a _GOTO.
 *
 * Every failure passed up leaves a breadcrumb "-> STATUS at file:line": at debug level as it
 * happens (MNT_LOG_LEVEL=debug shows the way up), and in this thread's trail, which starts again
 * at each error logged (the origin). main prints the trail whenever a command fails:
 *   mntrain: rank 3 on node1: error path: io/ckpt/ckpt_write.c:210 -> io/ckpt/ckpt_write.c:388
 *            -> src/cmd/train_outputs.c:116 -> main (system error) */
#ifndef MNT_CHECK_H
#define MNT_CHECK_H

#include <stdio.h>

#include "src/log.h"

/* (mnt_trail_add, mnt_trail_print and mnt_syserr_at, which these macros call, are the logger's:
 * log.h) */

#define MNT_SYSERR(...) mnt_syserr_at(__FILE__, __LINE__, __VA_ARGS__)

#define MNT_CHECK(call)                             \
  do {                                              \
    int mnt_rc_ = (call);                           \
    if (mnt_rc_ != MNT_OK) {                        \
      mnt_trail_add(mnt_rc_, __FILE__, __LINE__);   \
      return mnt_rc_;                               \
    }                                               \
  } while (0)

#define MNT_CHECK_GOTO(call, st, label)             \
  do {                                              \
    int mnt_rc_ = (call);                           \
    if (mnt_rc_ != MNT_OK) {                        \
      mnt_trail_add(mnt_rc_, __FILE__, __LINE__);   \
      (st) = mnt_rc_;                               \
      goto label;                                   \
    }                                               \
  } while (0)

#define MNT_SYSCHECK(call, ...)                     \
  do {                                              \
    if ((call) < 0) return MNT_SYSERR(__VA_ARGS__); \
  } while (0)

#define MNT_SYSCHECK_GOTO(call, st, label, ...)     \
  do {                                              \
    if ((call) < 0) {                               \
      (st) = MNT_SYSERR(__VA_ARGS__);               \
      goto label;                                   \
    }                                               \
  } while (0)

#endif
