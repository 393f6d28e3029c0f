/* world.h — who this process is, from PMIx (srun --mpi=pmix), and small-data exchange.
 * defines: mnt_world, mnt_world_init, mnt_world_allgather, mnt_world_bcast, mnt_world_barrier,
 *          mnt_world_agree, mnt_world_abort, mnt_world_finalize, MNT_PHASE_*, mnt_world_phase,
 *          mnt_world_phases (the set-up's phases, the slowest rank's, as one line),
 *          mnt_world_leave (PMIx left after set-up, agreement handed to the communicator),
 *          mnt_world_shrink (the ranks renumbered after a loss).
 * Exchange goes over PMIx put/commit/fence(collect)/get: for addresses, ids, secrets and
 * agreement, not for tensors. Without a PMIx server the process is rank 0 of 1 (said once, by
 * the commands that run as a job). Slurm's SLURM_* variables are never the source of identity;
 * they are read only to refuse a multi-task step that has no PMIx (srun --mpi=none, or a site
 * whose MpiDefault is not pmix), which would otherwise run N independent single-rank jobs. */
#ifndef MNT_WORLD_H
#define MNT_WORLD_H

#include <stddef.h>
#include <stdlib.h>

#define MNT_NODENAME_MAX 64

/* Where the set-up of a job goes, phase by phase (mnt_world_phase): from the process's start to
 * PMIx_Init done, the identities' fence, this program's own preparation (options, data, model:
 * everything not named otherwise), a communicator's secret (a PMIx broadcast), its shared-memory
 * segment, its addresses and TCP connections, and the first training step. */
enum {
  MNT_PHASE_LAUNCH,
  MNT_PHASE_IDENT,
  MNT_PHASE_PREP,
  MNT_PHASE_SECRET,
  MNT_PHASE_SHM,
  MNT_PHASE_TCP,
  MNT_PHASE_FIRST_STEP,
  MNT_NPHASES
};

typedef struct mnt_world {
  int rank, size;             /* PMIX_RANK, PMIX_JOB_SIZE */
  int local_rank, local_size; /* PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE */
  int node_rank, nnodes;      /* PMIX_NODEID (renumbered 0..nnodes-1), node count */
  char hostname[MNT_NODENAME_MAX]; /* this rank's node: its name in the job's node map, else PMIX_HOSTNAME */
  char nspace[256];           /* PMIx namespace, unique per job step ("single" without PMIx) */
  char jobid[64];             /* job id for names and reports ("" when unknown) */
  int have_pmix;              /* 1 when a PMIx server answered */
  /* for every rank r: its node index, local rank and node name */
  int *node_of, *local_of;
  char (*node_name)[MNT_NODENAME_MAX];
  unsigned seq;               /* exchange counter: keys are unique per call */
  unsigned fences;            /* fences so far: each rank's arrival record names its fence */
  int fence_failed;           /* a fence's failure: every later one fails at once with it */
  unsigned long records_read; /* PMIx records this rank has read, atomically (the set-up report) */
  double timeout_s;           /* deadline of every exchange (MNT_COMM_TIMEOUT) */
  int up;                     /* mnt_world_init got far enough that finalize (and abort) apply */
  int failed_together;        /* the failure every rank agreed on (mnt_world_agree), 0 if none */
  double phase_s[MNT_NPHASES]; /* seconds of set-up spent in each phase (mnt_world_phase) */
  /* After mnt_world_leave (--on-rank-loss shrink): no PMIx; mnt_world_agree goes through agree_fn (the
   * communicator's), the other exchanges fail. After a shrink (mnt_world_shrink) rank, size, the
   * node and local fields and the per-rank tables are the survivors', renumbered 0..size-1 in the old
   * order; job_of[r] is the rank r had when the job started (what Slurm and the logs call it). */
  int left;
  int (*agree_fn)(void *ctx, int status);
  void *agree_ctx;
  int job_size, *job_of;
  int epoch; /* shrinks so far */
  double phase_t;              /* mnt_now() of the last phase's end */
} mnt_world;

/* PMIx_Init and the identity of every rank (one fence). Returns MNT_OK or an error status;
 * MNT_EARG when Slurm started several tasks but no PMIx server answers. */
int mnt_world_init(mnt_world *w);
/* the PMIx client library this process runs on, as it reports itself (PMIx_Get_version, its name and
 * release): "OpenPMIx 5.0.7"; needs no server */
const char *mnt_world_pmix_version(void);
/* The time since the last phase ended (the process's start, for the first) was spent in phase. */
void mnt_world_phase(mnt_world *w, int phase);
/* Collective (every rank publishes its phases; rank 0 alone reads them all): out gets, on rank 0
 * (empty on the others), the slowest rank's time in each phase that took any and the largest total of one rank: "PMIx init 0.41 s,
 * identities 0.12 s, ..., total 2.93 s since the process started, 5 PMIx records read" (the most
 * any rank read). */
int mnt_world_phases(mnt_world *w, char *out, size_t n);
/* Every rank passes its status; every rank gets the first failure by rank order (MNT_OK when
 * none), which is also recorded in w->failed_together: a failure all ranks know about ends the
 * job normally instead of aborting it. */
int mnt_world_agree(mnt_world *w, int status);
/* all[r*bytes .. ] = what rank r passed; every rank calls with the same bytes. O(N) per rank: for
 * what every rank needs from every other (identities, agreement); a rank that needs a few ranks'
 * records publishes and looks up instead. */
int mnt_world_allgather(mnt_world *w, const void *mine, size_t bytes, void *all);
/* Collective: every rank publishes `mine` (bytes, the same on all) under a fresh key, returned in
 * *key, and waits until all have (a fence that collects). Then any rank's record is read with
 * mnt_world_lookup where it is needed, from the node's PMIx store: a ring's neighbours are O(1)
 * records per rank, where an allgather reads N (N² in all). Needs PMIx (a job of one process has
 * no one to look up: MNT_EARG). */
int mnt_world_publish(mnt_world *w, const void *mine, size_t bytes, unsigned *key);
/* rank's record under key (exactly bytes); thread-safe (the watchdog's thread looks up too) */
int mnt_world_lookup(mnt_world *w, unsigned key, int rank, void *out, size_t bytes);
/* buf on every rank = buf of root. */
int mnt_world_bcast(mnt_world *w, void *buf, size_t bytes, int root);
int mnt_world_barrier(mnt_world *w);
/* Take the whole job down with a message (PMIx_Abort); without PMIx, exit. Does not return. */
void mnt_world_abort(mnt_world *w, int status, const char *msg) __attribute__((noreturn));
void mnt_world_finalize(mnt_world *w);
/* Leave PMIx (PMIx_Finalize) with the identities kept: under Slurm's PMIx plugin a task still
 * connected when it dies takes the whole step down, one that has left dies alone. From then on
 * mnt_world_agree calls agree(ctx, status) (a communicator's agreement) and mnt_world_abort exits
 * this process alone. */
int mnt_world_leave(mnt_world *w, int (*agree)(void *ctx, int status), void *ctx);
/* Keep the ranks keep[0..n) (increasing, current numbering; this rank among them): renumbered
 * 0..n-1 in that order, nodes and local ranks recounted, epoch + 1. */
int mnt_world_shrink(mnt_world *w, const int *keep, int n);

#endif
