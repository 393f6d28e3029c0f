/* ckpt.h — collective checkpoints: one shared HDF5 file written by every rank, committed by a
 * manifest (io/ckpt/README.md).
 * defines: mnt_ckpt_tensor, mnt_ckpt_writer (create / begin / pending / local_done / finish /
 *          commit_now / last_step / destroy: io/ckpt/ckpt_write.c, the layout io/ckpt/ckpt_layout.c),
 *          mnt_ckpt (open / get / close: find, verify and read one: io/ckpt/ckpt_read.c),
 *          mnt_ckpt_remove_all, mnt_ckpt_newest, mnt_ckpt_is_path / mnt_ckpt_inspect,
 *          mnt_ckpt_step_dir (the step directories of a root, retention, inspect: io/ckpt/ckpt_retain.c).
 * What those files share is io/ckpt/ckpt_internal.h (theirs alone; the writer's two, ckpt_writer.h).
 *
 * On disk: ROOT/step-00001000/state.h5 + MANIFEST.json (+ share-RRRRR, one small record per rank,
 * read by nothing once committed). state.h5 is plain HDF5 (h5py, h5dump):
 * one contiguous float32 dataset per tensor (/model/<torchvision name>, /optim/momentum/<name>,
 * /bn/<name>), root attributes for the training state and the run's configuration (JSON).
 *
 * Writing (every rank, the same calls in the same order):
 *  1. begin: the file's layout is made once per writer: rank 0 builds the HDF5 skeleton as a
 *     scratch file in /dev/shm — every dataset allocated early and unfilled, objects of a stripe
 *     or more aligned to the stripe (H5Pset_alignment) — and broadcasts the byte offset of every
 *     dataset (H5Dget_offset) and the file's size. The data range is cut at stripe boundaries into
 *     one contiguous share per rank. Each checkpoint is written into ROOT/incoming-TOKEN-SEQ/state.h5,
 *     made empty by rank 0 ahead of time (at the previous commit), under a name never used before
 *     (a GlusterFS client may resolve an old name to the file renamed away). At begin the ranks
 *     agree that each can take part (a one-float allreduce) and copy the bytes of their share into
 *     a staging buffer: the only time the training loop is held up. A thread of each rank's own
 *     pwrite()s them in 8 MiB pieces (rank 0 also the file's size and the skeleton's metadata) and
 *     fsync()s, a second thread hashing them meanwhile (XXH3-64); then the thread records what
 *     the manifest needs of the share (its range, hash and status, failed or not) as
 *     INCOMING/share-RRRRR: created exclusively, fixed binary with a checksum (a half-written one
 *     is told from a whole one), fsynced. The training state (step, position, ...) is a dataset
 *     too (/train_state, fixed-size JSON text), so the layout and the metadata never change
 *     within a run.
 *  2. finish (when every rank's thread is done, or at once to wait): the statuses and hashes are
 *     gathered (allgather); rank 0 writes MANIFEST.json into the incoming directory (tmp → fsync
 *     → rename → fsync), renames the directory to ROOT/step-NNNNNNNN, fsyncs ROOT, deletes
 *     checkpoints beyond the newest `keep`, makes the next incoming file, and broadcasts the
 *     result. A directory without a manifest, or not named step-N, is no checkpoint; one whose
 *     manifest is there but does not parse is a damaged one.
 *  2'. commit_now (rank 0, any thread: a stop request while a step is computed, when the job may
 *     be killed before the next step boundary): the same commit, from the share records on disk
 *     instead of the allgather (the main thread may be inside a collective), once every rank's
 *     is there and good. One mutex of the writer guards rank 0's commit and the checkpoint in
 *     flight, so exactly one of finish and commit_now commits a checkpoint; the next finish
 *     still gathers (every rank takes part), finds it committed, and broadcasts that status. The
 *     manifest is the same bytes either way, and every rank ends with the same next incoming name.
 * Files are made without following links: INCOMING/state.h5 and the share records with
 * O_CREAT|O_EXCL|O_NOFOLLOW in a directory just made, the writers open state.h5 O_NOFOLLOW, and a
 * removal unlinks a link under a checkpoint's name instead of emptying what it points to.
 * Reading (one process: rank 0 of a resuming job, or `mntrain inspect`): the newest directory
 * whose manifest parses (duplicate keys refused), holds together before any of its numbers is
 * used (datasets inside the file, not overlapping; one share per rank, tiling the data exactly, each
 * with a hash; its step the directory's), whose file (a regular file, not a link) has the recorded
 * size, HDF5 layout and configuration (root attribute config), whose every share hashes to the
 * recorded value, whose "state" is the file's /train_state, and which the caller accepts; a failing one (a manifest that is there but does not
 * parse counts) is reported by name and the previous one is tried.
 * The data is read once into memory, as one packed image (datasets in file order). */
#ifndef MNT_CKPT_H
#define MNT_CKPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "src/comm/comm.h"
#include "src/path.h"

#define MNT_CKPT_FORMAT "mntrain-checkpoint"
#define MNT_CKPT_VERSION 1
#define MNT_CKPT_MANIFEST "MANIFEST.json"
#define MNT_CKPT_FILE "state.h5"

#define MNT_CKPT_STATE_BYTES 4096 /* /train_state: the state's JSON, padded with spaces */

typedef struct mnt_ckpt_tensor {
  char name[192];  /* HDF5 path, e.g. "/model/layer1.0.conv1.weight" */
  void *data;      /* writing: the values (read during begin only); reading: where they go */
  size_t n;        /* elements */
  int ndims, dims[4];
  int bytes_per;   /* 0: float32; 1: uint8 */
} mnt_ckpt_tensor;

static inline uint64_t mnt_ckpt_tensor_bytes(const mnt_ckpt_tensor *t) {
  return (uint64_t)t->n * (t->bytes_per ? 1u : 4u);
}

typedef struct mnt_ckpt_writer mnt_ckpt_writer;

/* Collective. root: the checkpoint directory (rank 0 creates it, or checks that it is the
 * user's own: src/safefs.h; on Lustre it sets the striping); stripe: alignment and share
 * granularity in bytes (a power of two); keep: checkpoints kept (>= 1); resumed_step: the step
 * of the checkpoint the run resumed from (-1: none): it is not written again, and newer step
 * directories (a branch the run abandons) are set aside. */
int mnt_ckpt_writer_create(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t resumed_step,
                           mnt_ckpt_writer **out);
/* Collective, after a shrink (--on-rank-loss shrink): a writer for the same root that touches
 * nothing in it at creation (no step directory set aside, no unfinished write removed: the root
 * was prepared when the job started); last_step: the newest checkpoint committed so far. */
int mnt_ckpt_writer_rejoin(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t last_step,
                           mnt_ckpt_writer **out);
/* Rank 0: every commit from now on records "membership_epoch": epoch in its manifest, and is made
 * only when fence(ctx) returns MNT_OK just before it (this group still holds the run's lock);
 * otherwise the commit fails with fence's status and nothing is renamed or retained. */
void mnt_ckpt_writer_fence(mnt_ckpt_writer *wr, int epoch, int (*fence)(void *ctx), void *ctx);
/* Collective: start checkpoint `step` of these tensors (identical on every rank, the same list
 * every time), with `state` (the training state: "state" in the manifest and the dataset
 * /train_state, its JSON text), `attrs` (the file's root attributes; with `config`, the run's
 * configuration, they must not change between checkpoints of one writer: the file's layout is
 * made once). A checkpoint still in flight is finished first. Returns when this rank's share is
 * staged; *stall_s: the seconds this call took. */
int mnt_ckpt_begin(mnt_ckpt_writer *wr, int64_t step, const mnt_ckpt_tensor *t, int nt, json_t *state, json_t *attrs,
                   json_t *config, double *stall_s);
/* 1 when a checkpoint is in flight */
int mnt_ckpt_pending(const mnt_ckpt_writer *wr);
/* 1 when this rank's share of the checkpoint in flight is on disk (or none is in flight) */
int mnt_ckpt_local_done(mnt_ckpt_writer *wr);
/* Collective: wait for this rank's share, agree, commit (rank 0). MNT_OK when nothing is in flight.
 * A failure on any rank fails it on every rank (the same status), leaving the previous
 * checkpoints as they were. */
int mnt_ckpt_finish(mnt_ckpt_writer *wr);
/* Any thread of rank 0 (other ranks: MNT_OK at once, *committed = 0): commit the checkpoint in
 * flight as soon as every rank's share record is on disk, without the communicator (the main
 * thread may be inside a collective). Waits at most timeout_s for the records (polling); a failed
 * share, a missing record at the deadline, or nothing in flight: no commit (*committed = 0, and
 * MNT_OK unless something on disk failed). The next collective mnt_ckpt_finish then agrees on it
 * as usual and does not commit it again. */
int mnt_ckpt_commit_now(mnt_ckpt_writer *wr, double timeout_s, int *committed);
/* the step of the newest checkpoint this writer committed (-1: none); one committed by commit_now
 * counts once finish has agreed on it */
int64_t mnt_ckpt_last_step(const mnt_ckpt_writer *wr);
/* Does not commit: a checkpoint in flight is abandoned (its thread joined). Waits for a
 * commit_now in progress (which gives up its wait for the records); none may start after it. */
void mnt_ckpt_writer_destroy(mnt_ckpt_writer *wr);

/* A checkpoint read into memory. */
typedef struct mnt_ckpt {
  char dir[MNT_PATH_MAX]; /* ROOT/step-... */
  int64_t step;
  json_t *manifest;   /* the whole manifest; "state" and "config" inside */
  uint8_t *image;     /* every dataset's bytes, in file order */
  size_t image_bytes;
  int verified;       /* the shares' hashes were checked */
} mnt_ckpt;

/* path: a checkpoint root (the newest valid step-* in it), a step directory or its state.h5.
 * verify: check every share's hash. Returns MNT_OK with *found = 0 when a root holds no
 * checkpoint (step directories without any MANIFEST.json are unfinished writes: skipped, said at
 * info level); MNT_EDATA when a named checkpoint fails its checks, or when a root holds
 * checkpoints and none passes (a damaged run is not a fresh start). In a root, a checkpoint is
 * damaged (a warning naming it and why, and the previous one is tried) when its MANIFEST.json is
 * there but does not parse, is not a manifest or is of a newer format, or when its state.h5 fails
 * its checks. MNT_EARG when path does not exist. */
int mnt_ckpt_open(const char *path, int verify, mnt_ckpt *out, int *found);
/* What a caller checks of a checkpoint beyond what is verified here (the training state's numbers
 * in range, ...): MNT_OK, or MNT_EDATA with why (n bytes) when the checkpoint must not be used. */
typedef int (*mnt_ckpt_accept_fn)(const mnt_ckpt *c, void *arg, char *why, size_t n);
/* mnt_ckpt_open, with accept(c, arg) asked of each checkpoint that passes its checks: one it
 * refuses is damaged like one whose checksum fails (in a root: a warning and the previous one) */
int mnt_ckpt_open_checked(const char *path, int verify, mnt_ckpt_accept_fn accept, void *arg, mnt_ckpt *out,
                          int *found);
/* Copy the tensor named `name` into dst (n elements); shape must match dims. MNT_EDATA naming
 * the checkpoint when it is missing or has another shape. */
int mnt_ckpt_get(const mnt_ckpt *c, const char *name, float *dst, size_t n, int ndims, const int *dims);
void mnt_ckpt_close(mnt_ckpt *c);
/* remove every step-* directory of root (each manifest first): a run started over */
int mnt_ckpt_remove_all(const char *root);
/* the newest step-* directory of root holding a MANIFEST.json, parsing or not (a damaged checkpoint
 * is an earlier run's too; no data read), -1 if none */
int64_t mnt_ckpt_newest(const char *root);
/* 1 when path looks like a checkpoint: a state.h5, a directory with a manifest, or a root of step-*
 * directories (and no dataset index) */
int mnt_ckpt_is_path(const char *path);
/* `mntrain inspect` of a checkpoint or a root: what it holds, its checksums verified; MNT_EDATA
 * when one is damaged */
int mnt_ckpt_inspect(const char *path);
/* "ROOT/step-00001000" */
void mnt_ckpt_step_dir(char *out, size_t n, const char *root, int64_t step);

#endif
