/* cmd/train.c — `mntrain train`: the command and its step loop around the trainer
 * (src/train/trainer.h); the command line is in cmd/train_options.c, what comes before the first
 * step in cmd/train_setup.c, what the run writes in cmd/train_outputs.c, the recovery from a lost
 * rank in cmd/train_recover.c, the signals in cmd/train_signals.c (train_internal.h).
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
 * mnt_train_main: mnt_train_options, then mnt_train_place, mnt_train_negotiate_resume (every
 * rank: the checkpoint and the batch per rank), mnt_train_start_trainer, mnt_train_open_outputs
 * (cmd/train_setup.c), then train_loop (a step: record_step, control, log_interval, evaluate,
 * checkpoints; a lost rank: mnt_train_recover_from; the end: mnt_train_report_preempted,
 * mnt_train_finish_run or mnt_train_resumed_complete, cmd/train_outputs.c). */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int mnt_train_evaluate(train_run *r, loop *l, int64_t step, double epoch_f) {
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
int mnt_train_check_target(train_run *r, loop *l, int64_t step, double epoch_f) {
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
    if (r->shrink && r->w->size > 1) MNT_CHECK(mnt_train_leave_pmix(r));
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
    MNT_CHECK(mnt_train_evaluate(r, l, step, epoch_f));
    MNT_CHECK(mnt_train_check_target(r, l, step, epoch_f));
  }
  if (t->s.target_step) return MNT_OK; /* the finished run's checkpoint and summary follow */
  if (ckpt_on && step < t->total && ((o->ckpt_steps && step % o->ckpt_steps == 0) || due_time))
    MNT_CHECK(mnt_train_checkpoint_begin(r));
  *brk = 0;
  return MNT_OK;
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
    st = mnt_train_evaluate(r, &l, t->s.step, (double)t->s.step / t->per_epoch);
    if (st == MNT_OK) st = mnt_train_check_target(r, &l, t->s.step, (double)t->s.step / t->per_epoch);
    if (st == MNT_OK && t->s.target_step) l.todo = 0;
  }
  t->s.eval_due = 0;
  while (t->s.step < t->total && l.todo > 0 && !t->s.target_step && st == MNT_OK) {
    int brk = 0;
    st = one_step(r, &l, &brk);
    if (mnt_train_recover_from(r, &l, &st)) continue; /* a rank lost: the survivors go on */
    if (brk) break;
  }
  int fin = st == MNT_OK && !l.stopped && l.done > 0;
  while (fin) { /* the finished run's checkpoint and summary: a loss in them is recovered from too */
    st = mnt_trainer_bn_final(t); /* --bn-eval recompute: what the run keeps */
    if (ckpt_on && st == MNT_OK) st = mnt_train_checkpoint_begin(r);
    if (ckpt_on && st == MNT_OK) st = mnt_train_checkpoint_finish(r);
    if (st == MNT_OK) st = mnt_train_finish_run(r, &l);
    if (!mnt_train_recover_from(r, &l, &st) || l.stopped) break;
  }
  if (st == MNT_OK && l.stopped) {
    st = mnt_train_report_preempted(r, &l);
  } else if (st == MNT_OK && !fin && w->rank == 0) { /* nothing trained: a run resumed at its end */
    st = mnt_train_resumed_complete(r);
  }
  free(l.step_ms);
  return st;
}

int mnt_train_main(mnt_world *w, int argc, char **argv) {
  opts o;
  mnt_train_defaults(&o);
  int help = 0, ckpt_on = 0;
  int st = mnt_train_options(&o, argc, argv, mnt_opts_quiet(), &help, &ckpt_on);
  if (st || help) return st;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  int have_sig_thr = mnt_train_signals_start(ckpt_on);
  mnt_trace_thread("main"); /* its last events go to --trace or --out once they are accepted (train_setup.c) */
  mnt_runlock *locks[2] = {NULL, NULL}; /* rank 0: --out's and --ckpt-dir's */
  train_run r = {.o = &o, .w = w, .ckpt_step = -1, .have_sig_thr = have_sig_thr, .losses = json_array(), .locks = locks};
  mnt_ckpt ck = {0};
  int found = 0;
  mnt_train_state rs = {0};
  MNT_CHECK_GOTO(mnt_world_init(w), st, out);
  r.shrink = o.on_rank_loss == MNT_LOSS_SHRINK;
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
