/* cmd/train_setup.c — what `mntrain train` does before its first step (see train_internal.h):
 * the rank placed on its CPUs, the resume negotiated (rank 0 prepares the run directories,
 * io/rundir/rundir.h, and reads the checkpoint; every rank learns its state and the batch per rank), the
 * trainer started from the checkpoint or --init, and the outputs opened (config.json,
 * metrics.jsonl, the sample logs). */
#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "src/check.h"
#include "src/cmd/train_internal.h"
#include "src/cmd/train_runkeys.h"
#include "src/cmd/train_signals.h"
#include "io/rundir/rundir.h"
#include "src/safefs.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/placement.h"
#include "src/trace.h"

/* ---- the rank's CPUs ---------------------------------------------------------------------- */

/* every rank: its share of the node's CPUs (placement.h) and, unless --threads or OMP_NUM_THREADS
 * say otherwise, that many compute threads (at least 1, also where the CPUs stay shared); local
 * rank 0 says what it did and warns when the node's ranks ask for more compute threads than it has
 * CPUs (each rank also runs a communicator thread and --loader-threads) */
void mnt_train_place(const opts *o, const mnt_world *w) {
  mnt_placement pl;
  mnt_place_rank(w, &pl);
  const char *env = getenv("OMP_NUM_THREADS");
  if (o->threads <= 0 && !(env && *env) && pl.share > 0) omp_set_num_threads(pl.share);
  int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  if (w->local_rank != 0) return;
  if (w->rank == 0) {
    printf("mntrain train: placement: %s; %d compute thread%s per rank\n", pl.why, threads, threads == 1 ? "" : "s");
    fflush(stdout);
  }
  if (threads == 1 && w->local_size > pl.node_cpus)
    MNT_WARN("%d ranks on %s share %d CPUs (one compute thread each, besides each one's communicator and loader "
             "threads): the ranks take turns and their steps drift apart; run at most %d ranks on a node of %d CPUs "
             "(or give the job more: sbatch --cpus-per-task)", w->local_size, w->hostname, pl.node_cpus,
             pl.node_cpus, pl.node_cpus);
  else if ((long)threads * w->local_size > pl.node_cpus)
    MNT_WARN("%d ranks on %s ask for %d compute threads each (%d in all) but have %d CPUs: the threads take turns "
             "and the ranks' steps drift apart; give each rank its CPUs (sbatch --cpus-per-task=C with "
             "srun --cpu-bind=cores, or fewer ranks per node) or fewer threads (--threads)",
             w->local_size, w->hostname, threads, threads * w->local_size, pl.node_cpus);
}

/* ---- resume: the checkpoint accepted, the batch per rank ---------------------------------- */

/* mnt_ckpt_open_checked's check of a checkpoint to resume: its training state is whole, in range,
 * and of its own step (a checkpoint whose state fails is damaged: the previous one is tried) */
static int state_ok(const mnt_ckpt *c, void *arg, char *why, size_t n) {
  (void)arg;
  mnt_train_state s;
  char what[600];
  if (mnt_train_state_parse(json_object_get(c->manifest, "state"), &s, what, sizeof what) != MNT_OK) {
    snprintf(why, n, "%s/%s: %s", c->dir, MNT_CKPT_MANIFEST, what);
    return MNT_EDATA;
  }
  json_t *steps = json_object_get(json_object_get(c->manifest, "config"), "steps");
  if (s.step != c->step || !json_is_integer(steps) || s.step > json_integer_value(steps)) {
    snprintf(why, n, "%s/%s: the training state is of step %lld, the checkpoint of step %lld of %lld", c->dir,
             MNT_CKPT_MANIFEST, (long long)s.step, (long long)c->step, (long long)json_integer_value(steps));
    return MNT_EDATA;
  }
  return MNT_OK;
}

/* rank 0: the run's identity, the checkpoint's when it has one (a run keeps it across its jobs),
 * else a new one */
static int run_identity(const mnt_ckpt *ck, char out[MNT_RUN_ID_HEX + 1]) {
  const char *old = ck ? json_string_value(json_object_get(json_object_get(ck->manifest, "config"), "run_id")) : NULL;
  if (mnt_is_run_id(old)) {
    memcpy(out, old, MNT_RUN_ID_HEX + 1);
    return MNT_OK;
  }
  uint64_t x;
  if (getrandom(&x, sizeof x, 0) != (ssize_t)sizeof x) return MNT_SYSERR("getrandom: the run's identity");
  snprintf(out, MNT_RUN_ID_HEX + 1, "%016llx", (unsigned long long)x);
  return MNT_OK;
}

/* every rank: rank 0 prepares the run directories (io/rundir/rundir.h), reads and verifies the checkpoint
 * to resume (once, here) and broadcasts whether there is one and its state. The global batch is the
 * run's invariant: the batch per rank follows the rank count, the BN groups the checkpoint's where
 * they divide it */
int mnt_train_negotiate_resume(train_run *r, mnt_ckpt *ck, mnt_train_state *rs, int *found, mnt_runlock **locks) {
  opts *o = r->o;
  mnt_world *w = r->w;
  mnt_train_cfg *c = &o->t;
  mnt_rundir_cfg rc = {.out = o->out, .ckpt_dir = o->ckpt_dir, .trace_dir = o->trace_dir, .export_path = o->export_path,
                       .resume = o->resume, .force = o->force, .no_verify = o->no_verify, .accept = state_ok};
  int st = w->rank == 0 ? mnt_rundir_prepare(&rc, w->jobid, ck, found, locks) : MNT_OK;
  /* --trace on a node-local filesystem: each node's directory is this user's own too (made if need be) */
  if (st == MNT_OK && w->rank != 0 && o->trace_dir) st = mnt_dir_secure(o->trace_dir, "--trace", 1, MNT_DIR_RUN);
  char why[600];
  if (st == MNT_OK && *found && (st = mnt_train_state_parse(json_object_get(ck->manifest, "state"), rs, why,
                                                            sizeof why)) != MNT_OK)
    MNT_ERR("%s: %s", ck->dir, why); /* accepted by state_ok: not reached */
  struct { int64_t found; mnt_train_state s; char run_id[MNT_RUN_ID_HEX + 1]; } hdr = {*found, *rs, ""};
  if (st == MNT_OK && w->rank == 0) st = run_identity(*found ? ck : NULL, hdr.run_id);
  MNT_CHECK(mnt_world_agree(w, st));
  MNT_CHECK(mnt_world_bcast(w, &hdr, sizeof hdr, 0));
  *found = (int)hdr.found;
  memcpy(r->run_id, hdr.run_id, sizeof r->run_id);
  r->run_id[MNT_RUN_ID_HEX] = '\0';
  /* accepted everywhere: a hang's last events may go there from now on (--out: where this rank sees
   * it as rank 0 did; a node-local --out that is not the user's own gets none) */
  r->dirs_ok = 1;
  if (o->trace_dir) mnt_trace_set_dump_dir(o->trace_dir);
  else if (w->rank == 0 || mnt_dir_usable(o->out, MNT_DIR_RUN)) mnt_trace_set_dump_dir(o->out);
  r->resumed_images = *found ? hdr.s.iv_n : 0;
  if (!*found) {
    if (!c->batch) c->batch = 32;
    return MNT_OK;
  }
  *rs = hdr.s;
  int64_t G = rs->global_batch;
  if (G % w->size) {
    if (w->rank == 0)
      MNT_ERR("the checkpoint's global batch %lld does not divide over %d ranks: resume it on a rank count that "
              "divides %lld", (long long)G, w->size, (long long)G);
    return mnt_world_agree(w, MNT_EARG);
  }
  int was = c->batch;
  c->batch = (int)(G / w->size);
  if (w->rank == 0 && was && was != c->batch)
    printf("mntrain train: --batch-per-rank %d ignored: the run's global batch is %lld, so %d per rank on %d ranks\n",
           was, (long long)G, c->batch, w->size);
  if (c->bn_batch && c->batch % c->bn_batch) {
    if (w->rank == 0)
      MNT_ERR("--bn-batch %d does not divide the %d images per rank of this resume (global batch %lld on %d "
              "ranks): leave --bn-batch out to keep the checkpoint's groups of %lld", c->bn_batch, c->batch,
              (long long)G, w->size, (long long)rs->bn_group);
    return mnt_world_agree(w, MNT_EARG);
  }
  if (!c->bn_batch) c->bn_batch = c->batch % rs->bn_group == 0 ? (int)rs->bn_group : c->batch;
  if (w->rank == 0 && c->bn_batch != rs->bn_group)
    MNT_WARN("batch-norm groups change from %lld to %d images (the checkpoint's do not divide %d per rank)",
             (long long)rs->bn_group, c->bn_batch, c->batch);
  return MNT_OK;
}

/* every rank: the trainer, its start (the checkpoint, which rank 0 loads and checks is this run's,
 * or --init) made rank 0's everywhere; the checkpoint writer */

/* ---- the trainer and the outputs ---------------------------------------------------------- */

/* rank 0, once: what each "auto" of --device, --comm and --precision became and why (the rules of
 * mnt_trainer_create and mnt_backend_create, said where their choice is known) */
static void say_auto(const opts *o, const mnt_trainer *t) {
  const char *dev = t->be->name;
  int cuda = t->cfg.device == MNT_DEVICE_CUDA;
  if (o->t.device == MNT_DEVICE_AUTO) printf("mntrain train: --device auto: %s (%s)\n", dev, t->device_why);
  if (o->t.comm == MNT_COMM_AUTO)
    printf("mntrain train: --comm auto: %s (device %s)\n", mnt_comm_names[t->cfg.comm], dev);
  if (o->t.precision == MNT_PREC_AUTO) {
    int bf16 = t->be->precision == MNT_PREC_BF16;
    if (cuda)
      printf("mntrain train: --precision auto: %s (the GPU is %s)\n", mnt_precision_name(t->be->precision),
             bf16 ? "Ampere or newer: bf16 tensor cores" : "older than Ampere: no bf16 tensor cores");
    else
      printf("mntrain train: --precision auto: %s (the CPU has %sbf16 instructions: %s)\n",
             mnt_precision_name(t->be->precision), bf16 ? "" : "no ", mnt_cpu_isa_name());
  }
  fflush(stdout);
}

int mnt_train_start_trainer(train_run *r, mnt_ckpt *ck, const mnt_train_state *rs, int found, int have_sig_thr) {
  opts *o = r->o;
  mnt_world *w = r->w;
  int st = mnt_trainer_create(w, &o->t, found ? rs : NULL, &r->t);
  if (st != MNT_OK) return st;
  mnt_trainer *t = r->t;
  if (w->rank == 0) say_auto(o, t);
  r->config = mnt_train_config_json(o, t);
  if (r->config) json_object_set_new(r->config, "run_id", json_string(r->run_id));
  if (w->rank == 0) {
    if (found) {
      st = mnt_trainer_load(t, ck);
      static const char *const run_keys[] = MNT_TRAIN_RUN_KEY_NAMES; /* what defines the run */
      if (st == MNT_OK)
        st = mnt_rundir_same_run(json_object_get(ck->manifest, "config"), r->config, ck->dir, run_keys,
                                 MNT_TRAIN_NRUN_KEYS);
      char p[MNT_PATH_MAX];
      snprintf(p, sizeof p, "%s/summary.json", o->out); /* resumed and unfinished: the run has no summary
                                                         * (one ended at its target is finished: it keeps it) */
      if (st == MNT_OK && rs->step < t->total && !rs->target_step && unlink(p) != 0 && errno != ENOENT) {
        st = MNT_SYSERR("%s: cannot remove", p);
      }
    } else if (o->init) {
      st = mnt_trainer_init_from(t, o->init);
    }
    mnt_ckpt_close(ck);
  }
  MNT_CHECK(mnt_world_agree(w, st));
  MNT_CHECK(mnt_trainer_sync(t)); /* identical start: rank 0's state everywhere */
  if (o->ckpt_dir &&
      (st = mnt_ckpt_writer_create(t->c, o->ckpt_dir, o->stripe, o->keep, found ? rs->step : -1, &r->wr)))
    return st;
  if (w->rank == 0 && have_sig_thr) mnt_train_signal_writer(r->wr);
  return MNT_OK;
}

/* every rank: rank 0 prints the effective configuration, writes config.json and opens
 * metrics.jsonl (a resumed run's kept up to its checkpoint); each rank its --sample-log; agreed */
int mnt_train_open_outputs(train_run *r, int found, const mnt_train_state *rs) {
  opts *o = r->o;
  mnt_world *w = r->w;
  mnt_trainer *t = r->t;
  const mnt_train_cfg *c = &o->t;
  int st = MNT_OK;
  if (found) json_object_set_new(r->config, "resumed_from_step", json_integer(rs->step));
  if (w->rank == 0) {
    char *txt = json_dumps(r->config, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(15));
    if (txt) printf("mntrain train: %s\n", txt);
    free(txt);
    st = mnt_json_save(o->out, "config.json", r->config);
    if (st == MNT_OK && !(r->metrics = mnt_rundir_open_log(r->mpath, found ? rs->step : -1, MNT_RUN_LOG_METRICS))) {
      st = MNT_SYSERR("%s: cannot open", r->mpath);
    }
    int cpu = t->cfg.device == MNT_DEVICE_CPU; /* the CPU's ISA: rank 0's (a node's kernels are named at set-up) */
    if (st == MNT_OK)
      printf("mntrain train: %s, %d ranks on %d nodes, global batch %lld (%d per rank), %lld steps (%lld per epoch), "
             "%.1f M parameters, %s %s%s%s%s\n",
             c->arch, w->size, w->nnodes, (long long)t->s.global_batch, c->batch, (long long)t->total,
             (long long)t->per_epoch, (double)t->m->nw / 1e6, t->be->name, mnt_precision_name(t->be->precision),
             cpu ? " on " : "", cpu ? mnt_cpu_isa_name() : "", found ? ", resumed" : "");
    fflush(stdout);
  }
  if (st == MNT_OK && o->sample_log) {
    char p[MNT_PATH_MAX];
    snprintf(p, sizeof p, "%s/samples-rank-%05d.txt", o->out, w->rank);
    if (!(r->samples = mnt_rundir_open_log(p, found ? rs->step : -1, MNT_RUN_LOG_SAMPLES))) {
      st = MNT_SYSERR("%s: cannot open", p);
    }
  }
  return mnt_world_agree(w, st);
}
