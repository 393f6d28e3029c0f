/* rundir.h — what happens to a training run's directories before it trains: --out, --ckpt-dir,
 * --trace and --export decided in one place (README "Runs and their outputs").
 * defines: mnt_rundir_cfg (the paths and choices of the command line), mnt_rundir_prepare (an
 *          earlier run resumed, replaced or refused; the run locks taken; the checkpoint to resume
 *          opened), mnt_rundir_same_run (a checkpoint's run and this command describe the same
 *          training), mnt_rundir_open_log (metrics.jsonl or a sample log, a resumed run's kept up
 *          to its checkpoint), mnt_output_probe (can PATH be written, in a directory that is safe?).
 *
 * The rules: --out and --ckpt-dir must be the user's own (src/safefs.h) and are locked for the run
 * (io/rundir/runlock.h) before anything in them is read or deleted. An earlier run in --out (any of
 * config.json, metrics.jsonl, summary.json and their .tmp files) is resumed when a checkpoint is
 * found, replaced with --force or when it provably never committed a checkpoint (no checkpoint in
 * --ckpt-dir, none recorded as committed by metrics.jsonl, no resumed_from_step in config.json,
 * and its config.json names the same --ckpt-dir), and refused otherwise: a run whose outputs
 * record a committed checkpoint that cannot be found is an error, never a silent start over.
 * --trace DIR is the user's own and loses an earlier run's traces; --export can be created. */
#ifndef MNT_RUNDIR_H
#define MNT_RUNDIR_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "io/ckpt/ckpt.h"
#include "io/rundir/runlock.h"

typedef struct mnt_rundir_cfg {
  const char *out;         /* --out, required */
  const char *ckpt_dir;    /* --ckpt-dir, NULL: no checkpoints */
  const char *trace_dir;   /* --trace, NULL: none */
  const char *export_path; /* --export, NULL: none */
  const char *resume;      /* "auto" (the newest valid checkpoint in ckpt_dir), "none" or a checkpoint's path */
  int force, no_verify;    /* --force (start over), --no-ckpt-verify */
  mnt_ckpt_accept_fn accept; /* what the caller checks of a checkpoint to resume (mnt_ckpt_open_checked) */
  void *accept_arg;
} mnt_rundir_cfg;

/* Rank 0, before anything is computed: the rules above applied. *found: a checkpoint to resume,
 * read into ck (checksums verified unless no_verify). locks[0], locks[1]: the locks of --out and
 * --ckpt-dir taken (NULL where not), to release with mnt_runlock_release whatever the outcome.
 * jobid: the Slurm job id ("" outside Slurm). MNT_EARG (a usage error: a directory refused, an
 * earlier run there, a --resume PATH without a valid checkpoint, an --export that cannot be
 * written) or MNT_EDATA (committed checkpoints missing, damaged ones), logged. */
int mnt_rundir_prepare(const mnt_rundir_cfg *c, const char *jobid, mnt_ckpt *ck, int *found, mnt_runlock **locks);
/* Rank 0: the checkpoint's run (its manifest's "config") and this command's configuration `now`
 * describe the same training: keys[0..nkeys), what defines a run (train: src/cmd/train_runkeys.h,
 * the architecture, size, seed, schedule and optimizer, global batch, steps, data fingerprint, the
 * --target-top1 it trains toward ...), are equal in both or absent from both (a run recorded before
 * "optimizer" or "bn_eval" existed ran sgd and running statistics); MNT_EARG naming the first key
 * that differs and the checkpoint dir */
int mnt_rundir_same_run(json_t *old, json_t *now, const char *dir, const char *const *keys, int nkeys);

typedef enum mnt_run_log {
  MNT_RUN_LOG_METRICS = 0, /* metrics.jsonl: a JSON object per line, its "step" */
  MNT_RUN_LOG_SAMPLES = 1, /* OUT/samples-rank-RRRRR.txt: "STEP id id ..." */
} mnt_run_log;

/* A log of the run, opened never through a symbolic link (mnt_open_log). resumed_step < 0: a new
 * file. Otherwise the lines up to resumed_step are kept (later ones were written by the
 * interrupted job after its checkpoint: they will be written again), rewritten whole, and the file
 * is appended to. NULL (logged, or errno set) when it cannot be opened. */
FILE *mnt_rundir_open_log(const char *path, int64_t resumed_step, mnt_run_log kind);

/* MNT_OK when a file can be created at path: its directory exists and is the user's or root's and
 * not writable by others without the sticky bit, and a file can be created there (tried, removed
 * again); MNT_EARG and an error naming `what` and path otherwise (checked when a run starts, not
 * discovered when it ends) */
int mnt_output_probe(const char *path, const char *what);

#endif
