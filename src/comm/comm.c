/* comm.c — backend selection; see comm.h. */
#include "src/comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cuda_module.h"
#include "src/check.h"
#include "src/log.h"

const char *const mnt_topology_names[MNT_NTOPO] = {"flat", "hier"};
const char *const mnt_comm_names[MNT_NCOMM] = {"auto", "cpu", "nccl"};

const char *mnt_topology_name(mnt_topology t) { return t >= 0 && t < MNT_NTOPO ? mnt_topology_names[t] : "?"; }

int mnt_comm_create(mnt_world *w, const char *backend, mnt_topology topo, mnt_comm **out) {
  *out = NULL;
  if (!backend || !strcmp(backend, "auto") || !strcmp(backend, "cpu"))
    return mnt_comm_cpu_create(w, topo, out);
  if (!strcmp(backend, "nccl") && MNT_HAVE_NCCL) {
    /* in the CUDA module, loaded on first use; every rank fails together (exit 2) when one cannot load it */
    const mnt_cuda_module *m = NULL;
    int st = mnt_cuda_module_load("--comm nccl", &m);
    if (st == MNT_OK && !m->comm_create) {
      MNT_ERR("--comm nccl: the CUDA module was built without NCCL");
      st = MNT_EARG;
    }
    MNT_CHECK(mnt_world_agree(w, st));
    return m->comm_create(w, topo, out);
  }
  if (MNT_HAVE_NCCL) MNT_ERR("unknown communicator backend '%s' (this build has: cpu, nccl)", backend);
  else MNT_ERR("unknown communicator backend '%s' (this build has: cpu; nccl needs a build with CUDA and NCCL)", backend);
  return MNT_EARG;
}

int mnt_comm_agree(void *ctx, int status) {
  mnt_comm *c = ctx;
  mnt_world *w = c->world;
  int *all = malloc((size_t)w->size * sizeof *all);
  if (!all) return MNT_ENOMEM;
  int st = mnt_allgather(c, &status, all, sizeof status);
  for (int r = 0; r < w->size && st == MNT_OK; r++)
    if (all[r] != MNT_OK) {
      st = all[r];
      if (r != w->rank && w->rank == 0)
        MNT_ERR("rank %d on %s failed (its own message says why); every rank stops", w->job_of[r],
                w->node_name[w->node_of[r]]);
      break;
    }
  free(all);
  return st;
}

int mnt_comm_enable_shrink(mnt_comm *c) {
  if (!c->ops->enable_shrink) {
    MNT_ERR("--on-rank-loss shrink: the %s communicator cannot shrink; use abort", c->ops->name);
    return MNT_EARG;
  }
  return c->ops->enable_shrink(c);
}

int mnt_comm_shrink(mnt_comm *c, int64_t step, mnt_rank_loss *lost, int max, int *nlost) {
  *nlost = 0;
  if (!c->ops->shrink) return MNT_EARG;
  return c->ops->shrink(c, step, lost, max, nlost);
}

int mnt_comm_quorum(int before, int n, int holds_rank0, char *why, size_t len) {
  if (2 * n > before) {
    snprintf(why, len, "quorum: %d of %d ranks, a majority", n, before);
    return 1;
  }
  if (2 * n == before && holds_rank0) {
    snprintf(why, len, "quorum: %d of %d ranks, exactly half, with rank 0 of the %d (the tie-breaker)", n, before,
             before);
    return 1;
  }
  if (2 * n == before)
    snprintf(why, len,
             "no quorum: %d of %d ranks, exactly half without rank 0 of the %d (the tie-breaker gives the "
             "other side of a split the run)",
             n, before, before);
  else snprintf(why, len, "no quorum: %d of %d ranks, a minority (the other side of a split may go on)", n, before);
  return 0;
}

void mnt_comm_destroy(mnt_comm *c) {
  if (c) c->ops->destroy(c);
}
