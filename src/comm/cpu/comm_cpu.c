/* comm_cpu.c — the CPU collective backend: pipelined ring reduce-scatter + allgather over
 * shared-memory FIFOs (ranks of one node) and TCP (between nodes); see comm.h.
 *
 * Topologies. flat: one ring over all ranks, ordered by (node, local rank), so each node
 * boundary is crossed by one TCP link. hier: reduce-scatter inside each node over shared
 * memory, then an inter-node ring allreduce among the ranks that hold the same slice (same local
 * rank), then an allgather inside each node. hier needs the same number of ranks on every node;
 * otherwise the communicator says so once and runs flat.
 *
 * The engine. A ring collective is a sequence of steps; at step k ring position p sends segment
 * (p + shift - k) mod n to the next position and receives segment (p + shift - k - 1) mod n from
 * the previous one, reducing it into its buffer (reduce-scatter steps) or copying it (allgather
 * steps). What is sent at step k is what was received at step k - 1, so the engine streams:
 * bytes of step k leave as soon as the same bytes of step k - 1 have arrived and been reduced.
 * Sending, receiving and reducing therefore overlap at the granularity of a FIFO piece or of a
 * TCP segment, without threads. Requests run on one progress thread per communicator, in order,
 * which gives iallreduce/wait for overlap with the backward pass.
 *
 * Waiting. When nothing moves the engine spins briefly, then sleeps: on its doorbell (a futex in
 * the shared segment that neighbours ring) when only shared memory is involved, in poll() when
 * only sockets are, alternating 1 ms polls and doorbell checks when both are. Every sleep is
 * bounded (100 ms) so that the liveness of shared-memory peers is checked and the deadline
 * (MNT_COMM_TIMEOUT without progress) is honoured.
 *
 * Who holds it up. While it waits, the engine tells its watchdog (watchdog.h) which rank it waits
 * for. After min(30 s, half the deadline) without progress it follows the chain of waits to the
 * rank that stopped (one that does not answer, or answers but is not in the collective) and warns,
 * naming it, again at twice that time, and so on; at the deadline it fails naming that rank.
 * The default deadline is 600 s, PyTorch's default for NCCL process groups: a training step waits
 * in a collective for its slowest rank, whose legitimate stalls (a first step that builds its
 * primitives, a parallel file system under a metadata storm, an evaluation pass, a checkpoint)
 * can take minutes, while a hung rank costs the whole allocation only until then, and the
 * warning (Horovod warns of stalls after 60 s) names it after 30 s. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "check.h"
#include "log.h"
#include "env.h"
#include "comm/cpu/ring.h"
#include "comm/cpu/transport.h"
#include "comm/cpu/watchdog.h"
#include "trace.h"

#define PIECE (256u << 10)      /* bytes reduced or copied before looking at the other side */
#define TCP_STAGE (1u << 20)    /* receive staging ring per TCP link: small enough to stay in L2 */
#define SPINS 64                /* idle iterations before sleeping */
#define LIVENESS_S 0.1          /* how often shared-memory peers are checked while waiting */

enum { TAG_FLAT = 0, TAG_INTER = 1 };

typedef struct ring {
  int n, pos;
  mnt_link *send, *recv; /* NULL when n == 1 */
} ring;

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

typedef struct cpu_comm {
  mnt_comm pub;
  mnt_world *w;
  uint32_t id;
  unsigned addr_key; /* the set-up exchange's key: peers' addresses are looked up under it */
  uint8_t secret[MNT_SECRET_BYTES];
  mnt_shm shm;
  int have_shm;
  mnt_link links[6];
  int nlinks;
  ring flat, local, inter;
  int *order; /* flat ring: rank at each position */
  double timeout_s;
  size_t fifo_cap, tcp_buf; /* MNT_SHM_FIFO_BYTES, MNT_TCP_BUF */
  const char *iface;        /* MNT_COMM_IFACE */
  mnt_watchdog *wd;
  /* progress thread */
  pthread_t thr;
  int thr_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mnt_comm_req *head, *tail;
  int stop;
  int broken; /* sticky status once a collective failed: peers are out of step */
} cpu_comm;

/* ---- the engine ------------------------------------------------------------------------- */

typedef struct plan {
  ring *r;
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
} plan;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int link_is(const mnt_link *l, int kind) { return l && l->kind == kind; }

/* The shared-memory neighbours this rank still needs, checked for life: the upstream one while
 * receives remain, the downstream one while sends remain. A neighbour that has finished the
 * collective and exited is not dead: a rank's last send can complete before its last receive, and
 * the downstream neighbour, done, may leave the job (at 128 oversubscribed ranks it often did,
 * and was reported dead; the scale test scale_finished_neighbour guards it). The upstream one may
 * also have written its last bytes and exited between this rank's look at the FIFO and its look
 * at the process: bytes left in the FIFO are read before anyone is declared dead. */
static int check_shm_peers(cpu_comm *c, const plan *p, int need_recv, int need_send) {
  mnt_link *ls[2] = {need_recv ? p->r->recv : NULL, need_send ? p->r->send : NULL};
  for (int i = 0; i < 2; i++) {
    if (!link_is(ls[i], MNT_LINK_SHM) || mnt_shm_peer_alive(&c->shm, ls[i]->peer_local)) continue;
    const void *src;
    size_t left = 0;
    if (i == 0 && mnt_link_peek(ls[i], &src, &left, 1, 1) == MNT_OK && left > 0) continue;
    MNT_ERR("rank %d on %s died during %s (its process is gone)", ls[i]->peer_rank, ls[i]->peer_node, p->what);
    return MNT_EPEER;
  }
  return MNT_OK;
}

static void sleep_on_bell(cpu_comm *c, uint32_t seen, double secs) {
  mnt_shm_slot *me = &c->shm.slots[c->shm.me];
  struct timespec ts = {.tv_sec = (time_t)secs, .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9)};
  atomic_store(&me->sleeping, 1u);
  if (atomic_load(&me->bell) == seen)
    syscall(SYS_futex, (uint32_t *)&me->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_store(&me->sleeping, 0u);
}

/* how long the ranks are asked what they wait for (mnt_watchdog_blame) when a collective stalls */
static double blame_probe_s(const cpu_comm *c) {
  return c->timeout_s / 4 < 0.5 ? 0.5 : c->timeout_s / 4 > 5 ? 5 : c->timeout_s / 4;
}

/* No progress since `last` while waiting for rank peer: a warning (final = 0: who holds it up is
 * asked now, up to blame_probe_s) or the failure (final = 1, with `who` asked before the deadline).
 * The seconds said are measured when the message is written, after the asking: the warning, the
 * last events' "(N s)" and the deadline tell one story (MNT_COMM_TIMEOUT is when the wait ends, not
 * when the asking before the end begins). */
static int stalled(cpu_comm *c, const plan *p, int peer, double last, int final, const char *who_asked) {
  char who[2000];
  if (final) snprintf(who, sizeof who, "%s", who_asked);
  else mnt_watchdog_blame(c->wd, peer, blame_probe_s(c), who, sizeof who);
  const char *node = c->w->node_name[c->w->node_of[peer]];
  char doing[160];
  mnt_trace_activity(doing, sizeof doing);
  double waited = mnt_now() - last;
  char why[2400];
  snprintf(why, sizeof why, "%s %s after %.1f s waiting for rank %d on %s (this rank: %s): %s", p->what,
           final ? "gave up" : "stalled", waited, peer, node, doing[0] ? doing : "no step open", who);
  mnt_trace_dump_last(NULL, why); /* the last events of every thread of this rank, once */
  if (!final) {
    MNT_WARN("%s: no progress for %.1f s, waiting for rank %d on %s: %s; giving up at %.0f s (MNT_COMM_TIMEOUT)",
             p->what, waited, peer, node, who, c->timeout_s);
    return MNT_OK;
  }
  MNT_ERR("%s made no progress for %.1f s: %s (this rank waited for rank %d on %s; MNT_COMM_TIMEOUT %.0f s)", p->what,
          waited, who, peer, node, c->timeout_s);
  return MNT_ETIMEOUT;
}

static int run_plan(cpu_comm *c, const plan *p);

static int run(cpu_comm *c, const plan *p) {
  int st = run_plan(c, p);
  mnt_watchdog_waiting(c->wd, -1, 0, NULL);
  return st;
}

/* One loop on purpose (~100 lines): sends and receives of every step of the plan advance
 * together, each as far as its FIFO or socket allows, with the reduction of a received chunk in
 * between; split into functions, the state of both directions would have to travel with them. */
static int run_plan(cpu_comm *c, const plan *p) {
  ring *r = p->r;
  int ss = 0, rs = 0;  /* current send / recv step */
  size_t so = 0, ro = 0; /* bytes done within it */
  double last = mnt_now(), checked = last;
  double warn_after = c->timeout_s / 2 < 30 ? c->timeout_s / 2 : 30;
  double ask_at = c->timeout_s - blame_probe_s(c); /* the asking ends at the deadline */
  char who[2000];
  int spins = 0, announced = 0, asked = 0;
  int uses_shm = link_is(r->send, MNT_LINK_SHM) || link_is(r->recv, MNT_LINK_SHM);
  while (ss < p->nsend || rs < p->nrecv) {
    uint32_t bell = c->have_shm ? atomic_load(&c->shm.slots[c->shm.me].bell) : 0;
    int moved = 0, send_full = 0;
    /* receive side first: it frees room upstream */
    size_t budget = 4 * (size_t)PIECE;
    while (rs < p->nrecv && budget > 0) {
      int seg = mnt_ring_recv_seg(r->pos, p->shift, rs, p->nseg);
      size_t len = p->len[seg];
      if (ro == len) {
        rs++;
        ro = 0;
        continue;
      }
      uint8_t *dst = p->buf + p->off[seg] + ro;
      size_t want = len - ro < PIECE ? len - ro : PIECE;
      size_t got;
      if (rs < p->reduce_steps) {
        const void *src;
        MNT_CHECK(mnt_link_peek(r->recv, &src, &got, want, p->esize));
        got -= got % p->esize;
        if (got == 0) break;
        mnt_reduce(p->t, dst, src, got / p->esize, rs == p->reduce_steps - 1 ? p->div : 1.0f);
        mnt_link_consume(r->recv, got);
      } else {
        MNT_CHECK(mnt_link_recv_into(r->recv, dst, want, &got));
        if (got == 0) break;
      }
      ro += got;
      budget -= got < budget ? got : budget;
      moved = 1;
    }
    /* send side: only bytes whose previous step has arrived */
    budget = 4 * (size_t)PIECE;
    while (ss < p->nsend && budget > 0) {
      int seg = mnt_ring_send_seg(r->pos, p->shift, ss, p->nseg);
      size_t len = p->len[seg];
      if (so == len) {
        ss++;
        so = 0;
        continue;
      }
      size_t limit = len;
      int dk = ss - p->lag;
      if (p->lag >= 0 && p->nrecv > 0 && dk >= 0 && rs <= dk) limit = rs == dk ? ro : 0;
      if (limit <= so) break;
      size_t sent;
      MNT_CHECK(mnt_link_send(r->send, p->buf + p->off[seg] + so, limit - so, &sent));
      if (sent == 0) {
        send_full = 1;
        break;
      }
      so += sent;
      budget -= sent < budget ? sent : budget;
      moved = 1;
    }
    double now;
    if (moved) {
      spins = 0;
      last = mnt_now();
      if (announced) {
        mnt_watchdog_waiting(c->wd, -1, 0, NULL);
        announced = asked = 0;
        warn_after = c->timeout_s / 2 < 30 ? c->timeout_s / 2 : 30;
      }
      continue;
    }
    if (++spins < SPINS) {
      cpu_relax();
      continue;
    }
    now = mnt_now();
    int peer = (rs < p->nrecv ? r->recv : r->send)->peer_rank;
    if (!announced) {
      mnt_watchdog_waiting(c->wd, peer, last, p->what);
      announced = 1;
    }
    if (!asked && now - last > ask_at) { /* who holds it up, asked before the deadline, not after it */
      mnt_watchdog_blame(c->wd, peer, blame_probe_s(c), who, sizeof who);
      asked = 1;
      now = mnt_now();
    }
    if (now - last >= c->timeout_s) return stalled(c, p, peer, last, 1, who);
    if (now - last > warn_after && !asked) { /* a warning the final asking does not overtake */
      if (warn_after < ask_at) stalled(c, p, peer, last, 0, NULL);
      warn_after *= 2;
    }
    if (now - checked > LIVENESS_S) {
      checked = now;
      MNT_CHECK(check_shm_peers(c, p, rs < p->nrecv, ss < p->nsend));
    }
    struct pollfd fds[2];
    int nfds = 0;
    if (rs < p->nrecv && link_is(r->recv, MNT_LINK_TCP))
      fds[nfds++] = (struct pollfd){.fd = r->recv->fd, .events = POLLIN};
    if (send_full && link_is(r->send, MNT_LINK_TCP))
      fds[nfds++] = (struct pollfd){.fd = r->send->fd, .events = POLLOUT};
    mnt_trace_push("sleep", peer); /* on the timeline: the engine waits for that rank */
    if (uses_shm && nfds == 0)
      sleep_on_bell(c, bell, LIVENESS_S);
    else if (nfds > 0)
      poll(fds, (nfds_t)nfds, uses_shm ? 1 : (int)(LIVENESS_S * 1000));
    mnt_trace_pop();
  }
  return MNT_OK;
}

/* ---- collectives --------------------------------------------------------------------- */

static int segments(size_t count, size_t esize, int n, size_t **off, size_t **len) {
  *off = malloc((size_t)n * sizeof **off);
  *len = malloc((size_t)n * sizeof **len);
  if (!*off || !*len) {
    free(*off);
    free(*len);
    MNT_ERR("out of memory for %d ring segments", n);
    return MNT_ENOMEM;
  }
  mnt_ring_segments(count, esize, n, *off, *len);
  for (int k = 0; k < n; k++) {
    (*off)[k] *= esize;
    (*len)[k] *= esize;
  }
  return MNT_OK;
}

/* Reduce-scatter (+ allgather when full) of buf[0..count) over ring r. After a reduce-scatter
 * alone, position p holds the reduced segment (p + 1) mod n of the returned table. */
static int ring_allreduce_part(cpu_comm *c, ring *r, uint8_t *buf, size_t count, mnt_dtype t,
                               float div, int rs, int ag, const char *what) {
  if (r->n == 1 || count == 0) return MNT_OK;
  size_t *off, *len, es = mnt_dtype_size(t);
  MNT_CHECK(segments(count, es, r->n, &off, &len));
  int n1 = r->n - 1;
  plan p = {.r = r, .buf = buf, .t = t, .esize = es, .nseg = r->n, .off = off, .len = len,
            .lag = 1, .div = div, .what = what};
  if (rs && ag) {
    p.nsend = p.nrecv = 2 * n1;
    p.reduce_steps = n1;
  } else if (rs) {
    p.nsend = p.nrecv = n1;
    p.reduce_steps = n1;
  } else { /* allgather of the segments left by a reduce-scatter */
    p.shift = 1;
    p.nsend = p.nrecv = n1;
    p.reduce_steps = 0;
  }
  int st = run(c, &p);
  free(off);
  free(len);
  return st;
}

static int do_allreduce(cpu_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op) {
  mnt_world *w = c->w;
  float div = op == MNT_AVG ? (float)w->size : 1.0f;
  if (w->size == 1 || count == 0) return MNT_OK;
  if (c->pub.topology == MNT_TOPO_FLAT)
    return ring_allreduce_part(c, &c->flat, buf, count, t, div, 1, 1, "allreduce");
  /* hier: node-local reduce-scatter, inter-node allreduce of my slice, node-local allgather */
  int L = c->local.n, N = c->inter.n;
  size_t es = mnt_dtype_size(t);
  uint8_t *b = buf;
  size_t soff = 0, slen = count;
  if (L > 1) {
    MNT_CHECK(ring_allreduce_part(c, &c->local, b, count, t, N == 1 ? div : 1.0f, 1, 0,
                                  "allreduce (intra-node reduce-scatter)"));
    size_t *off, *len;
    MNT_CHECK(segments(count, es, L, &off, &len)); /* the table the reduce-scatter used */
    int mine = (c->local.pos + 1) % L;
    soff = off[mine] / es;
    slen = len[mine] / es;
    free(off);
    free(len);
  }
  if (N > 1)
    MNT_CHECK(ring_allreduce_part(c, &c->inter, b + soff * es, slen, t, div, 1, 1,
                                  "allreduce (inter-node)"));
  if (L > 1)
    MNT_CHECK(ring_allreduce_part(c, &c->local, b, count, t, 1.0f, 0, 1,
                                  "allreduce (intra-node allgather)"));
  return MNT_OK;
}

static int do_bcast(cpu_comm *c, void *buf, size_t bytes, int root) {
  ring *r = &c->flat;
  if (r->n == 1 || bytes == 0) return MNT_OK;
  int rpos = 0;
  while (c->order[rpos] != root) rpos++;
  int q = (r->pos - rpos + r->n) % r->n; /* distance from the root along the ring */
  size_t off = 0, len = bytes;
  plan p = {.r = r, .buf = buf, .t = MNT_FP32, .esize = 1, .nseg = 1, .off = &off, .len = &len,
            .nsend = q < r->n - 1, .nrecv = q > 0, .lag = 0, .div = 1.0f, .what = "broadcast"};
  return run(c, &p);
}

static int do_allgather(cpu_comm *c, const void *send, void *recv, size_t bytes) {
  ring *r = &c->flat;
  uint8_t *out = recv;
  if ((const uint8_t *)send != out + (size_t)c->w->rank * bytes)
    memmove(out + (size_t)c->w->rank * bytes, send, bytes);
  if (r->n == 1 || bytes == 0) return MNT_OK;
  size_t *off = malloc((size_t)r->n * sizeof *off), *len = malloc((size_t)r->n * sizeof *len);
  if (!off || !len) {
    free(off);
    free(len);
    return MNT_ENOMEM;
  }
  for (int k = 0; k < r->n; k++) {
    off[k] = (size_t)c->order[k] * bytes;
    len[k] = bytes;
  }
  plan p = {.r = r, .buf = out, .t = MNT_FP32, .esize = 1, .nseg = r->n, .off = off, .len = len,
            .nsend = r->n - 1, .nrecv = r->n - 1, .lag = 1, .div = 1.0f, .what = "allgather"};
  int st = run(c, &p);
  free(off);
  free(len);
  return st;
}

static int execute(cpu_comm *c, mnt_comm_req *q) {
  switch (q->kind) {
    case REQ_ALLREDUCE: return do_allreduce(c, q->buf, q->count, q->t, q->op);
    case REQ_BCAST: return do_bcast(c, q->buf, q->bytes, q->root);
    case REQ_ALLGATHER: return do_allgather(c, q->send, q->buf, q->bytes);
    default: {
      float one = 1.0f;
      return ring_allreduce_part(c, &c->flat, (uint8_t *)&one, 1, MNT_FP32, 1.0f, 1, 1, "barrier");
    }
  }
}

/* ---- progress thread and requests ----------------------------------------------------- */

static const char *const REQ_NAME[] = {"allreduce", "broadcast", "allgather", "barrier"};

static void *progress_main(void *arg) {
  cpu_comm *c = arg;
  mnt_trace_thread("comm");
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (!c->head && !c->stop) {
      mnt_trace_push("idle", 0); /* on the timeline: no request */
      while (!c->head && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
      mnt_trace_pop();
    }
    if (!c->head) break;
    mnt_comm_req *q = c->head;
    int broken = c->broken;
    pthread_mutex_unlock(&c->mu);
    mnt_trace_push(REQ_NAME[q->kind], (int64_t)(q->kind == REQ_ALLREDUCE ? q->count * mnt_dtype_size(q->t) : q->bytes));
    int st = broken ? broken : execute(c, q);
    mnt_trace_pop();
    pthread_mutex_lock(&c->mu);
    if (st != MNT_OK && !c->broken) c->broken = st;
    c->head = q->next;
    if (!c->head) c->tail = NULL;
    q->status = st;
    q->done = 1;
    if (q->detached) free(q);
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static int submit(cpu_comm *c, mnt_comm_req *q) {
  q->next = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->tail) c->tail->next = q;
  else c->head = q;
  c->tail = q;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return MNT_OK;
}

static int cpu_wait(mnt_comm *pc, mnt_comm_req *q) {
  cpu_comm *c = pc->impl;
  pthread_mutex_lock(&c->mu);
  while (!q->done) pthread_cond_wait(&c->cv, &c->mu); /* the engine enforces the deadline */
  pthread_mutex_unlock(&c->mu);
  int st = q->status;
  free(q);
  return st;
}

static int run_sync(cpu_comm *c, mnt_comm_req *q) {
  mnt_comm_req *h = malloc(sizeof *h);
  if (!h) return MNT_ENOMEM;
  *h = *q;
  submit(c, h);
  return cpu_wait(&c->pub, h);
}

static int cpu_iallreduce(mnt_comm *pc, void *buf, size_t count, mnt_dtype t, mnt_redop op,
                          mnt_stream *stream, mnt_comm_req **req) {
  mnt_comm_req *q = calloc(1, sizeof *q);
  if (!q) return MNT_ENOMEM;
  *q = (mnt_comm_req){.kind = REQ_ALLREDUCE, .buf = buf, .count = count, .t = t, .op = op};
  *req = q;
  return submit(pc->impl, q);
}

static int cpu_allreduce(mnt_comm *pc, void *buf, size_t count, mnt_dtype t, mnt_redop op,
                         mnt_stream *stream) {
  mnt_comm_req q = {.kind = REQ_ALLREDUCE, .buf = buf, .count = count, .t = t, .op = op};
  return run_sync(pc->impl, &q);
}

static int cpu_broadcast(mnt_comm *pc, void *buf, size_t bytes, int root, mnt_stream *stream) {
  cpu_comm *c = pc->impl;
  if (root < 0 || root >= c->w->size) {
    MNT_ERR("broadcast root %d is not a rank (size %d)", root, c->w->size);
    return MNT_EARG;
  }
  mnt_comm_req q = {.kind = REQ_BCAST, .buf = buf, .bytes = bytes, .root = root};
  return run_sync(c, &q);
}

static int cpu_allgather(mnt_comm *pc, const void *send, void *recv, size_t bytes, mnt_stream *stream) {
  mnt_comm_req q = {.kind = REQ_ALLGATHER, .send = send, .buf = recv, .bytes = bytes};
  return run_sync(pc->impl, &q);
}

static int cpu_barrier(mnt_comm *pc) {
  mnt_comm_req q = {.kind = REQ_BARRIER};
  return run_sync(pc->impl, &q);
}

static void cpu_destroy(mnt_comm *pc) {
  cpu_comm *c = pc->impl;
  if (c->thr_started) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thr, NULL);
  }
  mnt_watchdog_stop(c->wd);
  for (int i = 0; i < c->nlinks; i++) mnt_link_close(&c->links[i]);
  if (c->have_shm) {
    mnt_shm_unlink(&c->shm);
    mnt_shm_close(&c->shm);
  }
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c->order);
  free(c);
}

static const mnt_comm_ops cpu_ops = {
    .name = "cpu",
    .allreduce = cpu_allreduce,
    .iallreduce = cpu_iallreduce,
    .wait = cpu_wait,
    .broadcast = cpu_broadcast,
    .allgather = cpu_allgather,
    .barrier = cpu_barrier,
    .destroy = cpu_destroy,
};

/* ---- set-up ------------------------------------------------------------------------------ */

static mnt_link *new_link(cpu_comm *c, int kind, int peer) {
  mnt_link *l = &c->links[c->nlinks++];
  memset(l, 0, sizeof *l);
  l->fd = -1;
  l->kind = kind;
  l->peer_rank = peer;
  l->peer_node = c->w->node_name[c->w->node_of[peer]];
  l->peer_local = c->w->local_of[peer];
  return l;
}

/* The rank with local rank `local` on node `node` (-1 if none). */
static int rank_at(const mnt_world *w, int node, int local) {
  for (int r = 0; r < w->size; r++)
    if (w->node_of[r] == node && w->local_of[r] == local) return r;
  return -1;
}

static void shm_name(const cpu_comm *c, char *out, size_t n) {
  char ns[96];
  size_t j = 0;
  for (const char *s = c->w->nspace; *s && j < sizeof ns - 1; s++)
    ns[j++] = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ? *s : '_';
  ns[j] = '\0';
  snprintf(out, n, "/mntrain-%s-c%u-n%d-%02x%02x%02x%02x%02x%02x%02x%02x", ns, c->id,
           c->w->node_rank, c->secret[0], c->secret[1], c->secret[2], c->secret[3], c->secret[4],
           c->secret[5], c->secret[6], c->secret[7]);
}

static int setup_shm(cpu_comm *c) {
  mnt_world *w = c->w;
  int L = w->local_size, l = w->local_rank;
  char name[200];
  shm_name(c, name, sizeof name);
  int st = MNT_OK, st_all = MNT_OK;
  size_t cap = c->fifo_cap;
  /* A local rank that fails still joins both barriers so that nobody waits for it; the
   * failure is agreed on below through an allgather. */
  if (L > 1 && l == 0) st = mnt_shm_open(&c->shm, name, L, l, cap, 1);
  MNT_CHECK(mnt_world_barrier(w));
  if (L > 1 && l != 0 && st == MNT_OK) st = mnt_shm_open(&c->shm, name, L, l, cap, 0);
  int *all = malloc((size_t)w->size * sizeof *all);
  if (!all) return MNT_ENOMEM;
  int rc = mnt_world_allgather(w, &st, sizeof st, all);
  for (int r = 0; r < w->size && rc == MNT_OK; r++)
    if (all[r] != MNT_OK && st_all == MNT_OK) {
      st_all = all[r];
      if (r != w->rank) MNT_ERR("rank %d could not set up shared memory", r);
    }
  free(all);
  if (L > 1 && st == MNT_OK) {
    c->have_shm = 1;
    if (l == 0) mnt_shm_unlink(&c->shm); /* everyone has it mapped now */
  }
  MNT_CHECK(rc);
  MNT_CHECK(st_all);
  if (L > 1) {
    int next = rank_at(w, w->node_rank, (l + 1) % L), prev = rank_at(w, w->node_rank, (l - 1 + L) % L);
    mnt_link *s = new_link(c, MNT_LINK_SHM, next), *r = new_link(c, MNT_LINK_SHM, prev);
    s->shm = r->shm = &c->shm;
    s->fifo = mnt_shm_fifo_of(&c->shm, l);
    r->fifo = mnt_shm_fifo_of(&c->shm, (l - 1 + L) % L);
    c->local = (ring){.n = L, .pos = l, .send = s, .recv = r};
  } else {
    c->local = (ring){.n = 1, .pos = 0};
  }
  return MNT_OK;
}

typedef struct want { int peer, tag; mnt_link **slot; } want;

/* what every rank publishes at set-up: its set-up listener (port 0 when it expects no connection)
 * and its watchdog */
typedef struct peer_addr { mnt_tcp_addr setup, wd; } peer_addr;

/* Connect to the ranks in out and accept those in in. Hellos are read concurrently (an inbox), a
 * silent or slow connection is dropped after 10 s and cannot delay the real peers. */
static int setup_tcp(cpu_comm *c, int lfd, const mnt_tcp_addr *to, want *out, int nout, want *in, int nin) {
  mnt_world *w = c->w;
  int st = MNT_OK;
  int *fds = NULL;
  mnt_tcp_inbox *ib = NULL;
  if (nin > 0) MNT_CHECK(mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 10.0));
  double deadline = mnt_now() + c->timeout_s;
  fds = malloc((size_t)(nout > 0 ? nout : 1) * sizeof *fds);
  if (!fds) { st = MNT_ENOMEM; goto out; }
  for (int i = 0; i < nout; i++) fds[i] = -1;
  for (int i = 0; i < nout; i++) {
    mnt_tcp_hello h;
    mnt_tcp_hello_init(&h, c->secret, c->id, w->rank, out[i].tag);
    if (to[i].port == 0) {
      MNT_ERR("rank %d published no address to connect to", out[i].peer);
      st = MNT_EPEER;
      goto out;
    }
    MNT_CHECK_GOTO(mnt_tcp_start_connect(&to[i], &h, &fds[i], deadline, out[i].peer), st, out);
  }
  double t0 = mnt_now(), warn_at = t0 + (c->timeout_s / 2 < 30 ? c->timeout_s / 2 : 30);
  for (int got = 0; got < nin;) {
    int fd, from, tag;
    st = mnt_tcp_accept_auth(ib, c->secret, c->id, deadline < warn_at ? deadline : warn_at, &fd, &from, &tag);
    if (st == MNT_ETIMEOUT) {
      char missing[200] = "";
      for (int i = 0; i < nin; i++)
        if (!*in[i].slot) {
          size_t l = strlen(missing);
          snprintf(missing + l, sizeof missing - l, "%srank %d on %s", l ? ", " : "", in[i].peer,
                   w->node_name[w->node_of[in[i].peer]]);
        }
      if (mnt_now() >= deadline) {
        MNT_ERR("set-up: %s did not connect within %.0f s (MNT_COMM_TIMEOUT)", missing, c->timeout_s);
        goto out;
      }
      MNT_WARN("set-up: still waiting after %.0f s for %s to connect; giving up after %.0f s", mnt_now() - t0,
               missing, c->timeout_s);
      warn_at = mnt_now() + (warn_at - t0); /* then at twice the time */
      continue;
    }
    if (st != MNT_OK) goto out;
    int matched = 0;
    for (int i = 0; i < nin && !matched; i++)
      if (in[i].peer == from && in[i].tag == tag && !*in[i].slot) {
        mnt_link *l = new_link(c, MNT_LINK_TCP, from);
        l->fd = fd;
        mnt_tcp_tune(fd, c->tcp_buf);
        l->stage_cap = TCP_STAGE;
        l->stage_mem = malloc(TCP_STAGE + 64);
        if (!l->stage_mem) { st = MNT_ENOMEM; goto out; }
        l->stage = l->stage_mem + 64;
        *in[i].slot = l;
        matched = 1;
      }
    if (!matched) {
      MNT_WARN("unexpected connection from rank %d (tag %d) ignored", from, tag);
      close(fd);
      continue;
    }
    got++;
  }
  for (int i = 0; i < nout; i++) {
    MNT_CHECK_GOTO(mnt_tcp_finish_connect(fds[i], deadline, out[i].peer), st, out);
    mnt_link *l = new_link(c, MNT_LINK_TCP, out[i].peer);
    l->fd = fds[i];
    mnt_tcp_tune(fds[i], c->tcp_buf);
    fds[i] = -1;
    *out[i].slot = l;
  }
out:
  if (fds)
    for (int i = 0; i < nout; i++)
      if (fds[i] >= 0) close(fds[i]);
  free(fds);
  mnt_tcp_inbox_close(ib);
  return st;
}

/* the watchdog asks rank r only when a collective stalls: its address is looked up then */
static int watchdog_addr(void *ctx, int r, mnt_tcp_addr *out) {
  cpu_comm *c = ctx;
  peer_addr a;
  MNT_CHECK(mnt_world_lookup(c->w, c->addr_key, r, &a, sizeof a));
  *out = a.wd;
  return MNT_OK;
}

/* The set-up exchange: every rank publishes its watchdog and set-up listener over PMIx and looks up
 * only the ranks it connects to (O(1) per rank: its ring neighbours), then the TCP links. */
static int setup_addresses(cpu_comm *c, want *outw, int nout, want *inw, int nin) {
  mnt_world *w = c->w;
  peer_addr me;
  mnt_tcp_addr *to = calloc((size_t)(nout > 0 ? nout : 1), sizeof *to);
  int lfd = -1;
  memset(&me, 0, sizeof me);
  if (!to) return MNT_ENOMEM;
  int st = mnt_watchdog_start(&c->wd, w, c->iface, c->secret, c->id, &me.wd);
  if (st == MNT_OK && nin > 0) st = mnt_tcp_listen(c->iface, &lfd, &me.setup);
  /* everyone takes part in the exchange, even with nothing to publish or after a failure */
  int rc = mnt_world_publish(w, &me, sizeof me, &c->addr_key);
  if (st == MNT_OK) st = rc;
  for (int i = 0; st == MNT_OK && i < nout; i++) {
    peer_addr a;
    st = mnt_world_lookup(w, c->addr_key, outw[i].peer, &a, sizeof a);
    to[i] = a.setup;
  }
  if (st == MNT_OK) st = mnt_watchdog_run(c->wd, watchdog_addr, c);
  if (st == MNT_OK && w->nnodes > 1) st = setup_tcp(c, lfd, to, outw, nout, inw, nin);
  if (lfd >= 0) close(lfd);
  free(to);
  return st;
}

int mnt_comm_cpu_create(mnt_world *w, mnt_topology topo, mnt_comm **out) {
  static uint32_t next_id = 1; /* communicators are created collectively, in the same order */
  *out = NULL;
  cpu_comm *c = calloc(1, sizeof *c);
  if (!c) return MNT_ENOMEM;
  c->w = w;
  c->id = next_id++;
  c->timeout_s = w->timeout_s;
  c->pub = (mnt_comm){.ops = &cpu_ops, .world = w, .topology = topo, .timeout_s = c->timeout_s,
                      .impl = c};
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  int st = MNT_OK;
  mnt_world_phase(w, MNT_PHASE_PREP); /* what came before: the program's own preparation */
  c->iface = mnt_env_comm_iface();
  /* every rank sees the same environment: all fail here alike, before the broadcast */
  MNT_CHECK_GOTO(mnt_env_shm_fifo_bytes(&c->fifo_cap), st, out);
  MNT_CHECK_GOTO(mnt_env_tcp_buf(&c->tcp_buf), st, out);

  /* a fresh secret for this communicator, from rank 0, over PMIx */
  if (w->rank == 0 && getrandom(c->secret, sizeof c->secret, 0) != (ssize_t)sizeof c->secret) {
    st = MNT_SYSERR("getrandom failed"); /* still take part in the broadcast below */
  }
  int rc = mnt_world_bcast(w, c->secret, sizeof c->secret, 0);
  if (st == MNT_OK) st = rc;
  if (st != MNT_OK) goto out;
  mnt_world_phase(w, MNT_PHASE_SECRET);

  /* hier needs the same number of ranks on every node (counted in one pass over the ranks) */
  if (topo == MNT_TOPO_HIER) {
    int uniform = 1, *cnt = calloc((size_t)w->nnodes, sizeof *cnt);
    if (!cnt) { st = MNT_ENOMEM; goto out; }
    for (int r = 0; r < w->size; r++) cnt[w->node_of[r]]++;
    for (int node = 0; node < w->nnodes; node++) uniform &= cnt[node] == w->local_size;
    free(cnt);
    if (!uniform) {
      if (w->rank == 0)
        MNT_WARN("--topology hier needs the same number of ranks on every node; using flat");
      c->pub.topology = MNT_TOPO_FLAT;
    }
  }

  c->order = malloc((size_t)w->size * sizeof *c->order);
  if (!c->order) { st = MNT_ENOMEM; goto out; }
  mnt_ring_order(w->size, w->node_of, w->local_of, c->order);
  int pos = 0;
  while (c->order[pos] != w->rank) pos++;
  int n = w->size;
  int next = c->order[(pos + 1) % n], prev = c->order[(pos - 1 + n) % n];
  c->flat = (ring){.n = n, .pos = pos};
  c->inter = (ring){.n = w->nnodes, .pos = w->node_rank};

  MNT_CHECK_GOTO(setup_shm(c), st, out);
  mnt_world_phase(w, MNT_PHASE_SHM);

  want outw[2], inw[2];
  int nout = 0, nin = 0;
  if (n > 1) {
    if (w->node_of[next] == w->node_rank) c->flat.send = c->local.send;
    else outw[nout++] = (want){next, TAG_FLAT, &c->flat.send};
    if (w->node_of[prev] == w->node_rank) c->flat.recv = c->local.recv;
    else inw[nin++] = (want){prev, TAG_FLAT, &c->flat.recv};
  }
  if (c->pub.topology == MNT_TOPO_HIER && w->nnodes > 1) {
    int N = w->nnodes;
    outw[nout++] = (want){rank_at(w, (w->node_rank + 1) % N, w->local_rank), TAG_INTER, &c->inter.send};
    inw[nin++] = (want){rank_at(w, (w->node_rank - 1 + N) % N, w->local_rank), TAG_INTER, &c->inter.recv};
  }
  if (w->size > 1) MNT_CHECK_GOTO(setup_addresses(c, outw, nout, inw, nin), st, out);
  mnt_world_phase(w, MNT_PHASE_TCP);

  if (pthread_create(&c->thr, NULL, progress_main, c) != 0) {
    MNT_ERR("could not start the communicator's progress thread");
    st = MNT_ESYS;
    goto out;
  }
  c->thr_started = 1;
  *out = &c->pub;
out:
  if (st != MNT_OK) cpu_destroy(&c->pub);
  return st;
}
