/* trainer.h — the state of a data-parallel training run as one thing, and what can be done to it.
 * defines: mnt_train_cfg, mnt_train_state, mnt_step_out, mnt_trainer and
 *          mnt_trainer_create / sync / step / interval / evaluate / save / load / init_from / destroy.
 *
 * A checkpoint saves exactly: the model's weights, the optimizer's momentum and the BN running
 * statistics (tensors, under torchvision's names), and mnt_train_state (below). Everything else
 * is derived from the configuration: the learning rate from (config, step), the data order and
 * every augmentation from (seed, epoch, sample) — there is no other random state to carry.
 * Collective calls (every rank, same order): create, sync, step, interval, check_state, evaluate, save.
 *
 * Non-finite values: every step checks what it computed before the update (the averaged gradients,
 * and each rank's own loss and BN statistics, which a rank carries into the gradient allreduce as a
 * NaN so that every rank decides alike); a step that fails the check is not applied (no update, the
 * BN statistics restored) and is skipped (--skip-nonfinite) or stops the run (MNT_EDATA, exit 1)
 * naming the tensor and the step. The weights and momentum an update makes are checked at every
 * log interval, checkpoint and the end (mnt_trainer_check_state): an update cannot be undone, so a
 * non-finite one stops the run even with --skip-nonfinite, the last finite checkpoint kept. */
#ifndef MNT_TRAINER_H
#define MNT_TRAINER_H

#include <jansson.h>
#include <stdint.h>

#include "src/backend/backend.h"
#include "io/ckpt/ckpt.h"
#include "src/comm/comm.h"
#include "src/comm/reducer.h"
#include "io/data/dataset.h"
#include "io/data/loader.h"
#include "src/model/resnet.h"
#include "src/train/optim.h"

/* the BN statistics evaluation, checkpoints and --export use: PyTorch's running averages (momentum
 * 0.1); the last training batch's (Akiba et al. 2017: no moving averages); or recomputed before each
 * use from the batches of the last bn_batches steps through the current weights (each rank's share;
 * the mean of the batches' means and of their variances, "precise BN"). Either way averaged over the
 * ranks where they are used. */
typedef enum { MNT_BN_EVAL_RUNNING = 0, MNT_BN_EVAL_LAST = 1, MNT_BN_EVAL_RECOMPUTE = 2, MNT_NBN_EVAL } mnt_bn_eval;
extern const char *const mnt_bn_eval_names[MNT_NBN_EVAL]; /* as --bn-eval spells them, by value */
const char *mnt_bn_eval_name(mnt_bn_eval e);

typedef struct mnt_train_cfg {
  const char *data, *val, *arch;
  mnt_device device;  /* MNT_DEVICE_AUTO: resolved once, by mnt_trainer_create (t->be is what it became) */
  mnt_comm_kind comm; /* MNT_COMM_AUTO: the device's (nccl with cuda, else cpu) */
  mnt_sched schedule;
  mnt_optim optimizer;
  mnt_topology topology;
  mnt_dtype grad_dtype;     /* of the gradients handed to the allreduce */
  mnt_precision precision;  /* MNT_PREC_AUTO: the backend's choice (backend.h); t->be->precision is what it became */
  int size, batch, bn_batch, epochs, steps, loader_threads, seed, skip_nonfinite, zero_init, no_bn_decay, pad_crop;
  double lr, warmup_epochs, bucket_mb, momentum, wd, min_scale, val_crop, smoothing, lars_eta;
  double rms_center, rms_period, rms_lr; /* rmsprop-warmup (train/optim.h); C, P < 0: the paper's 10:5 of 90 */
  mnt_bn_eval bn_eval;
  int bn_batches;           /* recompute: steps whose batches are taken */
  int cuda_graph;           /* 1: steps after the first as one graph each (mnt_trainer_step) */
} mnt_train_cfg;

/* the scalars a checkpoint saves */
typedef struct mnt_train_state {
  int64_t step;                    /* steps done */
  int64_t epoch, cursor;           /* the loader's position of the next global batch */
  int64_t skipped;                 /* steps skipped for non-finite gradients */
  int64_t global_batch, bn_group;  /* the run's invariants (a resume on other rank counts keeps them) */
  double iv_loss, iv_top1, iv_n;   /* sums over the log interval in progress: this rank's while it trains,
                                    * all ranks' in a checkpoint (restored to rank 0 alone) */
  int eval_due;                    /* 1: saved at an evaluation point before its validation (a stop: a
                                    * preempted job has seconds); the resumed run evaluates first */
  int64_t target_step;             /* --target-top1 reached after this step (0: not): the run is complete */
  double elapsed_s;                /* wall seconds of this run's jobs up to the state (time to accuracy) */
  double best_top1;                /* the run's best validation top-1 so far (0: none yet) */
} mnt_train_state;

/* what one step did (this rank) */
typedef struct mnt_step_out {
  double phase[5]; /* seconds: data wait, forward, backward, exposed comm, optimizer */
  int n, skipped;
} mnt_step_out;

typedef struct mnt_trainer {
  mnt_train_cfg cfg;     /* effective: on resume the batch per rank is derived from the global batch */
  char device_why[160];  /* --device auto: why it became what it did (the set-up says so) */
  mnt_world *w;
  mnt_comm *c;
  mnt_backend *be;
  mnt_resnet *m;
  mnt_loader *ld;
  mnt_dataset train, val;
  int have_train, have_val;
  mnt_optim_cfg opt;       /* the optimizer's and the schedule's configuration */
  int64_t per_epoch, total; /* batches per epoch, steps of the whole run */
  mnt_train_state s;        /* saved by a checkpoint */
  /* this job only */
  mnt_reducer *red;
  float *iv_dev;            /* backend memory: this interval's loss sum, top-1 and top-5 (read at log time) */
  mnt_step_hp *hp_dev;      /* backend memory: the step's learning rate and blend, written before its update */
  /* backends that augment (cuda): raw batches go up in two lanes (backend.h, mnt_upload_*), the next
   * batch on the copy stream while the current one trains (MNT_COPY_OVERLAP=off: each at the start
   * of its own step). A lane holds the batch's pixels, boxes and labels on the device, its boxes and
   * labels page-locked on the host (the loader's own are pageable) and what the step reads of it. */
  struct mnt_up_lane {
    uint8_t *raw_dev;
    float *box_dev, *box_host;
    int32_t *lab_dev, *lab_host;
    int64_t *ids;
    mnt_batch b;                 /* n, ids and labels the lane's own; raw not to be read */
    int64_t epoch, cursor;       /* the loader's position after this batch */
    int full;                    /* uploaded (or under way), not trained yet */
  } lane[2];
  int raw, overlap, cur_lane;   /* raw: the backend augments; cur_lane: the lane of the step in progress */
  float *hw, *hm, *hbn;     /* host copies of weights, the optimizer's state (m->nstate tensors) and BN statistics for checkpoints and
                             * exports when the backend's memory is not the host's (else the model's) */
  double comm_span;         /* seconds from a step's first bucket start to its last completion */
  /* the non-finite check of the whole state (trainer.c "Non-finite values"): backend memory */
  float *bn_prev;           /* the BN statistics before the step in progress (restored when it is skipped) */
  int32_t *own_flag;        /* [0] this rank's BN statistics, [1] its loss: non-finite after the forward */
  int32_t *state_flag;      /* [0] weights, [1] momentum, [2] BN statistics: non-finite (mnt_trainer_check_state) */
  int poison_due;           /* the first gradient backward reports takes own_flag into the allreduce */
  int hook_st;              /* a failure inside the gradient hook */
  const mnt_batch *last;    /* the newest batch (ids for a sample log) */
  float grad_weight;        /* this rank's gradient scale: 1, or n R / B for an uneven share (regroup) */
  void *graph[2];           /* cfg.cuda_graph on a backend that replays: the captured step of each upload lane */
} mnt_trainer;

/* Collective. Opens the data, builds the model and the loader at state->epoch/cursor (NULL: the
 * start), creates the communicator. Every rank's weights are its own until mnt_trainer_sync. */
int mnt_trainer_create(mnt_world *w, const mnt_train_cfg *cfg, const mnt_train_state *state, mnt_trainer **out);
/* rank 0: load weights, momentum and BN statistics from a checkpoint */
int mnt_trainer_load(mnt_trainer *t, const mnt_ckpt *ck);
/* rank 0: start from the weights of an HDF5 file (an --export file or a checkpoint's state.h5),
 * checked by name and shape; momentum stays zero */
int mnt_trainer_init_from(mnt_trainer *t, const char *path);
/* Collective: rank 0's weights, momentum and BN statistics everywhere. */
int mnt_trainer_sync(mnt_trainer *t);
/* Collective: one training step (reads, forward, loss, backward overlapped with the gradient
 * allreduce, non-finite check, SGD). With cfg.cuda_graph, every step after the first runs its work
 * from the forward to the update as one graph: on a backend that replays (cuda) captured once per
 * upload lane (a CUDA graph: kernels, cuDNN, cuBLAS and NCCL's collectives launched as one) and
 * replayed, the host waiting once at its end against the communicator's deadline; elsewhere (cpu)
 * run as it would be captured, so that what a graph cannot hold fails here too (backend.h:
 * mnt_be_capture_begin). The same results either way. The graphs are made again after an
 * evaluation, a BN recomputation and a regroup. */
int mnt_trainer_step(mnt_trainer *t, mnt_step_out *out);
/* Collective: the log interval's mean loss and top-1 over all ranks and its images; resets it. The
 * whole state is checked too (as mnt_trainer_check_state). */
int mnt_trainer_interval(mnt_trainer *t, double *loss, double *top1, double *images);
/* Collective: the weights, momentum and BN statistics all finite; else MNT_EDATA on every rank (agreed),
 * the first non-finite tensor and the step named (when: "checked before its checkpoint"): nothing
 * non-finite is checkpointed or exported */
int mnt_trainer_check_state(mnt_trainer *t, const char *when);
/* Collective: BN statistics (recomputed first under --bn-eval recompute, the running ones put back
 * after) averaged over ranks, then loss / top-1 / top-5 on --val, every sample once (ChainerMN's
 * multi-node evaluator). */
int mnt_trainer_evaluate(mnt_trainer *t, double *loss, double *top1, double *top5);
/* Collective: BN statistics averaged over ranks, then a checkpoint of the trainer started on wr
 * (config: the run's configuration, recorded in it). */
int mnt_trainer_save(mnt_trainer *t, mnt_ckpt_writer *wr, json_t *config);
/* Collective among the survivors of a loss (after mnt_comm_shrink): the most advanced survivor's
 * weights, momentum, BN statistics and state everywhere (a step whose allreduce failed is dropped),
 * then the same global batch split over them (uneven where it must be: mnt_loader_split), the model
 * rebuilt at the new batch per rank, the loader at the state's position. When a rank's larger share
 * does not fit (memory, --bn-batch), MNT_ENOMEM on every rank (agreed) with why: the caller's
 * policy follows (a checkpoint and a requeue at full size). */
int mnt_trainer_regroup(mnt_trainer *t, char *why, size_t why_n);
/* this rank: the BN statistics a finished run keeps (its final checkpoint, --export): under --bn-eval
 * recompute recomputed from the current weights; nothing to do otherwise */
int mnt_trainer_bn_final(mnt_trainer *t);
/* host pointers to the weights, momentum and BN statistics, current (downloaded from the device
 * where needed); mnt_trainer_upload sends the host copies back */
int mnt_trainer_host_model(mnt_trainer *t, float **w, float **m, float **bn);
int mnt_trainer_upload(mnt_trainer *t);
/* learning rate of the current step */
double mnt_trainer_lr(const mnt_trainer *t);
/* The state a checkpoint carries, as JSON, and back: MNT_EDATA with why (n bytes; nothing logged)
 * when a key is missing or a number is out of what a run can reach. */
json_t *mnt_train_state_json(const mnt_train_state *s);
int mnt_train_state_parse(json_t *o, mnt_train_state *s, char *why, size_t n);
void mnt_trainer_destroy(mnt_trainer *t);

#endif
