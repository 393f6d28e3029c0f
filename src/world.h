/* world.h — who this process is, from PMIx (srun --mpi=pmix), and small-data exchange.
 * defines: mnt_world, mnt_world_init, mnt_world_allgather, mnt_world_bcast, mnt_world_barrier,
 *          mnt_world_agree, mnt_world_abort, mnt_world_finalize.
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

typedef struct mnt_world {
  int rank, size;             /* PMIX_RANK, PMIX_JOB_SIZE */
  int local_rank, local_size; /* PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE */
  int node_rank, nnodes;      /* PMIX_NODEID (renumbered 0..nnodes-1), node count */
  char hostname[MNT_NODENAME_MAX]; /* PMIX_HOSTNAME of this rank's node */
  char nspace[256];           /* PMIx namespace, unique per job step ("single" without PMIx) */
  char jobid[64];             /* job id for names and reports ("" when unknown) */
  int have_pmix;              /* 1 when a PMIx server answered */
  /* for every rank r: its node index, local rank and node name */
  int *node_of, *local_of;
  char (*node_name)[MNT_NODENAME_MAX];
  unsigned seq;               /* exchange counter: keys are unique per call */
  double timeout_s;           /* deadline of every exchange (MNT_COMM_TIMEOUT) */
  int up;                     /* mnt_world_init got far enough that finalize (and abort) apply */
  int failed_together;        /* the failure every rank agreed on (mnt_world_agree), 0 if none */
} mnt_world;

/* PMIx_Init and the identity of every rank (one fence). Returns MNT_OK or an error status;
 * MNT_EARG when Slurm started several tasks but no PMIx server answers. */
int mnt_world_init(mnt_world *w);
/* Every rank passes its status; every rank gets the first failure by rank order (MNT_OK when
 * none), which is also recorded in w->failed_together: a failure all ranks know about ends the
 * job normally instead of aborting it. */
int mnt_world_agree(mnt_world *w, int status);
/* all[r*bytes .. ] = what rank r passed; every rank calls with the same bytes. */
int mnt_world_allgather(mnt_world *w, const void *mine, size_t bytes, void *all);
/* buf on every rank = buf of root. */
int mnt_world_bcast(mnt_world *w, void *buf, size_t bytes, int root);
int mnt_world_barrier(mnt_world *w);
/* Take the whole job down with a message (PMIx_Abort); without PMIx, exit. Does not return. */
void mnt_world_abort(mnt_world *w, int status, const char *msg) __attribute__((noreturn));
void mnt_world_finalize(mnt_world *w);

#endif
