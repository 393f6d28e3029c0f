/* cmd/train_outputs.c — what `mntrain train` writes (see train_internal.h): config.json's
 * configuration, metrics.jsonl's lines (rank 0), the checkpoints the step loop starts and commits,
 * and the run's end: stopped on request (MNT_EPREEMPT), finished (summary.json, --export), or
 * resumed already complete (summary.json rebuilt from metrics.jsonl when it is gone). */
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/cmd/train_internal.h"
#include "src/cmd/train_runkeys.h"
#include "src/cmd/train_signals.h"
#include "src/comm/comm.h"
#include "io/ckpt/export.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/progress.h"
#include "src/trace.h"

/* ---- config.json, metrics.jsonl's lines --------------------------------------------------- */

/* the effective configuration: config.json, and every checkpoint's "config" */
json_t *mnt_train_config_json(const opts *o, const mnt_trainer *t) {
  const mnt_train_cfg *c = &t->cfg;
  const mnt_world *w = t->w;
  /* how it runs (a resume may change these) */
  json_t *j = json_pack(
      "{s:s, s:s?, s:i, s:i, s:s, s:s, s:s, s:s, s:o, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:o,"
      " s:s, s:o}",
      "data", c->data, "val", c->val, "batch_per_rank", c->batch, "epochs", c->epochs, "device", t->be->name, "comm",
      t->c->ops->name, "topology", mnt_topology_name(t->c->topology), "grad_dtype", mnt_grad_dtype_names[c->grad_dtype],
      "bucket_mb", mnt_json_num(c->bucket_mb), "threads", o->threads > 0 ? o->threads : omp_get_max_threads(),
      "loader_threads", c->loader_threads, "ranks", w->size, "out", o->out, "nodes", w->nnodes, "log_every",
      o->log_every, "skip_nonfinite", c->skip_nonfinite, "bn_batch", (int)t->s.bn_group, "val_crop",
      mnt_json_num(c->val_crop), "version", MNT_VERSION, "eval_every", mnt_json_num(o->eval_every));
  if (j) json_object_set_new(j, "precision", json_string(mnt_precision_name(t->be->precision)));
    /* what defines the run (train_runkeys.h: the resume compares these) */
#define SET_RUN_KEY(key, when, value)                           \
  if (j && (when) && json_object_set_new(j, key, value) != 0) { \
    json_decref(j);                                             \
    j = NULL;                                                   \
  }
  MNT_TRAIN_RUN_KEYS(SET_RUN_KEY)
#undef SET_RUN_KEY
  if (j && o->ckpt_dir) {
    json_object_set_new(j, "ckpt_dir", json_string(o->ckpt_dir));
    json_object_set_new(j, "ckpt_every_steps", json_integer(o->ckpt_steps));
    json_object_set_new(j, "ckpt_every_minutes", mnt_json_num(o->ckpt_minutes));
    json_object_set_new(j, "keep", json_integer(o->keep));
  }
  return j;
}

/* rank 0: one line of metrics.jsonl, "time" (wall clock, ISO 8601 UTC) first (a full disk stops
 * the run here, loudly) */
int mnt_train_metric(train_run *r, json_t *line) {
  int st = MNT_OK;
  if (r->w->rank == 0) {
    char ts[MNT_ISO_TIME_LEN];
    mnt_iso_time_now(ts);
    json_t *o = line ? json_pack("{s:s, s:s}", "time", ts, "run_id", r->run_id) : NULL;
    /* after a shrink: the membership that wrote it (a line without the key: epoch 0) */
    if (o && r->w->epoch > 0) json_object_set_new(line, "membership_epoch", json_integer(r->w->epoch));
    if (o && json_object_update(o, line) != 0) {
      json_decref(o);
      o = NULL; /* mnt_json_append names the file: the line could not be made */
    }
    st = mnt_json_append(r->metrics, r->mpath, o);
    json_decref(o);
  }
  json_decref(line);
  return st;
}

/* rank 0, --timestamps: the wall-clock time that starts a progress line */
void mnt_train_progress_stamp(const opts *o) {
  char ts[MNT_ISO_TIME_LEN];
  if (!o->timestamps) return;
  mnt_iso_time_now(ts);
  printf("%s ", ts);
}

/* ---- checkpoints -------------------------------------------------------------------------- */

static int checkpoint_begin_(train_run *r);

/* every rank: the checkpoint of this step started (the previous one finished first) */
int mnt_train_checkpoint_begin(train_run *r) {
  mnt_trace_push("checkpoint", r->t->s.step);
  int st = checkpoint_begin_(r);
  mnt_trace_pop();
  return st;
}

static int checkpoint_begin_(train_run *r) {
  double t0 = mnt_now();
  MNT_CHECK(mnt_train_checkpoint_finish(r)); /* the previous one first (with its line in metrics.jsonl) */
  if (mnt_ckpt_last_step(r->wr) == r->t->s.step) return MNT_OK; /* this step's is committed already */
  r->ckpt_t0 = mnt_now();
  MNT_CHECK(mnt_trainer_save(r->t, r->wr, r->config));
  double stall = mnt_now() - t0; /* waiting for the previous one included */
  r->ckpt_step = r->t->s.step;
  r->last_ckpt_time = mnt_now();
  r->stall_sum += stall;
  return mnt_train_metric(r, json_pack("{s:I, s:I, s:o}", "step", (json_int_t)r->t->s.step, "checkpoint_step",
                                       (json_int_t)r->t->s.step, "ckpt_stall_ms", mnt_json_num(stall * 1e3)));
}

/* every rank: the checkpoint in flight, if any, committed */
int mnt_train_checkpoint_finish(train_run *r) {
  if (!mnt_ckpt_pending(r->wr)) return MNT_OK;
  mnt_trace_push("checkpoint commit", r->ckpt_step);
  int cst = mnt_ckpt_finish(r->wr);
  mnt_trace_pop();
  MNT_CHECK(cst);
  r->ncheckpoints++;
  double s = mnt_now() - r->ckpt_t0;
  char dir[MNT_PATH_MAX];
  mnt_ckpt_step_dir(dir, sizeof dir, r->o->ckpt_dir, r->ckpt_step);
  if (r->w->rank == 0) {
    mnt_train_progress_stamp(r->o);
    printf("mntrain train: checkpoint %s committed (%.1f s after it started)\n", dir, s);
    fflush(stdout);
  }
  return mnt_train_metric(r, json_pack("{s:I, s:I, s:s, s:o}", "step", (json_int_t)r->t->s.step,
                                       "checkpoint_step", (json_int_t)r->ckpt_step, "checkpoint", dir, "ckpt_write_s",
                                       mnt_json_num(s)));
}

/* ---- the run's end: stopped, or finished (summary.json, --export) ------------------------- */

/* qsort: doubles in ascending order */
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* --export: the final weights and BN statistics, from the device where they live there */
static int export_model(mnt_trainer *t, const char *path) {
  float *w, *m, *bn;
  MNT_CHECK(mnt_trainer_host_model(t, &w, &m, &bn));
  return mnt_export_h5(t->m, w, bn, &t->train, path);
}

/* every rank, after a stop request's checkpoint: rank 0 says why and where; MNT_EPREEMPT, agreed */
int mnt_train_report_preempted(train_run *r, const loop *l) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  if (r->w->rank == 0) {
    char dir[MNT_PATH_MAX];
    int sig = mnt_train_stop_signal();
    mnt_ckpt_step_dir(dir, sizeof dir, o->ckpt_dir, t->s.step);
    printf("mntrain train: stopped after step %lld/%lld (%s): checkpoint %s; the same command resumes it\n",
           (long long)t->s.step, (long long)t->total,
           sig ? (sig == SIGTERM ? "SIGTERM" : "SIGUSR1")
               : (o->stop_after && l->done >= o->stop_after ? "--stop-after" : "a signal on another rank"),
           dir);
    fflush(stdout);
  }
  return mnt_world_agree(r->w, MNT_EPREEMPT); /* agreed: the job ends normally, with exit code 3 */
}

/* the timed steps of this job (after warm-up; all of them when too few) and what they measure */
typedef struct timing {
  int64_t timed, skip; /* steps timed; warm-up steps before them */
  double span, ips, busbw, mean;
  const double *ranks; /* every rank's RANK_STATS figures (rank 0; NULL when they could not be had) */
} timing;

/* per rank, gathered at the end for summary.json's "rank_stats" (the report's slow ranks): the mean
 * ms per step of each phase, then the step's mean, p50 and p95 */
enum { RANK_STATS = 8 };
static const char *const PHASE_KEYS[5] = {"data", "forward", "backward", "comm_exposed", "optimizer"};

/* rank 0: summary.json's "rank_stats": [{"rank", "node", "phases_ms": {...}, "step_ms": {...}}] */
static json_t *rank_stats_json(const mnt_world *w, const double *all) {
  json_t *a = json_array();
  for (int r = 0; a && r < w->size; r++) {
    const double *v = all + (size_t)r * RANK_STATS;
    json_t *ph = json_object(), *o = json_object();
    for (int k = 0; k < 5; k++) json_object_set_new(ph, PHASE_KEYS[k], mnt_json_num(v[k]));
    json_object_set_new(o, "rank", json_integer(w->job_of[r]) /* the rank Slurm started (a shrink renumbers) */);
    json_object_set_new(o, "node", json_string(w->node_name[w->node_of[r]]));
    json_object_set_new(o, "phases_ms", ph);
    json_object_set_new(o, "step_ms", json_pack("{s:o, s:o, s:o}", "mean", mnt_json_num(v[5]), "p50",
                                                 mnt_json_num(v[6]), "p95", mnt_json_num(v[7])));
    json_array_append_new(a, o);
  }
  return a;
}

/* rank 0: summary.json (keys as README "Runs and their outputs") */
static int write_summary(train_run *r, const loop *l, const timing *tm) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  const double *step_ms = l->step_ms, *ph_all = l->ph_all;
  int64_t timed = tm->timed, skip = tm->skip;
  int rpn = w->size / w->nnodes;
  json_t *sm = json_pack(
      "{s:s, s:s, s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:o, s:o,"
      " s:{s:o, s:o, s:o}, s:{s:o, s:o, s:o, s:o, s:o}, s:I, s:o, s:s, s:o, s:o, s:I, s:o, s:o, s:I, s:I}",
      "version", MNT_VERSION, "arch", t->cfg.arch, "image_size", t->cfg.size, "device", t->be->name, "comm",
      t->c->ops->name, "topology", mnt_topology_name(t->c->topology), "ranks", w->size, "nodes", w->nnodes,
      "ranks_per_node", rpn, "threads_per_rank", o->threads > 0 ? o->threads : omp_get_max_threads(),
      "batch_per_rank", t->cfg.batch, "global_batch", (json_int_t)t->s.global_batch, "steps", (json_int_t)t->total,
      "img_per_s", mnt_json_num(tm->ips), "img_per_s_per_rank", mnt_json_num(tm->ips / w->size), "step_ms", "mean",
      mnt_json_num(tm->mean), "p50", mnt_json_num(step_ms[skip + timed / 2]), "p95",
      mnt_json_num(step_ms[skip + (int64_t)(0.95 * (double)(timed - 1))]), "phases_ms", "data",
      mnt_json_num(ph_all[0] * 1e3 / timed), "forward", mnt_json_num(ph_all[1] * 1e3 / timed), "backward",
      mnt_json_num(ph_all[2] * 1e3 / timed), "comm_exposed", mnt_json_num(ph_all[3] * 1e3 / timed), "optimizer",
      mnt_json_num(ph_all[4] * 1e3 / timed), "grad_bytes", (json_int_t)(t->m->nw * 4), "allreduce_busbw_gbs",
      mnt_json_num(tm->busbw), "slurm_job_id", w->jobid, "loss", mnt_json_num(l->last_loss), "top1",
      mnt_json_num(l->last_top1), "skipped_steps", (json_int_t)t->s.skipped, "train_seconds", mnt_json_num(tm->span),
      "eval_seconds", mnt_json_num(l->eval_s), "resumed_from_step", (json_int_t)l->step0, "steps_this_job",
      (json_int_t)l->done);
  if (sm) json_object_set_new(sm, "run_id", json_string(r->run_id));
  if (sm) json_object_set_new(sm, "precision", json_string(mnt_precision_name(t->be->precision)));
  if (sm) json_object_set_new(sm, "optimizer", json_string(mnt_optim_name(t->opt.optimizer)));
  if (sm) json_object_set_new(sm, "bn_eval", json_string(mnt_bn_eval_name(t->cfg.bn_eval)));
  if (sm) json_object_set_new(sm, "schedule", json_string(mnt_sched_name(t->opt.schedule)));
  if (sm) { /* what the layers ran: a throughput figure says what it measured */
    static char buf[8192];
    mnt_resnet_impls(t->m, MNT_LAYER_BN, buf, sizeof buf);
    json_object_set_new(sm, "bn_mode", json_string(buf));
    json_object_set_new(sm, "reference_layers", json_integer(mnt_resnet_slow_layers(t->m, buf, sizeof buf)));
    if (t->cfg.device == MNT_DEVICE_CPU) json_object_set_new(sm, "cpu_isa", json_string(mnt_cpu_isa_name()));
  }
  if (sm) /* not timed */
    json_object_set_new(sm, "warmup_steps", json_integer(timed < l->done ? (json_int_t)l->warm : 0));
  if (sm && !isnan(l->val_top1)) json_object_set_new(sm, "val_top1", mnt_json_num(l->val_top1));
  if (sm && !isnan(l->best_top1)) json_object_set_new(sm, "best_val_top1", mnt_json_num(l->best_top1));
  if (sm) json_object_set_new(sm, "steps_done", json_integer((json_int_t)t->s.step));
  if (sm && o->target_top1 > 0) { /* time to accuracy, MLPerf's measure */
    json_object_set_new(sm, "target_top1", mnt_json_num(o->target_top1));
    json_object_set_new(sm, "target_reached", json_boolean(t->s.target_step > 0));
    if (t->s.target_step > 0) {
      json_object_set_new(sm, "target_step", json_integer((json_int_t)t->s.target_step));
      json_object_set_new(sm, "target_epoch", mnt_json_num((double)t->s.target_step / t->per_epoch));
      if (r->target_time_s > 0) json_object_set_new(sm, "target_time_s", mnt_json_num(r->target_time_s));
    }
  }
  if (sm && tm->ranks) json_object_set_new(sm, "rank_stats", rank_stats_json(w, tm->ranks));
  if (sm && r->rebuilt) json_object_set_new(sm, "rebuilt_from", json_string("metrics.jsonl"));
  if (sm) { /* --on-rank-loss shrink: the ranks lost and the ranks at the end */
    json_object_set_new(sm, "rank_losses", r->losses ? json_incref(r->losses) : json_array());
    json_object_set_new(sm, "final_ranks", json_integer(w->size));
    json_object_set_new(sm, "on_rank_loss",
                        json_string(mnt_train_loss_names[r->shrink ? MNT_LOSS_SHRINK : MNT_LOSS_ABORT]));
    json_object_set_new(sm, "membership_epoch", json_integer(w->epoch));
  }
  if (sm && r->ncheckpoints) {
    json_object_set_new(sm, "checkpoints", json_integer(r->ncheckpoints));
    json_object_set_new(sm, "ckpt_stall_ms", mnt_json_num(r->stall_sum * 1e3 / r->ncheckpoints));
  }
  int st = mnt_train_locks_held(r); /* a group that lost the run's lock writes no summary */
  if (st == MNT_OK) st = mnt_json_save(o->out, "summary.json", sm);
  json_decref(sm);
  return st;
}

/* every rank, training done: one set of BN statistics, every rank's averaged (what --export writes);
 * the timing; rank 0 writes summary.json and --export and says so */
int mnt_train_finish_run(train_run *r, loop *l) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  mnt_world *w = r->w;
  double t_end = mnt_now();
  int st;
  if ((st = mnt_be_sync(t->be)) != MNT_OK ||
      (st = mnt_allreduce(t->c, t->m->bn, t->m->nbn, MNT_FP32, MNT_AVG)) != MNT_OK ||
      (st = mnt_trainer_check_state(t, "checked at the end")) != MNT_OK) /* no summary or export of a diverged train_run */
    return st;
  timing tm = {.timed = l->done - l->warm};
  int after_warmup = tm.timed > 0 && l->t_after_warmup > 0;
  tm.span = (after_warmup ? t_end - l->t_after_warmup : t_end - l->t_start) -
            (after_warmup ? l->eval_timed_s : l->eval_s);
  if (tm.timed <= 0) tm.timed = l->done;
  tm.skip = l->done - tm.timed;
  tm.ips = (double)tm.timed * t->s.global_batch / tm.span;
  /* bus bandwidth of the gradient allreduce as training saw it: bytes * 2(n-1)/n (0 on one rank) over
   * the time from a step's first bucket start to its last completion (overlapped with backward, so a
   * lower bound) */
  tm.busbw = t->comm_span > 0
                 ? (double)t->m->nw * 4.0 * mnt_busbw_factor(w->size) * (double)tm.timed / t->comm_span / 1e9
                 : 0.0;
  qsort(l->step_ms + tm.skip, (size_t)tm.timed, sizeof *l->step_ms, cmp_d);
  for (int64_t i = tm.skip; i < l->done; i++) tm.mean += l->step_ms[i];
  tm.mean /= tm.timed;
  /* every rank's phases and step times (collective), for the slow ranks in the report */
  double mine[RANK_STATS], *all = malloc((size_t)w->size * sizeof mine);
  for (int k = 0; k < 5; k++) mine[k] = l->ph_all[k] * 1e3 / (double)tm.timed;
  mine[5] = tm.mean;
  mine[6] = l->step_ms[tm.skip + tm.timed / 2];
  mine[7] = l->step_ms[tm.skip + (int64_t)(0.95 * (double)(tm.timed - 1))];
  if (!all) return MNT_ENOMEM;
  if ((st = mnt_allgather(t->c, mine, all, sizeof mine)) != MNT_OK) {
    free(all);
    return st;
  }
  tm.ranks = all;
  if (w->rank != 0) {
    free(all);
    return MNT_OK;
  }
  st = write_summary(r, l, &tm);
  free(all);
  if (st == MNT_OK && o->export_path) st = export_model(t, o->export_path);
  if (st == MNT_OK) {
    char lt[96];
    if (isnan(l->last_loss)) snprintf(lt, sizeof lt, "no loss (the last interval's steps were all skipped)");
    else snprintf(lt, sizeof lt, "loss %.4f, top1 %.4f", l->last_loss, l->last_top1);
    printf("mntrain train: done: %lld steps, %.1f img/s (%.1f per rank; %.1f s of evaluation apart), %s; "
           "%s/summary.json\n", (long long)t->s.step, tm.ips, tm.ips / w->size, l->eval_s, lt, o->out);
    if (t->s.skipped)
      printf("mntrain train: %lld of %lld steps skipped for NaN or Inf (--skip-nonfinite; summary.json skipped_steps)\n",
             (long long)t->s.skipped, (long long)t->s.step);
    if (!isnan(l->val_top1)) printf("mntrain train: validation top1 %.4f\n", l->val_top1);
    if (o->target_top1 > 0 && !t->s.target_step)
      printf("mntrain train: target top-1 %.4f not reached in %lld steps (best %.4f)\n", o->target_top1,
             (long long)t->total, isnan(l->best_top1) ? 0.0 : l->best_top1);
    if (o->export_path) printf("mntrain train: weights in %s\n", o->export_path);
  }
  return st;
}

/* rank 0, a run resumed at its end whose summary.json is gone: summary.json again, from the
 * intervals of metrics.jsonl (the steps, img/s, phases, loss and top-1 every --log-every steps
 * recorded), marked "rebuilt_from": the step times are the intervals' means, and what only the
 * jobs knew (the ranks' own figures, evaluation time, checkpoint stalls) is absent. r->rebuilt: 1 when
 * rebuilt, 0 when metrics.jsonl does not cover the run (said). */
static int rebuild_summary(train_run *r) {
  mnt_trainer *t = r->t;
  int64_t end = t->s.target_step ? t->s.target_step : t->total; /* a run ended at its target ends there */
  loop l = {.done = end, .warm = end > 20 ? 5 : end > 4 ? 1 : 0, .last_loss = NAN, .last_top1 = NAN,
            .val_top1 = NAN, .best_top1 = NAN};
  FILE *f = fopen(r->mpath, "r");
  if (!f || !(l.step_ms = calloc((size_t)end + 1, sizeof *l.step_ms))) {
    if (f) fclose(f);
    return f ? MNT_ENOMEM : MNT_SYSERR("%s: cannot read", r->mpath);
  }
  char *line = NULL;
  size_t cap = 0;
  int64_t prev = 0, filled = 0;
  int own = 0; /* a line of this run's seen */
  timing tm = {0};
  while (getline(&line, &cap, f) > 0) {
    json_t *j = json_loads(line, 0, NULL);
    const char *rid = json_string_value(json_object_get(j, "run_id"));
    /* this run's lines, and lines without a run_id before its first (its jobs from before run ids), as
     * mntrain report reads them: another run's line, or one without an id after the run's own, is
     * not this run's record */
    if (rid ? strcmp(rid, r->run_id) != 0 : own) {
      json_decref(j);
      continue;
    }
    own |= rid != NULL;
    json_t *ms = json_object_get(j, "ms");
    int64_t step = json_is_integer(json_object_get(j, "step")) ? json_integer_value(json_object_get(j, "step")) : -1;
    double ips = json_number_value(json_object_get(j, "img_per_s"));
    if (json_is_number(json_object_get(j, "val_top1"))) {
      l.val_top1 = json_number_value(json_object_get(j, "val_top1"));
      if (!(l.best_top1 >= l.val_top1)) l.best_top1 = l.val_top1;
    }
    if (json_is_number(json_object_get(j, "target_time_s")))
      r->target_time_s = json_number_value(json_object_get(j, "target_time_s"));
    if (step > prev && step <= end && ips > 0 && isfinite(ips) && json_is_object(ms)) {
      double step_ms = 1e3 * (double)t->s.global_batch / ips;
      static const char *const PH[5] = {"data", "forward", "backward", "comm_exposed", "optimizer"};
      for (int64_t k = prev + 1; k <= step; k++, filled++) {
        l.step_ms[k - 1] = step_ms;
        if (k <= l.warm) continue;
        tm.timed++;
        tm.span += step_ms / 1e3;
        for (int p = 0; p < 5; p++) l.ph_all[p] += json_number_value(json_object_get(ms, PH[p])) / 1e3;
      }
      l.last_loss = json_number_value(json_object_get(j, "loss"));
      l.last_top1 = json_number_value(json_object_get(j, "top1"));
      prev = step;
    }
    json_decref(j);
  }
  free(line);
  fclose(f);
  int st = MNT_OK;
  if (tm.timed == 0 || filled != end) {
    MNT_WARN("%s/summary.json is missing and %s covers %lld of the run's %lld steps: not rebuilt", r->o->out, r->mpath,
             (long long)filled, (long long)end);
  } else {
    tm.skip = end - tm.timed;
    tm.ips = (double)tm.timed * (double)t->s.global_batch / tm.span;
    for (int64_t i = tm.skip; i < end; i++) tm.mean += l.step_ms[i];
    tm.mean /= (double)tm.timed;
    qsort(l.step_ms + tm.skip, (size_t)tm.timed, sizeof *l.step_ms, cmp_d);
    r->rebuilt = 1;
    st = write_summary(r, &l, &tm);
  }
  free(l.step_ms);
  return st;
}


/* rank 0, a run resumed at its end (its summary.json stays): nothing to train; summary.json rebuilt
 * when it is gone, --export written */
int mnt_train_resumed_complete(train_run *r) {
  opts *o = r->o;
  mnt_trainer *t = r->t;
  int st = MNT_OK;
  printf("mntrain train: the run is complete (step %lld of %lld): nothing to train\n", (long long)t->s.step,
         (long long)t->total);
  char p[MNT_PATH_MAX + 16];
  snprintf(p, sizeof p, "%s/summary.json", o->out);
  if (access(p, F_OK) != 0 && fflush(r->metrics) == 0 && (st = rebuild_summary(r)) == MNT_OK && r->rebuilt)
    printf("mntrain train: %s was missing: rebuilt from %s (\"rebuilt_from\")\n", p, r->mpath);
  if (o->export_path && (st = export_model(t, o->export_path)) == MNT_OK)
    printf("mntrain train: weights in %s\n", o->export_path);
  return st;
}

int mnt_train_locks_held(void *run) {
  train_run *r = run;
  for (int i = 0; r->locks && i < 2; i++)
    if (r->locks[i]) MNT_CHECK(mnt_runlock_held(r->locks[i]));
  return MNT_OK;
}

void mnt_train_fence_writer(train_run *r) {
  if (r->wr && r->w->rank == 0) mnt_ckpt_writer_fence(r->wr, r->w->epoch, mnt_train_locks_held, r);
}

/* "rank 3 on node2, rank 2 on node2" (the lines before they had "lost") into r->losses */
static void losses_from_text(train_run *r, const char *text, json_int_t step, json_t *det, json_t *rec) {
  for (const char *p = text; (p = strstr(p, "rank ")) != NULL;) {
    int rank = -1, n = 0;
    char node[MNT_NODENAME_MAX] = "";
    if (sscanf(p, "rank %d on %63[^,]%n", &rank, node, &n) < 2 || rank < 0) break;
    json_array_append_new(r->losses, json_pack("{s:I, s:i, s:s, s:O, s:O}", "step", step, "rank", rank, "node", node,
                                               "detected_after_s", det, "recovered_after_s", rec));
    p += n;
  }
}

int mnt_train_losses_resumed(train_run *r) {
  if (r->w->rank != 0 || !r->losses) return MNT_OK;
  FILE *f = fopen(r->mpath, "re");
  if (!f) return MNT_OK; /* none yet */
  char *line = NULL;
  size_t cap = 0;
  json_t *null = json_null();
  while (getline(&line, &cap, f) > 0) {
    if (!strstr(line, "\"rank_lost\"")) continue;
    json_t *j = json_loads(line, 0, NULL), *lost = json_object_get(j, "lost");
    const char *names = json_string_value(json_object_get(j, "rank_lost"));
    json_t *det = json_object_get(j, "detected_after_s"), *rec = json_object_get(j, "recovered_after_s");
    json_int_t step = json_integer_value(json_object_get(j, "step"));
    if (json_is_array(lost)) { /* [{"rank", "node", "step"}] */
      for (size_t i = 0; i < json_array_size(lost); i++) {
        json_t *e = json_array_get(lost, i);
        if (!json_is_integer(json_object_get(e, "rank")) || !json_is_string(json_object_get(e, "node"))) continue;
        json_array_append_new(r->losses, json_pack("{s:I, s:I, s:s, s:O, s:O}", "step",
                                                   json_integer_value(json_object_get(e, "step")), "rank",
                                                   json_integer_value(json_object_get(e, "rank")), "node",
                                                   json_string_value(json_object_get(e, "node")), "detected_after_s",
                                                   det ? det : null, "recovered_after_s", rec ? rec : null));
      }
    } else if (names) {
      losses_from_text(r, names, step, det ? det : null, rec ? rec : null);
    }
    json_decref(j);
  }
  json_decref(null);
  free(line);
  fclose(f);
  if (json_array_size(r->losses) > 0)
    printf("mntrain train: the run lost %zu rank%s before this job (metrics.jsonl): summary.json keeps them\n",
           json_array_size(r->losses), json_array_size(r->losses) == 1 ? "" : "s");
  return MNT_OK;
}

int mnt_train_reopen_metrics(train_run *r) {
  r->metrics = fopen(r->mpath, "a");
  if (!r->metrics) return MNT_SYSERR("%s: cannot open for appending (this rank took over rank 0's outputs)", r->mpath);
  return MNT_OK;
}
