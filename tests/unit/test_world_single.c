/* test_world_single.c — without a PMIx server mntrain is rank 0 of 1 and every collective is
 * the identity (what a user gets when running mntrain outside srun). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm/comm.h"
#include "src/log.h"
#include "src/world.h"

#include "tests/expect.h"

int main(void) {
  if (getenv("PMIX_NAMESPACE") || getenv("PMIX_SERVER_URI41")) {
    fprintf(stderr, "test_world_single: running under a PMIx server; this test needs none\n");
    return 77;
  }
  mnt_world w;
  EXPECT(mnt_world_init(&w) == MNT_OK, "init without a server must succeed");
  EXPECT(w.rank == 0 && w.size == 1 && w.local_rank == 0 && w.local_size == 1 && w.nnodes == 1 && !w.have_pmix,
         "identity %d/%d local %d/%d nodes %d", w.rank, w.size, w.local_rank, w.local_size, w.nnodes);
  /* every call is checked on the data it returns, not only its status: the identity of one rank,
   * exactly the bytes given, and nothing written past them (sentinels) */
  struct { int x; char tag[12]; } mine = {42, "rank zero"}, all[2];
  memset(all, 0x5a, sizeof all);
  EXPECT(mnt_world_allgather(&w, &mine, sizeof mine, all) == MNT_OK, "allgather");
  size_t first = 0;
  while (first < sizeof mine && ((const char *)&all[0])[first] == ((const char *)&mine)[first]) first++;
  EXPECT(first == sizeof mine, "allgather: rank 0's slot holds %d '%.11s', not 42 'rank zero' (byte %zu of %zu differs)",
         all[0].x, all[0].tag, first, sizeof mine);
  const unsigned char *tail = (const unsigned char *)&all[1];
  int past = 0;
  for (size_t i = 0; i < sizeof all[1]; i++) past += tail[i] != 0x5a;
  EXPECT(past == 0, "allgather wrote %d bytes past the one rank's slot", past);
  int x = 42;
  EXPECT(mnt_world_bcast(&w, &x, sizeof x, 0) == MNT_OK, "bcast");
  EXPECT(x == 42, "bcast from rank 0 of 1 changed the value to %d", x);
  EXPECT(mnt_world_barrier(&w) == MNT_OK, "barrier");

  mnt_comm *c = NULL;
  EXPECT(mnt_comm_create(&w, "cpu", MNT_TOPO_HIER, &c) == MNT_OK && c, "comm create");
  if (!c) { /* nothing further can be checked */
    fprintf(stderr, "test_world_single: %d failures (no communicator: the rest is not run)\n", failures);
    return 1;
  }
  /* values that any scaling, reordering, or a sum with a stale buffer would change, all 7 checked */
  const float want[7] = {1.5f, -2.25f, 3e-3f, 4e6f, -5.0f, 0.0f, 7.75f};
  float v[8];
  int diff;
  mnt_redop ops[2] = {MNT_AVG, MNT_SUM};
  const char *opname[2] = {"avg", "sum"};
  for (int o = 0; o < 2; o++) {
    memcpy(v, want, sizeof want);
    v[7] = 99.0f; /* past the count: untouched */
    EXPECT(mnt_allreduce(c, v, 7, MNT_FP32, ops[o]) == MNT_OK, "allreduce %s of one", opname[o]);
    diff = 0;
    for (int i = 0; i < 7; i++) diff += v[i] != want[i];
    EXPECT(diff == 0 && v[7] == 99.0f, "allreduce %s of one rank: %d of 7 values changed (v[0] %g, v[3] %g), v[7] %g",
           opname[o], diff, v[0], v[3], v[7]);
  }
  memcpy(v, want, sizeof want);
  EXPECT(mnt_allreduce(c, v, 0, MNT_FP32, MNT_SUM) == MNT_OK && !memcmp(v, want, sizeof want), "allreduce of nothing");
  char out[12];
  memset(out, '#', sizeof out);
  EXPECT(mnt_allgather(c, "abcdefg", out, 8) == MNT_OK, "allgather");
  EXPECT(!memcmp(out, "abcdefg", 8) && out[8] == '#' && out[11] == '#', "allgather of one: '%.8s', then '%c'", out,
         out[8]);
  EXPECT(mnt_broadcast(c, out, 8, 0) == MNT_OK, "broadcast");
  EXPECT(!memcmp(out, "abcdefg", 8) && out[8] == '#', "broadcast from rank 0 of 1 changed the buffer to '%.8s'", out);
  EXPECT(mnt_broadcast(c, out, 8, 1) == MNT_EARG, "broadcast from a rank that does not exist");
  mnt_comm_req *q;
  memcpy(v, want, sizeof want);
  EXPECT(c->ops->iallreduce(c, v, 7, MNT_FP32, MNT_SUM, NULL, &q) == MNT_OK && c->ops->wait(c, q) == MNT_OK,
         "iallreduce/wait");
  diff = 0;
  for (int i = 0; i < 7; i++) diff += v[i] != want[i];
  EXPECT(diff == 0, "iallreduce sum of one rank: %d of 7 values changed", diff);
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
