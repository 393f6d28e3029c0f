/* comm.h — the communicator: collectives over all ranks of the world, one backend at a time.
 * defines: mnt_comm, mnt_comm_ops, mnt_comm_req, mnt_topology (and its names), mnt_comm_kind (and
 *          its names: --comm), mnt_comm_create, mnt_comm_destroy, mnt_comm_shrink, mnt_comm_quorum,
 *          mnt_topology_name, mnt_busbw_factor and inline wrappers
 *          mnt_allreduce, ...
 * Every call is in place, collective (all ranks, same order, same sizes) and has a deadline:
 * MNT_COMM_TIMEOUT seconds (default 600) without progress fail the call, naming the peer that
 * was waited for; a dead peer fails it within about a second. On failure the caller (main)
 * takes the job down with mnt_world_abort so that no rank is left waiting. */
#ifndef MNT_COMM_H
#define MNT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "src/dtype.h"
#include "src/backend/stream.h"
#include "src/log.h"
#include "src/world.h"

/* nccl-tests' bus bandwidth of an allreduce over n ranks: busbw = algbw * 2(n-1)/n, the bytes
 * each link carries per byte reduced (0 for one rank: nothing crosses a link). The one place
 * this rule is written (bench allreduce, train's summary, the performance model). */
static inline double mnt_busbw_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

typedef enum { MNT_TOPO_FLAT = 0, MNT_TOPO_HIER = 1, MNT_NTOPO } mnt_topology;
extern const char *const mnt_topology_names[MNT_NTOPO]; /* as --topology spells them, by value */
/* --comm: a communicator, or auto (the device's: nccl with cuda, else cpu); by value as --comm spells them */
typedef enum { MNT_COMM_AUTO = 0, MNT_COMM_CPU = 1, MNT_COMM_NCCL = 2, MNT_NCOMM } mnt_comm_kind;
extern const char *const mnt_comm_names[MNT_NCOMM];
const char *mnt_topology_name(mnt_topology t);

typedef struct mnt_comm mnt_comm;
typedef struct mnt_comm_req mnt_comm_req;

/* a rank lost (mnt_comm_shrink): its rank when the job started, and its node */
typedef struct mnt_rank_loss {
  int job_rank;
  char node[MNT_NODENAME_MAX];
} mnt_rank_loss;

typedef struct mnt_comm_ops {
  const char *name;
  /* buf[0..count) of every rank = sum (or average) over ranks. stream: the compute stream whose
   * queued work produced buf (nccl waits for it before reducing; NULL: the caller has
   * synchronised, nothing to wait for, as in the inline wrappers below); cpu: ignored */
  int (*allreduce)(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream);
  /* Start an allreduce and return at once; ops->wait completes it. Requests complete in
   * the order they were started. */
  int (*iallreduce)(mnt_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op, mnt_stream *stream,
                    mnt_comm_req **req);
  int (*wait)(mnt_comm *c, mnt_comm_req *req);
  int (*broadcast)(mnt_comm *c, void *buf, size_t bytes, int root, mnt_stream *stream);
  /* recv[r*bytes ..] = send of rank r */
  int (*allgather)(mnt_comm *c, const void *send, void *recv, size_t bytes, mnt_stream *stream);
  int (*barrier)(mnt_comm *c);
  void (*destroy)(mnt_comm *c);
  /* --on-rank-loss shrink (NULL: the backend cannot; mnt_comm_enable_shrink says so) */
  int (*enable_shrink)(mnt_comm *c);
  int (*shrink)(mnt_comm *c, int64_t step, mnt_rank_loss *lost, int max, int *nlost);
  /* 1 when another rank said a rank was lost (the collective in flight should stop); NULL: never */
  int (*interrupted)(mnt_comm *c);
  /* A started allreduce completed on the stream, not on the host: the stream's later work waits for
   * it and the host does not (inside a captured step, backend.h's mnt_be_capture_begin); the request
   * is done with. NULL: the host waits (ops->wait), as the cpu communicator must. */
  int (*join)(mnt_comm *c, mnt_comm_req *req, mnt_stream *stream);
  /* the host waits until the work queued on the stream so far is done, against the communicator's
   * deadline and watching its errors as its own waits do (after a replayed step). NULL: nothing is
   * queued beyond what the host waited for (cpu) */
  int (*settle)(mnt_comm *c, mnt_stream *stream);
} mnt_comm_ops;

struct mnt_comm {
  const mnt_comm_ops *ops;
  mnt_world *world;
  mnt_topology topology; /* what is used: hier falls back to flat when nodes differ in size */
  double timeout_s;
  void *impl;
};

/* backend: "cpu", "nccl" (built with NCCL: GPU buffers; loads the CUDA module, cuda_module.h, and
 * fails on every rank with MNT_EARG when a rank cannot) or "auto" (cpu: the buffers of this build's
 * training are in host memory). Collective: all ranks call it. */
int mnt_comm_create(mnt_world *w, const char *backend, mnt_topology topo, mnt_comm **out);
void mnt_comm_destroy(mnt_comm *c);
/* The CPU backend (ring over shared memory within a node, TCP between nodes). */
int mnt_comm_cpu_create(mnt_world *w, mnt_topology topo, mnt_comm **out);
#if MNT_HAVE_NCCL
/* In the CUDA module (lib/mntrain/mntrain-cuda.so), not in the executable: mntrain reaches them through
 * mnt_comm_create (the module's table); programs that link the module (gpu tests) may call them.
 * The NCCL backend (src/comm/nccl/): buffers in GPU memory (blocking calls also take host
 * buffers, staged through the GPU: small control values); every collective runs on the
 * communicator's own stream after the work queued on `stream` (NULL: nothing to wait for).
 * Collective; binds the process to its GPU first. */
int mnt_comm_nccl_create(mnt_world *w, mnt_topology topo, mnt_comm **out);
/* Collective: rank 0's ncclGetUniqueId, spread over PMIx (mnt_world_bcast) into id (bytes =
 * sizeof(ncclUniqueId)); needs no GPU. */
int mnt_nccl_bootstrap(mnt_world *w, void *id, size_t bytes);
#endif

/* Collective, while PMIx is up (before mnt_world_leave): every rank's control address kept, so that
 * the survivors of a loss can find each other without PMIx. MNT_EARG, said, on a backend that cannot
 * shrink. */
int mnt_comm_enable_shrink(mnt_comm *c);
/* After a collective failed on a lost rank (MNT_EPEER, MNT_ETIMEOUT): the survivors agree on who is
 * gone (over the links they still have, every wait with the deadline), the world is renumbered
 * (mnt_world_shrink) and the communicator rebuilt among them (flat). step: this rank's steps done
 * (said in the agreement). lost[0..*nlost): the ranks left out. MNT_EFENCED: this rank was left out
 * (it stopped, or lost its links), or its group has no quorum (mnt_comm_quorum: the other side of a
 * network split may go on): it must exit touching nothing. */
int mnt_comm_shrink(mnt_comm *c, int64_t step, mnt_rank_loss *lost, int max, int *nlost);
/* The quorum of a shrink: 1 when n survivors of the `before` ranks of the membership may go on: a
 * strict majority, or exactly half holding rank 0 of that membership (the tie-breaker every group
 * of a split evaluates alike, so that at most one goes on); 0: the group is fenced. why: the rule
 * that decided, in words for the log. */
int mnt_comm_quorum(int before, int n, int holds_rank0, char *why, size_t len);
/* a started allreduce completed on the stream where the backend can (mnt_comm_ops' join: nccl),
 * else waited for by the host */
static inline int mnt_comm_join(mnt_comm *c, mnt_comm_req *req, mnt_stream *stream) {
  return c->ops->join ? c->ops->join(c, req, stream) : c->ops->wait(c, req);
}
/* the host waits for the work queued on the stream (mnt_comm_ops' settle); MNT_OK where nothing is queued */
static inline int mnt_comm_settle(mnt_comm *c, mnt_stream *stream) {
  return c->ops->settle ? c->ops->settle(c, stream) : 0;
}
/* 1 when another rank said a rank was lost since the last shrink (--on-rank-loss shrink) */
static inline int mnt_comm_interrupted(mnt_comm *c) { return c->ops->interrupted && c->ops->interrupted(c); }
/* mnt_world_leave's agreement over a communicator (ctx): every rank's status, the first failure by rank
 * order returned on all (MNT_OK when none); the exchange's own failure when it fails */
int mnt_comm_agree(void *ctx, int status);
/* 1 when st is a failure a shrink can recover from */
static inline int mnt_comm_lost(int st) { return st == MNT_EPEER || st == MNT_ETIMEOUT; }

static inline int mnt_allreduce(mnt_comm *c, void *buf, size_t n, mnt_dtype t, mnt_redop op) {
  return c->ops->allreduce(c, buf, n, t, op, NULL);
}
static inline int mnt_broadcast(mnt_comm *c, void *buf, size_t bytes, int root) {
  return c->ops->broadcast(c, buf, bytes, root, NULL);
}
static inline int mnt_allgather(mnt_comm *c, const void *send, void *recv, size_t bytes) {
  return c->ops->allgather(c, send, recv, bytes, NULL);
}
static inline int mnt_barrier(mnt_comm *c) { return c->ops->barrier(c); }

#endif
