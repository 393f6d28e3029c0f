/* comm_nccl.c — the NCCL communicator (GPU buffers), bootstrapped from PMIx; see comm.h.
 *
 * Set-up, without MPI: the process binds to its GPU by PMIx local rank (the local rank modulo the
 * devices it sees, so that CUDA_VISIBLE_DEVICES as Slurm sets it with --gpus-per-task, with
 * --gpus-per-node, or not at all all work), rank 0 draws the NCCL unique id (ncclGetUniqueId)
 * and the world spreads it with its PMIx broadcast, and every rank joins with a non-blocking
 * ncclCommInitRankConfig polled against the deadline (MNT_COMM_TIMEOUT): a rank that never
 * arrives makes the others abort the communicator and fail naming the wait, not hang.
 *
 * Every call is checked (the call, file:line, rank and node in the message). Collectives are
 * enqueued on the communicator's own stream (or the caller's) and waited for by polling the
 * stream (or the request's event) and ncclCommGetAsyncError, as nccl-tests' watchdog does: on an
 * asynchronous error or at the deadline the communicator is aborted (ncclCommAbort) and the call
 * fails, so that main takes the job down through PMIx with the reason. Topology: flat (one NCCL
 * communicator over all ranks; NCCL builds its own rings and trees across NVLink and the
 * network). --topology hier is accepted and runs flat, saying so once. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "comm.h"
#include "log.h"

#define CUDA_OK(call, what)                                                                  \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      MNT_ERR("%s: %s failed: %s", what, #call, cudaGetErrorString(e_));                    \
      return MNT_ESYS;                                                                       \
    }                                                                                        \
  } while (0)
#define NCCL_OK(call, what)                                                                  \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                         \
      MNT_ERR("%s: %s failed: %s (%s)", what, #call, ncclGetErrorString(r_), ncclGetLastError(NULL)); \
      return MNT_EPEER;                                                                      \
    }                                                                                        \
  } while (0)

typedef struct nccl_impl {
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  float *scratch; /* one float on the device, for barrier */
  int aborted;
} nccl_impl;

struct mnt_comm_req { cudaEvent_t done; };

int mnt_nccl_bootstrap(mnt_world *w, void *id_out, size_t bytes) {
  ncclUniqueId id;
  if (bytes != sizeof id) {
    MNT_ERR("internal: a NCCL unique id has %zu bytes, not %zu", sizeof id, bytes);
    return MNT_ESYS;
  }
  memset(&id, 0, sizeof id);
  if (w->rank == 0) NCCL_OK(ncclGetUniqueId(&id), "NCCL bootstrap");
  MNT_CHECK(mnt_world_bcast(w, &id, sizeof id, 0)); /* PMIx put / commit / fence / get */
  memcpy(id_out, &id, sizeof id);
  MNT_DBG("NCCL unique id %016llx from rank 0", (unsigned long long)XXH3_64bits(&id, sizeof id));
  return MNT_OK;
}

int mnt_cuda_select_device(const mnt_world *w, int *device) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    MNT_ERR("no GPU visible to rank %d (%s%s%s): ask Slurm for one per task (--gpus-per-task=1 or --gpus-per-node)",
            w->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", vis ? ", CUDA_VISIBLE_DEVICES=" : "",
            vis ? vis : "");
    return MNT_EARG;
  }
  *device = w->local_rank % n;
  if (w->local_size > n && w->local_rank == 0)
    MNT_WARN("%d ranks on node %s share %d GPU%s", w->local_size, w->hostname, n, n == 1 ? "" : "s");
  CUDA_OK(cudaSetDevice(*device), "selecting the GPU");
  return MNT_OK;
}

static ncclDataType_t nccl_type(mnt_dtype t) {
  return t == MNT_BF16 ? ncclBfloat16 : t == MNT_FP16 ? ncclFloat16 : ncclFloat32;
}

/* Wait until `done` says the work is complete, watching the communicator's asynchronous errors
 * and the deadline; abort the communicator on either. done: 1 complete, 0 not yet, <0 error. */
static int watch(mnt_comm *c, const char *what, int (*done)(void *), void *arg) {
  nccl_impl *n = c->impl;
  double t0 = mnt_now(), warn = c->timeout_s < 60 ? c->timeout_s / 2 : 30;
  struct timespec nap = {0, 20 * 1000};
  for (;;) {
    int d = done(arg);
    if (d > 0) return MNT_OK;
    ncclResult_t ae = ncclSuccess;
    ncclCommGetAsyncError(n->comm, &ae);
    if (d < 0 || (ae != ncclSuccess && ae != ncclInProgress)) {
      MNT_ERR("NCCL %s failed on rank %d (%s): %s", what, c->world->rank, c->world->hostname,
              ae != ncclSuccess ? ncclGetErrorString(ae) : "CUDA error");
      break;
    }
    double el = mnt_now() - t0;
    if (el > warn) {
      MNT_WARN("NCCL %s on rank %d (%s) has waited %.0f s (a peer stopped, died or is not in it?)", what,
               c->world->rank, c->world->hostname, el);
      warn *= 2;
    }
    if (el > c->timeout_s) {
      MNT_ERR("NCCL %s on rank %d (%s) did not complete in %.0f s (MNT_COMM_TIMEOUT): aborting the communicator", what,
              c->world->rank, c->world->hostname, c->timeout_s);
      ncclCommAbort(n->comm);
      n->aborted = 1;
      return MNT_ETIMEOUT;
    }
    nanosleep(&nap, NULL);
    if (nap.tv_nsec < 1000 * 1000) nap.tv_nsec *= 2; /* 20 us .. about 1 ms */
  }
  ncclCommAbort(n->comm);
  n->aborted = 1;
  return MNT_EPEER;
}

static int stream_done(void *s) {
  cudaError_t e = cudaStreamQuery((cudaStream_t)s);
  return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -1;
}
static int event_done(void *ev) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)ev);
  return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -1;
}
static int comm_ready(void *comm) {
  ncclResult_t r = ncclSuccess;
  if (ncclCommGetAsyncError((ncclComm_t)comm, &r) != ncclSuccess) return -1;
  return r == ncclSuccess ? 1 : r == ncclInProgress ? 0 : -1;
}

static cudaStream_t stream_of(mnt_comm *c, mnt_stream *stream) {
  return stream ? (cudaStream_t)stream : ((nccl_impl *)c->impl)->stream;
}

static int n_allreduce(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  cudaStream_t s = stream_of(c, stream);
  NCCL_OK(ncclAllReduce(buf, buf, count, nccl_type(t), op == MNT_AVG ? ncclAvg : ncclSum, n->comm, s), "allreduce");
  return watch(c, "allreduce", stream_done, s);
}

static int n_iallreduce(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream,
                        mnt_comm_req **req) {
  nccl_impl *n = c->impl;
  cudaStream_t s = stream_of(c, stream);
  mnt_comm_req *r = calloc(1, sizeof *r);
  if (!r) return MNT_ENOMEM;
  *req = r;
  CUDA_OK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming), "allreduce");
  NCCL_OK(ncclAllReduce(buf, buf, count, nccl_type(t), op == MNT_AVG ? ncclAvg : ncclSum, n->comm, s), "allreduce");
  CUDA_OK(cudaEventRecord(r->done, s), "allreduce");
  return MNT_OK;
}

static int n_wait(mnt_comm *c, mnt_comm_req *r) {
  int st = watch(c, "allreduce", event_done, r->done);
  cudaEventDestroy(r->done);
  free(r);
  return st;
}

static int n_broadcast(mnt_comm *c, void *buf, size_t bytes, int root, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  cudaStream_t s = stream_of(c, stream);
  NCCL_OK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, n->comm, s), "broadcast");
  return watch(c, "broadcast", stream_done, s);
}

static int n_allgather(mnt_comm *c, const void *send, void *recv, size_t bytes, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  cudaStream_t s = stream_of(c, stream);
  NCCL_OK(ncclAllGather(send, recv, bytes, ncclUint8, n->comm, s), "allgather");
  return watch(c, "allgather", stream_done, s);
}

static int n_barrier(mnt_comm *c) {
  nccl_impl *n = c->impl;
  return n_allreduce(c, n->scratch, 1, MNT_FP32, MNT_SUM, NULL);
}

static void n_destroy(mnt_comm *c) {
  nccl_impl *n = c->impl;
  if (n) {
    if (n->comm && !n->aborted) ncclCommDestroy(n->comm);
    if (n->scratch) cudaFree(n->scratch);
    if (n->stream) cudaStreamDestroy(n->stream);
    free(n);
  }
  free(c);
}

static const mnt_comm_ops NCCL_OPS = {"nccl", n_allreduce, n_iallreduce, n_wait, n_broadcast, n_allgather, n_barrier,
                                      n_destroy};

int mnt_comm_nccl_create(mnt_world *w, mnt_topology topo, mnt_comm **out) {
  *out = NULL;
  mnt_comm *c = calloc(1, sizeof *c);
  nccl_impl *n = calloc(1, sizeof *n);
  if (!c || !n) {
    free(c);
    free(n);
    return MNT_ENOMEM;
  }
  *c = (mnt_comm){.ops = &NCCL_OPS, .world = w, .topology = MNT_TOPO_FLAT, .timeout_s = w->timeout_s, .impl = n};
  if (topo == MNT_TOPO_HIER && w->rank == 0)
    MNT_INFO("--topology hier with nccl runs flat (NCCL builds its own rings and trees over NVLink and the network)");
  int st = mnt_cuda_select_device(w, &n->device);
  ncclUniqueId id;
  st = mnt_world_agree(w, st); /* every rank has a GPU, or none starts */
  if (st == MNT_OK) st = mnt_nccl_bootstrap(w, &id, sizeof id);
  if (st == MNT_OK && cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking) != cudaSuccess) st = MNT_ESYS;
  if (st == MNT_OK && cudaMalloc((void **)&n->scratch, sizeof(float)) != cudaSuccess) st = MNT_ENOMEM;
  if (st == MNT_OK) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* polled against the deadline below */
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, w->size, id, w->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      MNT_ERR("ncclCommInitRankConfig failed on rank %d (%s): %s", w->rank, w->hostname, ncclGetErrorString(r));
      st = MNT_EPEER;
    } else {
      st = watch(c, "communicator set-up (ncclCommInitRankConfig)", comm_ready, n->comm);
    }
  }
  if (st != MNT_OK) {
    n_destroy(c);
    return st;
  }
  if (w->rank == 0) {
    int v = 0;
    ncclGetVersion(&v);
    MNT_INFO("NCCL %d.%d.%d: %d ranks, rank 0 on GPU %d", v / 10000, v / 100 % 100, v % 100, w->size, n->device);
  }
  *out = c;
  return MNT_OK;
}
