/* trace.h — a timeline of this rank: the spans of every thread (the step's phases, the gradient
 * buckets' allreduces, the loader's batches, the communicator's work and its sleeps) on this
 * process's clock, for `mntrain train --trace DIR` and for explaining a hang.
 * defines: mnt_trace_init, mnt_trace_thread, mnt_trace_push / mnt_trace_pop (a span on the calling
 *          thread, nested), mnt_trace_span (a span with its own times on a named track),
 *          mnt_trace_step, mnt_trace_now, mnt_trace_on, mnt_trace_set_offset, mnt_trace_write,
 *          mnt_trace_activity, mnt_trace_dump_last, mnt_trace_id, MNT_TRACE_FILE_FMT, MNT_TRACE_VERSION.
 *
 * Two records, one cost. Every span goes into its thread's ring of the last 256 (always: a hung
 * job says what each thread did last, even without --trace) and, while the step counter is in the
 * window [first, last] that --trace-steps sets, into the thread's trace, which is written at the
 * end of the job, at a stop and on a failure (mnt_trace_write): bounded by the window, never by the
 * job's length. A span costs two clock reads and a few stores (about 60 ns); names are string
 * literals (kept as pointers), args are one integer (step, bucket, batch, bytes).
 *
 * Clock: CLOCK_MONOTONIC in ns. Ranks on other nodes have other clocks; mnt_trace_set_offset
 * records what to add to this rank's times to get rank 0's (measured by the trainer at set-up),
 * and the file carries it: `mntrain report --trace DIR` merges the ranks on rank 0's clock.
 * In builds with CUDA every span of a thread is also an NVTX range while --trace is on, so
 * `nsys profile` shows the same names. Thread-safe: each thread writes its own buffers. */
#ifndef MNT_TRACE_H
#define MNT_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* each rank's file in the trace directory */
#define MNT_TRACE_FILE_FMT "trace-rank-%05d.json"

/* Turn the window on: spans of steps first..last (inclusive; step numbers as the progress lines
 * count them: the step in progress is the steps done + 1). first > last: no window (the rings only). */
void mnt_trace_init(int rank, int64_t first, int64_t last);
/* 1 when a window is set (--trace) */
int mnt_trace_on(void);
/* name the calling thread's track ("main", "loader 1", "comm"); a thread that never names itself
 * is "thread N" */
void mnt_trace_thread(const char *name);
/* the step the main thread starts now (spans recorded from now on belong to it) */
void mnt_trace_step(int64_t step);
/* ns on CLOCK_MONOTONIC */
uint64_t mnt_trace_now(void);
/* open a span on the calling thread (at most 16 open at once; deeper ones are not recorded) and
 * close the innermost one */
void mnt_trace_push(const char *name, int64_t arg);
void mnt_trace_pop(void);
/* a span with its own times on the track `track` (created on first use: "buckets"), for work whose
 * start and end are seen at different places */
void mnt_trace_span(const char *track, const char *name, uint64_t t0, uint64_t t1, int64_t arg);
/* ns to add to this rank's times to get rank 0's, and the uncertainty of that measurement */
void mnt_trace_set_offset(int64_t offset_ns, int64_t err_ns);
/* who wrote a trace file: what `mntrain report --trace` checks before it merges ranks */
typedef struct mnt_trace_id {
  const char *node;   /* this rank's node */
  const char *job;    /* the job step: PMIx's namespace (slurm.pmix.JOB.STEP), unique per launch */
  const char *run_id; /* the training run (config.json's run_id), kept across its jobs */
  const char *ended;  /* how this rank's job ended: "finished", "stopped" (a checkpoint and exit 3) or
                       * "failed": a failed rank's timeline ends where it failed */
  int size;           /* ranks in the job when the file is written (fewer than job_size after a shrink) */
  int job_size;       /* ranks the job started with, which the file's rank and name count (a rank keeps
                       * its rank of the job's start across shrinks); 0: size */
  int membership_epoch; /* shrinks applied (train --on-rank-loss shrink) when the file is written; 0: none */
} mnt_trace_id;
/* the version of the file's layout (its "version") */
#define MNT_TRACE_VERSION 2
/* DIR/trace-rank-RRRRR.json (RRRRR: the rank of the job's start): this rank's window and who wrote it
 * ("size", "job_size", "membership_epoch"), how its job ended and at which
 * step ("last_step"), and the step at which the span cap was hit ("truncated_at_step", -1: never). Written through the safe writer
 * (src/tmpfile.h: a new file under a name nobody can guess, renamed into place), into a directory the
 * caller has accepted (train: src/safefs.h). MNT_OK, or an error naming the file. Safe to
 * call more than once (the last call wins). */
int mnt_trace_write(const char *dir, const mnt_trace_id *id);
/* what the main thread is doing now, for a hang's message: "step 12: backward > bucket 3" ("" when
 * nothing is open) */
void mnt_trace_activity(char *out, size_t n);
/* DIR/last-events-rank-RRRRR.txt: every thread's open spans and its last events, newest last, with
 * why it was written; at most once every 5 s (a chain of stall warnings writes it once). dir NULL:
 * the directory set by mnt_trace_set_dump_dir, if any. Returns 1 when written. */
int mnt_trace_dump_last(const char *dir, const char *why);
/* where mnt_trace_dump_last writes when called without a directory (train: --trace DIR or --out, once
 * the run has accepted it: nothing is written into a directory that was refused); NULL: nowhere */
void mnt_trace_set_dump_dir(const char *dir);

#endif
