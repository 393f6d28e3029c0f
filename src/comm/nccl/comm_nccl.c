/* comm_nccl.c — the NCCL communicator (GPU buffers), bootstrapped from PMIx; see comm.h.
 *
 * Set-up, without MPI: the process binds to its GPU by PMIx local rank (mnt_cuda_select_device,
 * backend/cuda/device.h: the local rank modulo the devices it sees, so that CUDA_VISIBLE_DEVICES as
 * Slurm sets it with --gpus-per-task, with --gpus-per-node, or not at all all work), rank 0 draws
 * the NCCL unique id (ncclGetUniqueId) and the world spreads it with its PMIx broadcast, and every
 * rank joins with a non-blocking ncclCommInitRankConfig polled against the deadline
 * (MNT_COMM_TIMEOUT): a rank that never arrives makes the others abort the communicator and fail
 * naming the wait, not hang.
 *
 * Blocking and non-blocking. Set-up and teardown run on a non-blocking communicator (flat): each
 * call (init, split, finalize) may return ncclInProgress and finish on an NCCL thread, polled
 * against the deadline until ncclCommGetAsyncError leaves ncclInProgress. The collectives run on
 * blocking communicators split from it (coll, and hier's intra and inter): on a non-blocking one
 * NCCL starts a thread for every group, every collective included, and returns ncclInProgress
 * (group.cc, ncclGroupEndInternal: groupLaunchNonBlocking on a new thread), a thread start, join
 * and poll per call, 3-4 calls per bucket in hier. The splits themselves are jobs of the
 * non-blocking parent, polled as before. NCCL_RUNTIME_CONNECT=0 (unless the user set it) makes every
 * connection at set-up, so a blocking collective never waits on the host for a peer; what the
 * kernels wait for is polled as before (below).
 *
 * Topology. flat: one NCCL communicator over all ranks (NCCL builds its own rings and trees over
 * NVLink and the network). hier (--topology hier, ChainerMN's two-dimensional allreduce): two
 * more communicators split from the flat one with ncclCommSplit, intra (color = node index, key
 * = local rank: the ranks of one node) and inter (color = local rank, key = node index: one rank
 * per node, those that hold the same slice). An allreduce of count elements reduce-scatters
 * within the node (ncclReduceScatter, slice = count / local_size, each slice a multiple of 256
 * bytes), allreduces its own slice across nodes (ncclAllReduce on inter), and allgathers within
 * the node (ncclAllGather), all in place; the tail that does not fill local_size slices (fewer
 * than local_size * 256 bytes, and any buffer smaller than that) is allreduced on the flat
 * communicator. AVG uses ncclAvg at each step: the average over the node of the average over
 * the nodes is the average over all ranks, because every node has the same number of ranks.
 * hier is built only with more than one node, more than one rank per node and the same number
 * of ranks on every node; otherwise it runs flat and rank 0 says why once. c->topology says
 * which is used. broadcast, allgather and barrier always use the flat communicator.
 *
 * Streams. All collectives run on the communicator's own stream, one stream for all three NCCL
 * communicators, so their operations are queued in the same order on every rank. The caller's
 * stream (the compute stream whose work produced the buffer; NULL: nothing to wait for) gets an
 * event recorded on it, and the communicator's stream waits for that event (cudaStreamWaitEvent)
 * before the collectives, then records a done event. Blocking calls (allreduce, broadcast,
 * allgather, barrier) wait for that event; iallreduce returns once the work is queued and wait()
 * polls the request's event, so that the caller's next work (queued after wait returns) comes
 * after the reduction. Request events come from a free list and are reused.
 *
 * Every CUDA and NCCL call is checked (the call, file:line, rank and node in the message:
 * cuda_check.h's MNT_CUDA_* and the MNT_NCCL_* below), and every CUDA error is cleared where it is
 * handled (those checks, mnt_cuda_clear), so that none is left as the thread's last error for the
 * next kernel launch to report as its own. Every wait polls
 * cudaEventQuery and ncclCommGetAsyncError of every communicator about every 100 us
 * (nccl_wait.h), as nccl-tests' watchdog does: on an asynchronous error, a CUDA error, a failed
 * call in the middle of a collective (the host staging copies included), or at the deadline all
 * the NCCL communicators are aborted (ncclCommAbort) and the call fails, so that main takes the
 * job down through PMIx with the reason, and the peers fail at once rather than at their
 * deadline; every later call fails at once. destroy finalizes the communicators
 * (ncclCommFinalize, polled against the deadline; aborted when it expires) before
 * ncclCommDestroy. A communicator is used by one thread at a time. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "src/comm/comm.h"
#include "src/backend/cuda/cuda_check.h"
#include "src/backend/cuda/device.h"
#include "src/check.h"
#include "src/log.h"
#include "src/comm/nccl/nccl_wait.h"

/* NCCL's checks, in check.h's vocabulary (the CUDA calls' are cuda_check.h's):
 *   MNT_NCCL_OK(comm, call, what)   an expression: MNT_OK, or "NCCL what: call failed:
 *                                   ncclGetErrorString (ncclGetLastError(comm))" logged and MNT_EPEER
 *   MNT_NCCL_CHECK_GOTO(c, comm, call, what, st, out)   a call on the non-blocking communicator
 *                                   comm of the mnt_comm c: a failure is stored in st and jumps to
 *                                   out (which aborts the communicators); ncclInProgress is waited
 *                                   out (watch, against the deadline) before anything else is queued */
static int nccl_ok_at(ncclResult_t r, ncclComm_t comm, const char *what, const char *call, const char *file,
                      int line) {
  if (r == ncclSuccess) return MNT_OK;
  mnt_log_at(MNT_LOG_ERROR, file, line, "NCCL %s: %s failed: %s (%s)", what, call, ncclGetErrorString(r),
             ncclGetLastError(comm));
  return MNT_EPEER;
}
#define MNT_NCCL_OK(comm, call, what) nccl_ok_at((call), (comm), (what), #call, __FILE__, __LINE__)
#define MNT_NCCL_CHECK_GOTO(c, comm, call, what, st, label)                                               \
  do {                                                                                                    \
    ncclResult_t mnt_nr_ = (call);                                                                        \
    if (mnt_nr_ == ncclInProgress)                                                                        \
      MNT_CHECK_GOTO(watch((c), (what), NULL, (comm)), st, label);                                        \
    else                                                                                                  \
      MNT_CHECK_GOTO(nccl_ok_at(mnt_nr_, (comm), (what), #call, __FILE__, __LINE__), st, label);          \
  } while (0)

/* hier slices are multiples of this many bytes (aligned loads; the rest goes flat) */
enum { HIER_ALIGN = 256 };

struct mnt_comm_req {
  cudaEvent_t done;
  mnt_comm_req *next; /* on the free list */
};

typedef struct nccl_impl {
  ncclComm_t flat;          /* all ranks; non-blocking: set-up, splits, finalize under the deadline */
  ncclComm_t coll;          /* all ranks again, blocking: the flat collectives (NULL: they run on flat) */
  ncclComm_t intra, inter;  /* hier: the ranks of this node; the ranks of this local rank (blocking) */
  int intra_rank, intra_size, inter_size;
  cudaStream_t stream;      /* every collective runs here */
  cudaEvent_t ready;        /* recorded on the caller's stream; the stream above waits for it */
  cudaEvent_t done;         /* end of a blocking collective */
  mnt_comm_req *free_reqs;
  int device;
  float *one;               /* one float on the device, for barrier */
  void *stage;              /* host buffers (control values) pass through here */
  size_t stage_bytes;
  int aborted;
  mnt_topology asked;       /* --topology, for a rebuild after a loss */
  mnt_comm *ctl;            /* --on-rank-loss shrink: the CPU communicator that carries the membership */
} nccl_impl;

int mnt_nccl_bootstrap(mnt_world *w, void *id_out, size_t bytes) {
  ncclUniqueId id;
  if (bytes != sizeof id) {
    MNT_ERR("internal: a NCCL unique id has %zu bytes, not %zu", sizeof id, bytes);
    return MNT_ESYS;
  }
  memset(&id, 0, sizeof id);
  int st = MNT_OK;
  if (w->rank == 0) /* a failure still takes part in the broadcast, so that no rank waits for rank 0 */
    st = MNT_NCCL_OK(NULL, ncclGetUniqueId(&id), "bootstrap");
  int rc = mnt_world_bcast(w, &id, sizeof id, 0); /* PMIx put / commit / fence / get */
  MNT_CHECK(st != MNT_OK ? st : rc);
  memcpy(id_out, &id, sizeof id);
  MNT_DBG("NCCL unique id %016llx from rank 0", (unsigned long long)XXH3_64bits(&id, sizeof id));
  return MNT_OK;
}

static ncclDataType_t nccl_type(mnt_dtype t) {
  return t == MNT_BF16 ? ncclBfloat16 : t == MNT_FP16 ? ncclFloat16 : t == MNT_FP64 ? ncclFloat64 : ncclFloat32;
}
static ncclRedOp_t nccl_op(mnt_redop op) { return op == MNT_AVG ? ncclAvg : ncclSum; }

static const char *comm_name(const nccl_impl *n, ncclComm_t x) {
  return x == n->flat ? "flat" : x == n->coll ? "flat (blocking)" : x == n->intra ? "intra-node"
         : x == n->inter ? "inter-node" : "new";
}

/* the communicator of the flat collectives */
static ncclComm_t flat_coll(const nccl_impl *n) { return n->coll ? n->coll : n->flat; }

/* Abort every NCCL communicator (the flat one first: aborting it also ends a split still under
 * way, which may then leave a child to abort). Safe to call twice. */
static void abort_all(nccl_impl *n) {
  ncclComm_t *all[4] = {&n->flat, &n->coll, &n->intra, &n->inter};
  static const char *const names[4] = {"flat", "flat (blocking)", "intra-node", "inter-node"};
  for (int i = 0; i < 4; i++) {
    if (!*all[i]) continue;
    ncclResult_t r = ncclCommAbort(*all[i]);
    if (r != ncclSuccess) MNT_WARN("ncclCommAbort of the %s communicator failed: %s", names[i], ncclGetErrorString(r));
    *all[i] = NULL;
  }
  n->aborted = 1;
}

/* What watch() polls: the event, the communicator whose call is under way, and every
 * communicator's asynchronous error. */
typedef struct watch_poll {
  nccl_impl *n;
  const char *what;
  cudaEvent_t ev;
  ncclComm_t pending;
} watch_poll;

static int watch_once(void *arg, int *done) {
  watch_poll *w = arg;
  nccl_impl *n = w->n;
  *done = 1;
  if (w->ev) {
    /* cudaErrorNotReady is this poll's "not yet", and the runtime keeps it as the thread's last
     * error: cleared here, or the next kernel launched after the wait would fail with it */
    cudaError_t e = mnt_cuda_clear(cudaEventQuery(w->ev));
    if (e != cudaSuccess && e != cudaErrorNotReady) {
      MNT_ERR("NCCL %s: cudaEventQuery failed: %s", w->what, cudaGetErrorString(e));
      return MNT_EPEER;
    }
    *done = e == cudaSuccess;
  }
  if (n->ctl && mnt_comm_interrupted(n->ctl)) { /* a peer said a rank was lost: the recovery starts */
    MNT_WARN("NCCL %s stopped: another rank says a rank was lost", w->what);
    return MNT_EPEER;
  }
  ncclComm_t comms[5] = {n->flat, n->coll, n->intra, n->inter, NULL};
  if (w->pending && w->pending != n->flat && w->pending != n->coll && w->pending != n->intra &&
      w->pending != n->inter)
    comms[4] = w->pending;
  for (int i = 0; i < 5; i++) {
    if (!comms[i]) continue;
    ncclResult_t ae = ncclSuccess, r = ncclCommGetAsyncError(comms[i], &ae);
    if (r != ncclSuccess) {
      MNT_ERR("NCCL %s: ncclCommGetAsyncError (%s communicator) failed: %s", w->what, comm_name(n, comms[i]),
              ncclGetErrorString(r));
      return MNT_EPEER;
    }
    if (ae != ncclSuccess && ae != ncclInProgress) {
      MNT_ERR("NCCL %s failed on the %s communicator: %s (%s)", w->what, comm_name(n, comms[i]),
              ncclGetErrorString(ae), ncclGetLastError(comms[i]));
      return MNT_EPEER;
    }
    if (comms[i] == w->pending && ae == ncclInProgress) *done = 0;
  }
  return MNT_OK;
}

/* Wait, against the deadline, until the event ev has completed (ev != NULL) or the communicator
 * `pending` has left ncclInProgress (its call, init, split, enqueue or finalize, is done),
 * watching every communicator's asynchronous error meanwhile (nccl_wait.h: a poll about every
 * 100 us). On an error or at the deadline abort all the communicators. */
static int watch(mnt_comm *c, const char *what, cudaEvent_t ev, ncclComm_t pending) {
  nccl_impl *n = c->impl;
  watch_poll w = {n, what, ev, pending};
  int st = mnt_nccl_wait_loop(watch_once, &w, c->timeout_s, what, NULL);
  if (st != MNT_OK) abort_all(n);
  return st;
}

static int refuse_aborted(const nccl_impl *n, const char *what) {
  if (!n->aborted) return MNT_OK;
  MNT_ERR("NCCL %s: the communicator was aborted by an earlier failure", what);
  return MNT_EPEER;
}

/* Make the communicator's stream wait for the work queued so far on the caller's stream. */
static int after_caller(mnt_comm *c, mnt_stream *stream, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  if (!stream || mnt_cuda_stream(stream) == n->stream) return MNT_OK;
  MNT_CUDA_CHECK_GOTO(cudaEventRecord(n->ready, mnt_cuda_stream(stream)), st, out);
  MNT_CUDA_CHECK_GOTO(cudaStreamWaitEvent(n->stream, n->ready, 0), st, out);
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

/* Queue an allreduce of buf[0..count) on the communicator's stream: flat, or hier's three
 * steps on whole slices and flat for the tail. On failure the communicators are aborted. */
static int enqueue_allreduce(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  ncclDataType_t dt = nccl_type(t);
  ncclRedOp_t rop = nccl_op(op);
  size_t es = mnt_dtype_size(t), head = 0, slice = 0;
  if (es == 0 || es > HIER_ALIGN) {
    MNT_ERR("NCCL %s: element type %d is not one NCCL reduces here", what, (int)t);
    return MNT_EARG; /* nothing queued: every rank was given the same type */
  }
  if (c->topology == MNT_TOPO_HIER) {
    size_t unit = (size_t)n->intra_size * (HIER_ALIGN / es); /* elements per round of aligned slices */
    head = count / unit * unit;
    slice = head / (size_t)n->intra_size;
  }
  if (head > 0) {
    char *mine = (char *)buf + (size_t)n->intra_rank * slice * es;
    /* in place: rank i of the node keeps slice i, reduced (or averaged) over the node */
    MNT_NCCL_CHECK_GOTO(c, n->intra, ncclReduceScatter(buf, mine, slice, dt, rop, n->intra, n->stream), what, st,
                        out);
    /* slice i over the nodes: now reduced (or averaged) over all ranks */
    MNT_NCCL_CHECK_GOTO(c, n->inter, ncclAllReduce(mine, mine, slice, dt, rop, n->inter, n->stream), what, st, out);
    MNT_NCCL_CHECK_GOTO(c, n->intra, ncclAllGather(mine, buf, slice, dt, n->intra, n->stream), what, st, out);
  }
  if (count > head) {
    char *tail = (char *)buf + head * es;
    MNT_NCCL_CHECK_GOTO(c, flat_coll(n), ncclAllReduce(tail, tail, count - head, dt, rop, flat_coll(n), n->stream), what, st,
                        out);
  }
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

/* Record `ev` after the queued collectives (and, with wait, wait for it). */
static int finish(mnt_comm *c, cudaEvent_t ev, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  MNT_CUDA_CHECK_GOTO(cudaEventRecord(ev, n->stream), st, out);
  st = watch(c, what, ev, NULL); /* on failure it has aborted the communicators (again below: harmless) */
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

/* Host memory (the trainer's control values, a checkpoint's agreement, statistics sums) goes
 * through a device buffer: 1 for a host pointer (copied in when `in`), 0 for device memory. */
static int is_host(const void *p) {
  struct cudaPointerAttributes a;
  if (mnt_cuda_clear(cudaPointerGetAttributes(&a, p)) != cudaSuccess) return 1; /* older drivers: unknown = host */
  return a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged;
}
/* The staging buffer holds at least cap bytes, and the first `bytes` of `host` (NULL: nothing) are
 * queued for copying into it. A failure aborts the communicators, as every failure inside a
 * collective does: the peers may already be in it, and would otherwise wait for this rank until
 * MNT_COMM_TIMEOUT. */
static int stage_in(mnt_comm *c, const void *host, size_t bytes, size_t cap, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  if (cap > n->stage_bytes) {
    /* in stream order: a cudaFree would wait for the whole device without a deadline */
    void *old = n->stage;
    n->stage = NULL;
    n->stage_bytes = 0;
    if (old) MNT_CUDA_CHECK_GOTO(cudaFreeAsync(old, n->stream), st, out);
    cudaError_t e = mnt_cuda_clear(cudaMallocAsync(&n->stage, cap, n->stream));
    if (e != cudaSuccess) {
      MNT_ERR("NCCL %s: cudaMallocAsync of %zu bytes for host data failed: %s", what, cap, cudaGetErrorString(e));
      n->stage = NULL;
      st = e == cudaErrorMemoryAllocation ? MNT_ENOMEM : MNT_ESYS;
      goto out;
    }
    n->stage_bytes = cap;
  }
  if (host && bytes)
    MNT_CUDA_CHECK_GOTO(cudaMemcpyAsync(n->stage, host, bytes, cudaMemcpyHostToDevice, n->stream), st, out);
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}
/* The result (the collective has finished) back to the host. A failure aborts the communicators:
 * this rank fails, and the peers fail at their next call instead of waiting for it there. */
static int stage_out(mnt_comm *c, void *host, size_t bytes, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  MNT_CUDA_CHECK_GOTO(cudaMemcpy(host, n->stage, bytes, cudaMemcpyDeviceToHost), st, out);
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

static int n_allreduce(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  MNT_CHECK(refuse_aborted(n, "allreduce"));
  MNT_CHECK(after_caller(c, stream, "allreduce"));
  if (is_host(buf)) {
    size_t bytes = count * mnt_dtype_size(t);
    MNT_CHECK(stage_in(c, buf, bytes, bytes, "allreduce"));
    MNT_CHECK(enqueue_allreduce(c, n->stage, count, t, op, "allreduce"));
    MNT_CHECK(finish(c, n->done, "allreduce"));
    return stage_out(c, buf, bytes, "allreduce");
  }
  MNT_CHECK(enqueue_allreduce(c, buf, count, t, op, "allreduce"));
  return finish(c, n->done, "allreduce");
}

static int n_iallreduce(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream,
                        mnt_comm_req **req) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  *req = NULL;
  MNT_CHECK(refuse_aborted(n, "allreduce"));
  if (is_host(buf)) {
    MNT_ERR("NCCL allreduce: a started (non-blocking) allreduce needs GPU memory, not a host buffer");
    return MNT_EARG;
  }
  mnt_comm_req *r = n->free_reqs;
  if (r) {
    n->free_reqs = r->next;
  } else {
    if (!(r = calloc(1, sizeof *r))) {
      MNT_ERR("NCCL allreduce: out of memory for a request");
      st = MNT_ENOMEM;
      goto out;
    }
    cudaError_t e = mnt_cuda_clear(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    if (e != cudaSuccess) {
      MNT_ERR("NCCL allreduce: cudaEventCreateWithFlags failed: %s", cudaGetErrorString(e));
      free(r);
      r = NULL;
      st = MNT_ESYS;
      goto out;
    }
  }
  r->next = NULL;
  MNT_CHECK_GOTO(after_caller(c, stream, "allreduce"), st, out);
  MNT_CHECK_GOTO(enqueue_allreduce(c, buf, count, t, op, "allreduce"), st, out);
  MNT_CUDA_CHECK_GOTO(cudaEventRecord(r->done, n->stream), st, out);
  *req = r;
out:
  if (st != MNT_OK) {
    abort_all(n); /* peers may have queued their part: do not leave them waiting for ours */
    if (r) {
      r->next = n->free_reqs;
      n->free_reqs = r;
    }
  }
  return st;
}

static int n_wait(mnt_comm *c, mnt_comm_req *r) {
  nccl_impl *n = c->impl;
  if (!r) {
    MNT_ERR("NCCL allreduce: wait on no request");
    return MNT_EARG;
  }
  int st = refuse_aborted(n, "allreduce (wait)");
  if (st == MNT_OK) st = watch(c, "allreduce (wait)", r->done, NULL);
  r->next = n->free_reqs;
  n->free_reqs = r;
  return st;
}

/* the stream waits for the request's done event (a captured step: the NCCL stream's work joins the
 * capture back here); no host wait. Built without a GPU: not run yet. */
static int n_join(mnt_comm *c, mnt_comm_req *r, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  if (!r || !stream) {
    MNT_ERR("NCCL allreduce: a join needs a request and a stream");
    return MNT_EARG;
  }
  MNT_CHECK(refuse_aborted(n, "allreduce (join)"));
  MNT_CUDA_CHECK_GOTO(cudaStreamWaitEvent(mnt_cuda_stream(stream), r->done, 0), st, out);
out:
  r->next = n->free_reqs;
  n->free_reqs = r;
  if (st != MNT_OK) abort_all(n);
  return st;
}

/* the host waits for the stream's queued work (a replayed step, NCCL's collectives in it) as for
 * any collective: polled against the deadline, every communicator's errors watched */
static int n_settle(mnt_comm *c, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  MNT_CHECK(refuse_aborted(n, "the step"));
  MNT_CUDA_CHECK_GOTO(cudaEventRecord(n->done, mnt_cuda_stream(stream)), st, out);
  st = watch(c, "the step (a replayed graph)", n->done, NULL);
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

static int n_broadcast(mnt_comm *c, void *buf, size_t bytes, int root, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  if (root < 0 || root >= c->world->size) {
    MNT_ERR("NCCL broadcast: root %d is not a rank (0..%d)", root, c->world->size - 1);
    return MNT_EARG;
  }
  MNT_CHECK(refuse_aborted(n, "broadcast"));
  MNT_CHECK(after_caller(c, stream, "broadcast"));
  void *host = is_host(buf) ? buf : NULL;
  if (host) {
    MNT_CHECK(stage_in(c, c->world->rank == root ? buf : NULL, bytes, bytes, "broadcast"));
    buf = n->stage;
  }
  MNT_NCCL_CHECK_GOTO(c, flat_coll(n), ncclBroadcast(buf, buf, bytes, ncclUint8, root, flat_coll(n), n->stream),
                      "broadcast", st, out);
  MNT_CHECK_GOTO(finish(c, n->done, "broadcast"), st, out);
  if (host) st = stage_out(c, host, bytes, "broadcast");
out:
  if (st != MNT_OK) abort_all(n); /* finish and stage_out have already: harmless */
  return st;
}

static int n_allgather(mnt_comm *c, const void *send, void *recv, size_t bytes, mnt_stream *stream) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  MNT_CHECK(refuse_aborted(n, "allgather"));
  MNT_CHECK(after_caller(c, stream, "allgather"));
  void *host = is_host(recv) ? recv : NULL;
  size_t all = bytes * (size_t)c->world->size;
  if (host) { /* this rank's part in place in the staging buffer */
    MNT_CHECK(stage_in(c, NULL, 0, all, "allgather"));
    cudaError_t e = mnt_cuda_clear(cudaMemcpyAsync((char *)n->stage + (size_t)c->world->rank * bytes, send, bytes,
                                                   is_host(send) ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
                                                   n->stream));
    if (e != cudaSuccess) {
      MNT_ERR("NCCL allgather: cudaMemcpyAsync of this rank's part failed: %s", cudaGetErrorString(e));
      st = MNT_ESYS;
      goto out; /* the peers fail at once instead of at their deadline */
    }
    send = (char *)n->stage + (size_t)c->world->rank * bytes;
    recv = n->stage;
  }
  MNT_NCCL_CHECK_GOTO(c, flat_coll(n), ncclAllGather(send, recv, bytes, ncclUint8, flat_coll(n), n->stream),
                      "allgather", st, out);
  MNT_CHECK_GOTO(finish(c, n->done, "allgather"), st, out);
  if (host) st = stage_out(c, host, all, "allgather");
out:
  if (st != MNT_OK) abort_all(n); /* finish and stage_out have already: harmless */
  return st;
}

static int n_barrier(mnt_comm *c) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  MNT_CHECK(refuse_aborted(n, "barrier"));
  MNT_NCCL_CHECK_GOTO(c, flat_coll(n),
                      ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, flat_coll(n), n->stream), "barrier", st,
                      out);
  st = finish(c, n->done, "barrier"); /* on failure it has aborted the communicators (again below: harmless) */
out:
  if (st != MNT_OK) abort_all(n);
  return st;
}

/* Finalize (polled against the deadline) and destroy the communicators, children first; abort
 * them all if that fails. */
static void close_comms(mnt_comm *c) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  ncclComm_t *all[4] = {&n->inter, &n->intra, &n->coll, &n->flat};
  for (int i = 0; i < 4 && !n->aborted; i++) {
    if (!*all[i]) continue;
    MNT_NCCL_CHECK_GOTO(c, *all[i], ncclCommFinalize(*all[i]), "finalize (ncclCommFinalize)", st, out);
  }
  for (int i = 0; i < 4 && !n->aborted; i++) {
    if (!*all[i]) continue;
    ncclResult_t r = ncclCommDestroy(*all[i]);
    if (r != ncclSuccess && r != ncclInProgress)
      MNT_WARN("ncclCommDestroy of the %s communicator failed: %s", comm_name(n, *all[i]), ncclGetErrorString(r));
    *all[i] = NULL;
  }
out:
  if (st != MNT_OK) abort_all(n);
}

/* The CUDA resources, the requests on the free list and the structs (communicators already
 * closed or aborted). Each failure is reported and cleared, and the rest still released. */
static void release(mnt_comm *c) {
  nccl_impl *n = c->impl;
  if (n) {
    while (n->free_reqs) {
      mnt_comm_req *r = n->free_reqs;
      n->free_reqs = r->next;
      if (r->done) MNT_CUDA_WARN(cudaEventDestroy(r->done));
      free(r);
    }
    if (n->one) MNT_CUDA_WARN(cudaFree(n->one));
    if (n->stage) MNT_CUDA_WARN(cudaFree(n->stage)); /* from cudaMallocAsync: cudaFree waits for its stream */
    if (n->ready) MNT_CUDA_WARN(cudaEventDestroy(n->ready));
    if (n->done) MNT_CUDA_WARN(cudaEventDestroy(n->done));
    if (n->stream) MNT_CUDA_WARN(cudaStreamDestroy(n->stream));
    free(n);
  }
  free(c);
}

static void n_destroy(mnt_comm *c) {
  close_comms(c);
  nccl_impl *n = c->impl;
  if (n) mnt_comm_destroy(n->ctl);
  release(c);
}

static int n_enable_shrink(mnt_comm *c);
static int n_shrink(mnt_comm *c, int64_t step, mnt_rank_loss *lost, int max, int *nlost);
static int n_interrupted(mnt_comm *c) {
  nccl_impl *n = c->impl;
  return n->ctl && mnt_comm_interrupted(n->ctl);
}

static const mnt_comm_ops NCCL_OPS = {
    .name = "nccl",
    .allreduce = n_allreduce,
    .iallreduce = n_iallreduce,
    .wait = n_wait,
    .broadcast = n_broadcast,
    .allgather = n_allgather,
    .barrier = n_barrier,
    .destroy = n_destroy,
    .enable_shrink = n_enable_shrink,
    .shrink = n_shrink,
    .interrupted = n_interrupted,
    .join = n_join,
    .settle = n_settle,
};

/* Why hier cannot be used in this world (NULL: it can). The same answer on every rank: it
 * reads only the world's tables. */
static const char *hier_refusal(const mnt_world *w) {
  if (w->nnodes <= 1) return "all ranks are on one node";
  int L = 0;
  for (int r = 0; r < w->size; r++) L += w->node_of[r] == 0;
  if (L <= 1) return "there is one rank per node";
  for (int node = 0; node < w->nnodes; node++) {
    unsigned long long seen = 0; /* local ranks present, when L <= 64 */
    int cnt = 0;
    for (int r = 0; r < w->size; r++) {
      if (w->node_of[r] != node) continue;
      cnt++;
      int lr = w->local_of[r];
      if (lr < 0 || lr >= L) return "the local ranks of a node are not 0..n-1";
      if (L <= 64) {
        if (seen >> lr & 1ULL) return "two ranks of a node have the same local rank";
        seen |= 1ULL << lr;
      }
    }
    if (cnt != L) return "it needs the same number of ranks on every node";
  }
  return NULL;
}

/* One ncclCommSplit of the flat communicator into *made, ready when this returns. The split is a job
 * of the non-blocking parent: it returns at once and finishes on an NCCL thread (a blocking child
 * included: on an H200 with NCCL 2.28.3 the call returned ncclSuccess with the child not yet made),
 * so it is polled on the parent against the deadline. blocking: the child's own calls, its
 * collectives, run in the caller's thread (no NCCL thread per call; see mnt_comm_nccl_create). */
static int split(mnt_comm *c, int color, int key, int blocking, const char *name, ncclComm_t *made, int *rank,
                 int *size, const char *what) {
  nccl_impl *n = c->impl;
  int st = MNT_OK;
  ncclComm_t child = NULL; /* written by an NCCL thread until the flat communicator is ready again */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = blocking;
  cfg.commName = name; /* in NCCL_DEBUG's lines; a literal, since NCCL keeps the pointer */
  ncclResult_t r = ncclCommSplit(n->flat, color, key, &child, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    MNT_ERR("NCCL %s: ncclCommSplit(color %d, key %d) failed: %s (%s)", what, color, key, ncclGetErrorString(r),
            ncclGetLastError(n->flat));
    st = MNT_EPEER;
    goto out;
  }
  MNT_CHECK_GOTO(watch(c, what, NULL, n->flat), st, out); /* the split job runs on the parent */
  if (!child) {
    MNT_ERR("NCCL %s: ncclCommSplit(color %d, key %d) completed without a communicator", what, color, key);
    st = MNT_EPEER;
    goto out;
  }
  MNT_CHECK_GOTO(watch(c, what, NULL, child), st, out);
  *made = child; /* from here on abort_all owns it */
  child = NULL;
  MNT_NCCL_CHECK_GOTO(c, *made, ncclCommUserRank(*made, rank), what, st, out);
  MNT_NCCL_CHECK_GOTO(c, *made, ncclCommCount(*made, size), what, st, out);
out:
  if (st != MNT_OK) {
    abort_all(n); /* ends a split still under way; then the child it may have left */
    if (child) ncclCommAbort(child);
  }
  return st;
}

/* The NCCL communicators over the world as it is (at set-up, or over the survivors of a loss) from
 * the unique id: the flat one (non-blocking), hier's two splits unless no_hier says why not, and the
 * flat collectives' blocking one. On a failure they are left for the caller to abort. */
static int init_comms(mnt_comm *c, const ncclUniqueId *idp, const char *no_hier) {
  nccl_impl *n = c->impl;
  mnt_world *w = c->world;
  mnt_topology topo = n->asked;
  ncclUniqueId id = *idp;
  int st = MNT_OK;
  c->topology = MNT_TOPO_FLAT;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0; /* polled against the deadline below */
  cfg.commName = "mntrain flat";
  ncclResult_t r = ncclCommInitRankConfig(&n->flat, w->size, id, w->rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    MNT_ERR("NCCL set-up: ncclCommInitRankConfig failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    st = MNT_EPEER;
    return st;
  }
  if (!n->flat) {
    MNT_ERR("NCCL set-up: ncclCommInitRankConfig returned no communicator");
    st = MNT_EPEER;
    return st;
  }
  MNT_CHECK_GOTO(watch(c, "communicator set-up (ncclCommInitRankConfig)", NULL, n->flat), st, out);

  if (topo == MNT_TOPO_HIER && !no_hier) {
    int inter_rank = -1;
    MNT_CHECK_GOTO(split(c, w->node_rank, w->local_rank, 1, "mntrain intra-node", &n->intra, &n->intra_rank,
                         &n->intra_size, "intra-node communicator (ncclCommSplit)"),
                   st, out);
    MNT_CHECK_GOTO(split(c, w->local_rank, w->node_rank, 1, "mntrain inter-node", &n->inter, &inter_rank,
                         &n->inter_size, "inter-node communicator (ncclCommSplit)"),
                   st, out);
    if (n->intra_rank != w->local_rank || n->intra_size != w->local_size || inter_rank != w->node_rank ||
        n->inter_size != w->nnodes) {
      MNT_ERR("NCCL set-up: split communicators do not match the world: intra rank %d of %d (local rank %d of %d), "
              "inter rank %d of %d (node %d of %d)",
              n->intra_rank, n->intra_size, w->local_rank, w->local_size, inter_rank, n->inter_size, w->node_rank,
              w->nnodes);
      st = MNT_EPEER;
      return st;
    }
    c->topology = MNT_TOPO_HIER;
  }
  { /* the flat collectives' communicator: blocking (see the file's comment) */
    int cr = -1, cs = 0;
    MNT_CHECK_GOTO(split(c, 0, w->rank, 1, "mntrain flat collectives", &n->coll, &cr, &cs,
                         "collective communicator (ncclCommSplit)"),
                   st, out);
    if (cr != w->rank || cs != w->size) {
      MNT_ERR("NCCL set-up: the collective communicator has rank %d of %d, the world %d of %d", cr, cs, w->rank,
              w->size);
      st = MNT_EPEER;
      return st;
    }
  }
  if (w->rank == 0) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    if (c->topology == MNT_TOPO_HIER)
      MNT_INFO("NCCL %d.%d.%d: %d ranks, hier: %d nodes x %d ranks (intra-node reduce-scatter, inter-node allreduce, "
               "intra-node allgather), rank 0 on GPU %d, collectives on blocking communicators",
               v / 10000, v / 100 % 100, v % 100, w->size, n->inter_size, n->intra_size, n->device);
    else
      MNT_INFO("NCCL %d.%d.%d: %d ranks, flat, rank 0 on GPU %d, collectives on a blocking communicator", v / 10000,
               v / 100 % 100, v % 100, w->size, n->device);
  }
  return MNT_OK;
out:
  return st;
}

int mnt_comm_nccl_create(mnt_world *w, mnt_topology topo, mnt_comm **made) {
  *made = NULL;
  mnt_comm *c = calloc(1, sizeof *c);
  nccl_impl *n = calloc(1, sizeof *n);
  if (!c || !n) {
    MNT_ERR("NCCL communicator: out of memory");
    free(c);
    free(n);
    return MNT_ENOMEM;
  }
  *c = (mnt_comm){.ops = &NCCL_OPS, .world = w, .topology = MNT_TOPO_FLAT, .timeout_s = w->timeout_s, .impl = n};
  n->asked = topo;
  /* every connection made while the communicators are set up, under the deadline, and none at a
   * collective's first use (NCCL's default since 2.22), where a blocking communicator would wait for
   * a peer on the host without one; a value the user set is kept */
  if (setenv("NCCL_RUNTIME_CONNECT", "0", 0) != 0) MNT_WARN("setenv NCCL_RUNTIME_CONNECT failed");
  const char *no_hier = topo == MNT_TOPO_HIER ? hier_refusal(w) : NULL;
  if (topo == MNT_TOPO_HIER && no_hier && w->rank == 0)
    MNT_INFO("--topology hier with nccl runs flat here: %s", no_hier);

  int st = mnt_cuda_select_device(w, &n->device);
  st = mnt_world_agree(w, st); /* every rank has a GPU, or none starts */
  ncclUniqueId id;
  if (st == MNT_OK) st = mnt_nccl_bootstrap(w, &id, sizeof id);
  if (st != MNT_OK) goto out;
  /* this rank's CUDA resources; a failure on any rank stops all before NCCL waits for it */
  cudaError_t e = mnt_cuda_clear(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
  if (e != cudaSuccess) MNT_ERR("NCCL set-up: cudaStreamCreateWithFlags failed: %s", cudaGetErrorString(e));
  if (e == cudaSuccess &&
      (e = mnt_cuda_clear(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming))) != cudaSuccess)
    MNT_ERR("NCCL set-up: cudaEventCreateWithFlags failed: %s", cudaGetErrorString(e));
  if (e == cudaSuccess &&
      (e = mnt_cuda_clear(cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming))) != cudaSuccess)
    MNT_ERR("NCCL set-up: cudaEventCreateWithFlags failed: %s", cudaGetErrorString(e));
  if (e == cudaSuccess && (e = mnt_cuda_clear(cudaMalloc((void **)&n->one, sizeof(float)))) != cudaSuccess)
    MNT_ERR("NCCL set-up: cudaMalloc failed: %s", cudaGetErrorString(e));
  if (e == cudaSuccess && (e = mnt_cuda_clear(cudaMemset(n->one, 0, sizeof(float)))) != cudaSuccess)
    MNT_ERR("NCCL set-up: cudaMemset failed: %s", cudaGetErrorString(e));
  MNT_CHECK_GOTO(mnt_world_agree(w, e == cudaSuccess ? MNT_OK : MNT_ESYS), st, out);

  MNT_CHECK_GOTO(init_comms(c, &id, no_hier), st, out);
out:
  if (st != MNT_OK) {
    abort_all(n); /* peers may be inside an NCCL call with us: end it for them */
    release(c);
    return st;
  }
  *made = c;
  return MNT_OK;
}

/* --on-rank-loss shrink. A CPU communicator beside the NCCL ones carries the membership: its
 * watchdogs, the survivors' agreement and their links (comm.h, mnt_comm_shrink); it is made here,
 * collectively, while PMIx is still there, and is used for nothing else. Every wait on a GPU
 * collective polls it: when a peer says a rank was lost, the collective in flight stops. After a
 * loss every NCCL communicator is aborted (one whose peer died mid-collective cannot be trusted),
 * the CPU communicator shrinks, and the NCCL ones are made anew over the survivors: rank 0's new
 * unique id goes over the CPU communicator's rebuilt links (the ranks have left PMIx). NCCL's own
 * ncclCommShrink (2.27) keeps the parent's connections but needs a parent that was not aborted;
 * with NCCL_SHRINK_ABORT it would be the next step. Built without a GPU: this path has not run. */
static int n_enable_shrink(mnt_comm *c) {
  nccl_impl *n = c->impl;
  if (n->ctl) return MNT_OK;
  MNT_CHECK(mnt_comm_cpu_create(c->world, MNT_TOPO_FLAT, &n->ctl));
  return mnt_comm_enable_shrink(n->ctl);
}

static int n_shrink(mnt_comm *c, int64_t step, mnt_rank_loss *lost, int max, int *nlost) {
  nccl_impl *n = c->impl;
  *nlost = 0;
  if (!n->ctl) {
    MNT_ERR("internal: an NCCL shrink without its membership (mnt_comm_enable_shrink)");
    return MNT_EARG;
  }
  abort_all(n); /* kernels waiting for the lost rank end with their communicators */
  if (mnt_cuda_clear(cudaStreamSynchronize(n->stream)) != cudaSuccess)
    MNT_WARN("NCCL shrink: the communicator's stream reported an error after the abort (cleared)");
  MNT_CHECK(mnt_comm_shrink(n->ctl, step, lost, max, nlost));
  mnt_world *w = c->world;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  int st = w->rank == 0 ? MNT_NCCL_OK(NULL, ncclGetUniqueId(&id), "rebuild after a loss") : MNT_OK;
  int rc = mnt_broadcast(n->ctl, &id, sizeof id, 0);
  MNT_CHECK(mnt_comm_agree(n->ctl, st != MNT_OK ? st : rc));
  n->aborted = 0;
  const char *no_hier = n->asked == MNT_TOPO_HIER ? hier_refusal(w) : NULL;
  st = init_comms(c, &id, no_hier);
  if (st != MNT_OK) abort_all(n);
  return st;
}
