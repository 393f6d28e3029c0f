/* reducer.c — see reducer.h. */
#include "src/comm/reducer.h"

#include <stdlib.h>

#include "src/log.h"
#include "src/trace.h"

typedef struct bucket { size_t off, n; mnt_comm_req *req; uint64_t t0; } bucket;
struct mnt_reducer {
  mnt_comm *c;
  mnt_backend *be;
  float *g;
  void *half;       /* reduced-precision copy of the whole slab (backend memory), NULL for fp32 */
  mnt_dtype t;
  size_t limit;     /* floats per bucket */
  size_t lo, hi;    /* the range gathered so far: [lo, hi) */
  bucket *b;
  int nb, cap;
  int st;
  double t_first;   /* when this step's first bucket started */
};

int mnt_reducer_create(mnt_comm *c, mnt_backend *be, float *g, size_t n, mnt_dtype t, size_t limit, mnt_reducer **out) {
  *out = NULL;
  mnt_reducer *o = calloc(1, sizeof *o);
  if (!o) return MNT_ENOMEM;
  *o = (mnt_reducer){.c = c, .be = be, .g = g, .t = t, .limit = limit ? limit : 1};
  if (t != MNT_FP32) {
    int st = mnt_be_alloc(be, n * mnt_dtype_size(t), &o->half);
    if (st) {
      free(o);
      return st;
    }
  }
  *out = o;
  return MNT_OK;
}

static void flush(mnt_reducer *o) {
  if (o->hi == o->lo || o->st) return;
  if (o->nb == o->cap) {
    int cap = o->cap ? 2 * o->cap : 16;
    bucket *b = realloc(o->b, (size_t)cap * sizeof *b);
    if (!b) {
      o->st = MNT_ENOMEM;
      return;
    }
    o->b = b;
    o->cap = cap;
  }
  if (o->nb == 0) o->t_first = mnt_now();
  bucket *k = &o->b[o->nb++];
  *k = (bucket){.off = o->lo, .n = o->hi - o->lo, .t0 = mnt_trace_now()};
  void *buf = o->g + k->off;
  if (o->half) { /* reduced-precision allreduce: cast, reduce in that type (reducer.h), cast back */
    buf = (char *)o->half + k->off * mnt_dtype_size(o->t);
    if ((o->st = mnt_be_cast_from_f32(o->be, o->t, o->g + k->off, buf, k->n)) != MNT_OK) return;
  }
  o->st = o->c->ops->iallreduce(o->c, buf, k->n, o->t, MNT_AVG, o->be->stream, &k->req);
  o->lo = o->hi;
}

void mnt_reducer_ready(void *reducer, size_t off, size_t n) {
  mnt_reducer *o = reducer;
  if (o->hi == o->lo) o->hi = off + n; /* a new bucket */
  o->lo = off;
  if (o->hi - o->lo >= o->limit) flush(o);
}

/* the buckets started: waited for by the host, or (join) by the backend's stream */
static int complete(mnt_reducer *o, int join) {
  flush(o);
  for (int i = 0; i < o->nb; i++) {
    bucket *k = &o->b[i];
    int st = !k->req ? MNT_OK : join ? mnt_comm_join(o->c, k->req, o->be->stream) : o->c->ops->wait(o->c, k->req);
    /* on the timeline: from its start to when this wait saw it done (the communicator's own track
     * shows when the work ran) */
    mnt_trace_span("buckets", "bucket", k->t0, mnt_trace_now(), i);
    if (st && !o->st) o->st = st;
    if (o->half && !st && !o->st)
      o->st = mnt_be_cast_to_f32(o->be, o->t, (char *)o->half + k->off * mnt_dtype_size(o->t), o->g + k->off, k->n);
  }
  o->nb = 0;
  int st = o->st;
  o->st = 0;
  o->lo = o->hi = 0;
  return st;
}

int mnt_reducer_finish(mnt_reducer *o) { return complete(o, 0); }
int mnt_reducer_join(mnt_reducer *o) { return complete(o, 1); }

double mnt_reducer_first_start(const mnt_reducer *o) { return o->t_first; }

void mnt_reducer_destroy(mnt_reducer *o) {
  if (!o) return;
  mnt_be_free(o->be, o->half);
  free(o->b);
  free(o);
}
