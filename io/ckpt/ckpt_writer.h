/* ckpt_writer.h — the checkpoint writer's own state, shared by the two files that make it
 * (io/ckpt/ckpt_write.c: begin, the share's thread, the commit; io/ckpt/ckpt_layout.c: the file's
 * layout); nothing else includes it. The public API is io/ckpt/ckpt.h.
 * defines: share_info, share_rec (a rank's share record on disk), struct mnt_ckpt_writer,
 *          mnt_ckpt_agree, mnt_ckpt_layout. */
#ifndef MNT_CKPT_WRITER_H
#define MNT_CKPT_WRITER_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"

/* what every rank reports when its share is on disk */
typedef struct share_info { uint64_t lo, hi, packed, bytes, hash; int64_t status; } share_info;

/* INCOMING/share-RRRRR: a rank's share_info on disk, written by its thread once the share is
 * fsynced (or failed), so that rank 0 can commit without the communicator (mnt_ckpt_commit_now).
 * Fixed binary, native byte order (every rank of a job runs on the same kind of machine); whole
 * only when it has all its bytes and its checksum matches: anything else is not there yet. */
#define REC_MAGIC "mntshr1"
typedef struct share_rec {
  char magic[8];
  uint64_t token, seq;  /* the writer's token and the checkpoint's sequence number */
  int64_t step, rank;
  share_info s;
  uint64_t check;       /* XXH3-64 of the bytes before it */
} share_rec;

struct mnt_ckpt_writer {
  mnt_comm *c;
  char root[MNT_PATH_MAX];
  size_t stripe;
  int keep;
  int64_t last_step;
  int early_writeback;    /* sync_file_range after each piece (not on FUSE) */
  int direct;             /* this rank's pieces written with O_DIRECT where aligned (local filesystems) */
  /* the file's layout, the same for every checkpoint of this writer (made at the first begin) */
  int nt;                 /* tensors, the training-state dataset last */
  uint64_t *offsets;      /* of each dataset, by tensor */
  uint64_t file_bytes;
  mnt_ckpt_extent *mine;  /* this rank's pieces, file order */
  int npieces;
  share_info share;       /* this rank's share (hash and status filled by the thread) */
  mnt_ckpt_extent *meta;  /* rank 0: the metadata blocks of the skeleton (off, bytes, packed = into meta_bytes) */
  int nmeta;
  uint8_t *meta_bytes;
  json_t *datasets;       /* rank 0: the manifest's "datasets" */
  /* the checkpoint in flight */
  int pending;
  int64_t step;
  char dir[MNT_PATH_MAX];      /* the step directory it becomes */
  char path[MNT_PATH_MAX];     /* the file being written (in incoming) */
  char incoming[MNT_PATH_MAX]; /* ROOT/incoming-TOKEN-SEQ: where the next checkpoint is written */
  uint64_t token, seq;         /* the writer's random token (rank 0's, broadcast) and commit count */
  pthread_t thr;
  int have_thr;
  int done;               /* the thread finished (atomic) */
  uint8_t *stage;
  size_t stage_cap;
  char state_text[MNT_CKPT_STATE_BYTES];
  json_t *manifest;       /* rank 0: the manifest being prepared */
  char rec_path[MNT_PATH_MAX]; /* this rank's share record of the checkpoint in flight (INCOMING/share-RRRRR) */
  uint64_t rec_seq;       /* the checkpoint in flight's seq (the thread's copy) */
  /* Rank 0's commit against mnt_ckpt_commit_now (the signal thread): mu guards pending, step, dir,
   * manifest, incoming, seq and early, and the commit itself, so that exactly one of finish and
   * commit_now commits a checkpoint. The main thread writes those fields only under it. */
  pthread_mutex_t mu;
  pthread_cond_t idle;    /* signalled when callers drops to 0 */
  int callers;            /* commit_now calls in progress (destroy waits for them) */
  int closing;            /* destroy has begun: commit_now gives up */
  int early;              /* rank 0: the checkpoint in flight was committed by commit_now */
  int early_status;       /* ... with this status (finish reports it instead of committing) */
  int epoch;              /* the membership epoch recorded in each manifest (mnt_ckpt_writer_fence) */
  int (*fence)(void *ctx); /* rank 0, before each commit: MNT_OK while this group may write the run */
  void *fence_ctx;
};

/* Every rank's status, agreed over the communicator (a one-float allreduce): MNT_OK when all are,
 * else this rank's failure (or MNT_ESYS for a rank that did not fail itself). */
int mnt_ckpt_agree(mnt_ckpt_writer *wr, int st);
/* Collective, once per writer: rank 0 builds the layout of tensors t (nt, the training state last)
 * with root attributes attrs and broadcasts it; every rank finds its share and allocates the
 * staging buffer for it. */
int mnt_ckpt_layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, json_t *attrs);

#endif
