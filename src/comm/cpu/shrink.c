/* shrink.c — the membership of the CPU communicator, and its shrink when ranks are lost
 * (--on-rank-loss shrink); see comm.h, mnt_comm_shrink.
 *
 * Every rank's watchdog (watchdog.h) listens for its peers from a thread of its own; the
 * membership messages ride on it, so a rank answers them whatever its main thread is doing. A
 * message is a hello (magic "MNTMEMB?", the job secret, the communicator, the sender's job rank,
 * the kind) and a body: the sender's epoch (shrinks applied), its steps done, and one byte per job
 * rank, 1 for each rank it holds gone. Its answer: a status, the receiver's epoch and its own
 * bytes. Kinds:
 *   SUSPECT  "these ranks are gone": the receiver adds them to its own and is interrupted (its
 *            communicator's collective in flight fails at once, and it joins the recovery);
 *   JOIN     the same, to the leader (the lowest rank not held gone): the sender waits for
 *            DECIDE   the leader's final list for this epoch: the survivors rebuild without the ranks
 *            in it, in epoch + 1.
 * A sender behind the receiver's epoch has been left out (it stopped, or the others lost it): the
 * answer is FENCED and it exits without joining a collective or writing anything.
 *
 * Quorum. A network split looks the same from both sides: each group counts the other lost. A
 * group goes on only with a strict majority of the membership before the loss, or exactly half
 * holding its rank 0 (mnt_comm_quorum); the other exits as fenced before it rebuilds anything, so
 * that two groups never train and write the same run.
 *
 * Agreement. A rank whose collective failed (a peer's process gone, its connection closed, or the
 * deadline MNT_COMM_TIMEOUT without progress) or that was interrupted sends SUSPECT to every rank
 * it does not hold gone, until a round learns nothing new: a rank that does not answer within the
 * probe time (a quarter of MNT_COMM_TIMEOUT, 0.5 to 5 s) is gone; two survivors that saw different
 * failures first end with the union. Then each sends JOIN to the leader, which waits until every
 * rank it does not hold gone has joined (asking the others again each second: one that stops
 * answering is gone), then sends DECIDE to each. A leader that does not answer is gone, and the
 * next one leads. Every wait has the deadline MNT_COMM_TIMEOUT.
 *
 * The rebuild (setup.c, mnt_ccomm_fabric_rebuild) makes a new shared-memory segment per node and new
 * TCP links under a new communicator id: the old segment is marked closed for a stopped rank that
 * wakes up (its engine stops at once), the old sockets are closed. Links between nodes are made to
 * the watchdog's listener, which parks them here until the rebuild takes them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/comm/cpu/cpu_comm.h"
#include "src/log.h"

static const char MEMB_MAGIC[8] = {'M', 'N', 'T', 'M', 'E', 'M', 'B', '?'};
enum { K_SUSPECT = 1, K_JOIN = 2, K_DECIDE = 3 };
enum { A_OK = 0, A_FENCED = 1 };
#define NPARK 32

typedef struct body { int32_t epoch, pad; int64_t step; } body;
typedef struct answer { int32_t status, epoch; } answer;
typedef struct parked { int fd; uint32_t comm_id; int from, tag; } parked;

struct mnt_ccomm_member {
  int njob;            /* ranks when the job started */
  int me;              /* this rank's job rank (the watchdog thread reads it: the world's tables change) */
  mnt_tcp_addr *addr;  /* each job rank's watchdog */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int epoch;           /* shrinks applied */
  uint8_t *gone;       /* by job rank: held gone (cumulative) */
  uint8_t *joined;     /* the leader's: joined this epoch's recovery */
  uint8_t *decided;    /* the leader's decision for this epoch */
  int have_decision, fenced;
  int early;           /* a message of the next epoch came before this rank applied the decision */
  _Atomic int interrupt;
  parked park[NPARK];
  int npark;
};

int mnt_ccomm_member_enable(mnt_ccomm_comm *c, int (*addr_of)(void *ctx, int rank, mnt_tcp_addr *addr)) {
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = calloc(1, sizeof *mb);
  if (!mb) return MNT_ENOMEM;
  mb->njob = w->job_size;
  mb->me = w->job_of[w->rank];
  mb->addr = calloc((size_t)mb->njob, sizeof *mb->addr);
  mb->gone = calloc((size_t)mb->njob, 1);
  mb->joined = calloc((size_t)mb->njob, 1);
  mb->decided = calloc((size_t)mb->njob, 1);
  pthread_mutex_init(&mb->mu, NULL);
  pthread_cond_init(&mb->cv, NULL);
  int st = mb->addr && mb->gone && mb->joined && mb->decided ? MNT_OK : MNT_ENOMEM;
  /* every rank's watchdog, read from the node's PMIx store before PMIx is left (records already there) */
  for (int r = 0; r < w->size && st == MNT_OK; r++)
    if (r != w->rank) st = addr_of(c, r, &mb->addr[w->job_of[r]]);
  if (st != MNT_OK) {
    mnt_ccomm_member_free(mb);
    return st;
  }
  pthread_mutex_lock(&c->mu);
  c->mb = mb;
  pthread_mutex_unlock(&c->mu);
  return MNT_OK;
}

void mnt_ccomm_member_free(mnt_ccomm_member *mb) {
  if (!mb) return;
  for (int i = 0; i < mb->npark; i++) close(mb->park[i].fd);
  pthread_mutex_destroy(&mb->mu);
  pthread_cond_destroy(&mb->cv);
  free(mb->addr), free(mb->gone), free(mb->joined), free(mb->decided);
  free(mb);
}

int mnt_ccomm_member_addr(mnt_ccomm_comm *c, int rank, mnt_tcp_addr *out) {
  if (!c->mb || rank < 0 || rank >= c->w->size) return MNT_EARG;
  *out = c->mb->addr[c->w->job_of[rank]];
  return MNT_OK;
}

int mnt_ccomm_member_interrupted(const mnt_ccomm_comm *c) {
  return c->mb && atomic_load(&((mnt_ccomm_member *)c->mb)->interrupt);
}

void mnt_ccomm_member_suspect(mnt_ccomm_comm *c, int rank) {
  mnt_ccomm_member *mb = c->mb;
  if (!mb || rank < 0 || rank >= c->w->size || rank == c->w->rank) return;
  pthread_mutex_lock(&mb->mu);
  mb->gone[c->w->job_of[rank]] = 1;
  pthread_mutex_unlock(&mb->mu);
}

/* ---- the watchdog thread's side ---------------------------------------------------------- */

/* merge n bytes of another rank's view; 1 when something was new (mu held) */
static int merge(mnt_ccomm_member *mb, const uint8_t *g) {
  int news = 0;
  for (int j = 0; j < mb->njob; j++)
    if (g[j] && !mb->gone[j]) mb->gone[j] = 1, news = 1;
  return news;
}

int mnt_ccomm_member_on_msg(void *ctx, const mnt_tcp_hello *h, int fd) {
  mnt_ccomm_comm *c = ctx;
  mnt_ccomm_member *mb = c->mb;
  if (!mb) return 0;
  if (mnt_tcp_hello_ok(h, c->secret)) { /* a link of a rebuild: parked until the rebuild takes it */
    pthread_mutex_lock(&mb->mu);
    if (mb->npark == NPARK) { /* the oldest goes: a rebuild waits for the newest */
      close(mb->park[0].fd);
      memmove(mb->park, mb->park + 1, (NPARK - 1) * sizeof *mb->park);
      mb->npark--;
    }
    mb->park[mb->npark++] = (parked){.fd = fd, .comm_id = h->comm_id, .from = h->from_rank, .tag = h->tag};
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return 1;
  }
  if (memcmp(h->magic, MEMB_MAGIC, sizeof h->magic) || memcmp(h->secret, c->secret, MNT_SECRET_BYTES) ||
      h->comm_id != c->base_id || h->from_rank < 0 || h->from_rank >= mb->njob)
    return 0;
  body b;
  uint8_t *g = malloc((size_t)mb->njob);
  double dl = mnt_now() + 1.0;
  if (!g || mnt_tcp_xfer(fd, &b, sizeof b, 0, dl) != MNT_OK || mnt_tcp_xfer(fd, g, (size_t)mb->njob, 0, dl) != MNT_OK) {
    free(g);
    close(fd);
    return 1;
  }
  int me = mb->me;
  pthread_mutex_lock(&mb->mu);
  answer a = {.status = A_OK, .epoch = mb->epoch};
  if (b.epoch < mb->epoch) {
    /* behind: left out if this rank counts it gone; else a survivor still applying the decision */
    if (mb->gone[h->from_rank]) a.status = A_FENCED;
  } else if (g[me]) {
    mb->fenced = 1; /* the others count this rank gone */
    atomic_store(&mb->interrupt, 1);
  } else if (b.epoch > mb->epoch) {
    mb->early = 1; /* a survivor ahead saw a new loss: this rank's recovery follows its own */
  } else {
    merge(mb, g);
    atomic_store(&mb->interrupt, 1);
    if (h->tag == K_JOIN) mb->joined[h->from_rank] = 1;
    if (h->tag == K_DECIDE) {
      memcpy(mb->decided, g, (size_t)mb->njob);
      mb->have_decision = 1;
    }
  }
  memcpy(g, mb->gone, (size_t)mb->njob);
  pthread_cond_broadcast(&mb->cv);
  pthread_mutex_unlock(&mb->mu);
  if (mnt_tcp_xfer(fd, &a, sizeof a, 1, dl) == MNT_OK) (void)mnt_tcp_xfer(fd, g, (size_t)mb->njob, 1, dl);
  free(g);
  close(fd);
  return 1;
}

/* wait on the member's condition for up to 100 ms (mu held) */
static void nap(mnt_ccomm_member *mb) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 100 * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_cond_timedwait(&mb->cv, &mb->mu, &ts);
}

int mnt_ccomm_member_take_link(mnt_ccomm_comm *c, uint32_t comm_id, int from, int tag, double deadline, int *fd) {
  mnt_ccomm_member *mb = c->mb;
  pthread_mutex_lock(&mb->mu);
  for (;;) {
    for (int i = 0; i < mb->npark; i++)
      if (mb->park[i].comm_id == comm_id && mb->park[i].from == from && mb->park[i].tag == tag) {
        *fd = mb->park[i].fd;
        memmove(mb->park + i, mb->park + i + 1, (size_t)(mb->npark - i - 1) * sizeof *mb->park);
        mb->npark--;
        pthread_mutex_unlock(&mb->mu);
        return mnt_tcp_answer(*fd, 1, deadline);
      }
    if (mnt_now() >= deadline) break;
    nap(mb);
  }
  pthread_mutex_unlock(&mb->mu);
  MNT_ERR("rebuild: rank %d on %s did not connect within %.0f s (MNT_COMM_TIMEOUT)", c->w->job_of[from],
          c->w->node_name[c->w->node_of[from]], c->timeout_s);
  return MNT_ETIMEOUT;
}

/* ---- the recovering rank's side ------------------------------------------------------------- */

/* send kind with this rank's view to job rank j; its answer into *a and g (njob bytes): MNT_OK, or
 * MNT_EPEER when it does not answer within the probe time */
static int tell(mnt_ccomm_comm *c, int j, int kind, const uint8_t *view, int64_t step, answer *a, uint8_t *g) {
  mnt_ccomm_member *mb = c->mb;
  mnt_tcp_hello h;
  mnt_tcp_hello_init(&h, c->secret, c->base_id, c->w->job_of[c->w->rank], kind);
  memcpy(h.magic, MEMB_MAGIC, sizeof h.magic);
  body b = {.epoch = mb->epoch, .step = step};
  double dl = mnt_now() + mnt_ccomm_probe_s(c);
  int fd;
  char why[300];
  int st = mnt_tcp_dial(&mb->addr[j], &h, sizeof h, dl, &fd, why, sizeof why);
  if (st != MNT_OK) return MNT_EPEER;
  st = mnt_tcp_xfer(fd, &b, sizeof b, 1, dl);
  if (st == MNT_OK) st = mnt_tcp_xfer(fd, (void *)view, (size_t)mb->njob, 1, dl);
  if (st == MNT_OK) st = mnt_tcp_xfer(fd, a, sizeof *a, 0, dl);
  if (st == MNT_OK) st = mnt_tcp_xfer(fd, g, (size_t)mb->njob, 0, dl);
  close(fd);
  return st == MNT_OK ? MNT_OK : MNT_EPEER;
}

/* job rank j of the current membership: held gone? (mu held or a snapshot) */
#define JOB(r) (w->job_of[r])
#define NODE(r) (w->node_name[w->node_of[r]])

/* the view now, copied (mu taken) */
static void snapshot(mnt_ccomm_member *mb, uint8_t *v) {
  pthread_mutex_lock(&mb->mu);
  memcpy(v, mb->gone, (size_t)mb->njob);
  pthread_mutex_unlock(&mb->mu);
}

/* mark rank r (current numbering) gone, said once */
static void lost(mnt_ccomm_comm *c, int r, const char *why) {
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = c->mb;
  pthread_mutex_lock(&mb->mu);
  int was = mb->gone[JOB(r)];
  mb->gone[JOB(r)] = 1;
  pthread_mutex_unlock(&mb->mu);
  if (!was) MNT_WARN("rank %d on %s %s: counted as lost", JOB(r), NODE(r), why);
}

/* SUSPECT to every member not held gone until a round learns nothing new; MNT_EFENCED when one says
 * this rank was left out */
static int spread(mnt_ccomm_comm *c, int64_t step, uint8_t *v, uint8_t *g) {
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = c->mb;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int r = 0; r < w->size; r++) {
      snapshot(mb, v);
      if (r == w->rank || v[JOB(r)]) continue;
      answer a;
      if (tell(c, JOB(r), K_SUSPECT, v, step, &a, g) != MNT_OK) {
        lost(c, r, "does not answer");
        changed = 1;
        continue;
      }
      if (a.status == A_FENCED) {
        MNT_ERR("rank %d on %s says this rank was left out of the job (it stopped answering, or lost its links): "
                "exiting without touching the run", JOB(r), NODE(r));
        return MNT_EFENCED;
      }
      pthread_mutex_lock(&mb->mu);
      changed |= merge(mb, g);
      pthread_mutex_unlock(&mb->mu);
    }
    pthread_mutex_lock(&mb->mu);
    int f = mb->fenced;
    pthread_mutex_unlock(&mb->mu);
    if (f) {
      MNT_ERR("the other ranks went on without this rank (it stopped answering): exiting without touching the run");
      return MNT_EFENCED;
    }
  }
  return MNT_OK;
}

/* the leader: every member not held gone has joined (those that stop answering are gone), then
 * DECIDE to each; the decision into v */
static int lead(mnt_ccomm_comm *c, int64_t step, double deadline, uint8_t *v, uint8_t *g) {
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = c->mb;
  double asked = mnt_now();
  for (;;) {
    pthread_mutex_lock(&mb->mu);
    int missing = -1;
    for (int r = 0; r < w->size && missing < 0; r++)
      if (r != w->rank && !mb->gone[JOB(r)] && !mb->joined[JOB(r)]) missing = r;
    if (missing >= 0 && mnt_now() < deadline) nap(mb);
    pthread_mutex_unlock(&mb->mu);
    if (missing < 0) break;
    if (mnt_now() >= deadline) {
      MNT_ERR("shrink: rank %d on %s answers but did not join the recovery within %.0f s (MNT_COMM_TIMEOUT)",
              JOB(missing), NODE(missing), c->timeout_s);
      return MNT_ETIMEOUT;
    }
    if (mnt_now() - asked > 1.0) { /* the ones not joined yet: still there? */
      asked = mnt_now();
      MNT_CHECK(spread(c, step, v, g));
    }
  }
  snapshot(mb, v);
  for (int r = 0; r < w->size; r++) {
    answer a;
    if (r != w->rank && !v[JOB(r)] && tell(c, JOB(r), K_DECIDE, v, step, &a, g) != MNT_OK)
      MNT_WARN("rank %d on %s did not take the decision (a later loss, if it is gone)", JOB(r), NODE(r));
  }
  return MNT_OK;
}

/* a member: JOIN the leader and wait for its decision (into v); MNT_EPEER when the leader is lost */
static int follow(mnt_ccomm_comm *c, int leader, int64_t step, double deadline, uint8_t *v, uint8_t *g) {
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = c->mb;
  answer a;
  snapshot(mb, v);
  if (tell(c, JOB(leader), K_JOIN, v, step, &a, g) != MNT_OK) {
    lost(c, leader, "(the recovery's leader) does not answer");
    return MNT_EPEER;
  }
  if (a.status == A_FENCED) {
    MNT_ERR("rank %d on %s says this rank was left out of the job: exiting without touching the run", JOB(leader),
            NODE(leader));
    return MNT_EFENCED;
  }
  pthread_mutex_lock(&mb->mu);
  merge(mb, g);
  pthread_mutex_unlock(&mb->mu);
  double asked = mnt_now();
  for (;;) {
    pthread_mutex_lock(&mb->mu);
    int have = mb->have_decision, f = mb->fenced;
    if (have) memcpy(v, mb->decided, (size_t)mb->njob);
    if (!have && !f) nap(mb);
    pthread_mutex_unlock(&mb->mu);
    if (f) {
      MNT_ERR("the other ranks went on without this rank: exiting without touching the run");
      return MNT_EFENCED;
    }
    if (have) return MNT_OK;
    if (mnt_now() >= deadline) {
      MNT_ERR("shrink: no decision from rank %d on %s (the recovery's leader) within %.0f s (MNT_COMM_TIMEOUT)",
              JOB(leader), NODE(leader), c->timeout_s);
      return MNT_ETIMEOUT;
    }
    if (mnt_now() - asked > 1.0) { /* the leader still there? */
      asked = mnt_now();
      snapshot(mb, v);
      if (tell(c, JOB(leader), K_SUSPECT, v, step, &a, g) != MNT_OK) {
        lost(c, leader, "(the recovery's leader) does not answer");
        return MNT_EPEER;
      }
    }
  }
}

int mnt_ccomm_shrink(mnt_comm *pc, int64_t step, mnt_rank_loss *out, int max, int *nout) {
  mnt_ccomm_comm *c = pc->impl;
  mnt_world *w = c->w;
  mnt_ccomm_member *mb = c->mb;
  *nout = 0;
  if (!mb) {
    MNT_ERR("internal: shrink without the membership enabled (mnt_comm_enable_shrink)");
    return MNT_EARG;
  }
  /* the requests in flight end first: each fails at once on the broken communicator */
  pthread_mutex_lock(&c->mu);
  if (!c->broken) c->broken = MNT_EPEER;
  while (c->head) pthread_cond_wait(&c->cv, &c->mu);
  pthread_mutex_unlock(&c->mu);
  uint8_t *v = malloc((size_t)mb->njob), *g = malloc((size_t)mb->njob);
  int *keep = malloc((size_t)w->size * sizeof *keep);
  int st = v && g && keep ? MNT_OK : MNT_ENOMEM;
  double deadline = mnt_now() + (c->timeout_s > 10 ? c->timeout_s : 10);
  while (st == MNT_OK) {
    st = spread(c, step, v, g);
    if (st != MNT_OK) break;
    int leader = -1;
    for (int r = 0; r < w->size && leader < 0; r++)
      if (!v[JOB(r)]) leader = r;
    st = leader == w->rank ? lead(c, step, deadline, v, g) : follow(c, leader, step, deadline, v, g);
    if (st == MNT_EPEER) st = MNT_OK; /* the leader is lost: the next one leads */
    else break;
  }
  if (st == MNT_OK && v[JOB(w->rank)]) {
    MNT_ERR("the other ranks count this rank as lost: exiting without touching the run");
    st = MNT_EFENCED;
  }
  if (st == MNT_OK) { /* a split's groups each count the other lost: the quorum lets one go on at most */
    int n = 0;
    for (int r = 0; r < w->size; r++) n += !v[JOB(r)];
    char why[200];
    if (!mnt_comm_quorum(w->size, n, !v[JOB(0)], why, sizeof why)) {
      MNT_ERR("shrink: this rank's group has %s: exiting without touching the run", why);
      st = MNT_EFENCED;
    }
  }
  int n = 0;
  for (int r = 0; st == MNT_OK && r < w->size; r++) {
    if (!v[JOB(r)]) {
      keep[n++] = r;
    } else if (*nout < max) {
      out[*nout].job_rank = JOB(r);
      snprintf(out[*nout].node, sizeof out[*nout].node, "%s", NODE(r));
      (*nout)++;
    }
  }
  if (st == MNT_OK) {
    pthread_mutex_lock(&mb->mu);
    memcpy(mb->gone, v, (size_t)mb->njob); /* the decision is the view from now on */
    mb->epoch++;
    mb->have_decision = 0;
    memset(mb->joined, 0, (size_t)mb->njob);
    atomic_store(&mb->interrupt, mb->early);
    mb->early = 0;
    pthread_mutex_unlock(&mb->mu);
    mnt_ccomm_fabric_fence(&c->fab); /* a stopped rank that wakes up finds its segment closed */
    mnt_ccomm_fabric_close(&c->fab);
    st = mnt_world_shrink(w, keep, n);
  }
  if (st == MNT_OK) st = mnt_ccomm_fabric_rebuild(c, mb->epoch);
  if (st == MNT_OK) {
    pthread_mutex_lock(&c->mu);
    c->broken = 0;
    pthread_mutex_unlock(&c->mu);
  }
  free(v), free(g), free(keep);
  return st;
}
