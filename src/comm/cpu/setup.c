/* setup.c — the CPU communicator's set-up: mnt_comm_cpu_create and the fabric it builds; see comm.h.
 * Rank 0 draws a fresh secret for the communicator and spreads it over PMIx. The ranks of a node
 * (when there are several) map one shared-memory segment, named after the job, the communicator,
 * the node and the secret, that holds the FIFOs and doorbells of the node-local ring. With more
 * than one rank, every rank starts its watchdog and publishes it and its set-up listener over
 * PMIx, then connects over TCP to its next ring neighbour on another node and accepts its previous
 * one, hellos authenticated with the secret (flat ring; the inter-node ring too for hier). The
 * progress thread starts last. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/env.h"
#include "src/world.h"
#include "src/comm/comm.h"
#include "src/comm/cpu/cpu_comm.h"
#include "src/comm/cpu/ring.h"
#include "src/comm/cpu/transport.h"
#include "src/comm/cpu/watchdog.h"

#define TCP_STAGE (1u << 20)    /* receive staging ring per TCP link: small enough to stay in L2 */

static mnt_link *new_link(mnt_ccomm_comm *c, int kind, int peer) {
  mnt_link *l = &c->fab.links[c->fab.nlinks++];
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

static void shm_name(const mnt_ccomm_comm *c, char *out, size_t n) {
  char ns[96];
  size_t j = 0;
  for (const char *s = c->w->nspace; *s && j < sizeof ns - 1; s++)
    ns[j++] = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ? *s : '_';
  ns[j] = '\0';
  snprintf(out, n, "/mntrain-%s-c%u-n%d-%02x%02x%02x%02x%02x%02x%02x%02x", ns, c->id,
           c->w->node_rank, c->secret[0], c->secret[1], c->secret[2], c->secret[3], c->secret[4],
           c->secret[5], c->secret[6], c->secret[7]);
}

static int setup_shm(mnt_ccomm_comm *c) {
  mnt_world *w = c->w;
  int L = w->local_size, l = w->local_rank;
  char name[200];
  shm_name(c, name, sizeof name);
  int st = MNT_OK, st_all = MNT_OK;
  size_t cap = c->fifo_cap;
  /* A local rank that fails still joins both barriers so that nobody waits for it; the
   * failure is agreed on below through an allgather. */
  if (L > 1 && l == 0) st = mnt_shm_open(&c->fab.shm, name, L, l, cap, 1);
  MNT_CHECK(mnt_world_barrier(w));
  if (L > 1 && l != 0 && st == MNT_OK) st = mnt_shm_open(&c->fab.shm, name, L, l, cap, 0);
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
    c->fab.have_shm = 1;
    if (l == 0) mnt_shm_unlink(&c->fab.shm); /* everyone has it mapped now */
  }
  MNT_CHECK(rc);
  MNT_CHECK(st_all);
  if (L > 1) {
    int next = rank_at(w, w->node_rank, (l + 1) % L), prev = rank_at(w, w->node_rank, (l - 1 + L) % L);
    mnt_link *s = new_link(c, MNT_LINK_SHM, next), *r = new_link(c, MNT_LINK_SHM, prev);
    s->shm = r->shm = &c->fab.shm;
    s->fifo = mnt_shm_fifo_of(&c->fab.shm, l);
    r->fifo = mnt_shm_fifo_of(&c->fab.shm, (l - 1 + L) % L);
    c->fab.local = (mnt_ccomm_ring){.n = L, .pos = l, .send = s, .recv = r};
  } else {
    c->fab.local = (mnt_ccomm_ring){.n = 1, .pos = 0};
  }
  return MNT_OK;
}

typedef struct want { int peer, tag; mnt_link **slot; } want;

/* what every rank publishes at set-up: its set-up listener (port 0 when it expects no connection)
 * and its watchdog */
typedef struct peer_addr { mnt_tcp_addr setup, wd; } peer_addr;

/* Connect to the ranks in out and accept those in in. Hellos are read concurrently (an inbox), a
 * silent or slow connection is dropped after 10 s and cannot delay the real peers. */
static int setup_tcp(mnt_ccomm_comm *c, int lfd, const mnt_tcp_addr *to, want *out, int nout, want *in, int nin) {
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

/* the watchdog asks rank r only when a collective stalls: its address is looked up then (from the
 * table once the membership has one: PMIx may be gone) */
static int watchdog_addr(void *ctx, int r, mnt_tcp_addr *out) {
  mnt_ccomm_comm *c = ctx;
  peer_addr a;
  if (c->mb) return mnt_ccomm_member_addr(c, r, out);
  MNT_CHECK(mnt_world_lookup(c->w, c->addr_key, r, &a, sizeof a));
  *out = a.wd;
  return MNT_OK;
}

/* The set-up exchange: every rank publishes its watchdog and set-up listener over PMIx and looks up
 * only the ranks it connects to (O(1) per rank: its ring neighbours), then the TCP links. */
static int setup_addresses(mnt_ccomm_comm *c, want *outw, int nout, want *inw, int nin) {
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
  mnt_ccomm_comm *c = calloc(1, sizeof *c);
  if (!c) return MNT_ENOMEM;
  c->w = w;
  c->id = c->base_id = next_id++;
  c->timeout_s = w->timeout_s;
  c->pub = (mnt_comm){.ops = &mnt_ccomm_ops, .world = w, .topology = topo, .timeout_s = c->timeout_s, .impl = c};
  c->fab.topology = topo;
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
      c->pub.topology = c->fab.topology = MNT_TOPO_FLAT;
    }
  }

  c->fab.order = malloc((size_t)w->size * sizeof *c->fab.order);
  if (!c->fab.order) { st = MNT_ENOMEM; goto out; }
  mnt_ring_order(w->size, w->node_of, w->local_of, c->fab.order);
  int pos = 0;
  while (c->fab.order[pos] != w->rank) pos++;
  int n = w->size;
  int next = c->fab.order[(pos + 1) % n], prev = c->fab.order[(pos - 1 + n) % n];
  c->fab.flat = (mnt_ccomm_ring){.n = n, .pos = pos};
  c->fab.inter = (mnt_ccomm_ring){.n = w->nnodes, .pos = w->node_rank};

  MNT_CHECK_GOTO(setup_shm(c), st, out);
  mnt_world_phase(w, MNT_PHASE_SHM);

  want outw[2], inw[2];
  int nout = 0, nin = 0;
  if (n > 1) {
    if (w->node_of[next] == w->node_rank) c->fab.flat.send = c->fab.local.send;
    else outw[nout++] = (want){next, TAG_FLAT, &c->fab.flat.send};
    if (w->node_of[prev] == w->node_rank) c->fab.flat.recv = c->fab.local.recv;
    else inw[nin++] = (want){prev, TAG_FLAT, &c->fab.flat.recv};
  }
  if (c->fab.topology == MNT_TOPO_HIER && w->nnodes > 1) {
    int N = w->nnodes;
    outw[nout++] = (want){rank_at(w, (w->node_rank + 1) % N, w->local_rank), TAG_INTER, &c->fab.inter.send};
    inw[nin++] = (want){rank_at(w, (w->node_rank - 1 + N) % N, w->local_rank), TAG_INTER, &c->fab.inter.recv};
  }
  if (w->size > 1) MNT_CHECK_GOTO(setup_addresses(c, outw, nout, inw, nin), st, out);
  mnt_world_phase(w, MNT_PHASE_TCP);

  st = mnt_ccomm_progress_start(c);
  if (st != MNT_OK) goto out;
  *out = &c->pub;
out:
  if (st != MNT_OK) c->pub.ops->destroy(&c->pub);
  return st;
}

void mnt_ccomm_fabric_close(mnt_ccomm_fabric *f) {
  for (int i = 0; i < f->nlinks; i++) mnt_link_close(&f->links[i]);
  if (f->have_shm) {
    mnt_shm_unlink(&f->shm);
    mnt_shm_close(&f->shm);
  }
  free(f->order);
  *f = (mnt_ccomm_fabric){0};
}

void mnt_ccomm_fabric_fence(mnt_ccomm_fabric *f) {
  if (!f->have_shm) return;
  for (int l = 0; l < f->shm.nlocal; l++) {
    atomic_store(&f->shm.slots[l].closed, 1);
    mnt_shm_ring(&f->shm, l);
  }
}

static int lookup_addr(void *ctx, int r, mnt_tcp_addr *out) { return watchdog_addr(ctx, r, out); }

int mnt_ccomm_enable_shrink(mnt_comm *pc) {
  mnt_ccomm_comm *c = pc->impl;
  if (c->w->size > 1) MNT_CHECK(mnt_ccomm_member_enable(c, lookup_addr));
  if (c->wd) mnt_watchdog_on_msg(c->wd, mnt_ccomm_member_on_msg);
  return MNT_OK;
}

/* /dev/shm's segment `name` made by another local rank and ready (its magic written): wait for it */
static int await_segment(mnt_ccomm_comm *c, const char *name, double deadline) {
  while (mnt_now() < deadline) {
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd >= 0) {
      uint64_t magic = 0;
      ssize_t n = pread(fd, &magic, sizeof magic, 0);
      close(fd);
      if (n == (ssize_t)sizeof magic && magic != 0) return MNT_OK;
    }
    usleep(2000);
  }
  MNT_ERR("rebuild: the node's new shared-memory segment did not appear within %.0f s (MNT_COMM_TIMEOUT)",
          c->timeout_s);
  return MNT_ETIMEOUT;
}

/* a TCP link of the fabric over fd: the receiving side stages */
static int tcp_link(mnt_ccomm_comm *c, int peer, int fd, mnt_link **slot, int recv) {
  mnt_link *l = new_link(c, MNT_LINK_TCP, peer);
  l->fd = fd;
  mnt_tcp_tune(fd, c->tcp_buf);
  if (recv) {
    l->stage_cap = TCP_STAGE;
    l->stage_mem = malloc(TCP_STAGE + 64);
    if (!l->stage_mem) return MNT_ENOMEM;
    l->stage = l->stage_mem + 64;
  }
  *slot = l;
  return MNT_OK;
}

int mnt_ccomm_fabric_rebuild(mnt_ccomm_comm *c, int epoch) {
  mnt_world *w = c->w;
  mnt_ccomm_fabric *f = &c->fab;
  double deadline = mnt_now() + c->timeout_s;
  c->id = c->base_id + 0x10000u * (uint32_t)epoch;
  if (c->pub.topology == MNT_TOPO_HIER && w->rank == 0)
    MNT_WARN("after a loss the allreduce runs flat (--topology hier needs the same ranks on every node)");
  c->pub.topology = f->topology = MNT_TOPO_FLAT;
  int L = w->local_size, l = w->local_rank, n = w->size;
  f->order = malloc((size_t)n * sizeof *f->order);
  if (!f->order) return MNT_ENOMEM;
  mnt_ring_order(n, w->node_of, w->local_of, f->order);
  int pos = 0;
  while (f->order[pos] != w->rank) pos++;
  int next = f->order[(pos + 1) % n], prev = f->order[(pos - 1 + n) % n];
  f->flat = (mnt_ccomm_ring){.n = n, .pos = pos};
  f->inter = (mnt_ccomm_ring){.n = w->nnodes, .pos = w->node_rank};
  f->local = (mnt_ccomm_ring){.n = 1, .pos = 0};
  if (L > 1) { /* a new segment: local rank 0 makes it, the others wait for it, then it is unlinked */
    char name[200];
    shm_name(c, name, sizeof name);
    if (l == 0) MNT_CHECK(mnt_shm_open(&f->shm, name, L, l, c->fifo_cap, 1));
    else {
      MNT_CHECK(await_segment(c, name, deadline));
      MNT_CHECK(mnt_shm_open(&f->shm, name, L, l, c->fifo_cap, 0));
    }
    f->have_shm = 1;
    if (l == 0) {
      for (int k = 1; k < L; k++)
        while (!atomic_load(&f->shm.slots[k].attached)) {
          if (mnt_now() >= deadline) {
            mnt_shm_unlink(&f->shm);
            MNT_ERR("rebuild: local rank %d did not attach the new segment within %.0f s", k, c->timeout_s);
            return MNT_ETIMEOUT;
          }
          usleep(2000);
        }
      mnt_shm_unlink(&f->shm);
    }
    int nx = rank_at(w, w->node_rank, (l + 1) % L), pv = rank_at(w, w->node_rank, (l - 1 + L) % L);
    mnt_link *s = new_link(c, MNT_LINK_SHM, nx), *r = new_link(c, MNT_LINK_SHM, pv);
    s->shm = r->shm = &f->shm;
    s->fifo = mnt_shm_fifo_of(&f->shm, l);
    r->fifo = mnt_shm_fifo_of(&f->shm, (l - 1 + L) % L);
    f->local = (mnt_ccomm_ring){.n = L, .pos = l, .send = s, .recv = r};
  }
  if (n == 1) return MNT_OK;
  if (w->node_of[next] == w->node_rank) f->flat.send = f->local.send;
  if (w->node_of[prev] == w->node_rank) f->flat.recv = f->local.recv;
  int ofd = -1, st = MNT_OK;
  if (!f->flat.send) { /* to next's watchdog, which parks it for next's rebuild */
    mnt_tcp_hello h;
    mnt_tcp_addr a;
    mnt_tcp_hello_init(&h, c->secret, c->id, w->rank, TAG_FLAT);
    MNT_CHECK(mnt_ccomm_member_addr(c, next, &a));
    MNT_CHECK(mnt_tcp_start_connect(&a, &h, &ofd, deadline, next));
  }
  if (!f->flat.recv) {
    int ifd;
    st = mnt_ccomm_member_take_link(c, c->id, prev, TAG_FLAT, deadline, &ifd);
    if (st == MNT_OK) st = tcp_link(c, prev, ifd, &f->flat.recv, 1);
  }
  if (ofd >= 0) {
    if (st == MNT_OK) st = mnt_tcp_finish_connect(ofd, deadline, next);
    if (st == MNT_OK) st = tcp_link(c, next, ofd, &f->flat.send, 0);
    else close(ofd);
  }
  return st;
}
