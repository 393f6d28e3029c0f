/* placement.h — where the ranks of a node run: each its own share of the node's CPUs.
 * defines: mnt_placement, mnt_place_rank.
 *
 * Ranks that Slurm did not bind (TaskPlugin=task/none, or srun --cpu-bind=none) all see every CPU
 * of the node, and the scheduler moves their threads about: two ranks' compute threads then share
 * a core for a while, and the ranks' steps drift apart (measured on a 2-core node: weak-scaling
 * efficiency of 2 ranks 0.67-0.90 unbound, 0.87-0.92 with each rank on its own core, alternating
 * rounds). So, as Open MPI binds by default, each rank takes a contiguous share of the CPUs it is
 * allowed (PMIx local rank l of L gets the l-th of L near-equal shares), before its own threads
 * start: the compute, communicator and loader threads inherit it. Left alone: a rank Slurm bound
 * (SLURM_CPU_BIND_TYPE other than none: srun --cpu-bind, task/affinity), a node with one rank, one
 * with more ranks than CPUs, and MNT_CPU_BIND=none. The compute threads default to the share, also
 * where the CPUs are left shared: 3 ranks on 2 CPUs run one thread each, not 2 (measured on a 2-core
 * node: 718 and 522 img/s with 2 each, 2,306 and 2,255 with 1). */
#ifndef MNT_PLACEMENT_H
#define MNT_PLACEMENT_H

#include <stddef.h>

#include "src/world.h"

typedef struct mnt_placement {
  int bound;          /* 1: this rank now runs on its share */
  int cpus;           /* CPUs this rank may use now */
  int share;          /* the compute threads it should run by default: its CPUs when it has its own,
                       * else its part of the CPUs it shares with the node's ranks (at least 1);
                       * 0: unknown (affinity not readable) */
  int node_cpus;      /* CPUs the node's ranks share (what this rank was allowed before) */
  char why[160];      /* what was done, or why not: for the set-up line and --help */
} mnt_placement;

/* bind this rank (the calling thread, and so every thread it starts later) to its share; never fails
 * the run: a refusal of the kernel is said in why */
void mnt_place_rank(const mnt_world *w, mnt_placement *p);

#endif
