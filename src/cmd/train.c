/* cmd/train.c — `mntrain train`: the command line and the step loop around the trainer
 * (src/train/trainer.h); what comes before the first step is in cmd/train_setup.c, what the run
 * writes in cmd/train_outputs.c, the signals in cmd/train_signals.c (train_internal.h).
 * Rank 0 prints progress and writes OUT/config.json, OUT/metrics.jsonl and OUT/summary.json (keys
 * as README "Runs and their outputs"). With checkpoints on (any --ckpt-* flag, --resume or --stop-after):
 *  - every K steps / M minutes, and at the end, a collective checkpoint (io/ckpt/ckpt.h), asynchronous:
 *    the loop is held up only while each rank copies its share of the state;
 *  - SIGUSR1 and SIGTERM are taken by a thread of their own (cmd/train_signals.h: on rank 0 it
 *    commits the checkpoint in flight at once). The stop request rides a small allreduce at every
 *    step boundary (signals reach the ranks at different times), so every rank stops after the
 *    same step, writes a checkpoint synchronously and returns MNT_EPREEMPT (exit 3).
 *    A step is not cut short between layers: the ranks could agree on it only through a collective
 *    (the gradient buckets), by which time the forward pass has moved the BN statistics and the
 *    loader has handed out the step's samples; undoing that would save at most one step;
 *  - a run started again with the same command resumes from the newest valid checkpoint, on any
 *    number of ranks that divides the global batch, and appends to its metrics.jsonl.
 * --out and --ckpt-dir must be the user's own (src/safefs.h) and are locked by rank 0 for the run
 * (io/rundir/runlock.h) before anything in them is read or deleted; a run starts over only when it
 * provably never committed a checkpoint (io/rundir/rundir.h).
 * mnt_train_main: parse_options, validate, then mnt_train_place, mnt_train_negotiate_resume (every
 * rank: the checkpoint and the batch per rank), mnt_train_start_trainer, mnt_train_open_outputs
 * (cmd/train_setup.c), then train_loop (a step: record_step, control, log_interval, evaluate,
 * checkpoints; the end: mnt_train_report_preempted, mnt_train_finish_run or
 * mnt_train_resumed_complete, cmd/train_outputs.c). */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/args.h"
#include "io/ckpt/ckpt.h"
#include "src/comm/comm.h"
#include "src/jsonio.h"
#include "src/check.h"
#include "src/log.h"
#include "src/progress.h"
#include "io/rundir/runlock.h"
#include "src/cmd/cmd.h"
#include "src/cmd/train_internal.h"
#include "src/cmd/train_signals.h"
#include "src/train/trainer.h"
#include "src/env.h"
#include "src/trace.h"

/* ---- a step's parts: its record, the ranks' control, the progress line, evaluation -------- */

/* a step done: its phase times, and the samples it trained on (--sample-log) */
static void record_step(train_run *r, loop *l, const mnt_step_out *so, int64_t step) {
  mnt_trainer *t = r->t;
  l->done++;
  double step_s = 0;
  for (int k = 0; k < 5; k++) {
    l->ph[k] += so->phase[k];
    if (l->done > l->warm) l->ph_all[k] += so->phase[k];
    step_s += so->phase[k];
  }
  l->step_ms[l->done - 1] = step_s * 1e3;
  if (l->done == l->warm) l->t_after_warmup = mnt_now();
  if (l->done == l->warm) t->comm_span = 0;
  if (r->samples) { /* the global samples this rank trained on */
    fprintf(r->samples, "%lld", (long long)step);
    for (int i = 0; i < t->last->n; i++) fprintf(r->samples, " %lld", (long long)t->last->ids[i]);
    fputc('\n', r->samples);
  }
}

/* every rank, after each step with checkpoints on: one allreduce of a stop request on any rank, this
 * rank's checkpoint share written and rank 0's clock; the checkpoint in flight is committed once
 * every share is written. *stop, *due_time: what the ranks agreed */
static int control(train_run *r, int *stop, int *due_time) {
  opts *o = r->o;
  mnt_world *w = r->w;
  float ctl[3] = {mnt_train_stop_signal() ? 1.0f : 0.0f,
                  mnt_ckpt_local_done(r->wr) ? 1.0f : 0.0f,
                  w->rank == 0 && o->ckpt_minutes > 0 && mnt_now() - r->last_ckpt_time >= o->ckpt_minutes * 60
                      ? 1.0f : 0.0f};
  mnt_trace_push("control", 0);
  int st = mnt_allreduce(r->t->c, ctl, 3, MNT_FP32, MNT_SUM);
  mnt_trace_pop();
  if (st != MNT_OK) return st;
  *stop = ctl[0] > 0;
  *due_time = ctl[2] > 0;
  if (mnt_ckpt_pending(r->wr) && (int)ctl[1] == w->size) return mnt_train_checkpoint_finish(r);
  return MNT_OK;
}

/* every rank (collective): the interval's loss and throughput; rank 0's progress line and
 * metrics.jsonl line */
static int log_interval(train_run *r, loop *l, int64_t step, double epoch_f) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  double images;
  mnt_trace_push("log", step);
  int st = mnt_trainer_interval(t, &l->last_loss, &l->last_top1, &images);
  mnt_trace_pop();
  if (st != MNT_OK) return st;
  double now = mnt_now(), ips = (images - r->resumed_images) / (now - l->iv_t0);
  r->resumed_images = 0;
  double eta = (now - l->t_start - l->eval_s) / l->done * (double)(t->total - step);
  double lr = mnt_lr_at(&t->opt, (double)(step - 1) / t->per_epoch), ms = 1e3 / images * t->s.global_batch;
  if (r->w->rank == 0 && images > 0) {
    mnt_train_progress_stamp(o);
    printf("epoch %.2f step %lld/%lld loss %.4f top1 %.3f lr %.4g %.1f img/s ETA %.0f s\n", epoch_f,
           (long long)step, (long long)t->total, l->last_loss, l->last_top1, lr, ips, eta);
    fflush(stdout);
  } else if (r->w->rank == 0) { /* --skip-nonfinite skipped them all: no loss to show */
    mnt_train_progress_stamp(o);
    printf("epoch %.2f step %lld/%lld: every step since the last line was skipped (non-finite; %lld in all) lr %.4g "
           "ETA %.0f s\n", epoch_f, (long long)step, (long long)t->total, (long long)t->s.skipped, lr, eta);
    fflush(stdout);
  }
  double *ph = l->ph;
  st = mnt_train_metric(r, json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:{s:o, s:o, s:o, s:o, s:o}}", "step",
                                     (json_int_t)step, "epoch", mnt_json_num(epoch_f), "loss",
                                     mnt_json_num(l->last_loss), "top1", mnt_json_num(l->last_top1), "lr",
                                     mnt_json_num(lr), "img_per_s", mnt_json_num(ips), "ms", "data",
                                     mnt_json_num(ph[0] * ms), "forward", mnt_json_num(ph[1] * ms), "backward",
                                     mnt_json_num(ph[2] * ms), "comm_exposed", mnt_json_num(ph[3] * ms), "optimizer",
                                     mnt_json_num(ph[4] * ms)));
  if (st) return st;
  memset(l->ph, 0, sizeof l->ph);
  l->iv_t0 = mnt_now();
  return MNT_OK;
}

/* every rank (collective), --val: the validation set evaluated; rank 0's line and metrics.jsonl
 * line. Evaluation is not training: its time is kept out of the throughput */
static int evaluate(train_run *r, loop *l, int64_t step, double epoch_f) {
  mnt_trainer *t = r->t;
  double vl, v1, v5, te = mnt_now();
  mnt_trace_push("evaluate", step);
  l->eval_open = step; /* a rank lost in it: the survivors run it again (recover) */
  int st = mnt_trainer_evaluate(t, &vl, &v1, &v5);
  mnt_trace_pop();
  if (st != MNT_OK) return st;
  l->eval_open = -1;
  l->val_top1 = v1;
  if (!(l->best_top1 >= v1)) l->best_top1 = v1;
  if (v1 > t->s.best_top1) t->s.best_top1 = v1; /* the run's, kept in its checkpoints */
  if (r->w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("epoch %.2f validation: loss %.4f top1 %.4f top5 %.4f (%lld samples)\n", epoch_f, vl, v1, v5,
           (long long)t->val.total);
    fflush(stdout);
  }
  /* elapsed_s: the run's wall time at this point, over all its jobs (the learning curve against time) */
  l->val_elapsed = l->elapsed0 + mnt_now() - l->t_start;
  /* rank 0 may have finished an evaluation that another rank was lost in: its line once */
  if (l->val_written != step)
    st =
        mnt_train_metric(r, json_pack("{s:I, s:o, s:o, s:o, s:o, s:o}", "step", (json_int_t)step, "epoch",
                                      mnt_json_num(epoch_f), "val_loss", mnt_json_num(vl), "val_top1", mnt_json_num(v1),
                                      "val_top5", mnt_json_num(v5), "elapsed_s", mnt_json_num(l->val_elapsed)));
  if (st) return st;
  l->val_written = step;
  double dt = mnt_now() - te;
  l->eval_s += dt;
  if (l->done > l->warm) l->eval_timed_s += dt;
  l->iv_t0 += dt; /* the interval in progress leaves the evaluation out, whenever it fell in it */
  return MNT_OK;
}

/* after an evaluation, --target-top1: reached (the same on every rank: the value is the
 * allreduce's), the step, epoch and the run's wall time recorded; the run ends here */
static int check_target(train_run *r, loop *l, int64_t step, double epoch_f) {
  mnt_trainer *t = r->t;
  if (!(r->o->target_top1 > 0) || !(l->val_top1 >= r->o->target_top1)) return MNT_OK;
  t->s.target_step = step;
  r->target_time_s = l->val_elapsed; /* the evaluation's line says the same */
  if (r->w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("mntrain train: target top-1 %.4f reached at step %lld (epoch %.2f) after %.1f s: the run ends here\n",
           r->o->target_top1, (long long)step, epoch_f, r->target_time_s);
    fflush(stdout);
  }
  return mnt_train_metric(r, json_pack("{s:I, s:o, s:o, s:o}", "step", (json_int_t)step, "epoch",
                                       mnt_json_num(epoch_f), "target_top1", mnt_json_num(r->o->target_top1),
                                       "target_time_s", mnt_json_num(r->target_time_s)));
}

/* an evaluation after this step: every --eval-every epochs (fractions allowed) and at the end */
static int eval_point(const mnt_trainer *t, double every, int64_t step) {
  if (step == t->total) return 1;
  double per = every * (double)t->per_epoch; /* steps between evaluations */
  return floor((double)step / per + 1e-9) > floor((double)(step - 1) / per + 1e-9);
}

/* ---- the step loop ------------------------------------------------------------------------ */

/* every rank, after this job's first step: where the set-up went (the slowest rank's phases, a
 * PMIx exchange), printed by rank 0 */
static int report_setup(train_run *r) {
  mnt_world_phase(r->w, MNT_PHASE_FIRST_STEP);
  char line[512];
  MNT_CHECK(mnt_world_phases(r->w, line, sizeof line));
  if (r->w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("mntrain train: set-up (slowest rank): %s\n", line);
    fflush(stdout);
  }
  return MNT_OK;
}

/* every rank, the first step of this job done, --on-rank-loss shrink on several ranks: every rank's
 * control address kept (from the PMIx records of the set-up), then PMIx left: from here a rank that
 * dies dies alone, and the survivors find out through the communicator (comm.h, mnt_comm_shrink) */
static int leave_pmix(train_run *r) {
  mnt_world *w = r->w;
  int st = mnt_comm_enable_shrink(r->t->c);
  MNT_CHECK(mnt_world_agree(w, st));
  MNT_CHECK(mnt_world_leave(w, mnt_comm_agree, r->t->c));
  if (w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("mntrain train: --on-rank-loss shrink: the ranks left PMIx; a lost rank leaves the others going on "
           "(at least %d ranks, --min-ranks)\n", r->min_ranks);
    fflush(stdout);
  }
  return MNT_OK;
}

/* every rank: one step of the loop, its checkpoint, log line and evaluation where due. *brk: the loop
 * ends (stopped with a checkpoint, the target reached, or a failure) */
static int one_step(train_run *r, loop *l, int *brk) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  int st, ckpt_on = o->ckpt_dir != NULL;
  mnt_step_out so;
  *brk = 1;
  MNT_CHECK(mnt_trainer_step(t, &so));
  r->last_step_end = mnt_now();
  int64_t step = t->s.step; /* steps done, this one included */
  if (step == l->step0 + 1) {
    MNT_CHECK(report_setup(r));
    if (r->shrink && r->w->size > 1) MNT_CHECK(leave_pmix(r));
  }
  record_step(r, l, &so, step);
  t->s.elapsed_s = l->elapsed0 + mnt_now() - l->t_start; /* what a checkpoint of this step records */
  int stop = 0, due_time = 0;
  if (ckpt_on) MNT_CHECK(control(r, &stop, &due_time));
  int end_epoch = step % t->per_epoch == 0, eval_now = t->have_val && eval_point(t, o->eval_every, step);
  double epoch_f = (double)step / t->per_epoch;
  if (step % o->log_every == 0 || step == t->total || end_epoch) MNT_CHECK(log_interval(r, l, step, epoch_f));
  if (ckpt_on && o->stop_after && l->done >= o->stop_after) stop = 1;
  if (stop && step < t->total) { /* every rank knows: a checkpoint now (before any evaluation: a
                                  * preempted job has seconds; the resumed one does it), synchronously, then out */
    t->s.eval_due = eval_now;
    if ((st = mnt_train_checkpoint_begin(r)) == MNT_OK && (st = mnt_train_checkpoint_finish(r)) == MNT_OK)
      l->stopped = 1;
    return st;
  }
  if (eval_now) {
    MNT_CHECK(evaluate(r, l, step, epoch_f));
    MNT_CHECK(check_target(r, l, step, epoch_f));
  }
  if (t->s.target_step) return MNT_OK; /* the finished run's checkpoint and summary follow */
  if (ckpt_on && step < t->total && ((o->ckpt_steps && step % o->ckpt_steps == 0) || due_time))
    MNT_CHECK(mnt_train_checkpoint_begin(r));
  *brk = 0;
  return MNT_OK;
}

/* every surviving rank, a collective having failed on a lost rank: the survivors agree on who is
 * gone and rebuild the communicator (mnt_comm_shrink), take the most advanced survivor's state and
 * split the global batch among themselves (mnt_trainer_regroup), and commit a checkpoint at once.
 * Below --min-ranks, or when a rank's larger share does not fit, that checkpoint ends the job with
 * exit 3 (MNT_EPREEMPT): the template requeues it at full size. MNT_EFENCED: this rank was left out. */
static int recover(train_run *r, loop *l) {
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  double t_detect = mnt_now();
  int size0 = w->size, job0 = w->job_of[0]; /* the membership before: its size and its rank 0 */
  int64_t step0 = t->s.step;
  mnt_trace_push("recovery", step0);
  int64_t last_ckpt = mnt_ckpt_last_step(r->wr);
  if (r->wr) { /* the checkpoint in flight is abandoned: its commit needed every rank's share */
    if (r->have_sig_thr) mnt_train_signal_writer(NULL);
    mnt_ckpt_writer_destroy(r->wr);
    r->wr = NULL;
  }
  mnt_rank_loss lost[64];
  int nlost = 0;
  int st = mnt_comm_shrink(t->c, t->s.step, lost, 64, &nlost), shrunk = st == MNT_OK;
  double t_agreed = mnt_now(), t_regrouped = t_agreed;
  char why[300] = "";
  int policy = 0; /* 1: a checkpoint and exit 3 */
  if (st == MNT_OK) {
    st = mnt_trainer_regroup(t, why, sizeof why);
    t_regrouped = mnt_now();
    if (st == MNT_ENOMEM && why[0]) policy = 1, st = MNT_OK;
  }
  char quorum[200] = "";
  int rerun = 0;    /* the evaluation of this step, cut short by the loss */
  if (st == MNT_OK) /* mnt_comm_shrink let this group go on: the rule that did, for the log */
    mnt_comm_quorum(size0, w->size, w->job_of[0] == job0, quorum, sizeof quorum);
  if (st == MNT_OK && w->size < r->min_ranks) {
    snprintf(why, sizeof why, "%d ranks left, fewer than --min-ranks %d", w->size, r->min_ranks);
    policy = 1;
  }
  if (st == MNT_OK) { /* an evaluation a survivor was in when the rank was lost: run again below */
    float in_eval = l->eval_open == t->s.step ? 1.0f : 0.0f;
    st = mnt_allreduce(t->c, &in_eval, 1, MNT_FP32, MNT_SUM);
    rerun = st == MNT_OK && in_eval > 0 && t->have_val;
    t->s.eval_due = rerun && policy; /* the checkpoint that stops the job records it: the resumed job runs it */
  }
  if (st == MNT_OK && w->rank == 0 && r->locks) { /* the run's locks carry the new membership epoch */
    const char *dirs[2] = {r->o->out, r->o->ckpt_dir}, *what[2] = {"--out", "--ckpt-dir"};
    for (int i = 0; i < 2 && st == MNT_OK; i++) {
      if (r->locks[i]) st = mnt_runlock_set_epoch(r->locks[i], w->epoch);
      else if (dirs[i]) /* rank 0 was lost: its locks are this rank's (this group has the quorum) */
        st = mnt_runlock_take_epoch(dirs[i], what[i], w->jobid, w->epoch, &r->locks[i]);
    }
  }
  if (st == MNT_OK && w->rank == 0 && !r->metrics) st = mnt_train_reopen_metrics(r); /* rank 0 was lost */
  if (shrunk) st = mnt_world_agree(w, st); /* the new rank 0's locks: known to all before anything is written */
  if (st == MNT_OK && r->o->ckpt_dir)      /* the root is in use: nothing in it set aside or removed */
    st = mnt_ckpt_writer_rejoin(t->c, r->o->ckpt_dir, r->o->stripe, r->o->keep, last_ckpt, &r->wr);
  if (st == MNT_OK) mnt_train_fence_writer(r);
  if (st == MNT_OK && w->rank == 0 && r->have_sig_thr) mnt_train_signal_writer(r->wr);
  double t_ready = mnt_now();
  if (st == MNT_OK && r->wr) { /* at once: what the survivors have is safe before they go on */
    st = mnt_train_checkpoint_begin(r);
    if (st == MNT_OK) st = mnt_train_checkpoint_finish(r);
  }
  mnt_trace_pop();
  if (st != MNT_OK) return st;
  double det = t_detect - r->last_step_end, rec = mnt_now() - t_detect; /* to the next step: checkpoint included */
  char names[400] = "";
  json_t *lost_json = json_array(); /* metrics.jsonl's "lost": what a resumed job's summary.json keeps */
  for (int i = 0; i < nlost; i++) {
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%srank %d on %s", i ? ", " : "", lost[i].job_rank, lost[i].node);
    json_array_append_new(r->losses, json_pack("{s:I, s:i, s:s, s:o, s:o}", "step", (json_int_t)step0, "rank",
                                               lost[i].job_rank, "node", lost[i].node, "detected_after_s",
                                               mnt_json_num(det), "recovered_after_s", mnt_json_num(rec)));
    json_array_append_new(lost_json, json_pack("{s:i, s:s, s:I}", "rank", lost[i].job_rank, "node", lost[i].node,
                                               "step", (json_int_t)step0));
  }
  int per = (int)(t->s.global_batch / w->size);
  char share[48];
  if (t->s.global_batch % w->size) snprintf(share, sizeof share, "%d or %d", per, per + 1);
  else snprintf(share, sizeof share, "%d", per);
  if (w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf(
        "mntrain train: lost %s in step %lld: %d of %d ranks left%s%lld (global batch %lld, %s images per rank; "
        "detected %.1f s after the last step ended, recovered in %.1f s; checkpoint %s; %s)\n",
        names, (long long)step0 + 1, w->size, size0, policy ? ", state of step " : ", going on from step ",
        (long long)t->s.step + !policy, (long long)t->s.global_batch, share, det, rec,
        r->wr ? "committed" : "off: no --ckpt-dir", quorum);
    fflush(stdout);
  }
  /* the recovery's parts: agreement and rebuild, the state and the new split, the checkpoint */
  st = mnt_train_metric(r, json_pack("{s:I, s:s, s:o, s:i, s:i, s:s, s:o, s:o, s:{s:o, s:o, s:o}}", "step",
                                     (json_int_t)t->s.step, "rank_lost", names, "lost", lost_json, "ranks", w->size,
                                     "ranks_before", size0, "quorum", quorum, "detected_after_s", mnt_json_num(det),
                                     "recovered_after_s", mnt_json_num(rec), "recovery_s", "agree",
                                     mnt_json_num(t_agreed - t_detect), "regroup", mnt_json_num(t_regrouped - t_agreed),
                                     "checkpoint", mnt_json_num(mnt_now() - t_ready)));
  if (st != MNT_OK) return st;
  r->last_step_end = mnt_now();
  l->iv_t0 = mnt_now();
  /* the evaluation the loss cut short, run again by the survivors (the same weights: the same
   * figures, and --target-top1's time counts it where it was due); a job that stops below
   * --min-ranks leaves it to the resumed one when its checkpoint records it */
  if (rerun && !(policy && mnt_ckpt_last_step(r->wr) == t->s.step && last_ckpt != t->s.step)) {
    double epoch_f = (double)t->s.step / t->per_epoch;
    if (w->rank == 0) {
      mnt_train_progress_stamp(r->o);
      printf("mntrain train: the evaluation after step %lld was cut short by the loss: run again\n",
             (long long)t->s.step);
      fflush(stdout);
    }
    t->s.eval_due = 0;
    MNT_CHECK(evaluate(r, l, t->s.step, epoch_f));
    MNT_CHECK(check_target(r, l, t->s.step, epoch_f));
  }
  if (!policy) return MNT_OK;
  if (w->rank == 0) {
    printf("mntrain train: %s: stopping after the checkpoint of step %lld (exit 3); the template requeues the job at "
           "full size and it resumes there\n", why, (long long)t->s.step);
    fflush(stdout);
  }
  l->stopped = 1;
  /* the template's sign (srun's own status reports the lost task): stopped with a checkpoint, to requeue */
  st = mnt_train_metric(r, json_pack("{s:I, s:s, s:b}", "step", (json_int_t)t->s.step, "stopped", why, "requeue", 1));
  if (st != MNT_OK) return st;
  return mnt_world_agree(w, MNT_EPREEMPT);
}

/* after a failure *st: a lost rank under --on-rank-loss shrink is recovered from (again, if the
 * recovery itself loses one, up to 8 times); 1 when the survivors go on (*st MNT_OK), 0 otherwise */
static int recover_from(train_run *r, loop *l, int *st) {
  if (*st == MNT_OK || !r->shrink || !r->w->left || !mnt_comm_lost(*st)) return 0;
  for (int tries = 0; tries < 8; tries++) {
    *st = recover(r, l);
    if (*st == MNT_OK || !mnt_comm_lost(*st)) break;
  }
  return *st == MNT_OK && !l->stopped;
}

/* every rank: this job's steps, with a checkpoint where due and at the end; then the run's end:
 * stopped (MNT_EPREEMPT), finished (summary.json), or resumed already complete */
static int train_loop(train_run *r) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  loop l = {.step0 = t->s.step,
            .todo = t->s.target_step ? 0 : t->total - t->s.step,
            .last_loss = NAN,
            .last_top1 = NAN,
            .val_top1 = NAN,
            .best_top1 = t->s.best_top1 > 0 ? t->s.best_top1 : NAN,
            .elapsed0 = t->s.elapsed_s,
            .eval_open = -1,
            .val_written = -1};
  if (l.todo < 0) { /* mnt_rundir_same_run found the run's steps the checkpoint's, and state_ok
                     * (cmd/train_setup.c) its step within them */
    MNT_ERR("resumed at step %lld of a run of %lld steps", (long long)t->s.step, (long long)t->total);
    return MNT_EDATA;
  }
  if (o->stop_after && o->stop_after < l.todo) l.todo = o->stop_after;
  if (!(l.step_ms = calloc((size_t)l.todo + 1, sizeof *l.step_ms))) return MNT_ENOMEM;
  int st = MNT_OK, ckpt_on = o->ckpt_dir != NULL;
  l.t_start = mnt_now();
  l.iv_t0 = mnt_now();
  l.warm = l.todo > 20 ? 5 : l.todo > 4 ? 1 : 0;
  if (mnt_trace_on()) { /* the window: --trace-steps, or the three steps after this job's warm-up */
    int64_t a = o->trace_first ? o->trace_first : l.step0 + l.warm + 1, b = o->trace_first ? o->trace_last : a + 2;
    int64_t end = l.step0 + l.todo; /* this job's last step */
    mnt_trace_init(w->rank, a, b);
    if (w->rank == 0 && (a > end || b <= l.step0))
      MNT_WARN("--trace-steps %lld:%lld: this job trains steps %lld to %lld, none of them in the window: its trace "
               "will hold no step (the set-up and the end only)", (long long)a, (long long)b, (long long)l.step0 + 1,
               (long long)end);
    else if (w->rank == 0 && (b > end || a <= l.step0))
      MNT_WARN("--trace-steps %lld:%lld: this job trains steps %lld to %lld: steps %lld to %lld are traced",
               (long long)a, (long long)b, (long long)l.step0 + 1, (long long)end,
               (long long)(a > l.step0 ? a : l.step0 + 1), (long long)(b < end ? b : end));
  }
  r->last_ckpt_time = mnt_now();
  t->comm_span = 0;
  mnt_world_phase(w, MNT_PHASE_PREP); /* model, data, the start's sync and the outputs */
  if (t->s.eval_due && t->have_val && l.todo > 0) { /* the validation the stop left out */
    st = evaluate(r, &l, t->s.step, (double)t->s.step / t->per_epoch);
    if (st == MNT_OK) st = check_target(r, &l, t->s.step, (double)t->s.step / t->per_epoch);
    if (st == MNT_OK && t->s.target_step) l.todo = 0;
  }
  t->s.eval_due = 0;
  while (t->s.step < t->total && l.todo > 0 && !t->s.target_step && st == MNT_OK) {
    int brk = 0;
    st = one_step(r, &l, &brk);
    if (recover_from(r, &l, &st)) continue; /* a rank lost: the survivors go on */
    if (brk) break;
  }
  int fin = st == MNT_OK && !l.stopped && l.done > 0;
  while (fin) { /* the finished run's checkpoint and summary: a loss in them is recovered from too */
    st = mnt_trainer_bn_final(t); /* --bn-eval recompute: what the run keeps */
    if (ckpt_on && st == MNT_OK) st = mnt_train_checkpoint_begin(r);
    if (ckpt_on && st == MNT_OK) st = mnt_train_checkpoint_finish(r);
    if (st == MNT_OK) st = mnt_train_finish_run(r, &l);
    if (!recover_from(r, &l, &st) || l.stopped) break;
  }
  if (st == MNT_OK && l.stopped) {
    st = mnt_train_report_preempted(r, &l);
  } else if (st == MNT_OK && !fin && w->rank == 0) { /* nothing trained: a run resumed at its end */
    st = mnt_train_resumed_complete(r);
  }
  free(l.step_ms);
  return st;
}

/* ---- the command -------------------------------------------------------------------------- */

/* the command line into *o (which holds the defaults); --help printed (rank 0) */
static int parse_options(opts *o, int argc, char **argv, int quiet, int *help) {
  mnt_train_cfg *c = &o->t;
  char optim_help[2200]; /* from the optimizers' table (train/optim.h) */
  snprintf(optim_help, sizeof optim_help, "%s (default %s)", mnt_optim_help(), mnt_optim_name(MNT_OPTIM_SGD));
  const mnt_opt table[] = {
      {"data", 0, MNT_OPT_PATH, &c->data, "DIR", "training set (mntrain convert), required", 0, 0},
      {"val", 0, MNT_OPT_PATH, &c->val, "DIR", "validation set, evaluated every --eval-every epochs and at the end", 0,
       0},
      {"eval-every", 0, MNT_OPT_DOUBLE, &o->eval_every, "E",
       "epochs between evaluations of --val, fractions allowed "
       "(default 1)",
       MNT_RANGE(1e-6, 1e6)},
      {"target-top1", 0, MNT_OPT_DOUBLE, &o->target_top1, "X",
       "stop when validation top-1 reaches X (a fraction: 0.759), recording the step, epoch and wall time "
       "(MLPerf's time to accuracy) in metrics.jsonl and summary.json; needs --val; a run keeps its target",
       MNT_RANGE(0, 1)},
      {"arch", 0, MNT_OPT_STRING, &c->arch, "A", "resnet8|20|18|34|50|101 (default resnet50)", 0, 0},
      {"size", 0, MNT_OPT_INT, &c->size, "S", "training crop in pixels (default 224)", MNT_RANGE(1, 4096)},
      {"batch-per-rank", 0, MNT_OPT_INT, &c->batch, "B",
       "images per rank per step (default 32; on resume: the checkpoint's global batch / ranks)",
       MNT_RANGE(1, 1 << 20)},
      {"epochs", 0, MNT_OPT_INT, &c->epochs, "E", "epochs to train (default 1 unless --steps)", MNT_RANGE(0, 1e6)},
      {"steps", 0, MNT_OPT_INT, &c->steps, "N", "steps to train instead of whole epochs", MNT_RANGE(0, 2e9)},
      {"lr", 0, MNT_OPT_DOUBLE, &c->lr, "LR", "learning rate per 256 images (linear scaling; default 0.1)",
       MNT_RANGE(0, 1000)},
      {"warmup-epochs", 0, MNT_OPT_DOUBLE, &c->warmup_epochs, "W", "linear warm-up (default 0)", MNT_RANGE(0, 1e6)},
      {"schedule", 0, MNT_OPT_CHOICE, &o->schedule, "step|cosine|poly|slow-start",
       "decay after warm-up: x0.1 at 1/3, 2/3, 8/9 of the run; cosine to 0; poly: (1-t)^2 to 0; slow-start (Akiba et "
       "al. "
       "2017): 0.5 of the peak to 40/90 of the run, then 0.075, 0.01 and 0.001 of it at 70/90 and 85/90 (default step)",
       0, 0},
      {"optimizer", 0, MNT_OPT_CHOICE, &o->optimizer, mnt_optim_choices(), optim_help, 0, 0},
      {"lars-eta", 0, MNT_OPT_DOUBLE, &c->lars_eta, "ETA", "LARS trust coefficient (default 0.001)",
       MNT_RANGE(1e-9, 1)},
      {"rmsprop-warmup", 0, MNT_OPT_STRING, &o->rmsprop_warmup, "C:P",
       "rmsprop-warmup's blend in epochs: SGD's weight exp(2(e-C)/P)/2 before epoch C, then 1/2 + (e-C)/P up to 1 "
       "(default: 10:5 of 90 epochs, Akiba et al. 2017, as fractions of the run)",
       0, 0},
      {"rmsprop-lr", 0, MNT_OPT_DOUBLE, &c->rms_lr, "LR",
       "rmsprop-warmup: the RMSprop term's rate, (1 - SGD's weight) x LR per unit of normalised gradient, not "
       "scaled with the batch; momentum makes its step about 1/(1 - momentum) times that (default 1e-4)",
       MNT_RANGE(0, 10)},
      {"momentum", 0, MNT_OPT_DOUBLE, &c->momentum, "M", "SGD momentum (default 0.9)", MNT_RANGE(0, 1)},
      {"wd", 0, MNT_OPT_DOUBLE, &c->wd, "WD", "weight decay (default 1e-4)", MNT_RANGE(0, 1)},
      {"no-bn-decay", 0, MNT_OPT_FLAG, &c->no_bn_decay, NULL, "no weight decay on BN parameters and biases", 0, 0},
      {"zero-init-residual", 0, MNT_OPT_FLAG, &c->zero_init, NULL, "zero the last BN of each residual branch", 0, 0},
      {"min-crop", 0, MNT_OPT_DOUBLE, &c->min_scale, "F", "RandomResizedCrop's smallest area (default 0.08)",
       MNT_RANGE(0.01, 1)},
      {"pad-crop", 0, MNT_OPT_INT, &c->pad_crop, "P", "RandomCrop(size, padding=P) + flip instead (small images)",
       MNT_RANGE(0, 4095)},
      {"val-crop", 0, MNT_OPT_DOUBLE, &c->val_crop, "F", "validation centre crop, fraction of the side (default 0.875)",
       MNT_RANGE(0.05, 1)},
      {"label-smoothing", 0, MNT_OPT_DOUBLE, &c->smoothing, "E", "train against (1-E) onehot + E/classes (default 0)",
       MNT_RANGE(0, 0.999)},
      {"bn-eval", 0, MNT_OPT_CHOICE, &o->bn_eval, "running|last|recompute",
       "BN statistics for evaluation, checkpoints and --export: running averages (momentum 0.1); the last training "
       "batch's (Akiba et al. 2017); or recomputed from the current weights over the batches of the last "
       "--bn-recompute-batches steps before each evaluation and at the end (\"precise BN\"); averaged over ranks "
       "(default running)",
       0, 0},
      {"bn-recompute-batches", 0, MNT_OPT_INT, &c->bn_batches, "N",
       "--bn-eval recompute: training batches per rank (default 16)", MNT_RANGE(1, 1 << 20)},
      {"device", 0, MNT_OPT_CHOICE, &o->device, "cpu|cuda|auto",
       "where to compute: cpu (oneDNN) or cuda (cuDNN, one GPU per rank by local rank); auto: cuda with --comm nccl, "
       "else cpu",
       0, 0},
      {"precision", 0, MNT_OPT_CHOICE, &o->precision, "fp32|bf16|auto",
       "activations and the inputs of convolutions and the fully connected layer (weights, momentum, BN statistics, "
       "the loss and the gradients stay fp32); auto: bf16 on GPUs (Ampere and newer) and on CPUs with bf16 "
       "instructions, else fp32 (default fp32; "
       "README: Precision)",
       0, 0},
      {"cuda-graph", 0, MNT_OPT_CHOICE, &o->cuda_graph, "on|off",
       "on: every step after the first runs from its forward to its update as one graph: with --device cuda captured "
       "once per upload lane as a CUDA graph (kernels, cuDNN, cuBLAS and NCCL's collectives; needs --comm nccl) and "
       "replayed, the host waiting once per step; with --device cpu run as a graph would hold it, its rules checked "
       "(the same results as off; default off)",
       0, 0},
      {"comm", 0, MNT_OPT_CHOICE, &c->comm, "auto|cpu|nccl", "communicator (default auto: nccl with --device cuda)", 0,
       0},
      {"topology", 0, MNT_OPT_STRING, &o->topology, "flat|hier", "allreduce topology (default flat)", 0, 0},
      {"grad-dtype", 0, MNT_OPT_STRING, &o->grad_dtype, "fp32|bf16|fp16",
       "allreduce precision (default fp32; bf16 halves the bytes, but its partial sums are rounded at every ring step: "
       "~1.3% off at 128 ranks, see benchmarks/README.md)",
       0, 0},
      {"bucket-mb", 0, MNT_OPT_DOUBLE, &c->bucket_mb, "M", "allreduce bucket size in MB (default 25)",
       MNT_RANGE(0.001, 1e6)},
      {"threads", 0, MNT_OPT_INT, &o->threads, "T",
       "compute threads per rank (default: OMP_NUM_THREADS, else the rank's share of the node's CPUs: MNT_CPU_BIND)",
       MNT_RANGE(0, 4096)},
      {"loader-threads", 0, MNT_OPT_INT, &c->loader_threads, "T", "prefetch threads per rank (default 2)",
       MNT_RANGE(1, 256)},
      {"seed", 0, MNT_OPT_INT, &c->seed, "S", "seed of weights, data order and augmentation (default 1)", MNT_ANY_INT},
      {"out", 0, MNT_OPT_PATH, &o->out, "DIR", "output directory (default mntrain-out); must not hold an earlier run",
       0, 0},
      {"force", 0, MNT_OPT_FLAG, &o->force, NULL,
       "start over: replace an earlier run's outputs in --out and its checkpoints in --ckpt-dir", 0, 0},
      {"log-every", 0, MNT_OPT_INT, &o->log_every, "N", "progress and metrics every N steps (default 10)",
       MNT_RANGE(1, 2e9)},
      {"timestamps", 0, MNT_OPT_FLAG, &o->timestamps, NULL,
       "start each progress line (steps, validation, checkpoints) with the UTC time, as metrics.jsonl's \"time\"", 0,
       0},
      {"skip-nonfinite", 0, MNT_OPT_FLAG, &c->skip_nonfinite, NULL, "skip a step with NaN/Inf gradients", 0, 0},
      {"bn-batch", 0, MNT_OPT_INT, &c->bn_batch, "N",
       "batch-norm statistics over groups of N images (default: the batch per rank; on resume the checkpoint's)",
       MNT_RANGE(0, 1 << 20)},
      {"export", 0, MNT_OPT_PATH, &o->export_path, "FILE.h5", "write the final weights (torchvision names) to HDF5", 0,
       0},
      {"init", 0, MNT_OPT_PATH, &o->init, "FILE.h5",
       "start from these weights (an --export file or a checkpoint's state.h5; checked by name and shape)", 0, 0},
      {"ckpt-dir", 0, MNT_OPT_PATH, &o->ckpt_dir, "DIR",
       "checkpoints (step-NNNNNNNN/state.h5 + MANIFEST.json) on a shared filesystem (default OUT/ckpt when any "
       "checkpoint flag is given)",
       0, 0},
      {"ckpt-every-steps", 0, MNT_OPT_INT, &o->ckpt_steps, "K", "a checkpoint every K steps (and at the end)",
       MNT_RANGE(0, 2e9)},
      {"ckpt-every-minutes", 0, MNT_OPT_DOUBLE, &o->ckpt_minutes, "M", "a checkpoint every M minutes (rank 0's clock)",
       MNT_RANGE(0, 1e7)},
      {"keep", 0, MNT_OPT_INT, &o->keep, "N", "checkpoints kept, newest first (default 2)", MNT_RANGE(1, 1e6)},
      {"resume", 0, MNT_OPT_PATH, &o->resume, "auto|PATH|none",
       "auto: the newest valid checkpoint in --ckpt-dir, else a fresh start (default with checkpoints); PATH: that "
       "checkpoint; none: never (default without)",
       0, 0},
      {"ckpt-stripe", 0, MNT_OPT_SIZE2, &o->stripe, "BYTES",
       "alignment and share granularity of checkpoint writes, a power of two (default 1M: a parallel filesystem's "
       "stripe)",
       MNT_RANGE(4096, 1ull << 30)},
      {"no-ckpt-verify", 0, MNT_OPT_FLAG, &o->no_verify, NULL, "resume without checking the checkpoint's checksums", 0,
       0},
      {"stop-after", 0, MNT_OPT_INT, &o->stop_after, "N",
       "stop after N steps of this job with a checkpoint, as if preempted (exit 3)", MNT_RANGE(0, 2e9)},
      {"sample-log", 0, MNT_OPT_FLAG, &o->sample_log, NULL,
       "each rank writes the global sample ids of every step to OUT/samples-rank-RRRRR.txt (audits)", 0, 0},
      {"on-rank-loss", 0, MNT_OPT_CHOICE, &o->on_rank_loss, "abort|shrink",
       "when a rank dies or stops answering (MNT_COMM_TIMEOUT): abort takes the job down (the template requeues it "
       "and it resumes from its last checkpoint); shrink: the survivors agree on who is gone, split the same global "
       "batch among themselves, commit a checkpoint and go on (with nccl: not yet run on a GPU; default: "
       "MNT_ON_RANK_LOSS, else abort)",
       0, 0},
      {"min-ranks", 0, MNT_OPT_INT, &o->min_ranks, "N",
       "with shrink: fewer ranks left than N end the job with a checkpoint and exit 3, for a requeue at full size "
       "(default: half the ranks at the start)",
       MNT_RANGE(1, 1 << 24)},
      {"trace", 0, MNT_OPT_PATH, &o->trace_dir, "DIR",
       "each rank writes the timeline of --trace-steps (every thread's spans: the step's phases, the gradient "
       "buckets, the loader, the communicator) to DIR/trace-rank-RRRRR.json, at the end, at a stop and on a "
       "failure; mntrain report --trace DIR merges them (default: MNT_TRACE)",
       0, 0},
      {"trace-steps", 0, MNT_OPT_STRING, &o->trace_steps, "A:B",
       "the steps --trace records, as the progress lines number them (default: the three after warm-up)", 0, 0},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  int st = mnt_parse_opts("train", table, argc, argv, help, quiet);
  if (st) return st;
  if (*help && !quiet)
    mnt_print_help(stdout, "srun --mpi=pmix mntrain train --data DIR [--val DIR] --arch A --size S --batch-per-rank B ...",
                   "Data-parallel training over all ranks of the job (one process per CPU socket or GPU).\n"
                   "Writes OUT/config.json at the start, OUT/metrics.jsonl while it trains and OUT/summary.json\n"
                   "when it ends; an --out that holds an earlier run is refused unless --force or resumed.\n"
                   "--out and --ckpt-dir must be your own (not writable by others), and hold one run at a time\n"
                   "(DIR/mntrain.lock: a second job on them is refused, naming the first).\n"
                   "Checkpoints (any --ckpt-* flag): written by all ranks into one HDF5 file, committed by a\n"
                   "manifest; SIGUSR1/SIGTERM commit the checkpoint in flight at once, then stop every rank after\n"
                   "the same step with a checkpoint (exit 3), and the same command line resumes the run, on any\n"
                   "rank count that divides the global batch.",
                   table);
  return MNT_OK;
}

/* the options checked against each other (a usage error, quiet on ranks other than 0), and the
 * defaults that follow from others filled in. *ckpt_on: checkpoints wanted */
static int validate(opts *o, int quiet, int *ckpt_on) {
  mnt_train_cfg *c = &o->t;
  const char *bad = NULL;
  *ckpt_on = o->ckpt_dir || o->ckpt_steps || o->ckpt_minutes > 0 || o->stop_after || (o->resume && strcmp(o->resume, "none"));
  if (!c->data) bad = "--data DIR is required";
  else if (!mnt_resnet_known(c->arch))
    return mnt_usage_error("train", "--arch: one of %s, not '%s'", mnt_resnet_arch_names(), c->arch);
  else if (mnt_dtype_parse(o->grad_dtype, &c->grad_dtype)) bad = "--grad-dtype: fp32, bf16 or fp16";
  else if (mnt_topology_parse(o->topology, &c->topology)) bad = "--topology: flat or hier";
  else if (mnt_sched_parse(o->schedule, &c->schedule) || mnt_optim_parse(o->optimizer, &c->optimizer) ||
           mnt_precision_parse(o->precision, &c->precision) || mnt_bn_eval_parse(o->bn_eval, &c->bn_eval))
    bad = "--schedule, --optimizer, --precision or --bn-eval: not a choice of --help's"; /* the option parser checked them */
  else if (c->pad_crop >= c->size) bad = "--pad-crop must be smaller than --size";
  else if (c->bn_batch && c->batch && c->batch % c->bn_batch) bad = "--bn-batch must divide --batch-per-rank";
  else if (o->target_top1 == 0) bad = "--target-top1: a fraction above 0 and at most 1 (0.759): every evaluation reaches 0";
  else if (o->target_top1 > 0 && !c->val) bad = "--target-top1 needs --val DIR (the set it is measured on)";
  else if (o->force && o->resume && strcmp(o->resume, "none"))
    bad = "--force starts the run over: it cannot be combined with --resume auto|PATH";
  c->cuda_graph = !strcmp(o->cuda_graph, "on"); /* the option parser checked on|off */
  if (!o->trace_dir && mnt_env_trace() && mnt_env_trace()[0]) o->trace_dir = mnt_env_trace();
  if (!o->on_rank_loss) o->on_rank_loss = mnt_env_on_rank_loss() ? mnt_env_on_rank_loss() : "abort";
  if (!bad && strcasecmp(o->on_rank_loss, "abort") && strcasecmp(o->on_rank_loss, "shrink"))
    bad = "--on-rank-loss (or MNT_ON_RANK_LOSS): abort or shrink";
  if (!bad && o->min_ranks && strcasecmp(o->on_rank_loss, "shrink")) bad = "--min-ranks goes with --on-rank-loss shrink";
  if (!bad && o->rmsprop_warmup) {
    double a = -1, b = -1;
    char tail = 0;
    if (sscanf(o->rmsprop_warmup, "%lf:%lf%c", &a, &b, &tail) != 2 || !(a >= 0) || !(b > 0) || a > 1e6 || b > 1e6)
      bad = "--rmsprop-warmup: C:P in epochs, C >= 0 and P > 0 (10:5 is the paper's for 90 epochs)";
    else
      c->rms_center = a, c->rms_period = b;
  }
  if (!bad && o->rmsprop_warmup && c->optimizer != MNT_OPTIM_RMSPROP_WARMUP)
    bad = "--rmsprop-warmup goes with --optimizer rmsprop-warmup";
  if (!bad && c->bn_batches && c->bn_eval != MNT_BN_EVAL_RECOMPUTE)
    bad = "--bn-recompute-batches goes with --bn-eval recompute";
  if (!bad && o->trace_steps) {
    long long a = 0, b = 0;
    char tail = 0;
    if (sscanf(o->trace_steps, "%lld:%lld%c", &a, &b, &tail) != 2 || a < 1 || b < a)
      bad = "--trace-steps: A:B, the first and the last step traced (1 <= A <= B)";
    else if (b - a >= 10000)
      bad = "--trace-steps: at most 10000 steps (a trace is for a window, not a run)";
    else
      o->trace_first = a, o->trace_last = b;
    if (!bad && !o->trace_dir) bad = "--trace-steps needs --trace DIR (or MNT_TRACE)";
  }
  if (bad) return mnt_usage_error("train", "%s (see mntrain train --help)", bad);
  /* the paths config.json and the checkpoints record: JSON text is UTF-8 */
  const struct { const char *flag, *v; } paths[] = {{"--data", c->data},       {"--val", c->val},
                                                    {"--out", o->out},         {"--ckpt-dir", o->ckpt_dir},
                                                    {"--export", o->export_path}, {"--init", o->init},
                                                    {"--resume", o->resume},   {"--trace", o->trace_dir}};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    json_t *j = paths[i].v ? json_string(paths[i].v) : NULL;
    json_decref(j);
    if (paths[i].v && !j)
      return mnt_usage_error("train", "%s: the path is not UTF-8 (config.json, which records it, is JSON text): "
                             "rename it, or reach it through a link whose name is UTF-8", paths[i].flag);
  }
  c->device = o->device;
  if (!o->resume) o->resume = *ckpt_on && !o->force ? "auto" : "none";
  if (*ckpt_on && !o->ckpt_dir) {
    snprintf(o->ckpt_buf, sizeof o->ckpt_buf, "%s/ckpt", o->out);
    o->ckpt_dir = o->ckpt_buf;
  }
  if (!c->epochs && !c->steps) c->epochs = 1;
  if (c->bn_eval == MNT_BN_EVAL_RECOMPUTE && !c->bn_batches) c->bn_batches = 16;
  return MNT_OK;
}

int mnt_train_main(mnt_world *w, int argc, char **argv) {
  opts o = {.t = {.arch = "resnet50",
                  .lars_eta = 0.001,
                  .rms_center = -1,
                  .rms_period = -1,
                  .rms_lr = 1e-4,
                  .bn_batches = 0,
                  .comm = "auto",
                  .size = 224,
                  .batch = 0,
                  .epochs = 0,
                  .steps = 0,
                  .seed = 1,
                  .lr = 0.1,
                  .warmup_epochs = 0,
                  .bucket_mb = 25,
                  .momentum = 0.9,
                  .wd = 1e-4,
                  .min_scale = 0.08,
                  .val_crop = 0.875,
                  .loader_threads = 2},
            .schedule = "step",
            .optimizer = "sgd",
            .bn_eval = "running",
            .cuda_graph = "off",
            .topology = "flat",
            .grad_dtype = "fp32",
            .precision = "fp32",
            .device = "auto",
            .out = "mntrain-out",
            .log_every = 10,
            .keep = 2,
            .stripe = 1 << 20,
            .eval_every = 1,
            .target_top1 = -1 /* none (0 given is refused) */};
  int help = 0, ckpt_on = 0;
  int quiet = mnt_opts_quiet();
  int st = parse_options(&o, argc, argv, quiet, &help);
  if (st || help) return st;
  MNT_CHECK(validate(&o, quiet, &ckpt_on));
  if (o.threads > 0) omp_set_num_threads(o.threads);
  int have_sig_thr = mnt_train_signals_start(ckpt_on);
  mnt_trace_thread("main"); /* its last events go to --trace or --out once they are accepted (train_setup.c) */
  mnt_runlock *locks[2] = {NULL, NULL}; /* rank 0: --out's and --ckpt-dir's */
  train_run r = {.o = &o, .w = w, .ckpt_step = -1, .have_sig_thr = have_sig_thr, .losses = json_array(), .locks = locks};
  mnt_ckpt ck = {0};
  int found = 0;
  mnt_train_state rs = {0};
  MNT_CHECK_GOTO(mnt_world_init(w), st, out);
  r.shrink = !strcasecmp(o.on_rank_loss, "shrink");
  r.min_ranks = o.min_ranks ? o.min_ranks : (w->size + 1) / 2;
  mnt_train_place(&o, w); /* before this rank's own threads start: they inherit its CPUs */
  /* --trace: on before the trainer (it measures the clocks against rank 0's); the window is set in
   * the loop, where the warm-up is known */
  if (o.trace_dir) mnt_trace_init(w->rank, o.trace_first ? o.trace_first : INT64_MAX,
                                  o.trace_first ? o.trace_last : INT64_MAX);
  else mnt_trace_init(w->rank, 1, 0); /* the rings alone: a hang's last events name this rank */
  snprintf(r.mpath, sizeof r.mpath, "%s/metrics.jsonl", o.out);
  MNT_CHECK_GOTO(mnt_train_negotiate_resume(&r, &ck, &rs, &found, locks), st, out);
  MNT_CHECK_GOTO(mnt_train_start_trainer(&r, &ck, &rs, found, have_sig_thr), st, out);
  mnt_train_fence_writer(&r);
  MNT_CHECK_GOTO(mnt_train_open_outputs(&r, found, &rs), st, out);
  if (found) MNT_CHECK_GOTO(mnt_train_losses_resumed(&r), st, out);
  st = train_loop(&r);
out:
  /* fenced (left out, or a group without quorum): the group that went on owns the run; this rank
   * writes nothing more (no trace, no lock released: it is taken over) */
  if (st == MNT_EFENCED) r.dirs_ok = 0;
  if (o.trace_dir && r.dirs_ok) { /* at the end, at a stop and on a failure, into a directory accepted */
    mnt_trace_id tid = {.node = w->node_name ? w->node_name[w->node_of[w->rank]] : w->hostname,
                        .job = w->nspace,
                        .run_id = r.run_id,
                        .size = w->size,
                        .job_size = w->job_size,
                        .membership_epoch = w->epoch,
                        .ended = st == MNT_OK         ? "finished"
                                 : st == MNT_EPREEMPT ? "stopped"
                                                      : "failed"};
    int ts = mnt_trace_write(o.trace_dir, &tid);
    if (ts == MNT_OK && w->rank == 0)
      printf("mntrain train: timeline of steps in %s (mntrain report --trace %s merges the ranks)\n", o.trace_dir,
             o.trace_dir);
    if (st == MNT_OK && ts != MNT_OK && ts != MNT_EPREEMPT) st = ts;
  }
  if (r.metrics && fclose(r.metrics) != 0 && st == MNT_OK) {
    st = MNT_SYSERR("%s: cannot write", r.mpath);
  }
  if (r.samples && fclose(r.samples) != 0 && st == MNT_OK) st = MNT_ESYS;
  mnt_ckpt_close(&ck);
  mnt_train_signal_writer(NULL); /* waits for a commit on a stop request in progress */
  mnt_ckpt_writer_destroy(r.wr);
  for (int i = 1; i >= 0; i--) {
    if (st == MNT_EFENCED) mnt_runlock_abandon(locks[i]);
    else mnt_runlock_release(locks[i]);
  }
  json_decref(r.config);
  json_decref(r.losses);
  mnt_trainer_destroy(r.t);
  mnt_train_signals_stop();
  return st;
}
