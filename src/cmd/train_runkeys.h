/* train_runkeys.h — what defines a training run, listed once: the keys of config.json (and of every
 * checkpoint's "config") that a resume must find unchanged. mnt_train_config_json writes each key
 * from this table, and the resume check compares exactly the table's keys
 * (io/rundir/rundir.h, mnt_rundir_same_run, with MNT_TRAIN_RUN_KEY_NAMES): a hyperparameter added
 * here is written and checked; one left out of the table is neither.
 * defines: MNT_TRAIN_RUN_KEYS, MNT_TRAIN_RUN_KEY_NAMES, MNT_TRAIN_NRUN_KEYS.
 *
 * X(key, when, value): value is the key's JSON value (a new reference) and is written when `when`
 * holds (a key a run without the option never had: the optimizer's own, the target); both read the
 * names c (the mnt_train_cfg), t (the mnt_trainer) and o (the command's opts). */
#ifndef MNT_TRAIN_RUNKEYS_H
#define MNT_TRAIN_RUNKEYS_H

#define MNT_TRAIN_RUN_KEYS(X)                                                                 \
  X("arch", 1, json_string(c->arch))                                                          \
  X("size", 1, json_integer(c->size))                                                         \
  X("seed", 1, json_integer(c->seed))                                                         \
  X("schedule", 1, json_string(mnt_sched_name(c->schedule)))                                  \
  X("lr", 1, mnt_json_num(c->lr))                                                             \
  X("warmup_epochs", 1, mnt_json_num(c->warmup_epochs))                                       \
  X("momentum", 1, mnt_json_num(c->momentum))                                                 \
  X("wd", 1, mnt_json_num(c->wd))                                                             \
  X("no_bn_decay", 1, json_boolean(c->no_bn_decay))                                           \
  X("zero_init_residual", 1, json_boolean(c->zero_init))                                      \
  X("min_crop", 1, mnt_json_num(c->min_scale))                                                \
  X("pad_crop", 1, json_integer(c->pad_crop))                                                 \
  X("label_smoothing", 1, mnt_json_num(c->smoothing))                                         \
  X("global_batch", 1, json_integer(t->s.global_batch))                                       \
  X("steps", 1, json_integer(t->total))                                                       \
  X("data_fingerprint", 1, json_string(t->train.fingerprint))                                 \
  X("optimizer", 1, json_string(mnt_optim_name(c->optimizer)))                                \
  X("lars_eta", t->opt.optimizer == MNT_OPTIM_LARS, mnt_json_num(c->lars_eta))                \
  X("rmsprop_warmup", t->opt.optimizer == MNT_OPTIM_RMSPROP_WARMUP,                           \
    json_pack("[o, o]", mnt_json_num(t->opt.rms_center), mnt_json_num(t->opt.rms_period)))    \
  X("rmsprop_lr", t->opt.optimizer == MNT_OPTIM_RMSPROP_WARMUP, mnt_json_num(c->rms_lr))      \
  X("bn_eval", 1, json_string(mnt_bn_eval_name(c->bn_eval)))                                  \
  X("bn_recompute_batches", c->bn_eval == MNT_BN_EVAL_RECOMPUTE, json_integer(c->bn_batches)) \
  X("target_top1", o->target_top1 > 0, mnt_json_num(o->target_top1))

#define MNT_TRAIN_RUN_KEY_NAME_(key, when, value) key,
/* the keys alone: a static const char *const array's initializer */
#define MNT_TRAIN_RUN_KEY_NAMES \
  { MNT_TRAIN_RUN_KEYS(MNT_TRAIN_RUN_KEY_NAME_) }
#define MNT_TRAIN_RUN_KEY_ONE_(key, when, value) +1
#define MNT_TRAIN_NRUN_KEYS (0 MNT_TRAIN_RUN_KEYS(MNT_TRAIN_RUN_KEY_ONE_))

#endif
