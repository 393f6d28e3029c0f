/* cpu_comm.h — the CPU collective backend's internal header (not public; comm.h has the backend's
 * entry, mnt_comm_cpu_create): pipelined ring reduce-scatter + allgather over shared-memory FIFOs
 * (ranks of one node) and TCP (between nodes), in engine.c, collectives.c, progress.c, setup.c.
 * defines: mnt_cpu_ring, mnt_cpu_plan, mnt_cpu_fabric (what set-up builds from the set of ranks:
 *          shared memory, links, rings, ring order), mnt_cpu_comm, struct mnt_comm_req, REQ_*,
 *          TAG_FLAT / TAG_INTER, mnt_cpu_run (engine.c), mnt_cpu_execute (collectives.c),
 *          mnt_cpu_progress_start / stop and mnt_cpu_ops (progress.c), mnt_cpu_fabric_close (setup.c). */
#ifndef MNT_CPU_COMM_H
#define MNT_CPU_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/cpu/transport.h"
#include "comm/cpu/watchdog.h"

enum { TAG_FLAT = 0, TAG_INTER = 1 };

typedef struct mnt_cpu_ring {
  int n, pos;
  mnt_link *send, *recv; /* NULL when n == 1 */
} mnt_cpu_ring;

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
typedef struct mnt_cpu_fabric {
  mnt_shm shm;
  int have_shm;
  mnt_link links[6];
  int nlinks;
  mnt_cpu_ring flat, local, inter;
  int *order;            /* flat ring: rank at each position */
  mnt_topology topology; /* what the rings serve; set-up keeps pub.topology the same */
} mnt_cpu_fabric;

typedef struct mnt_cpu_comm {
  mnt_comm pub;
  mnt_world *w;
  uint32_t id;
  unsigned addr_key; /* the set-up exchange's key: peers' addresses are looked up under it */
  uint8_t secret[MNT_SECRET_BYTES];
  double timeout_s;
  size_t fifo_cap, tcp_buf; /* MNT_SHM_FIFO_BYTES, MNT_TCP_BUF */
  const char *iface;        /* MNT_COMM_IFACE */
  mnt_watchdog *wd;
  mnt_cpu_fabric fab;
  /* progress thread */
  pthread_t thr;
  int thr_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mnt_comm_req *head, *tail;
  int stop;
  int broken; /* sticky status once a collective failed: peers are out of step */
} mnt_cpu_comm;

typedef struct mnt_cpu_plan {
  mnt_cpu_ring *r;
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
} mnt_cpu_plan;

/* run plan p to its end, the deadline and the watchdog's questions included (engine.c) */
int mnt_cpu_run(mnt_cpu_comm *c, const mnt_cpu_plan *p);
/* carry out request q over the fabric's rings, on the progress thread (collectives.c) */
int mnt_cpu_execute(mnt_cpu_comm *c, mnt_comm_req *q);
/* start the progress thread; MNT_ESYS, said, when it cannot (progress.c) */
int mnt_cpu_progress_start(mnt_cpu_comm *c);
/* stop the progress thread once its queue is done and join it; nothing when it never started (progress.c) */
void mnt_cpu_progress_stop(mnt_cpu_comm *c);
/* the communicator's table: collectives queued to the progress thread, destroy (progress.c) */
extern const mnt_comm_ops mnt_cpu_ops;
/* close the fabric's links, unlink and close its shared memory, free its order; *f is left empty (setup.c) */
void mnt_cpu_fabric_close(mnt_cpu_fabric *f);

#endif
