/* runsum.h — summary.json of a finished `mntrain train` run (written by cmd/train_outputs.c), read
 * once for `mntrain report` and `mntrain model`. The reader keeps what is there and says what is
 * not; each command decides which keys it needs and says so in its own words.
 * defines: mnt_run_summary, MNT_RS_* (its numbers, phases_ms.* and step_ms.mean included),
 *          MNT_RS_PHASE / MNT_RS_NPHASE, MNT_RUN_ID_HEX, mnt_run_summary_read, mnt_rs_present, mnt_rs_is_int,
 *          mnt_is_run_id */
#ifndef MNT_RUNSUM_H
#define MNT_RUNSUM_H

#include <stdint.h>

/* the numbers of summary.json, by key; "a.b" is key b of object a */
enum {
  MNT_RS_RANKS,             /* "ranks" */
  MNT_RS_NODES,             /* "nodes" */
  MNT_RS_RANKS_PER_NODE,    /* "ranks_per_node" */
  MNT_RS_IMAGE_SIZE,        /* "image_size" */
  MNT_RS_BATCH_PER_RANK,    /* "batch_per_rank" */
  MNT_RS_GLOBAL_BATCH,      /* "global_batch" */
  MNT_RS_GRAD_BYTES,        /* "grad_bytes" */
  MNT_RS_IMG_PER_S,         /* "img_per_s" */
  MNT_RS_STEP_MS_MEAN,      /* "step_ms.mean" */
  MNT_RS_THREADS_PER_RANK,  /* "threads_per_rank" */
  MNT_RS_DEVICES_PER_RANK,  /* "devices_per_rank" */
  MNT_RS_STEPS,             /* "steps" */
  MNT_RS_STEPS_THIS_JOB,    /* "steps_this_job" */
  MNT_RS_WARMUP_STEPS,      /* "warmup_steps" */
  MNT_RS_RESUMED_FROM_STEP, /* "resumed_from_step" */
  MNT_RS_STEPS_DONE,        /* "steps_done" (fewer than steps when --target-top1 ended the run) */
  MNT_RS_VAL_TOP1,          /* "val_top1" (the last evaluation) */
  MNT_RS_BEST_VAL_TOP1,     /* "best_val_top1" */
  MNT_RS_TARGET_TOP1,       /* "target_top1" (--target-top1) */
  MNT_RS_TARGET_STEP,       /* "target_step" (reached at) */
  MNT_RS_TARGET_EPOCH,      /* "target_epoch" */
  MNT_RS_TARGET_TIME_S,     /* "target_time_s" */
  MNT_RS_PHASE,             /* "phases_ms.data", then forward, backward, comm_exposed, optimizer */
  MNT_RS_NPHASE = 5,
  MNT_RS_N = MNT_RS_PHASE + MNT_RS_NPHASE
};

enum { MNT_RS_STRMAX = 64 };

/* a run's identity: 16 lowercase hex digits (train draws it; a resumed run keeps it) */
enum { MNT_RUN_ID_HEX = 16 };

typedef struct mnt_run_summary {
  double num[MNT_RS_N];  /* the value when a JSON number, else NAN */
  int64_t ival[MNT_RS_N]; /* the value when a JSON integer, else 0 */
  uint32_t present;       /* bit k: key k is there (of any type); MNT_RS_N <= 32 */
  uint32_t integer;       /* bit k: key k is a JSON integer */
  /* strings: "" when absent, not a string, or MNT_RS_STRMAX bytes or longer */
  char arch[MNT_RS_STRMAX], device[MNT_RS_STRMAX], precision[MNT_RS_STRMAX], topology[MNT_RS_STRMAX];
  char optimizer[MNT_RS_STRMAX], schedule[MNT_RS_STRMAX], bn_eval[MNT_RS_STRMAX];
  /* "run_id": the run's identity (16 lowercase hex digits; config.json's and every metrics.jsonl line's
   * too); "" when absent or not such a string. have_run_id: 0 absent (a run from before run ids),
   * 1 there but not a run id, 2 a run id */
  char run_id[MNT_RS_STRMAX];
  int have_run_id;
  int target_reached; /* "target_reached": -1 absent or not a boolean, else 0 or 1 */
  int have_arch, have_device; /* the key is there (of any type) */
  int phases_ms;              /* "phases_ms": 0 absent, 1 there but not an object, 2 an object */
  /* why the read failed: jansson's text and line, or "not a JSON object" (parsed: 1) */
  char err[160];
  int err_line, parsed;
} mnt_run_summary;

/* path (a summary.json) into *s. MNT_OK, or MNT_EARG when it cannot be read or parsed or is not a
 * JSON object, with s->err, s->err_line and s->parsed saying which; nothing is logged. */
int mnt_run_summary_read(const char *path, mnt_run_summary *s);

/* 1 when s is a run id: MNT_RUN_ID_HEX lowercase hex digits, nothing else */
int mnt_is_run_id(const char *s);

static inline int mnt_rs_present(const mnt_run_summary *s, int k) { return (int)(s->present >> k & 1u); }
static inline int mnt_rs_is_int(const mnt_run_summary *s, int k) { return (int)(s->integer >> k & 1u); }

#endif
