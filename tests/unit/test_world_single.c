/* test_world_single.c — without a PMIx server mntrain is rank 0 of 1 and every collective is
 * the identity (what a user gets when running mntrain outside srun). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "log.h"
#include "world.h"

#include "check.h"

int main(void) {
  if (getenv("PMIX_NAMESPACE") || getenv("PMIX_SERVER_URI41")) {
    fprintf(stderr, "test_world_single: running under a PMIx server; this test needs none\n");
    return 77;
  }
  mnt_world w;
  EXPECT(mnt_world_init(&w) == MNT_OK, "init without a server must succeed");
  EXPECT(w.rank == 0 && w.size == 1 && w.local_rank == 0 && w.local_size == 1 && w.nnodes == 1 && !w.have_pmix,
         "identity %d/%d local %d/%d nodes %d", w.rank, w.size, w.local_rank, w.local_size, w.nnodes);
  int x = 42, all = 0;
  EXPECT(mnt_world_allgather(&w, &x, sizeof x, &all) == MNT_OK && all == 42, "allgather");
  EXPECT(mnt_world_bcast(&w, &x, sizeof x, 0) == MNT_OK && x == 42, "bcast");
  EXPECT(mnt_world_barrier(&w) == MNT_OK, "barrier");

  mnt_comm *c;
  EXPECT(mnt_comm_create(&w, "cpu", MNT_TOPO_HIER, &c) == MNT_OK, "comm create");
  float v[5] = {1, 2, 3, 4, 5};
  EXPECT(mnt_allreduce(c, v, 5, MNT_FP32, MNT_AVG) == MNT_OK && v[4] == 5, "allreduce avg of one");
  EXPECT(mnt_allreduce(c, v, 5, MNT_FP32, MNT_SUM) == MNT_OK && v[0] == 1, "allreduce sum of one");
  EXPECT(mnt_allreduce(c, v, 0, MNT_FP32, MNT_SUM) == MNT_OK, "allreduce of nothing");
  char out[8] = {0};
  EXPECT(mnt_allgather(c, "abcdefg", out, 8) == MNT_OK && !strcmp(out, "abcdefg"), "allgather copies");
  EXPECT(mnt_broadcast(c, out, 8, 0) == MNT_OK, "broadcast");
  EXPECT(mnt_broadcast(c, out, 8, 1) == MNT_EARG, "broadcast from a rank that does not exist");
  mnt_comm_req *q;
  EXPECT(c->ops->iallreduce(c, v, 5, MNT_FP32, MNT_SUM, NULL, &q) == MNT_OK && c->ops->wait(c, q) == MNT_OK,
         "iallreduce/wait");
  EXPECT(mnt_barrier(c) == MNT_OK, "comm barrier");
  mnt_comm *bad;
  EXPECT(mnt_comm_create(&w, "mpi", MNT_TOPO_FLAT, &bad) == MNT_EARG, "unknown backend");
  mnt_comm_destroy(c);
  mnt_world_finalize(&w);
  if (failures) {
    fprintf(stderr, "test_world_single: %d failures\n", failures);
    return 1;
  }
  printf("test_world_single: ok\n");
  return 0;
}
