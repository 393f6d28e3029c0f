/* test_nccl_comm.c — the NCCL communicator on GPUs, flat or hier (the argument, default flat):
 * allreduce (fp32 sum and average, bf16 and fp16 sums) at sizes that exercise hier's whole
 * slices, its flat tail and the all-flat small case; iallreduce + wait ordered after work still
 * queued on a compute stream (a host function holds that stream, then an asynchronous copy writes
 * the input: a communicator that did not wait for the stream would reduce the old zeros); several
 * requests in flight; broadcast, allgather and barrier, of device and of host buffers (staged).
 * Results are checked on the host against what the ranks' inputs must give.
 * After every call that waits (set-up, each collective, each wait, destroy) no CUDA error may be
 * left as the thread's last error, and one of our kernels (kernels/ops.h) must launch: a poll's
 * cudaErrorNotReady left behind made the first kernel after an NCCL wait fail.
 * flat also checks that hier asked in a world that cannot have it runs flat, and that a failed host
 * staging (an allocation no GPU can hold) aborts the communicator at once (every later call is
 * refused), so that the peers are not left waiting until MNT_COMM_TIMEOUT.
 * hier needs more than one node with the same number (more than one) of GPUs on each, e.g.
 *   srun --mpi=pmix -N2 --ntasks-per-node=2 --gpus-per-task=1 test_nccl_comm hier
 * and is checked to be hier and to give the same sums as flat; elsewhere it skips (77) saying why
 * (on one GPU it cannot run: NCCL refuses two ranks on one device).
 * Skips (77) where there is no GPU (on any rank: the ranks agree first). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/expect.h"
#include "src/comm/comm.h"
#include "src/dtype.h"
#include "src/log.h"
#include "kernels/ops.h"
#include "src/world.h"

#define N 100003 /* odd: never whole hier slices, so the flat tail is always used too */

static mnt_world w;
static int R, me;
static float *probe; /* one float on this rank's GPU, for the probe kernel */
static int waits;    /* calls followed by the probe */

/* After a call that waited on NCCL: no CUDA error left for the next kernel launch to report as
 * its own, and one of our kernels launches (its launcher checks cudaGetLastError()). */
static void after_wait(const char *what) {
  cudaError_t e = cudaPeekAtLastError();
  EXPECT(e == cudaSuccess, "after %s: the thread's last CUDA error is %s (%s): the next kernel would fail with it",
         what, cudaGetErrorName(e), cudaGetErrorString(e));
  if (probe) {
    int k = mnt_k_f32_scale(probe, 1.0f, 1, NULL);
    EXPECT(k == 0, "after %s: launching a kernel (mnt_k_f32_scale) failed: %s", what,
           cudaGetErrorString((cudaError_t)k));
  }
  waits++;
}

/* A failed call has aborted the NCCL communicators; take the job down so that no rank waits. */
static void must(int st, const char *what) {
  if (st == MNT_OK) {
    after_wait(what);
    return;
  }
  fprintf(stderr, "FAIL rank %d: %s: %s (%s)\n", me, what, mnt_status_str(st), mnt_last_error());
  mnt_world_abort(&w, 1, what);
}

static void cuda_must(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "FAIL rank %d: %s: %s\n", me, what, cudaGetErrorString(e));
  mnt_world_abort(&w, 1, what);
}

/* Host to device and landed: the communicator's stream does not wait for the legacy default
 * stream, and a pageable cudaMemcpy may return before its DMA is done. */
static void put(void *d, const void *h, size_t bytes) {
  cuda_must(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  cuda_must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
static void get(void *h, const void *d, size_t bytes) {
  cuda_must(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}

/* x[i] = i % 7 + rank: the sum over ranks is R * (i % 7) + R (R - 1) / 2, exact in fp32 */
static float input(size_t i, int rank) { return (float)(i % 7 + (size_t)rank); }
static float sum_of(size_t i) { return (float)((size_t)R * (i % 7) + (size_t)R * (size_t)(R - 1) / 2); }

/* fp32 sum or average of count elements; the average within a few ulps (ncclAvg premultiplies) */
static void check_fp32(mnt_comm *c, float *d, float *h, size_t count, mnt_redop op, const char *topo) {
  for (size_t i = 0; i < count; i++) h[i] = input(i, me);
  put(d, h, count * sizeof(float));
  must(c->ops->allreduce(c, d, count, MNT_FP32, op, NULL), "allreduce fp32");
  get(h, d, count * sizeof(float));
  size_t bad = count;
  for (size_t i = 0; i < count && bad == count; i++) {
    float want = op == MNT_AVG ? sum_of(i) / (float)R : sum_of(i);
    if (op == MNT_SUM ? h[i] != want : fabsf(h[i] - want) > 1e-5f * fmaxf(1.0f, fabsf(want))) bad = i;
  }
  EXPECT(bad == count, "%s: fp32 %s of %zu elements: [%zu] = %g, want %g", topo, op == MNT_AVG ? "average" : "sum",
         count, bad, bad < count ? (double)h[bad] : 0.0,
         bad < count ? (double)(op == MNT_AVG ? sum_of(bad) / (float)R : sum_of(bad)) : 0.0);
}

/* bf16 or fp16 sum of small integers (exact) */
static void check_half(mnt_comm *c, void *d, float *h, uint16_t *h16, size_t count, mnt_dtype t, const char *topo) {
  for (size_t i = 0; i < count; i++) h[i] = (float)(i % 5);
  mnt_from_f32(t, h, h16, count);
  put(d, h16, count * 2);
  must(c->ops->allreduce(c, d, count, t, MNT_SUM, NULL), "allreduce 16-bit");
  get(h16, d, count * 2);
  mnt_to_f32(t, h16, h, count);
  size_t bad = count;
  for (size_t i = 0; i < count && bad == count; i++)
    if (h[i] != (float)((size_t)R * (i % 5))) bad = i;
  EXPECT(bad == count, "%s: %s sum of %zu elements: [%zu] = %g, want %g", topo, mnt_dtype_name(t), count, bad,
         bad < count ? (double)h[bad] : 0.0, bad < count ? (double)((size_t)R * (bad % 5)) : 0.0);
}

static void hold_stream(void *arg) {
  (void)arg;
  struct timespec t = {0, 200 * 1000 * 1000}; /* 200 ms: the collective must not start before */
  nanosleep(&t, NULL);
}

/* iallreduce of three buckets whose input is written by an asynchronous copy on a compute stream
 * held by a host function; the buffer holds zeros until then. */
static void check_overlap(mnt_comm *c, float *d, float *h, const char *topo) {
  cudaStream_t s;
  float *pinned;
  cuda_must(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_must(cudaMallocHost((void **)&pinned, N * sizeof(float)), "cudaMallocHost");
  for (size_t i = 0; i < N; i++) pinned[i] = input(i, me);
  cuda_must(cudaMemset(d, 0, N * sizeof(float)), "cudaMemset");
  cuda_must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuda_must(cudaLaunchHostFunc(s, hold_stream, NULL), "cudaLaunchHostFunc");
  cuda_must(cudaMemcpyAsync(d, pinned, N * sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  size_t cut[4] = {0, N / 5, N / 5 + 4099, N};
  mnt_comm_req *req[3];
  for (int b = 0; b < 3; b++)
    must(c->ops->iallreduce(c, d + cut[b], cut[b + 1] - cut[b], MNT_FP32, MNT_SUM, (mnt_stream *)s, &req[b]),
         "iallreduce");
  for (int b = 0; b < 3; b++) must(c->ops->wait(c, req[b]), "wait");
  get(h, d, N * sizeof(float));
  size_t bad = N;
  for (size_t i = 0; i < N && bad == N; i++)
    if (h[i] != sum_of(i)) bad = i;
  EXPECT(bad == N, "%s: iallreduce after the compute stream: [%zu] = %g, want %g (0: it did not wait for the stream)",
         topo, bad, bad < N ? (double)h[bad] : 0.0, bad < N ? (double)sum_of(bad) : 0.0);
  /* a request with no stream, and its event reused */
  for (int rep = 0; rep < 3; rep++) {
    for (size_t i = 0; i < N; i++) h[i] = 1.0f;
    put(d, h, N * sizeof(float));
    mnt_comm_req *r;
    must(c->ops->iallreduce(c, d, N, MNT_FP32, MNT_SUM, NULL, &r), "iallreduce");
    must(c->ops->wait(c, r), "wait");
    get(h, d, N * sizeof(float));
    EXPECT(h[0] == (float)R && h[N / 2] == (float)R && h[N - 1] == (float)R, "%s: iallreduce %d: %g, want %d", topo,
           rep, (double)h[0], R);
  }
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

/* hier is possible: more than one node, more than one rank on each, the same number on each */
static int hier_possible(void) {
  if (w.nnodes <= 1) return 0;
  int L = 0;
  for (int r = 0; r < R; r++) L += w.node_of[r] == 0;
  for (int node = 1; node < w.nnodes; node++) {
    int cnt = 0;
    for (int r = 0; r < R; r++) cnt += w.node_of[r] == node;
    if (cnt != L) return 0;
  }
  return L > 1;
}

static void run(mnt_topology topo) {
  const char *name = mnt_topology_name(topo);
  mnt_comm *c;
  must(mnt_comm_create(&w, "nccl", topo, &c), "nccl communicator");
  if (!probe) cuda_must(cudaMalloc((void **)&probe, sizeof *probe), "cudaMalloc of the probe"); /* on our GPU */
  mnt_topology want = topo == MNT_TOPO_HIER && hier_possible() ? MNT_TOPO_HIER : MNT_TOPO_FLAT;
  EXPECT(c->topology == want, "%s asked: uses %s, want %s (%d nodes, %d ranks)", name,
         mnt_topology_name(c->topology), mnt_topology_name(want), w.nnodes, R);
  EXPECT(!strcmp(c->ops->name, "nccl"), "backend %s", c->ops->name);

  int L = w.local_size > 0 ? w.local_size : 1;
  size_t big = ((size_t)1 << 22) + 5;
  /* whole hier slices (fp32: 64 elements = 256 bytes per rank of the node), a tail, all tail, one */
  size_t sizes[] = {N, (size_t)L * 64 * 3, (size_t)L * 64 * 3 + 1, (size_t)L * 64 - 1, 7, 1, big};
  float *h = malloc(big * sizeof(float));
  uint16_t *h16 = malloc(N * 2);
  float *d;
  if (!h || !h16) must(MNT_ENOMEM, "test buffers");
  cuda_must(cudaMalloc((void **)&d, (big > (size_t)N * R ? big : (size_t)N * R) * sizeof(float)), "cudaMalloc");

  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    check_fp32(c, d, h, sizes[k], MNT_SUM, name);
    check_fp32(c, d, h, sizes[k], MNT_AVG, name);
  }
  check_half(c, d, h, h16, N, MNT_BF16, name);
  check_half(c, d, h, h16, N, MNT_FP16, name);
  check_half(c, d, h, h16, (size_t)L * 128 * 2, MNT_BF16, name); /* whole slices of 16-bit elements */
  check_overlap(c, d, h, name);

  /* broadcast from the last rank, allgather of the ranks, barrier */
  for (int i = 0; i < N; i++) h[i] = (float)me;
  put(d, h, N * sizeof(float));
  must(c->ops->broadcast(c, d, N * sizeof(float), R - 1, NULL), "broadcast");
  get(h, d, N * sizeof(float));
  EXPECT(h[0] == (float)(R - 1) && h[N - 1] == (float)(R - 1), "%s: broadcast: %g, want %d", name, (double)h[0],
         R - 1);
  float mine = (float)me, *dm;
  cuda_must(cudaMalloc((void **)&dm, sizeof(float)), "cudaMalloc");
  put(dm, &mine, sizeof mine);
  must(c->ops->allgather(c, dm, d, sizeof(float), NULL), "allgather");
  get(h, d, (size_t)R * sizeof(float));
  for (int r = 0; r < R; r++) EXPECT(h[r] == (float)r, "%s: allgather [%d] = %g", name, r, (double)h[r]);
  must(c->ops->barrier(c), "barrier");

  /* host buffers, staged through the GPU: allreduce, broadcast, allgather */
  for (size_t i = 0; i < N; i++) h[i] = input(i, me);
  must(c->ops->allreduce(c, h, N, MNT_FP32, MNT_SUM, NULL), "allreduce of a host buffer");
  size_t bad = N;
  for (size_t i = 0; i < N && bad == N; i++)
    if (h[i] != sum_of(i)) bad = i;
  EXPECT(bad == N, "%s: allreduce of a host buffer: [%zu] = %g, want %g", name, bad, bad < N ? (double)h[bad] : 0.0,
         bad < N ? (double)sum_of(bad) : 0.0);
  for (size_t i = 0; i < 1000; i++) h[i] = (float)(me * 1000 + (int)i);
  must(c->ops->broadcast(c, h, 1000 * sizeof(float), 0, NULL), "broadcast of a host buffer");
  EXPECT(h[0] == 0.0f && h[999] == 999.0f, "%s: broadcast of a host buffer: %g %g, want 0 999", name, (double)h[0],
         (double)h[999]);
  for (int r = 0; r < R; r++) h[r] = -1.0f;
  must(c->ops->allgather(c, &mine, h, sizeof(float), NULL), "allgather into a host buffer");
  for (int r = 0; r < R; r++)
    EXPECT(h[r] == (float)r, "%s: allgather into a host buffer [%d] = %g", name, r, (double)h[r]);

  if (me == 0)
    printf("%s asked, %s used: NCCL on %d rank(s), %d node(s): allreduce fp32 sum/avg at %zu sizes, bf16, fp16, "
           "iallreduce after a compute stream, broadcast, allgather, barrier, host buffers staged; a kernel launched "
           "after each of %d calls\n",
           name, mnt_topology_name(c->topology), R, w.nnodes, sizeof sizes / sizeof sizes[0], waits);
  cudaFree(dm);
  cudaFree(d);
  free(h);
  free(h16);
  mnt_comm_destroy(c);
  after_wait("destroy");
}

/* hier asked where it cannot be: the communicator runs flat and says so */
static void check_hier_fallback(void) {
  mnt_comm *c;
  must(mnt_comm_create(&w, "nccl", MNT_TOPO_HIER, &c), "nccl communicator (hier asked)");
  EXPECT(c->topology == MNT_TOPO_FLAT, "hier asked on %d node(s), %d rank(s): uses %s, want flat", w.nnodes, R,
         mnt_topology_name(c->topology));
  must(c->ops->barrier(c), "barrier (hier asked, flat used)");
  mnt_comm_destroy(c);
  after_wait("destroy");
}

/* A host staging that fails (a buffer no GPU can hold) aborts the communicator at once, as every
 * failure inside a collective does: every later call is refused, so that a peer already inside
 * the collective is not left waiting until MNT_COMM_TIMEOUT. Every rank fails the same way. */
static void check_staging_failure(void) {
  mnt_comm *c;
  must(mnt_comm_create(&w, "nccl", MNT_TOPO_FLAT, &c), "nccl communicator");
  float host[4] = {1, 2, 3, 4};
  size_t huge = (size_t)1 << 42; /* 16 TiB of fp32 to stage */
  if (me == 0) printf("a failed host staging (the errors logged next are expected):\n");
  fflush(stdout);
  double t0 = mnt_now();
  int st = c->ops->allreduce(c, host, huge, MNT_FP32, MNT_SUM, NULL);
  EXPECT(st != MNT_OK, "an allreduce staging %zu bytes of host data succeeded", huge * sizeof(float));
  after_wait("a failed host staging");
  st = c->ops->barrier(c);
  EXPECT(st != MNT_OK && strstr(mnt_last_error(), "aborted by an earlier failure"),
         "after a failed host staging the communicator was not aborted: the next barrier returned %s (%s)",
         mnt_status_str(st), mnt_last_error());
  double took = mnt_now() - t0;
  EXPECT(took < 10.0, "the failed staging and the refused barrier took %.1f s", took);
  mnt_comm_destroy(c);
  after_wait("destroy of an aborted communicator");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "flat";
  if (strcmp(mode, "flat") && strcmp(mode, "hier")) {
    fprintf(stderr, "usage: test_nccl_comm [flat|hier]\n");
    return 2;
  }
  setenv("MNT_COMM_TIMEOUT", "60", 0); /* a stuck collective fails inside the test's time */
  if (mnt_world_init(&w) != MNT_OK) {
    fprintf(stderr, "FAIL: world: %s\n", mnt_last_error());
    return 1;
  }
  R = w.size;
  me = check_rank = w.rank;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (mnt_world_agree(&w, e == cudaSuccess && n > 0 ? MNT_OK : MNT_EARG) != MNT_OK) {
    if (me == 0) printf("SKIP: no CUDA device here (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    mnt_world_finalize(&w);
    return 77;
  }
  if (!strcmp(mode, "hier") && !hier_possible()) { /* the same answer on every rank: the world's tables */
    if (me == 0)
      printf("SKIP: hier needs more than one node with the same number (more than one) of GPU ranks on each; this "
             "run has %d rank(s) on %d node(s). One GPU cannot run it: NCCL refuses two ranks on one device "
             "(srun --mpi=pmix -N2 --ntasks-per-node=2 --gpus-per-task=1 test_nccl_comm hier)\n",
             R, w.nnodes);
    mnt_world_finalize(&w);
    return 77;
  }
  if (!strcmp(mode, "hier")) {
    run(MNT_TOPO_HIER);
  } else {
    run(MNT_TOPO_FLAT);
    if (!hier_possible()) check_hier_fallback();
    check_staging_failure();
  }
  if (probe) cudaFree(probe);
  int st = mnt_world_agree(&w, failures ? MNT_EDATA : MNT_OK);
  if (me == 0) printf("%s: %d checks on rank 0, %d failed%s\n", st ? "FAIL" : "ok", checks, failures,
                      st && !failures ? " (on another rank)" : "");
  mnt_world_finalize(&w);
  return st ? 1 : 0;
}
