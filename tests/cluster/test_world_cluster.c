/* test_world_cluster.c — under srun --mpi=pmix: the identity PMIx gives every rank is
 * consistent (sizes, nodes, local ranks), small-data exchange over PMIx works, and a barrier waits
 * for a late rank on another node.
 * usage: srun ... test_world_cluster EXPECTED_SIZE EXPECTED_NODES */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/log.h"
#include "src/world.h"

#include "tests/expect.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: test_world_cluster EXPECTED_SIZE EXPECTED_NODES\n");
    return 2;
  }
  int want_size = atoi(argv[1]), want_nodes = atoi(argv[2]);
  mnt_world w;
  if (mnt_world_init(&w) != MNT_OK) {
    fprintf(stderr, "FAIL: world init: %s\n", mnt_last_error());
    return 1;
  }
  check_rank = w.rank;
  EXPECT(w.have_pmix, "no PMIx server: run under srun --mpi=pmix");
  EXPECT(w.size == want_size, "size %d, want %d", w.size, want_size);
  EXPECT(w.nnodes == want_nodes, "nnodes %d, want %d", w.nnodes, want_nodes);
  /* local ranks on every node are exactly 0..local_size-1, and local_size counts the node */
  for (int node = 0; node < w.nnodes; node++) {
    int cnt = 0, seen = 0;
    for (int r = 0; r < w.size; r++)
      if (w.node_of[r] == node) {
        cnt++;
        seen |= 1 << w.local_of[r];
      }
    EXPECT(cnt > 0 && seen == (1 << cnt) - 1, "node %d: %d ranks, local rank mask %x", node, cnt, seen);
    if (node == w.node_rank) EXPECT(cnt == w.local_size, "local_size %d but %d ranks on my node", w.local_size, cnt);
    for (int other = 0; other < node; other++)
      EXPECT(strcmp(w.node_name[node], w.node_name[other]) != 0, "nodes %d and %d share the name %s", node, other,
             w.node_name[node]);
  }
  EXPECT(w.node_of[w.rank] == w.node_rank && w.local_of[w.rank] == w.local_rank, "my own entry");
  EXPECT(!strcmp(w.node_name[w.node_rank], w.hostname), "node name %s vs hostname %s", w.node_name[w.node_rank], w.hostname);
  EXPECT(w.jobid[0] != '\0', "no job id from the namespace '%s'", w.nspace);

  /* exchange: a 1000-byte record from every rank, and a broadcast from the last rank */
  char mine[1000], *all = malloc(1000 * (size_t)w.size);
  for (int i = 0; i < 1000; i++) mine[i] = (char)(w.rank * 7 + i);
  EXPECT(mnt_world_allgather(&w, mine, sizeof mine, all) == MNT_OK, "allgather");
  for (int r = 0; r < w.size; r++)
    for (int i = 0; i < 1000; i++)
      if (all[(size_t)r * 1000 + (size_t)i] != (char)(r * 7 + i)) {
        EXPECT(0, "allgather: byte %d of rank %d", i, r);
        break;
      }
  int token = w.rank == w.size - 1 ? 12345 : -1;
  EXPECT(mnt_world_bcast(&w, &token, sizeof token, w.size - 1) == MNT_OK && token == 12345, "bcast: %d", token);
  EXPECT(mnt_world_barrier(&w) == MNT_OK, "barrier");
  /* a barrier waits for the last rank to arrive, across nodes too: the last rank comes 1.5 s late */
  if (w.rank == w.size - 1) nanosleep(&(struct timespec){1, 500000000}, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  EXPECT(mnt_world_barrier(&w) == MNT_OK, "barrier with a late rank");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (w.rank != w.size - 1)
    EXPECT(waited > 1.0, "barrier: left after %.3f s, before rank %d arrived (1.5 s late, on %s)", waited, w.size - 1,
           w.node_name[w.node_of[w.size - 1]]);

  int fails_all[256] = {0};
  int total = 0;
  if (w.size <= 256 && mnt_world_allgather(&w, &failures, sizeof failures, fails_all) == MNT_OK)
    for (int r = 0; r < w.size; r++) total += fails_all[r];
  else
    total = failures + 1;
  if (w.rank == 0)
    printf("test_world_cluster: %d ranks on %d nodes: %s (%d failures)\n", w.size, w.nnodes, total ? "FAILED" : "ok", total);
  free(all);
  mnt_world_finalize(&w);
  return total ? 1 : 0;
}
