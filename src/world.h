/* world.h — who this process is, from PMIx (srun --mpi=pmix), and small-data exchange.
 * defines: mnt_world, mnt_world_init, mnt_world_allgather, mnt_world_bcast, mnt_world_barrier,
 *          mnt_world_abort, mnt_world_finalize, mnt_world_timeout.
 * Exchange goes over PMIx put/commit/fence(collect)/get: for addresses, ids, secrets and
 * agreement, not for tensors. Without a PMIx server the process is rank 0 of 1 (said once).
 * Slurm's SLURM_* variables are never read. */
#ifndef MNT_WORLD_H
#define MNT_WORLD_H

#include <stddef.h>

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
  double timeout_s;           /* deadline of every exchange (MNT_COMM_TIMEOUT, default 300 s) */
} mnt_world;

/* PMIx_Init and the identity of every rank (one fence). Returns MNT_OK or an error status. */
int mnt_world_init(mnt_world *w);
/* all[r*bytes .. ] = what rank r passed; every rank calls with the same bytes. */
int mnt_world_allgather(mnt_world *w, const void *mine, size_t bytes, void *all);
/* buf on every rank = buf of root. */
int mnt_world_bcast(mnt_world *w, void *buf, size_t bytes, int root);
int mnt_world_barrier(mnt_world *w);
/* Take the whole job down with a message (PMIx_Abort); without PMIx, exit. Does not return. */
void mnt_world_abort(mnt_world *w, int status, const char *msg) __attribute__((noreturn));
void mnt_world_finalize(mnt_world *w);
/* Seconds from MNT_COMM_TIMEOUT (default 300); bad values are reported and ignored. */
double mnt_world_timeout(void);

#endif
