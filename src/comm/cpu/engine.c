/* engine.c — the CPU communicator's engine: one ring plan streamed over the links to its end; its
 * waiting, its deadline and who holds it up. See cpu_comm.h.
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
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/comm/cpu/cpu_comm.h"
#include "src/comm/cpu/ring.h"
#include "src/comm/cpu/transport.h"
#include "src/comm/cpu/watchdog.h"
#include "src/trace.h"

#define PIECE (256u << 10)      /* bytes reduced or copied before looking at the other side */
#define SPINS 64                /* idle iterations before sleeping */
#define LIVENESS_S 0.1          /* how often shared-memory peers are checked while waiting */

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
/* a link's failure: its peer is held gone (--on-rank-loss shrink), the status passed up */
#define LINK_CHECK(c, link, call)                       \
  do {                                                  \
    int lst_ = (call);                                  \
    if (lst_ != MNT_OK) {                               \
      mnt_ccomm_member_suspect((c), (link)->peer_rank); \
      MNT_CHECK(lst_);                                  \
    }                                                   \
  } while (0)

/* --on-rank-loss shrink: a peer said a rank is gone, or the survivors left this segment */
static int interrupted(mnt_ccomm_comm *c, const mnt_ccomm_plan *p) {
  int closed = c->fab.have_shm && atomic_load(&c->fab.shm.slots[c->fab.shm.me].closed);
  if (!closed && !mnt_ccomm_member_interrupted(c)) return MNT_OK;
  MNT_WARN("%s stopped: %s", p->what, closed ? "the other ranks of this node left its segment (a rank was lost)"
                                              : "another rank says a rank was lost");
  return MNT_EPEER;
}

static int check_shm_peers(mnt_ccomm_comm *c, const mnt_ccomm_plan *p, int need_recv, int need_send) {
  mnt_link *ls[2] = {need_recv ? p->r->recv : NULL, need_send ? p->r->send : NULL};
  for (int i = 0; i < 2; i++) {
    if (!link_is(ls[i], MNT_LINK_SHM) || mnt_shm_peer_alive(&c->fab.shm, ls[i]->peer_local)) continue;
    const void *src;
    size_t left = 0;
    if (i == 0 && mnt_link_peek(ls[i], &src, &left, 1, 1) == MNT_OK && left > 0) continue;
    MNT_ERR("rank %d on %s died during %s (its process is gone)", c->w->job_of[ls[i]->peer_rank], ls[i]->peer_node,
            p->what);
    mnt_ccomm_member_suspect(c, ls[i]->peer_rank);
    return MNT_EPEER;
  }
  return MNT_OK;
}

static void sleep_on_bell(mnt_ccomm_comm *c, uint32_t seen, double secs) {
  mnt_shm_slot *me = &c->fab.shm.slots[c->fab.shm.me];
  struct timespec ts = {.tv_sec = (time_t)secs, .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9)};
  atomic_store(&me->sleeping, 1u);
  if (atomic_load(&me->bell) == seen)
    syscall(SYS_futex, (uint32_t *)&me->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_store(&me->sleeping, 0u);
}

double mnt_ccomm_probe_s(const mnt_ccomm_comm *c) {
  return c->timeout_s / 4 < 0.5 ? 0.5 : c->timeout_s / 4 > 5 ? 5 : c->timeout_s / 4;
}

/* No progress since `last` while waiting for rank peer: a warning (final = 0: who holds it up is
 * asked now, up to mnt_ccomm_probe_s) or the failure (final = 1, with `who` asked before the deadline).
 * The seconds said are measured when the message is written, after the asking: the warning, the
 * last events' "(N s)" and the deadline tell one story (MNT_COMM_TIMEOUT is when the wait ends, not
 * when the asking before the end begins). */
static int stalled(mnt_ccomm_comm *c, const mnt_ccomm_plan *p, int peer, double last, int final,
                   const char *who_asked) {
  char who[2000];
  if (final) snprintf(who, sizeof who, "%s", who_asked);
  else mnt_watchdog_blame(c->wd, peer, mnt_ccomm_probe_s(c), who, sizeof who);
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

/* One loop on purpose (~100 lines): sends and receives of every step of the plan advance
 * together, each as far as its FIFO or socket allows, with the reduction of a received chunk in
 * between; split into functions, the state of both directions would have to travel with them. */
static int run_plan(mnt_ccomm_comm *c, const mnt_ccomm_plan *p) {
  mnt_ccomm_ring *r = p->r;
  int ss = 0, rs = 0;  /* current send / recv step */
  size_t so = 0, ro = 0; /* bytes done within it */
  double last = mnt_now(), checked = last;
  double warn_after = c->timeout_s / 2 < 30 ? c->timeout_s / 2 : 30;
  double ask_at = c->timeout_s - mnt_ccomm_probe_s(c); /* the asking ends at the deadline */
  char who[2000];
  int spins = 0, announced = 0, asked = 0;
  int uses_shm = link_is(r->send, MNT_LINK_SHM) || link_is(r->recv, MNT_LINK_SHM);
  while (ss < p->nsend || rs < p->nrecv) {
    uint32_t bell = c->fab.have_shm ? atomic_load(&c->fab.shm.slots[c->fab.shm.me].bell) : 0;
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
        LINK_CHECK(c, r->recv, mnt_link_peek(r->recv, &src, &got, want, p->esize));
        got -= got % p->esize;
        if (got == 0) break;
        mnt_reduce(p->t, dst, src, got / p->esize, rs == p->reduce_steps - 1 ? p->div : 1.0f);
        mnt_link_consume(r->recv, got);
      } else {
        LINK_CHECK(c, r->recv, mnt_link_recv_into(r->recv, dst, want, &got));
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
      LINK_CHECK(c, r->send, mnt_link_send(r->send, p->buf + p->off[seg] + so, limit - so, &sent));
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
      mnt_watchdog_blame(c->wd, peer, mnt_ccomm_probe_s(c), who, sizeof who);
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
      MNT_CHECK(interrupted(c, p));
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

int mnt_ccomm_run(mnt_ccomm_comm *c, const mnt_ccomm_plan *p) {
  int st = run_plan(c, p);
  mnt_watchdog_waiting(c->wd, -1, 0, NULL);
  return st;
}
