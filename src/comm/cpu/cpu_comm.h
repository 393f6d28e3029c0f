/* cpu_comm.h — the CPU collective backend's internal header (not public; comm.h has the backend's
 * entry, mnt_comm_cpu_create): pipelined ring reduce-scatter + allgather over shared-memory FIFOs
 * (ranks of one node) and TCP (between nodes): engine.c (a ring plan run), collectives.c, progress.c
 * (the progress thread), setup.c (shared memory and links, and their rebuild), shrink.c (the
 * membership and the survivors' agreement), watchdog.c (each rank's listener), link.c, ring.c and the
 * transports (transport_shm.c, transport_tcp.c). Its symbols are mnt_ccomm_* (the CPU backend of
 * the model is mnt_cpu_*).
 * defines: mnt_ccomm_ring, mnt_ccomm_plan, mnt_ccomm_fabric (what set-up builds from the set of ranks:
 *          shared memory, links, rings, ring order), mnt_ccomm_comm, struct mnt_comm_req, REQ_*,
 *          TAG_FLAT / TAG_INTER, mnt_ccomm_run (engine.c), mnt_ccomm_execute (collectives.c),
 *          mnt_ccomm_progress_start / stop and mnt_ccomm_ops (progress.c), mnt_ccomm_fabric_close (setup.c). */
#ifndef MNT_CPU_COMM_H
#define MNT_CPU_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "src/comm/comm.h"
#include "src/comm/cpu/transport.h"
#include "src/comm/cpu/watchdog.h"

enum { TAG_FLAT = 0, TAG_INTER = 1 };

typedef struct mnt_ccomm_ring {
  int n, pos;
  mnt_link *send, *recv; /* NULL when n == 1 */
} mnt_ccomm_ring;

enum { REQ_ALLREDUCE, REQ_BCAST, REQ_ALLGATHER, REQ_BARRIER };

struct mnt_comm_req {
  int kind;
  void *buf;
  const void *send;
  size_t count, bytes;
  mnt_dtype t;
  mnt_redop op;
  int root;
  int status, done, detached;
  struct mnt_comm_req *next;
};

/* what set-up builds from the set of ranks; a change of membership replaces it whole */
typedef struct mnt_ccomm_fabric {
  mnt_shm shm;
  int have_shm;
  mnt_link links[6];
  int nlinks;
  mnt_ccomm_ring flat, local, inter;
  int *order;            /* flat ring: rank at each position */
  mnt_topology topology; /* what the rings serve; set-up keeps pub.topology the same */
} mnt_ccomm_fabric;

typedef struct mnt_ccomm_member mnt_ccomm_member; /* shrink.c */

typedef struct mnt_ccomm_comm {
  mnt_comm pub;
  mnt_world *w;
  uint32_t id;      /* the fabric's: links and segments of another id are refused */
  uint32_t base_id; /* the communicator's at set-up (a rebuild's id is base_id + 0x10000 * epoch) */
  mnt_ccomm_member *mb; /* --on-rank-loss shrink: the membership (NULL until mnt_comm_enable_shrink) */
  unsigned addr_key; /* the set-up exchange's key: peers' addresses are looked up under it */
  uint8_t secret[MNT_SECRET_BYTES];
  double timeout_s;
  size_t fifo_cap, tcp_buf; /* MNT_SHM_FIFO_BYTES, MNT_TCP_BUF */
  const char *iface;        /* MNT_COMM_IFACE */
  mnt_watchdog *wd;
  mnt_ccomm_fabric fab;
  /* progress thread */
  pthread_t thr;
  int thr_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mnt_comm_req *head, *tail;
  int stop;
  int broken; /* sticky status once a collective failed: peers are out of step */
} mnt_ccomm_comm;

typedef struct mnt_ccomm_plan {
  mnt_ccomm_ring *r;
  uint8_t *buf;
  mnt_dtype t;
  size_t esize;
  int nseg;
  const size_t *off, *len; /* bytes */
  int shift;
  int nsend, nrecv;
  int lag;          /* send step k needs recv step k - lag (when >= 0 and there is a recv side) */
  int reduce_steps; /* recv steps below this reduce, the others copy */
  float div;        /* applied by the last reducing step */
  const char *what;
} mnt_ccomm_plan;

/* how long the ranks are asked what they wait for (mnt_watchdog_blame) when a collective or a
 * shrink's agreement stalls: a quarter of the communicator's timeout, within 0.5 to 5 s (engine.c) */
double mnt_ccomm_probe_s(const mnt_ccomm_comm *c);
/* run plan p to its end, the deadline and the watchdog's questions included (engine.c) */
int mnt_ccomm_run(mnt_ccomm_comm *c, const mnt_ccomm_plan *p);
/* carry out request q over the fabric's rings, on the progress thread (collectives.c) */
int mnt_ccomm_execute(mnt_ccomm_comm *c, mnt_comm_req *q);
/* start the progress thread; MNT_ESYS, said, when it cannot (progress.c) */
int mnt_ccomm_progress_start(mnt_ccomm_comm *c);
/* stop the progress thread once its queue is done and join it; nothing when it never started (progress.c) */
void mnt_ccomm_progress_stop(mnt_ccomm_comm *c);
/* the communicator's table: collectives queued to the progress thread, destroy (progress.c) */
extern const mnt_comm_ops mnt_ccomm_ops;
/* close the fabric's links, unlink and close its shared memory, free its order; *f is left empty (setup.c) */
void mnt_ccomm_fabric_close(mnt_ccomm_fabric *f);
/* mark the fabric's shared segment closed: an engine still on it (a rank left out) stops (setup.c) */
void mnt_ccomm_fabric_fence(mnt_ccomm_fabric *f);
/* a new fabric over the world as it is now (after mnt_world_shrink), flat, its id from epoch: a
 * segment per node, TCP links through the watchdogs' listeners (setup.c) */
int mnt_ccomm_fabric_rebuild(mnt_ccomm_comm *c, int epoch);

/* ---- the membership (shrink.c) ---- */
/* every rank's watchdog address (addr_of, while PMIx is up); messages of the membership taken from now */
int mnt_ccomm_member_enable(mnt_ccomm_comm *c, int (*addr_of)(void *ctx, int rank, mnt_tcp_addr *addr));
void mnt_ccomm_member_free(mnt_ccomm_member *mb);
/* rank's (current numbering) watchdog address from the table; MNT_EARG when not enabled */
int mnt_ccomm_member_addr(mnt_ccomm_comm *c, int rank, mnt_tcp_addr *out);
/* 1 when a peer said a rank is gone: the collective in flight stops (engine.c) */
int mnt_ccomm_member_interrupted(const mnt_ccomm_comm *c);
/* the engine's collective failed on rank (its process gone, its link closed): held gone */
void mnt_ccomm_member_suspect(mnt_ccomm_comm *c, int rank);
/* the watchdog's other messages (watchdog.h, mnt_watchdog_on_msg); ctx: the communicator */
int mnt_ccomm_member_on_msg(void *ctx, const mnt_tcp_hello *h, int fd);
/* the link of a rebuild from rank `from` (current numbering) with that id and tag, parked by the
 * watchdog: answered yes and in *fd, or MNT_ETIMEOUT at the deadline */
int mnt_ccomm_member_take_link(mnt_ccomm_comm *c, uint32_t comm_id, int from, int tag, double deadline, int *fd);
/* ops->shrink (comm.h) */
int mnt_ccomm_shrink(mnt_comm *pc, int64_t step, mnt_rank_loss *out, int max, int *nout);
int mnt_ccomm_enable_shrink(mnt_comm *pc);

#endif
