/* train_internal.h — what the files of `mntrain train` share; not an interface outside the
 * command. cmd/train.c holds the options and the step loop, cmd/train_setup.c what comes before
 * the first step, cmd/train_outputs.c what the run writes, cmd/train_recover.c the recovery from a
 * lost rank (cmd/train_signals.h: the signals).
 * defines: opts (the command line), train_run (the run: its trainer, writer and rank 0's logs), loop
 *          (what the step loop measures); from cmd/train.c: mnt_train_evaluate,
 *          mnt_train_check_target; from cmd/train_recover.c: mnt_train_leave_pmix,
 *          mnt_train_recover_from; from cmd/train_setup.c: mnt_train_place,
 *          mnt_train_negotiate_resume, mnt_train_start_trainer, mnt_train_open_outputs; from
 *          cmd/train_outputs.c: mnt_train_config_json, mnt_train_metric, mnt_train_progress_stamp,
 *          mnt_train_checkpoint_begin, mnt_train_checkpoint_finish, mnt_train_report_preempted,
 *          mnt_train_finish_run, mnt_train_resumed_complete, mnt_train_reopen_metrics,
 *          mnt_train_losses_resumed, mnt_train_fence_writer, mnt_train_locks_held */
#ifndef MNT_TRAIN_INTERNAL_H
#define MNT_TRAIN_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/ckpt/ckpt.h"
#include "io/rundir/runlock.h"
#include "src/path.h"
#include "src/runsum.h"
#include "src/train/trainer.h"
#include "src/world.h"

/* --on-rank-loss, by value as it is spelled (mnt_train_loss_names: the one place) */
enum { MNT_LOSS_ABORT = 0, MNT_LOSS_SHRINK = 1, MNT_NLOSS };
extern const char *const mnt_train_loss_names[MNT_NLOSS];

/* the command line: the trainer's configuration (its choices typed: an MNT_OPT_ENUM writes each)
 * and the command's own options */
typedef struct opts {
  mnt_train_cfg t;
  const char *rmsprop_warmup; /* --rmsprop-warmup C:P (epochs), parsed into t */
  const char *out, *export_path, *ckpt_dir, *resume, *init;
  const char *trace_dir, *trace_steps; /* --trace DIR (or MNT_TRACE), --trace-steps A:B */
  int on_rank_loss;                    /* --on-rank-loss (or MNT_ON_RANK_LOSS): MNT_LOSS_* */
  int min_ranks;                       /* --min-ranks (0: half the ranks at the start) */
  int64_t trace_first, trace_last;     /* the steps given, or 0 0: the three after warm-up */
  int threads, log_every, force, ckpt_steps, keep, no_verify, stop_after, sample_log;
  int timestamps; /* --timestamps: progress lines start with the wall-clock time */
  double ckpt_minutes;
  double target_top1, eval_every; /* --target-top1 (-1: none), --eval-every (epochs) */
  char ckpt_buf[MNT_PATH_MAX];
  size_t stripe;
} opts;

/* the run: what every part of the command works on */
typedef struct train_run {
  opts *o;
  mnt_world *w;
  mnt_trainer *t;
  mnt_ckpt_writer *wr;    /* with checkpoints on */
  json_t *config;         /* config.json's, and every checkpoint's "config" (mnt_train_config_json) */
  FILE *metrics, *samples; /* rank 0's metrics.jsonl, this rank's --sample-log */
  char mpath[MNT_PATH_MAX]; /* OUT/metrics.jsonl */
  double ckpt_t0, last_ckpt_time, stall_sum;
  int64_t ckpt_step, ncheckpoints;
  double resumed_images; /* images of the interval in progress trained before the resume */
  int rebuilt;           /* summary.json rebuilt from metrics.jsonl (mnt_train_resumed_complete) */
  double target_time_s;  /* --target-top1: the run's wall seconds when this job reached it */
  int dirs_ok;           /* --out and --trace accepted on every rank (mnt_train_negotiate_resume): only
                          * then is anything written into them (a trace, a hang's last events) */
  /* the run's identity (runsum.h: MNT_RUN_ID_HEX hex digits), drawn when the run starts and kept in
   * its checkpoints: every job of the run writes it into config.json, each metrics.jsonl line,
   * summary.json and the trace files (mntrain report uses a run's own lines and names the rest) */
  char run_id[MNT_RUN_ID_HEX + 1];
  /* --on-rank-loss shrink */
  int shrink, min_ranks;  /* min_ranks: --min-ranks, default half the ranks at the start */
  int have_sig_thr;       /* the signal thread runs (rank 0 hands it the checkpoint writer) */
  json_t *losses;         /* summary.json's rank_losses */
  mnt_runlock **locks;    /* rank 0's locks of --out and --ckpt-dir (a new rank 0 takes them after a loss) */
  double last_step_end;   /* mnt_now() after the last step (a loss's detection is counted from it) */
} train_run;

/* What the loop measures for the progress lines and summary.json. Phases: data, forward, backward,
 * comm exposed, optimizer; ph is this interval's, ph_all every timed step's (the first `warm` steps
 * of the job are not timed). */
typedef struct loop {
  int64_t step0, todo, warm, done; /* the step resumed from; steps this job may do, warm-up, done */
  double *step_ms;                 /* each step of this job, ms */
  double ph[5], ph_all[5];
  double t_start, t_after_warmup, iv_t0; /* the job's, the timed steps' and the interval's start */
  double eval_s, eval_timed_s;           /* evaluation time, all and after warm-up */
  double last_loss, last_top1, val_top1, best_top1; /* best_top1: the run's best validation (all its jobs) */
  double elapsed0;    /* the run's wall seconds before this job (its checkpoint's) */
  double val_elapsed; /* the run's wall seconds at the last evaluation (metrics.jsonl "elapsed_s") */
  int stopped; /* stopped on request, with a checkpoint */
  int64_t eval_open;   /* the step whose evaluation is under way (-1: none): a loss in it re-runs it */
  int64_t val_written; /* rank 0: the step of the last validation line written (-1: none) */
} loop;

/* ---- cmd/train_options.c: the command line ------------------------------------------------- */

/* the defaults of every option */
void mnt_train_defaults(opts *o);
/* argv parsed into o (the option table), --help printed (*help set; quiet: ranks other than 0),
 * the options checked against each other and the defaults that follow from others filled in;
 * *ckpt_on: checkpoints wanted. A usage error (MNT_EARG, exit 2) names the flag. */
int mnt_train_options(opts *o, int argc, char **argv, int quiet, int *help, int *ckpt_on);

/* ---- cmd/train.c: the step loop's parts the recovery uses too ------------------------------ */

/* every rank (collective), --val: the validation set evaluated; rank 0's line and metrics.jsonl line
 * (once per step: rank 0 may have finished an evaluation another rank was lost in) */
int mnt_train_evaluate(train_run *r, loop *l, int64_t step, double epoch_f);
/* after an evaluation, --target-top1: reached, the step and time recorded; the run ends there */
int mnt_train_check_target(train_run *r, loop *l, int64_t step, double epoch_f);

/* ---- cmd/train_recover.c: --on-rank-loss shrink ------------------------------------------- */

/* every rank, the first step of this job done, on several ranks: every rank's control address
 * kept, then PMIx left (a rank that dies from here dies alone) */
int mnt_train_leave_pmix(train_run *r);
/* after a failure *st: a lost rank recovered from (again, if the recovery itself loses one, up to
 * 8 times); 1 when the survivors go on (*st MNT_OK), 0 otherwise (*st: the failure, MNT_EFENCED for
 * a rank left out or a group without quorum, MNT_EPREEMPT below --min-ranks) */
int mnt_train_recover_from(train_run *r, loop *l, int *st);

/* ---- cmd/train_setup.c: before the first step --------------------------------------------- */

/* every rank: its share of the node's CPUs and its compute threads (before its own threads start) */
void mnt_train_place(const opts *o, const mnt_world *w);
/* every rank: rank 0 prepares the run directories (io/rundir/rundir.h; locks[0..1]: the locks it takes)
 * and reads the checkpoint to resume into ck; *found and its state *rs on every rank, the batch per
 * rank set */
int mnt_train_negotiate_resume(train_run *r, mnt_ckpt *ck, mnt_train_state *rs, int *found, mnt_runlock **locks);
/* every rank: r->t from the checkpoint (closed) or --init, the same everywhere; r->config; r->wr */
int mnt_train_start_trainer(train_run *r, mnt_ckpt *ck, const mnt_train_state *rs, int found, int have_sig_thr);
/* every rank: rank 0's config.json and metrics.jsonl, each rank's --sample-log; agreed */
int mnt_train_open_outputs(train_run *r, int found, const mnt_train_state *rs);

/* ---- cmd/train_outputs.c: config.json, metrics.jsonl's lines, checkpoints, the run's end -- */

/* the effective configuration: config.json, and every checkpoint's "config" */
json_t *mnt_train_config_json(const opts *o, const mnt_trainer *t);
/* rank 0: one line of metrics.jsonl (line taken, NULL: the line could not be made) */
int mnt_train_metric(train_run *r, json_t *line);
/* rank 0, --timestamps: the wall-clock time that starts a progress line */
void mnt_train_progress_stamp(const opts *o);
/* every rank: the checkpoint of this step started (the previous one finished first) */
int mnt_train_checkpoint_begin(train_run *r);
/* every rank: the checkpoint in flight, if any, committed */
int mnt_train_checkpoint_finish(train_run *r);
/* every rank, after a stop request's checkpoint: rank 0 says why and where; MNT_EPREEMPT, agreed */
int mnt_train_report_preempted(train_run *r, const loop *l);
/* every rank, training done: BN statistics averaged, the timing; rank 0's summary.json and --export */
int mnt_train_finish_run(train_run *r, loop *l);
/* rank 0 after a loss that took the old rank 0: metrics.jsonl opened for appending */
int mnt_train_reopen_metrics(train_run *r);
/* rank 0 of a resumed run: the ranks lost before its checkpoint (metrics.jsonl's "rank_lost" lines,
 * kept up to the checkpoint) into r->losses, so that summary.json names every loss of the run */
int mnt_train_losses_resumed(train_run *r);
/* every rank: rank 0's checkpoint commits fenced by the run's locks (mnt_ckpt_writer_fence), with
 * the membership epoch */
void mnt_train_fence_writer(train_run *r);
/* rank 0, the lock still this run's (mnt_runlock_held on each lock it holds): MNT_OK or MNT_EFENCED */
int mnt_train_locks_held(void *run);
/* rank 0, a run resumed at its end: nothing to train; summary.json rebuilt when it is gone, --export */
int mnt_train_resumed_complete(train_run *r);

#endif
