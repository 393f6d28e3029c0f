/* collectives.c — the CPU communicator's collectives as ring plans over its fabric: allreduce
 * (flat or hier), broadcast, allgather, barrier; see cpu_comm.h.
 *
 * Topologies. flat: one ring over all ranks, ordered by (node, local rank), so each node
 * boundary is crossed by one TCP link. hier: reduce-scatter inside each node over shared
 * memory, then an inter-node ring allreduce among the ranks that hold the same slice (same local
 * rank), then an allgather inside each node. hier needs the same number of ranks on every node;
 * otherwise the communicator says so once and runs flat. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/log.h"
#include "src/dtype.h"
#include "src/comm/cpu/cpu_comm.h"
#include "src/comm/cpu/ring.h"

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
static int ring_allreduce_part(mnt_ccomm_comm *c, mnt_ccomm_ring *r, uint8_t *buf, size_t count, mnt_dtype t, float div,
                               int rs, int ag, const char *what) {
  if (r->n == 1 || count == 0) return MNT_OK;
  size_t *off, *len, es = mnt_dtype_size(t);
  MNT_CHECK(segments(count, es, r->n, &off, &len));
  int n1 = r->n - 1;
  mnt_ccomm_plan p = {.r = r,
                      .buf = buf,
                      .t = t,
                      .esize = es,
                      .nseg = r->n,
                      .off = off,
                      .len = len,
                      .lag = 1,
                      .div = div,
                      .what = what};
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
  int st = mnt_ccomm_run(c, &p);
  free(off);
  free(len);
  return st;
}

static int do_allreduce(mnt_ccomm_comm *c, void *buf, size_t count, mnt_dtype t, mnt_redop op) {
  mnt_world *w = c->w;
  float div = op == MNT_AVG ? (float)w->size : 1.0f;
  if (w->size == 1 || count == 0) return MNT_OK;
  if (c->fab.topology == MNT_TOPO_FLAT)
    return ring_allreduce_part(c, &c->fab.flat, buf, count, t, div, 1, 1, "allreduce");
  /* hier: node-local reduce-scatter, inter-node allreduce of my slice, node-local allgather */
  int L = c->fab.local.n, N = c->fab.inter.n;
  size_t es = mnt_dtype_size(t);
  uint8_t *b = buf;
  size_t soff = 0, slen = count;
  if (L > 1) {
    MNT_CHECK(ring_allreduce_part(c, &c->fab.local, b, count, t, N == 1 ? div : 1.0f, 1, 0,
                                  "allreduce (intra-node reduce-scatter)"));
    size_t *off, *len;
    MNT_CHECK(segments(count, es, L, &off, &len)); /* the table the reduce-scatter used */
    int mine = (c->fab.local.pos + 1) % L;
    soff = off[mine] / es;
    slen = len[mine] / es;
    free(off);
    free(len);
  }
  if (N > 1)
    MNT_CHECK(ring_allreduce_part(c, &c->fab.inter, b + soff * es, slen, t, div, 1, 1,
                                  "allreduce (inter-node)"));
  if (L > 1)
    MNT_CHECK(ring_allreduce_part(c, &c->fab.local, b, count, t, 1.0f, 0, 1,
                                  "allreduce (intra-node allgather)"));
  return MNT_OK;
}

static int do_bcast(mnt_ccomm_comm *c, void *buf, size_t bytes, int root) {
  mnt_ccomm_ring *r = &c->fab.flat;
  if (r->n == 1 || bytes == 0) return MNT_OK;
  int rpos = 0;
  while (c->fab.order[rpos] != root) rpos++;
  int q = (r->pos - rpos + r->n) % r->n; /* distance from the root along the ring */
  size_t off = 0, len = bytes;
  mnt_ccomm_plan p = {.r = r,
                      .buf = buf,
                      .t = MNT_FP32,
                      .esize = 1,
                      .nseg = 1,
                      .off = &off,
                      .len = &len,
                      .nsend = q<r->n - 1, .nrecv = q> 0,
                      .lag = 0,
                      .div = 1.0f,
                      .what = "broadcast"};
  return mnt_ccomm_run(c, &p);
}

static int do_allgather(mnt_ccomm_comm *c, const void *send, void *recv, size_t bytes) {
  mnt_ccomm_ring *r = &c->fab.flat;
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
    off[k] = (size_t)c->fab.order[k] * bytes;
    len[k] = bytes;
  }
  mnt_ccomm_plan p = {.r = r,
                      .buf = out,
                      .t = MNT_FP32,
                      .esize = 1,
                      .nseg = r->n,
                      .off = off,
                      .len = len,
                      .nsend = r->n - 1,
                      .nrecv = r->n - 1,
                      .lag = 1,
                      .div = 1.0f,
                      .what = "allgather"};
  int st = mnt_ccomm_run(c, &p);
  free(off);
  free(len);
  return st;
}

int mnt_ccomm_execute(mnt_ccomm_comm *c, mnt_comm_req *q) {
  switch (q->kind) {
    case REQ_ALLREDUCE: return do_allreduce(c, q->buf, q->count, q->t, q->op);
    case REQ_BCAST: return do_bcast(c, q->buf, q->bytes, q->root);
    case REQ_ALLGATHER: return do_allgather(c, q->send, q->buf, q->bytes);
    default: {
      float one = 1.0f;
      return ring_allreduce_part(c, &c->fab.flat, (uint8_t *)&one, 1, MNT_FP32, 1.0f, 1, 1, "barrier");
    }
  }
}
