/* train_signals.h — the signals of `mntrain train`, taken by a thread of their own (internal to
 * src/cmd/train*.c).
 * defines: mnt_train_signals_start, mnt_train_signal_writer, mnt_train_stop_signal,
 *          mnt_train_signals_stop.
 * SIGUSR1 and SIGTERM (with checkpoints on) and SIGUSR2 are blocked in every thread but this one,
 * so no system call in the communicator or the loader sees EINTR. SIGUSR2: every thread's last
 * events on disk (trace.h), and the run goes on. SIGUSR1 or SIGTERM: a stop request. On rank 0 the
 * thread commits the checkpoint in flight at once when every share is on disk (mnt_ckpt_commit_now:
 * milliseconds, whatever the step time, so a KillWait shorter than a step keeps it); on every rank
 * it records the signal, which the step loop reads (mnt_train_stop_signal) and makes every rank's
 * at the next step boundary. */
#ifndef MNT_TRAIN_SIGNALS_H
#define MNT_TRAIN_SIGNALS_H

#include "io/ckpt/ckpt.h"

/* SIGUSR2 and, when ckpt_on, SIGUSR1 and SIGTERM blocked and the thread started. Called before PMIx
 * and every other thread exist: they all inherit the blocked signals. 1: the thread runs */
int mnt_train_signals_start(int ckpt_on);
/* rank 0's checkpoint writer while it exists, NULL when it is about to go: a stop request commits
 * the checkpoint in flight at once through it (NULL waits for a commit in progress) */
void mnt_train_signal_writer(mnt_ckpt_writer *wr);
/* the signal that asked for a stop on this rank (SIGUSR1 or SIGTERM), 0 when none has */
int mnt_train_stop_signal(void);
/* the command's end: the thread, if it runs, woken to return and joined */
void mnt_train_signals_stop(void);

#endif
