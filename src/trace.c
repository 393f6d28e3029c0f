/* trace.c — see trace.h. Every thread (and every named track) has a ring of its last spans and,
 * while the window is on, a growing array of the window's spans; both belong to it alone except the
 * tracks, which several threads write under the track's mutex. Readers (the file, a hang's dump)
 * take each buffer's mutex; the rings are read without it (a dump of a hung job must not wait for
 * a thread that holds a lock: a span being written may show half-written, which a dump tolerates). */
#include "src/trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/check.h"
#include "src/jsonio.h" /* mnt_json_fput_str: names from PMIx and the command line, escaped */
#include "src/log.h"
#include "src/path.h"
#include "src/tmpfile.h"

#if MNT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

enum { RING = 256, DEPTH = 16, MAX_BUFS = 128, NAME = 32 };
#define MAX_EVENTS ((size_t)1 << 22) /* spans in the window, all buffers together (~200 MB at most) */

typedef struct event {
  uint64_t t0, t1;
  const char *name;
  int64_t arg, step;
  int32_t depth;
} event;

typedef struct open_span {
  const char *name;
  uint64_t t0;
  int64_t arg, step;
} open_span;

typedef struct tbuf {
  char name[NAME];
  int id, track;      /* track: a named track several threads write (mnt_trace_span) */
  pthread_mutex_t mu; /* guards win (and, for a track, the ring) */
  event *win;
  size_t nwin, cap;
  event ring[RING];
  _Atomic uint64_t nring;
  open_span stack[DEPTH];
  _Atomic int depth;
} tbuf;

static struct {
  pthread_mutex_t mu; /* guards the table */
  tbuf *bufs[MAX_BUFS];
  _Atomic int n;
  int rank;
  int64_t first, last;
  _Atomic int on;
  _Atomic int64_t step;
  _Atomic size_t events; /* in every window array together */
  _Atomic int truncated;
  _Atomic int64_t trunc_step; /* the step of the first span the cap left out */
  int64_t offset_ns, offset_err_ns;
  uint64_t t_start;
  char dump_dir[MNT_PATH_MAX];
  _Atomic uint64_t last_dump;
  tbuf *main; /* the thread that numbers the steps */
} T = {.mu = PTHREAD_MUTEX_INITIALIZER, .first = 1, .last = 0};

static __thread tbuf *tl_me;

uint64_t mnt_trace_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void mnt_trace_init(int rank, int64_t first, int64_t last) {
  T.rank = rank;
  T.first = first;
  T.last = last;
  if (!T.t_start) T.t_start = mnt_trace_now();
  atomic_store(&T.on, first <= last);
}

int mnt_trace_on(void) { return atomic_load(&T.on); }

void mnt_trace_set_offset(int64_t offset_ns, int64_t err_ns) {
  T.offset_ns = offset_ns;
  T.offset_err_ns = err_ns;
}

void mnt_trace_set_dump_dir(const char *dir) { snprintf(T.dump_dir, sizeof T.dump_dir, "%s", dir ? dir : ""); }

/* a new buffer in the table (NULL when it is full: that thread's spans are not recorded) */
static tbuf *new_buf(const char *name, int track) {
  tbuf *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  pthread_mutex_init(&b->mu, NULL);
  b->track = track;
  pthread_mutex_lock(&T.mu);
  int n = atomic_load(&T.n);
  if (n == MAX_BUFS) {
    pthread_mutex_unlock(&T.mu);
    pthread_mutex_destroy(&b->mu);
    free(b);
    return NULL;
  }
  b->id = n;
  if (name) snprintf(b->name, sizeof b->name, "%s", name);
  else snprintf(b->name, sizeof b->name, "thread %d", n);
  T.bufs[n] = b;
  atomic_store(&T.n, n + 1);
  pthread_mutex_unlock(&T.mu);
  return b;
}

static tbuf *me(void) {
  if (!tl_me) tl_me = new_buf(NULL, 0);
  return tl_me;
}

void mnt_trace_thread(const char *name) {
  tbuf *b = me();
  if (!b) return;
  pthread_mutex_lock(&b->mu);
  snprintf(b->name, sizeof b->name, "%s", name);
  pthread_mutex_unlock(&b->mu);
}

void mnt_trace_step(int64_t step) {
  T.main = me();
  atomic_store(&T.step, step);
}

static int in_window(int64_t step) { return atomic_load_explicit(&T.on, memory_order_relaxed) && step >= T.first && step <= T.last; }

/* the span into b's ring and, in the window, its trace (locked: caller holds b->mu for tracks) */
static void record(tbuf *b, const event *e) {
  uint64_t k = atomic_load_explicit(&b->nring, memory_order_relaxed);
  b->ring[k % RING] = *e;
  atomic_store_explicit(&b->nring, k + 1, memory_order_release);
  if (!in_window(e->step)) return;
  if (atomic_fetch_add(&T.events, 1) >= MAX_EVENTS) {
    if (!atomic_exchange(&T.truncated, 1)) atomic_store(&T.trunc_step, e->step);
    return;
  }
  if (!b->track) pthread_mutex_lock(&b->mu);
  if (b->nwin == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 1024;
    event *w = realloc(b->win, cap * sizeof *w);
    if (w) b->win = w, b->cap = cap;
  }
  if (b->nwin < b->cap) b->win[b->nwin++] = *e;
  if (!b->track) pthread_mutex_unlock(&b->mu);
}

void mnt_trace_push(const char *name, int64_t arg) {
  tbuf *b = me();
  if (!b) return;
  int d = atomic_load_explicit(&b->depth, memory_order_relaxed);
  if (d < DEPTH) b->stack[d] = (open_span){name, mnt_trace_now(), arg, atomic_load_explicit(&T.step, memory_order_relaxed)};
  atomic_store_explicit(&b->depth, d + 1, memory_order_release);
#if MNT_HAVE_NVTX
  if (atomic_load_explicit(&T.on, memory_order_relaxed)) nvtxRangePushA(name);
#endif
}

void mnt_trace_pop(void) {
  tbuf *b = tl_me;
  if (!b) return;
  int d = atomic_load_explicit(&b->depth, memory_order_relaxed);
  if (d <= 0) return;
  atomic_store_explicit(&b->depth, d - 1, memory_order_release);
#if MNT_HAVE_NVTX
  if (atomic_load_explicit(&T.on, memory_order_relaxed)) nvtxRangePop();
#endif
  if (d > DEPTH) return; /* was not recorded */
  const open_span *o = &b->stack[d - 1];
  event e = {o->t0, mnt_trace_now(), o->name, o->arg, o->step, d - 1};
  record(b, &e);
}

void mnt_trace_span(const char *track, const char *name, uint64_t t0, uint64_t t1, int64_t arg) {
  tbuf *b = NULL;
  int n = atomic_load(&T.n);
  for (int i = 0; i < n && !b; i++)
    if (T.bufs[i]->track && !strcmp(T.bufs[i]->name, track)) b = T.bufs[i];
  if (!b) {
    pthread_mutex_lock(&T.mu); /* one track per name even when two threads ask at once */
    n = atomic_load(&T.n);
    for (int i = 0; i < n && !b; i++)
      if (T.bufs[i]->track && !strcmp(T.bufs[i]->name, track)) b = T.bufs[i];
    pthread_mutex_unlock(&T.mu);
    if (!b && !(b = new_buf(track, 1))) return;
  }
  event e = {t0, t1, name, arg, atomic_load_explicit(&T.step, memory_order_relaxed), 0};
  pthread_mutex_lock(&b->mu);
  record(b, &e);
  pthread_mutex_unlock(&b->mu);
}

/* ---- the file ---------------------------------------------------------------------------------- */

int mnt_trace_write(const char *dir, const mnt_trace_id *id) {
  char path[MNT_PATH_MAX + 64], tmp[MNT_PATH_MAX + 72];
  if (snprintf(path, sizeof path, "%s/" MNT_TRACE_FILE_FMT, dir, T.rank) >= (int)sizeof path) {
    MNT_ERR("--trace %s: path too long", dir);
    return MNT_EARG;
  }
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp); /* DIR/.trace-rank-R.json.XXXXXX, exclusive: never a link */
  if (!f) return MNT_ESYS;
  int n = atomic_load(&T.n);
  fprintf(f, "{\"version\": %d, \"rank\": %d, \"size\": %d, \"job_size\": %d, \"membership_epoch\": %d, \"job\": ",
          MNT_TRACE_VERSION, T.rank, id->size, id->job_size > 0 ? id->job_size : id->size,
          id->membership_epoch > 0 ? id->membership_epoch : 0);
  mnt_json_fput_str(f, id->job);
  fprintf(f, ", \"run_id\": ");
  mnt_json_fput_str(f, id->run_id);
  fprintf(f, ", \"node\": ");
  mnt_json_fput_str(f, id->node);
  fprintf(f, ", \"ended\": ");
  mnt_json_fput_str(f, id->ended ? id->ended : "finished");
  fprintf(f, ", \"last_step\": %lld, \"clock\": \"CLOCK_MONOTONIC\",\n"
             " \"offset_ns\": %lld, \"offset_err_ns\": %lld, \"steps\": [%lld, %lld], \"truncated\": %s, "
             "\"truncated_at_step\": %lld,\n \"threads\": [",
          (long long)atomic_load(&T.step), (long long)T.offset_ns, (long long)T.offset_err_ns, (long long)T.first,
          (long long)T.last, atomic_load(&T.truncated) ? "true" : "false",
          atomic_load(&T.truncated) ? (long long)atomic_load(&T.trunc_step) : -1LL);
  for (int i = 0; i < n; i++) {
    pthread_mutex_lock(&T.bufs[i]->mu);
    fprintf(f, "%s{\"id\": %d, \"name\": ", i ? ", " : "", i);
    mnt_json_fput_str(f, T.bufs[i]->name);
    fprintf(f, ", \"track\": %s}", T.bufs[i]->track ? "true" : "false");
    pthread_mutex_unlock(&T.bufs[i]->mu);
  }
  /* events: [thread, start ns, duration ns, name, arg, step, depth] */
  fprintf(f, "],\n \"events\": [");
  int first = 1;
  for (int i = 0; i < n; i++) {
    tbuf *b = T.bufs[i];
    pthread_mutex_lock(&b->mu);
    for (size_t k = 0; k < b->nwin; k++) {
      const event *e = &b->win[k];
      fprintf(f, "%s\n  [%d, %llu, %llu, ", first ? "" : ",", i, (unsigned long long)e->t0,
              (unsigned long long)(e->t1 > e->t0 ? e->t1 - e->t0 : 0)); /* a span given ends before it starts: 0 */
      mnt_json_fput_str(f, e->name);
      fprintf(f, ", %lld, %lld, %d]", (long long)e->arg, (long long)e->step, e->depth);
      first = 0;
    }
    pthread_mutex_unlock(&b->mu);
  }
  fprintf(f, "\n]}\n");
  return mnt_tmp_fcommit(f, tmp, path); /* on disk, then renamed over DIR/trace-rank-R.json */
}

/* ---- a hang's explanation ---------------------------------------------------------------------- */

void mnt_trace_activity(char *out, size_t n) {
  out[0] = '\0';
  tbuf *b = T.main;
  if (!b || !n) return;
  int d = atomic_load_explicit(&b->depth, memory_order_acquire);
  if (d > DEPTH) d = DEPTH;
  size_t l = 0;
  uint64_t now = mnt_trace_now();
  for (int i = 0; i < d && l + 1 < n; i++) {
    const open_span *o = &b->stack[i];
    if (!o->name) break;
    if (i == 0) l += (size_t)snprintf(out + l, n - l, "step %lld: ", (long long)o->step);
    if (l >= n) break;
    if (!strcmp(o->name, "step") && i + 1 < d) continue; /* "step 12: backward", not "step 12: step > backward" */
    l += (size_t)snprintf(out + l, n - l, "%s%s", i > 1 || (i == 1 && strcmp(b->stack[0].name, "step")) ? " > " : "",
                          o->name);
    if (l < n && o->arg && strcmp(o->name, "step")) l += (size_t)snprintf(out + l, n - l, " %lld", (long long)o->arg);
    if (l < n && i == d - 1) l += (size_t)snprintf(out + l, n - l, " (%.1f s)", (double)(now - o->t0) * 1e-9);
  }
  if (l >= n) out[n - 1] = '\0';
}

int mnt_trace_dump_last(const char *dir, const char *why) {
  if (!dir || !dir[0]) dir = T.dump_dir;
  if (!dir[0]) return 0;
  uint64_t now = mnt_trace_now(), last = atomic_load(&T.last_dump);
  if (last && now - last < 5000000000ull) return 0;
  if (!atomic_compare_exchange_strong(&T.last_dump, &last, now)) return 0;
  char path[MNT_PATH_MAX + 64], tmp[MNT_PATH_MAX + 72];
  snprintf(path, sizeof path, "%s/last-events-rank-%05d.txt", dir, T.rank);
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp); /* exclusive, renamed into place: never through a link */
  if (!f) {
    MNT_WARN("cannot write %s", path);
    return 0;
  }
  char act[256];
  mnt_trace_activity(act, sizeof act);
  fprintf(f, "# rank %d: the last events of every thread, written because %s, %.3f s after the trace began\n",
          T.rank, why ? why : "asked", (double)(now - T.t_start) * 1e-9);
  fprintf(f, "# now: %s\n", act[0] ? act : "(no span open on the main thread)");
  fprintf(f, "# times: s since the trace began (CLOCK_MONOTONIC; + %lld ns gives rank 0's clock)\n",
          (long long)T.offset_ns);
  int n = atomic_load(&T.n);
  for (int i = 0; i < n; i++) {
    tbuf *b = T.bufs[i];
    int d = atomic_load_explicit(&b->depth, memory_order_acquire);
    fprintf(f, "thread %d (%s):", i, b->name);
    for (int k = 0; k < d && k < DEPTH; k++)
      fprintf(f, "%s %s since %.6f (step %lld, arg %lld)", k ? " >" : " open:", b->stack[k].name ? b->stack[k].name : "?",
              (double)(b->stack[k].t0 - T.t_start) * 1e-9, (long long)b->stack[k].step, (long long)b->stack[k].arg);
    fprintf(f, "%s\n", d ? "" : " nothing open");
    uint64_t k1 = atomic_load_explicit(&b->nring, memory_order_acquire), k0 = k1 > RING ? k1 - RING : 0;
    for (uint64_t k = k0; k < k1; k++) {
      event e = b->ring[k % RING];
      if (!e.name) continue;
      fprintf(f, "  %12.6f  %10.3f ms  %*s%s  step %lld  arg %lld\n", (double)(e.t0 - T.t_start) * 1e-9,
              (double)(e.t1 - e.t0) * 1e-6, 2 * (e.depth < 8 ? e.depth : 8), "", e.name, (long long)e.step,
              (long long)e.arg);
    }
  }
  if (mnt_tmp_fcommit(f, tmp, path) != MNT_OK) {
    MNT_WARN("cannot write %s", path);
    return 0;
  }
  MNT_WARN("the last events of every thread of rank %d are in %s (%s)", T.rank, path, why ? why : "asked");
  return 1;
}
