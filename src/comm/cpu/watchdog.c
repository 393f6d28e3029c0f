/* watchdog.c — see watchdog.h. */
#include "src/comm/cpu/watchdog.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/sysmem.h"
#include "src/trace.h"

static const char ASK[8] = {'M', 'N', 'T', 'W', 'D', 'O', 'G', '?'};
static const char TELL[8] = {'M', 'N', 'T', 'W', 'D', 'O', 'G', '!'};

/* a request is a hello (transport.h): the same first bytes as a link's and a membership message's,
 * which on_msg (the membership, shrink.c) takes */
typedef mnt_tcp_hello request;

typedef struct reply {
  char magic[8];
  int32_t rank;
  int32_t waiting_on; /* -1: not waiting in a collective */
  double waited_s;
  char what[48];
  char doing[96]; /* what its main thread is doing (trace.h: "step 12: backward (3.2 s)") */
} reply;

struct mnt_watchdog {
  mnt_world *w;
  uint8_t secret[MNT_SECRET_BYTES];
  uint32_t id;
  int lfd, wake;
  mnt_tcp_inbox *ib;
  int (*addr_of)(void *ctx, int rank, mnt_tcp_addr *addr); /* a rank's watchdog, looked up when asked */
  void *addr_ctx;
  int (*on_msg)(void *ctx, const mnt_tcp_hello *h, int fd); /* other messages: 1 when taken (fd theirs) */
  pthread_t thr;
  int started;
  _Atomic int stop;
  /* what this rank waits for, set by the communicator's progress thread */
  _Atomic int waiting_on;
  _Atomic int64_t since_us;
  pthread_mutex_t mu; /* guards what */
  char what[48];
};

int mnt_watchdog_start(mnt_watchdog **out, mnt_world *w, const char *iface, const uint8_t *secret, uint32_t comm_id,
                       mnt_tcp_addr *addr) {
  mnt_watchdog *wd = calloc(1, sizeof *wd);
  if (!wd) return MNT_ENOMEM;
  wd->w = w;
  wd->id = comm_id;
  wd->lfd = wd->wake = -1;
  memcpy(wd->secret, secret, MNT_SECRET_BYTES);
  atomic_store(&wd->waiting_on, -1);
  pthread_mutex_init(&wd->mu, NULL);
  *out = wd;
  MNT_CHECK(mnt_tcp_listen(iface, &wd->lfd, addr));
  wd->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wd->wake < 0) return MNT_FD_SYSERR("eventfd", "the watchdog's eventfd");
  return mnt_tcp_inbox_open(&wd->ib, wd->lfd, sizeof(request), 2.0);
}

static void *serve(void *arg) {
  mnt_watchdog *wd = arg;
  while (!atomic_load(&wd->stop)) {
    request q;
    int fd;
    int st = mnt_tcp_inbox_next(wd->ib, mnt_now() + 1.0, wd->wake, &fd, &q, NULL, 0);
    if (st == MNT_ESYS) { /* no descriptor to accept with (logged once): try again in a second, not at once */
      struct pollfd p = {.fd = wd->wake, .events = POLLIN};
      poll(&p, 1, 1000);
    }
    if (st != MNT_OK) continue;
    if (memcmp(q.magic, ASK, sizeof q.magic) || q.comm_id != wd->id || memcmp(q.secret, wd->secret, MNT_SECRET_BYTES)) {
      if (!wd->on_msg || !wd->on_msg(wd->addr_ctx, &q, fd)) close(fd); /* not one of ours: no answer */
      continue;
    }
    reply r = {.rank = wd->w->rank, .waiting_on = atomic_load(&wd->waiting_on)};
    memcpy(r.magic, TELL, sizeof r.magic);
    if (r.waiting_on >= 0) r.waited_s = mnt_now() - (double)atomic_load(&wd->since_us) * 1e-6;
    pthread_mutex_lock(&wd->mu);
    memcpy(r.what, wd->what, sizeof r.what);
    pthread_mutex_unlock(&wd->mu);
    mnt_trace_activity(r.doing, sizeof r.doing);
    mnt_tcp_xfer(fd, &r, sizeof r, 1, mnt_now() + 1.0);
    close(fd);
    /* a peer follows a stall through this rank: its last events on disk too (at most every 5 s), unless
     * a stall is a loss the survivors recover from (a rank left out must not write) */
    if (wd->on_msg) continue;
    char why[96];
    snprintf(why, sizeof why, "rank %d asked what this rank waits for (a collective stalled)", q.from_rank);
    mnt_trace_dump_last(NULL, why);
  }
  return NULL;
}

int mnt_watchdog_run(mnt_watchdog *wd, int (*addr_of)(void *ctx, int rank, mnt_tcp_addr *addr), void *ctx) {
  wd->addr_of = addr_of;
  wd->addr_ctx = ctx;
  if (pthread_create(&wd->thr, NULL, serve, wd) != 0) {
    MNT_ERR("could not start the communicator's watchdog thread");
    return MNT_ESYS;
  }
  wd->started = 1;
  return MNT_OK;
}

void mnt_watchdog_on_msg(mnt_watchdog *wd, int (*on_msg)(void *ctx, const mnt_tcp_hello *h, int fd)) {
  wd->on_msg = on_msg; /* set before the first shrink, after a fence of the set-up: read by the thread */
}

void mnt_watchdog_waiting(mnt_watchdog *wd, int peer, double since, const char *what) {
  if (!wd) return;
  if (peer >= 0) {
    atomic_store(&wd->since_us, (int64_t)(since * 1e6));
    pthread_mutex_lock(&wd->mu);
    snprintf(wd->what, sizeof wd->what, "%s", what ? what : "");
    pthread_mutex_unlock(&wd->mu);
  }
  atomic_store(&wd->waiting_on, peer);
}

/* ask rank r: 0 and *rep, -1 when it does not answer in time, -2 when this rank could not ask
 * (no socket: why says so) */
static int ask(mnt_watchdog *wd, int r, double probe_s, reply *rep, char *why, size_t why_n) {
  request q = {.comm_id = wd->id, .from_rank = wd->w->rank};
  memcpy(q.magic, ASK, sizeof q.magic);
  memcpy(q.secret, wd->secret, MNT_SECRET_BYTES);
  double deadline = mnt_now() + probe_s;
  int fd;
  mnt_tcp_addr a;
  if (!wd->addr_of) return -1;
  if (wd->addr_of(wd->addr_ctx, r, &a) != MNT_OK) {
    snprintf(why, why_n, "its address could not be looked up over PMIx");
    return -2;
  }
  int dst = mnt_tcp_dial(&a, &q, sizeof q, deadline, &fd, why, why_n);
  if (dst == MNT_ESYS) return -2; /* our own failure, not the peer's */
  if (dst != MNT_OK) return -1;
  int st = mnt_tcp_xfer(fd, rep, sizeof *rep, 0, deadline);
  close(fd);
  return st == MNT_OK && !memcmp(rep->magic, TELL, sizeof rep->magic) && rep->rank == r ? 0 : -1;
}

#define NODE(r) wd->w->node_name[wd->w->node_of[r]]

int mnt_watchdog_blame(mnt_watchdog *wd, int peer, double probe_s, char *out, size_t n) {
  mnt_world *w = wd->w;
  char chain[1600] = "";
  int culprit = -1;
  out[0] = '\0';
  unsigned char *seen = calloc((size_t)w->size, 1);
  if (!seen) {
    snprintf(out, n, "rank %d on %s (not asked: out of memory)", peer, NODE(peer));
    return peer;
  }
  seen[w->rank] = 1;
  int r = peer;
  for (int hops = 0; hops < w->size; hops++) {
    reply rep;
    char why[360];
    seen[r] = 1;
    int a = ask(wd, r, probe_s, &rep, why, sizeof why);
    if (a == -2) {
      snprintf(out, n, "rank %d on %s could not be asked what it waits for (%s)%s%s", r, NODE(r), why,
               chain[0] ? "; " : "", chain);
      break; /* nobody to blame: this rank could not ask */
    }
    if (a != 0) {
      snprintf(out, n, "rank %d on %s does not answer (stopped, hung or gone)%s%s", r, NODE(r), chain[0] ? "; " : "",
               chain);
      culprit = r;
      break;
    }
    rep.what[sizeof rep.what - 1] = '\0';
    if (rep.waiting_on < 0 || rep.waiting_on >= w->size) {
      rep.doing[sizeof rep.doing - 1] = '\0';
      snprintf(out, n, "rank %d on %s answers but is not waiting in a collective (busy elsewhere: %s)%s%s", r, NODE(r),
               rep.doing[0] ? rep.doing : "compute, I/O, or another code path", chain[0] ? "; " : "", chain);
      culprit = r;
      break;
    }
    size_t l = strlen(chain);
    rep.doing[sizeof rep.doing - 1] = '\0';
    snprintf(chain + l, sizeof chain - l, "%srank %d on %s waits for rank %d on %s (%.1f s, %s%s%s)", l ? ", " : "",
             r, NODE(r), rep.waiting_on, NODE(rep.waiting_on), rep.waited_s, rep.what, rep.doing[0] ? "; " : "",
             rep.doing);
    if (seen[rep.waiting_on]) {
      snprintf(out, n, "the ranks wait for each other in a cycle (mismatched collectives?): %s", chain);
      break;
    }
    r = rep.waiting_on;
  }
  if (culprit < 0 && !out[0]) snprintf(out, n, "the chain of waits could not be followed: %s", chain);
  free(seen);
  return culprit;
}

void mnt_watchdog_stop(mnt_watchdog *wd) {
  if (!wd) return;
  if (wd->started) {
    atomic_store(&wd->stop, 1);
    uint64_t one = 1;
    if (write(wd->wake, &one, sizeof one) < 0) { /* the thread also wakes within a second */
    }
    pthread_join(wd->thr, NULL);
  }
  mnt_tcp_inbox_close(wd->ib);
  if (wd->lfd >= 0) close(wd->lfd);
  if (wd->wake >= 0) close(wd->wake);
  pthread_mutex_destroy(&wd->mu);
  free(wd);
}
