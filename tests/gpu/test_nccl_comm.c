/* test_nccl_comm.c — the NCCL communicator on this process's GPU (one rank: no PMIx, or under srun
 * on every GPU of a node): allreduce (fp32 sum and average, bf16 sum), the asynchronous
 * allreduce and wait, broadcast, allgather and barrier on device buffers, results checked on the
 * host against what the ranks' inputs must give. Skips (77) where there is no GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dtype.h"
#include "log.h"
#include "world.h"

#define N 100003

static int fails;
static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    fails++;
  }
}

int main(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no CUDA device here\n");
    return 77;
  }
  mnt_world w;
  memset(&w, 0, sizeof w);
  if (mnt_world_init(&w) != MNT_OK) return 1;
  mnt_comm *c;
  if (mnt_comm_create(&w, "nccl", MNT_TOPO_FLAT, &c) != MNT_OK) {
    fprintf(stderr, "FAIL: nccl communicator: %s\n", mnt_last_error());
    return 1;
  }
  int R = w.size, me = w.rank;
  float *h = malloc(N * sizeof(float)), *d;
  uint16_t *h16 = malloc(N * 2);
  cudaMalloc((void **)&d, (size_t)N * R * sizeof(float));
  /* fp32 sum and average: x[i] = i % 7 + rank */
  for (int op = 0; op < 2; op++) {
    for (int i = 0; i < N; i++) h[i] = (float)(i % 7 + me);
    cudaMemcpy(d, h, N * sizeof(float), cudaMemcpyHostToDevice);
    check(c->ops->allreduce(c, d, N, MNT_FP32, op ? MNT_AVG : MNT_SUM, NULL) == MNT_OK, "allreduce");
    cudaMemcpy(h, d, N * sizeof(float), cudaMemcpyDeviceToHost);
    int ok = 1;
    for (int i = 0; i < N && ok; i++) {
      float want = (float)(R * (i % 7) + R * (R - 1) / 2);
      ok = h[i] == (op ? want / R : want);
    }
    check(ok, op ? "fp32 average" : "fp32 sum");
  }
  /* bf16 sum of small integers: exact */
  for (int i = 0; i < N; i++) h[i] = (float)(i % 5);
  mnt_from_f32(MNT_BF16, h, h16, N);
  cudaMemcpy(d, h16, N * 2, cudaMemcpyHostToDevice);
  check(c->ops->allreduce(c, d, N, MNT_BF16, MNT_SUM, NULL) == MNT_OK, "bf16 allreduce");
  cudaMemcpy(h16, d, N * 2, cudaMemcpyDeviceToHost);
  mnt_to_f32(MNT_BF16, h16, h, N);
  int ok = 1;
  for (int i = 0; i < N && ok; i++) ok = h[i] == (float)(R * (i % 5));
  check(ok, "bf16 sum");
  /* asynchronous allreduce */
  for (int i = 0; i < N; i++) h[i] = 1.0f;
  cudaMemcpy(d, h, N * sizeof(float), cudaMemcpyHostToDevice);
  mnt_comm_req *req;
  check(c->ops->iallreduce(c, d, N, MNT_FP32, MNT_SUM, NULL, &req) == MNT_OK && c->ops->wait(c, req) == MNT_OK,
        "iallreduce + wait");
  cudaMemcpy(h, d, N * sizeof(float), cudaMemcpyDeviceToHost);
  check(h[0] == (float)R && h[N - 1] == (float)R, "iallreduce result");
  /* broadcast from the last rank, allgather of the ranks, barrier */
  for (int i = 0; i < N; i++) h[i] = (float)me;
  cudaMemcpy(d, h, N * sizeof(float), cudaMemcpyHostToDevice);
  check(c->ops->broadcast(c, d, N * sizeof(float), R - 1, NULL) == MNT_OK, "broadcast");
  cudaMemcpy(h, d, N * sizeof(float), cudaMemcpyDeviceToHost);
  check(h[0] == (float)(R - 1) && h[N - 1] == (float)(R - 1), "broadcast result");
  float mine = (float)me, *gather = malloc((size_t)R * sizeof(float));
  float *dm;
  cudaMalloc((void **)&dm, sizeof(float));
  cudaMemcpy(dm, &mine, sizeof mine, cudaMemcpyHostToDevice);
  check(c->ops->allgather(c, dm, d, sizeof(float), NULL) == MNT_OK, "allgather");
  cudaMemcpy(gather, d, (size_t)R * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < R; r++) check(gather[r] == (float)r, "allgather result");
  check(c->ops->barrier(c) == MNT_OK, "barrier");
  if (me == 0) printf("%s: NCCL on %d rank(s): allreduce fp32/bf16/avg, iallreduce, broadcast, allgather, barrier\n",
                      fails ? "FAIL" : "ok", R);
  cudaFree(dm);
  cudaFree(d);
  free(gather);
  free(h);
  free(h16);
  mnt_comm_destroy(c);
  mnt_world_finalize(&w);
  return fails ? 1 : 0;
}
