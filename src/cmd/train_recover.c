/* cmd/train_recover.c — `mntrain train --on-rank-loss shrink`: leaving PMIx after the first step,
 * and the survivors' recovery after a lost rank (see train_internal.h). The agreement on who is gone
 * and the quorum are the communicator's (src/comm/cpu/shrink.c, comm.h mnt_comm_shrink); the new
 * split of the global batch is the trainer's (mnt_trainer_regroup); here: the order of it all, the
 * run's locks and outputs taken over by a new rank 0, the checkpoint at once, the evaluation a loss
 * cut short, and what the run says about the loss (its line, metrics.jsonl, summary.json). */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "io/ckpt/ckpt.h"
#include "io/rundir/runlock.h"
#include "src/check.h"
#include "src/cmd/train_internal.h"
#include "src/cmd/train_signals.h"
#include "src/comm/comm.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/trace.h"

/* every rank, the first step of this job done, --on-rank-loss shrink on several ranks: every rank's
 * control address kept (from the PMIx records of the set-up), then PMIx left: from here a rank that
 * dies dies alone, and the survivors find out through the communicator (comm.h, mnt_comm_shrink) */
int mnt_train_leave_pmix(train_run *r) {
  mnt_world *w = r->w;
  int st = mnt_comm_enable_shrink(r->t->c);
  MNT_CHECK(mnt_world_agree(w, st));
  MNT_CHECK(mnt_world_leave(w, mnt_comm_agree, r->t->c));
  if (w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf(
        "mntrain train: --on-rank-loss shrink: the ranks left PMIx; a lost rank leaves the others going on "
        "(at least %d ranks, --min-ranks)\n",
        r->min_ranks);
    fflush(stdout);
  }
  return MNT_OK;
}

/* what a recovery found and did, for its line, metrics.jsonl and summary.json */
typedef struct recovery {
  mnt_rank_loss lost[64];
  int nlost, size0, policy; /* policy 1: a checkpoint and exit 3 (why) */
  int64_t step0;            /* steps done when the loss was found */
  double t_detect, t_agreed, t_regrouped, t_ready;
  char why[300], quorum[200];
} recovery;

/* rank 0 of the group that went on: the run's locks carry the new membership epoch; a rank 0 new to
 * the role (rank 0 was lost) takes them over, and rank 0's metrics.jsonl */
static int take_outputs(train_run *r) {
  mnt_world *w = r->w;
  if (w->rank != 0) return MNT_OK;
  const char *dirs[2] = {r->o->out, r->o->ckpt_dir}, *what[2] = {"--out", "--ckpt-dir"};
  for (int i = 0; i < 2 && r->locks; i++) {
    if (r->locks[i]) MNT_CHECK(mnt_runlock_set_epoch(r->locks[i], w->epoch));
    else if (dirs[i]) /* this group has the quorum: a lock of an earlier epoch is taken over */
      MNT_CHECK(mnt_runlock_take_epoch(dirs[i], what[i], w->jobid, w->epoch, &r->locks[i]));
  }
  return r->metrics ? MNT_OK : mnt_train_reopen_metrics(r);
}

/* rank 0's line of the loss, its metrics.jsonl line, and summary.json's rank_losses */
static int say_loss(train_run *r, const recovery *v) {
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  double det = v->t_detect - r->last_step_end,
         rec = mnt_now() - v->t_detect; /* to the next step: checkpoint included */
  char names[400] = "";
  json_t *lost_json = json_array(); /* metrics.jsonl's "lost": what a resumed job's summary.json keeps */
  for (int i = 0; i < v->nlost; i++) {
    const mnt_rank_loss *x = &v->lost[i];
    size_t k = strlen(names);
    snprintf(names + k, sizeof names - k, "%srank %d on %s", i ? ", " : "", x->job_rank, x->node);
    json_array_append_new(r->losses, json_pack("{s:I, s:i, s:s, s:o, s:o}", "step", (json_int_t)v->step0, "rank",
                                               x->job_rank, "node", x->node, "detected_after_s", mnt_json_num(det),
                                               "recovered_after_s", mnt_json_num(rec)));
    json_array_append_new(lost_json, json_pack("{s:i, s:s, s:I}", "rank", x->job_rank, "node", x->node, "step",
                                               (json_int_t)v->step0));
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
        names, (long long)v->step0 + 1, w->size, v->size0, v->policy ? ", state of step " : ", going on from step ",
        (long long)t->s.step + !v->policy, (long long)t->s.global_batch, share, det, rec,
        r->wr ? "committed" : "off: no --ckpt-dir", v->quorum);
    fflush(stdout);
  }
  /* the recovery's parts: agreement and rebuild, the state and the new split, the checkpoint */
  return mnt_train_metric(r, json_pack("{s:I, s:s, s:o, s:i, s:i, s:s, s:o, s:o, s:{s:o, s:o, s:o}}", "step",
                                       (json_int_t)t->s.step, "rank_lost", names, "lost", lost_json, "ranks", w->size,
                                       "ranks_before", v->size0, "quorum", v->quorum, "detected_after_s",
                                       mnt_json_num(det), "recovered_after_s", mnt_json_num(rec), "recovery_s", "agree",
                                       mnt_json_num(v->t_agreed - v->t_detect), "regroup",
                                       mnt_json_num(v->t_regrouped - v->t_agreed), "checkpoint",
                                       mnt_json_num(mnt_now() - v->t_ready)));
}

/* every survivor: the evaluation the loss cut short, run again (the same weights: the same figures,
 * and --target-top1's time counts it where it was due) */
static int rerun_evaluation(train_run *r, loop *l) {
  mnt_trainer *t = r->t;
  double epoch_f = (double)t->s.step / t->per_epoch;
  if (r->w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("mntrain train: the evaluation after step %lld was cut short by the loss: run again\n",
           (long long)t->s.step);
    fflush(stdout);
  }
  t->s.eval_due = 0;
  MNT_CHECK(mnt_train_evaluate(r, l, t->s.step, epoch_f));
  return mnt_train_check_target(r, l, t->s.step, epoch_f);
}

/* every surviving rank, a collective having failed on a lost rank: the survivors agree on who is
 * gone and rebuild the communicator (mnt_comm_shrink), take the most advanced survivor's state and
 * split the global batch among themselves (mnt_trainer_regroup), and commit a checkpoint at once.
 * Below --min-ranks, or when a rank's larger share does not fit, that checkpoint ends the job with
 * exit 3 (MNT_EPREEMPT): the template requeues it at full size. MNT_EFENCED: this rank was left out. */
static int recover(train_run *r, loop *l) {
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  recovery v = {.t_detect = mnt_now(), .size0 = w->size, .step0 = t->s.step};
  int job0 = w->job_of[0]; /* the membership before: its rank 0 */
  mnt_trace_push("recovery", v.step0);
  int64_t last_ckpt = mnt_ckpt_last_step(r->wr);
  if (r->wr) { /* the checkpoint in flight is abandoned: its commit needed every rank's share */
    if (r->have_sig_thr) mnt_train_signal_writer(NULL);
    mnt_ckpt_writer_destroy(r->wr);
    r->wr = NULL;
  }
  int st = mnt_comm_shrink(t->c, t->s.step, v.lost, 64, &v.nlost), shrunk = st == MNT_OK;
  v.t_agreed = v.t_regrouped = mnt_now();
  if (st == MNT_OK) {
    st = mnt_trainer_regroup(t, v.why, sizeof v.why);
    v.t_regrouped = mnt_now();
    if (st == MNT_ENOMEM && v.why[0]) v.policy = 1, st = MNT_OK;
  }
  int rerun = 0;    /* the evaluation of this step, cut short by the loss */
  if (st == MNT_OK) /* mnt_comm_shrink let this group go on: the rule that did, for the log */
    mnt_comm_quorum(v.size0, w->size, w->job_of[0] == job0, v.quorum, sizeof v.quorum);
  if (st == MNT_OK && w->size < r->min_ranks) {
    snprintf(v.why, sizeof v.why, "%d ranks left, fewer than --min-ranks %d", w->size, r->min_ranks);
    v.policy = 1;
  }
  if (st == MNT_OK) { /* an evaluation a survivor was in when the rank was lost: run again below */
    float in_eval = l->eval_open == t->s.step ? 1.0f : 0.0f;
    st = mnt_allreduce(t->c, &in_eval, 1, MNT_FP32, MNT_SUM);
    rerun = st == MNT_OK && in_eval > 0 && t->have_val;
    t->s.eval_due = rerun && v.policy; /* the checkpoint that stops the job records it: the resumed job runs it */
  }
  if (st == MNT_OK) st = take_outputs(r);
  if (shrunk) st = mnt_world_agree(w, st); /* the new rank 0's locks: known to all before anything is written */
  if (st == MNT_OK && r->o->ckpt_dir)      /* the root is in use: nothing in it set aside or removed */
    st = mnt_ckpt_writer_rejoin(t->c, r->o->ckpt_dir, r->o->stripe, r->o->keep, last_ckpt, &r->wr);
  if (st == MNT_OK) mnt_train_fence_writer(r);
  if (st == MNT_OK && w->rank == 0 && r->have_sig_thr) mnt_train_signal_writer(r->wr);
  v.t_ready = mnt_now();
  if (st == MNT_OK && r->wr) { /* at once: what the survivors have is safe before they go on */
    st = mnt_train_checkpoint_begin(r);
    if (st == MNT_OK) st = mnt_train_checkpoint_finish(r);
  }
  mnt_trace_pop();
  MNT_CHECK(st);
  MNT_CHECK(say_loss(r, &v));
  r->last_step_end = mnt_now();
  l->iv_t0 = mnt_now();
  /* a job that stops below --min-ranks leaves the evaluation to the resumed one when its checkpoint records it */
  if (rerun && !(v.policy && mnt_ckpt_last_step(r->wr) == t->s.step && last_ckpt != t->s.step))
    MNT_CHECK(rerun_evaluation(r, l));
  if (!v.policy) return MNT_OK;
  if (w->rank == 0) {
    printf(
        "mntrain train: %s: stopping after the checkpoint of step %lld (exit 3); the template requeues the job at "
        "full size and it resumes there\n",
        v.why, (long long)t->s.step);
    fflush(stdout);
  }
  l->stopped = 1;
  /* the template's sign (srun's own status reports the lost task): stopped with a checkpoint, to requeue */
  MNT_CHECK(
      mnt_train_metric(r, json_pack("{s:I, s:s, s:b}", "step", (json_int_t)t->s.step, "stopped", v.why, "requeue", 1)));
  return mnt_world_agree(w, MNT_EPREEMPT);
}

/* after a failure *st: a lost rank under --on-rank-loss shrink is recovered from (again, if the
 * recovery itself loses one, up to 8 times); 1 when the survivors go on (*st MNT_OK), 0 otherwise */
int mnt_train_recover_from(train_run *r, loop *l, int *st) {
  if (*st == MNT_OK || !r->shrink || !r->w->left || !mnt_comm_lost(*st)) return 0;
  for (int tries = 0; tries < 8; tries++) {
    *st = recover(r, l);
    if (*st == MNT_OK || !mnt_comm_lost(*st)) break;
  }
  return *st == MNT_OK && !l->stopped;
}
