/* test_nccl_bootstrap.c — the NCCL bootstrap over PMIx, on CPUs: rank 0's ncclGetUniqueId
 * (which needs no GPU) reaches every rank intact through mnt_world_bcast. Every rank hashes the
 * id it got; the hashes are gathered (over PMIx again) and must all equal rank 0's, and the id
 * must not be all zeros (an exchange that delivered nothing).   srun ... test_nccl_bootstrap */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "src/comm/comm.h"
#include "src/log.h"
#include "src/world.h"

int main(void) {
  mnt_world w;
  memset(&w, 0, sizeof w);
  if (mnt_world_init(&w) != MNT_OK) return 1;
  ncclUniqueId id;
  int st = mnt_nccl_bootstrap(&w, &id, sizeof id);
  if (st != MNT_OK) {
    fprintf(stderr, "FAIL: rank %d: bootstrap: %s\n", w.rank, mnt_last_error());
    mnt_world_abort(&w, 1, "bootstrap failed");
  }
  unsigned long long mine = XXH3_64bits(&id, sizeof id), *all = calloc((size_t)w.size, sizeof *all);
  int zero = 1;
  for (size_t i = 0; i < sizeof id; i++) zero &= id.internal[i] == 0;
  if (!all || mnt_world_allgather(&w, &mine, sizeof mine, all) != MNT_OK) mnt_world_abort(&w, 1, "allgather failed");
  int bad = zero;
  for (int r = 0; r < w.size; r++) bad |= all[r] != all[0];
  if (w.rank == 0) {
    printf("%s: %d ranks on %d nodes got NCCL unique id %016llx (%zu bytes) from rank 0%s\n", bad ? "FAIL" : "ok",
           w.size, w.nnodes, all[0], sizeof id, zero ? " (all zeros)" : "");
    for (int r = 0; r < w.size && bad; r++) printf("  rank %d: %016llx\n", r, all[r]);
  }
  free(all);
  mnt_world_finalize(&w);
  return bad;
}
