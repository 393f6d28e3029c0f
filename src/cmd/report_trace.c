/* cmd/report_trace.c — `mntrain report --trace DIR` (see report_internal.h): every rank's timeline
 * (DIR/trace-rank-RRRRR.json, written by train --trace; src/trace.h) merged on rank 0's clock into
 *   OUT/trace.json  the Chrome trace event format (Perfetto, chrome://tracing): one process per rank
 *                   named "rank R (node)", one track per thread, complete ("X") events in us;
 *   OUT/trace.svg   the slowest traced step: ranks as rows, the step's phases as coloured spans, the
 *                   communicator's work under them, and the critical rank (the last to finish its
 *                   backward pass: the others wait in the allreduce for it) marked.
 * A rank without a file is named and left out; a file that is not a trace stops the merge. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "path.h"
#include "cmd/report_internal.h"
#include "io/rundir/safefs.h"
#include "tmpfile.h"
#include "trace.h"

enum { MAIN_PHASES = 5 };
static const char *const PHASES[MAIN_PHASES] = {"data", "forward", "backward", "comm", "optimizer"};
static const char *const COLOURS[MAIN_PHASES] = {"#8c8c8c", "#4c72b0", "#dd8452", "#c44e52", "#55a868"};

typedef struct rank_trace {
  json_t *j;        /* the file */
  int rank;
  char node[64];
  int64_t offset;   /* ns to add to get rank 0's clock */
  json_t *events;   /* [thread, t0, dur, name, arg, step, depth] */
  json_t *threads;  /* [{id, name, track}] */
  int main_tid, comm_tid; /* the threads named "main" and "comm" (-1: none) */
} rank_trace;

static int tid_named(json_t *threads, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(threads, i, t) {
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && !strcmp(n, name)) return (int)json_integer_value(json_object_get(t, "id"));
  }
  return -1;
}

/* one rank's file, checked: MNT_EARG naming it and what is wrong */
static int load_rank(const char *path, rank_trace *r) {
  json_error_t e;
  memset(r, 0, sizeof *r);
  r->main_tid = r->comm_tid = -1;
  if (!(r->j = json_load_file(path, JSON_REJECT_DUPLICATES, &e))) {
    MNT_ERR("%s: not a trace: %s (line %d)", path, e.text, e.line);
    return MNT_EARG;
  }
  json_t *rk = json_object_get(r->j, "rank"), *off = json_object_get(r->j, "offset_ns");
  r->events = json_object_get(r->j, "events");
  r->threads = json_object_get(r->j, "threads");
  const char *node = json_string_value(json_object_get(r->j, "node"));
  if (!json_is_integer(rk) || !json_is_integer(off) || !json_is_array(r->events) || !json_is_array(r->threads)) {
    MNT_ERR("%s: not a trace of mntrain train --trace (rank, offset_ns, threads, events)", path);
    return MNT_EARG;
  }
  size_t i;
  json_t *ev;
  json_array_foreach(r->events, i, ev) {
    if (!json_is_array(ev) || json_array_size(ev) != 7 || !json_is_integer(json_array_get(ev, 0)) ||
        !json_is_integer(json_array_get(ev, 1)) || !json_is_integer(json_array_get(ev, 2)) ||
        !json_is_string(json_array_get(ev, 3))) {
      MNT_ERR("%s: event %zu is not [thread, start, duration, name, arg, step, depth]", path, i);
      return MNT_EARG;
    }
  }
  r->rank = (int)json_integer_value(rk);
  r->offset = (int64_t)json_integer_value(off);
  snprintf(r->node, sizeof r->node, "%s", node ? node : "?");
  r->main_tid = tid_named(r->threads, "main");
  r->comm_tid = tid_named(r->threads, "comm");
  return MNT_OK;
}

#define EV_TID(ev) ((int)json_integer_value(json_array_get(ev, 0)))
#define EV_T0(r, ev) ((int64_t)json_integer_value(json_array_get(ev, 1)) + (r)->offset)
#define EV_DUR(ev) ((int64_t)json_integer_value(json_array_get(ev, 2)))
#define EV_NAME(ev) json_string_value(json_array_get(ev, 3))
#define EV_ARG(ev) ((long long)json_integer_value(json_array_get(ev, 4)))
#define EV_STEP(ev) ((long long)json_integer_value(json_array_get(ev, 5)))
#define EV_DEPTH(ev) ((int)json_integer_value(json_array_get(ev, 6)))

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* OUT/trace.json */
static int write_chrome(const char *path, rank_trace *rs, int n, int64_t t0) {
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"clock\": \"rank 0's CLOCK_MONOTONIC\"},\n"
             "\"traceEvents\": [");
  int first = 1;
  for (int i = 0; i < n; i++) {
    rank_trace *r = &rs[i];
    char pname[128];
    snprintf(pname, sizeof pname, "rank %d (%s)", r->rank, r->node);
    fprintf(f, "%s\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": ", first ? "" : ",",
            r->rank);
    json_str(f, pname);
    fprintf(f, "}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, \"args\": {\"sort_index\": %d}}",
            r->rank, r->rank);
    first = 0;
    size_t k;
    json_t *t;
    json_array_foreach(r->threads, k, t) {
      int id = (int)json_integer_value(json_object_get(t, "id"));
      const char *name = json_string_value(json_object_get(t, "name"));
      fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", r->rank,
              id);
      json_str(f, name ? name : "?");
      fprintf(f, "}},\n{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": %d, \"tid\": %d, \"args\": "
                 "{\"sort_index\": %d}}",
              r->rank, id, id);
    }
    json_t *ev;
    json_array_foreach(r->events, k, ev) {
      fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"name\": ", r->rank,
              EV_TID(ev), (double)(EV_T0(r, ev) - t0) * 1e-3, (double)EV_DUR(ev) * 1e-3);
      json_str(f, EV_NAME(ev));
      fprintf(f, ", \"args\": {\"step\": %lld, \"arg\": %lld}}", EV_STEP(ev), EV_ARG(ev));
    }
  }
  fprintf(f, "\n]}\n");
  return mnt_tmp_fcommit(f, tmp, path);
}

/* a rank's main-thread span of a step: the phase k (-1: the whole step); 0 when absent */
static json_t *step_span(const rank_trace *r, long long step, const char *name) {
  size_t k;
  json_t *ev;
  json_array_foreach(r->events, k, ev) if (EV_TID(ev) == r->main_tid && EV_STEP(ev) == step && !strcmp(EV_NAME(ev), name))
      return ev;
  return NULL;
}

/* the slowest traced step: the one whose span from the first rank's start to the last rank's end
 * is longest; -1 when no step is in every file */
static long long slowest_step(rank_trace *rs, int n, int64_t *lo_out, int64_t *hi_out) {
  long long best = -1;
  double best_len = -1;
  size_t k;
  json_t *ev;
  json_array_foreach(rs[0].events, k, ev) {
    if (EV_TID(ev) != rs[0].main_tid || strcmp(EV_NAME(ev), "step")) continue;
    long long s = EV_STEP(ev);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    int all = 1;
    for (int i = 0; i < n && all; i++) {
      json_t *sp = step_span(&rs[i], s, "step");
      if (!sp) all = 0;
      else {
        int64_t a = EV_T0(&rs[i], sp), b = a + EV_DUR(sp);
        if (a < lo) lo = a;
        if (b > hi) hi = b;
      }
    }
    if (all && (double)(hi - lo) > best_len) best_len = (double)(hi - lo), best = s, *lo_out = lo, *hi_out = hi;
  }
  return best;
}

static void xml_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '"') fputs("&quot;", f);
    else fputc(*s, f);
  }
}

enum { W = 1100, LEFT = 170, RIGHT = 30, TOP = 70, ROW = 34, BAR = 18, SUB = 7 };

/* OUT/trace.svg: step `s` of every rank, [lo, hi] on rank 0's clock */
static int write_svg(const char *path, rank_trace *rs, int n, long long s, int64_t lo, int64_t hi) {
  /* the critical rank: the last to end its backward pass */
  int crit = 0;
  int64_t crit_end = INT64_MIN, first_end = INT64_MAX;
  for (int i = 0; i < n; i++) {
    json_t *b = step_span(&rs[i], s, "backward");
    if (!b) continue;
    int64_t e = EV_T0(&rs[i], b) + EV_DUR(b);
    if (e > crit_end) crit_end = e, crit = i;
    if (e < first_end) first_end = e;
  }
  double span = (double)(hi - lo), px = (double)(W - LEFT - RIGHT) / (span > 0 ? span : 1);
  int H = TOP + n * ROW + 70;
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
             "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
             "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
          W, H, W, H);
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\">step %lld, the slowest traced: %.1f ms from the first rank's "
             "start to the last rank's end</text>\n",
          LEFT, s, span * 1e-6);
  if (crit_end > INT64_MIN) {
    char who[200];
    snprintf(who, sizeof who, "critical: rank %d (%s) ended its backward pass last, %.1f ms after the first rank",
             rs[crit].rank, rs[crit].node, (double)(crit_end - first_end) * 1e-6);
    fprintf(f, "<text x=\"%d\" y=\"40\" fill=\"#b00\">", LEFT);
    xml_text(f, who);
    fprintf(f, "</text>\n");
  }
  /* the time axis, ms from the step's start */
  double ms = span * 1e-6, tick = ms > 500 ? 100 : ms > 200 ? 50 : ms > 100 ? 20 : ms > 40 ? 10 : ms > 10 ? 2 : 1;
  for (double t = 0; t <= ms + 1e-9; t += tick) {
    double x = LEFT + t * 1e6 * px;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n<text x=\"%.1f\" y=\"%d\" "
               "text-anchor=\"middle\" fill=\"#555\">%g ms</text>\n",
            x, TOP - 8, x, TOP + n * ROW, x, TOP - 12, t);
  }
  for (int i = 0; i < n; i++) {
    rank_trace *r = &rs[i];
    int y = TOP + i * ROW + 4;
    if (i == crit)
      fprintf(f, "<rect x=\"2\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#b00\" stroke-width=\"2\"/>\n",
              y - 3, W - 4, ROW - 2);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\"%s>rank %d (", LEFT - 8, y + 13,
            i == crit ? " fill=\"#b00\" font-weight=\"bold\"" : "", r->rank);
    xml_text(f, r->node);
    fprintf(f, ")%s</text>\n", i == crit ? " &#9664;" : "");
    size_t k;
    json_t *ev;
    json_array_foreach(r->events, k, ev) {
      if (EV_STEP(ev) != s) continue;
      int tid = EV_TID(ev), ph = -1;
      for (int p = 0; p < MAIN_PHASES; p++)
        if (!strcmp(EV_NAME(ev), PHASES[p])) ph = p;
      int on_main = tid == r->main_tid && ph >= 0 && EV_DEPTH(ev) == 1;
      int on_comm = tid == r->comm_tid && EV_DEPTH(ev) == 0 && strcmp(EV_NAME(ev), "idle");
      if (!on_main && !on_comm) continue;
      double x0 = LEFT + (double)(EV_T0(r, ev) - lo) * px, w = (double)EV_DUR(ev) * px;
      if (x0 < LEFT) w -= LEFT - x0, x0 = LEFT;
      if (x0 + w > W - RIGHT) w = W - RIGHT - x0;
      if (w <= 0) continue;
      if (w < 0.5) w = 0.5;
      fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>rank %d %s %.2f ms%s</title>"
                 "</rect>\n",
              x0, on_main ? y : y + BAR + 1, w, on_main ? BAR : SUB, on_main ? COLOURS[ph] : "#7a5195", r->rank,
              EV_NAME(ev), (double)EV_DUR(ev) * 1e-6, on_comm ? " (communicator thread)" : "");
    }
  }
  int ly = TOP + n * ROW + 30, lx = LEFT;
  for (int p = 0; p < MAIN_PHASES; p++, lx += 120)
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s%s</text>\n", lx,
            ly - 10, COLOURS[p], lx + 18, ly, PHASES[p], p == 3 ? " (exposed)" : "");
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"6\" fill=\"#7a5195\"/><text x=\"%d\" y=\"%d\">communicator "
             "thread at work (under each rank)</text>\n",
          lx, ly - 7, lx + 18, ly);
  fprintf(f, "</svg>\n");
  return mnt_tmp_fcommit(f, tmp, path);
}

static int cmp_rank(const void *a, const void *b) { return ((const rank_trace *)a)->rank - ((const rank_trace *)b)->rank; }

int mnt_report_trace(const char *dir, const char *out) {
  DIR *d = opendir(dir);
  if (!d) {
    MNT_SYSERR("--trace %s: cannot read the directory", dir);
    return MNT_EARG;
  }
  rank_trace *rs = NULL;
  int n = 0, cap = 0, st = MNT_OK, size = 0;
  struct dirent *e;
  while ((e = readdir(d)) && st == MNT_OK) {
    int rk;
    char tail;
    if (sscanf(e->d_name, "trace-rank-%d.jso%c", &rk, &tail) != 2 || tail != 'n' || strlen(e->d_name) != 21) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      rank_trace *q = realloc(rs, (size_t)cap * sizeof *q);
      if (!q) {
        st = MNT_ENOMEM;
        break;
      }
      rs = q;
    }
    char p[MNT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    st = load_rank(p, &rs[n]);
    n++;
    if (st == MNT_OK) {
      int sz = (int)json_integer_value(json_object_get(rs[n - 1].j, "size"));
      if (sz > size) size = sz;
    }
  }
  closedir(d);
  if (st == MNT_OK && n == 0) {
    MNT_ERR("--trace %s: no trace-rank-*.json (mntrain train --trace %s writes them)", dir, dir);
    st = MNT_EARG;
  }
  if (st == MNT_OK) {
    qsort(rs, (size_t)n, sizeof *rs, cmp_rank);
    if (n < size) { /* a failed job: what is there is still worth merging */
      char missing[256] = "";
      size_t l = 0;
      for (int r = 0, i = 0; r < size && l < sizeof missing - 16; r++) {
        while (i < n && rs[i].rank < r) i++;
        if (i >= n || rs[i].rank != r) l += (size_t)snprintf(missing + l, sizeof missing - l, "%s%d", l ? " " : "", r);
      }
      MNT_WARN("--trace %s: %d of %d ranks wrote a trace; missing: %s", dir, n, size, missing);
    }
  }
  int64_t t0 = INT64_MAX;
  for (int i = 0; i < n && st == MNT_OK; i++) {
    size_t k;
    json_t *ev;
    json_array_foreach(rs[i].events, k, ev) if (EV_T0(&rs[i], ev) < t0) t0 = EV_T0(&rs[i], ev);
  }
  char pj[MNT_PATH_MAX + 16], ps[MNT_PATH_MAX + 16];
  snprintf(pj, sizeof pj, "%s/trace.json", out);
  snprintf(ps, sizeof ps, "%s/trace.svg", out);
  if (st == MNT_OK) st = mnt_dir_secure(out, "--out", 1, MNT_DIR_FILES);
  if (st == MNT_OK) st = write_chrome(pj, rs, n, t0);
  if (st == MNT_OK) {
    int64_t lo = 0, hi = 0;
    long long s = rs[0].main_tid >= 0 ? slowest_step(rs, n, &lo, &hi) : -1;
    size_t events = 0;
    for (int i = 0; i < n; i++) events += json_array_size(rs[i].events);
    printf("mntrain report: %d ranks, %zu spans merged on rank 0's clock (offsets measured at set-up) into %s\n", n,
           events, pj);
    if (s < 0) {
      printf("mntrain report: no step traced on every rank: no %s\n", ps);
    } else if ((st = write_svg(ps, rs, n, s, lo, hi)) == MNT_OK) {
      printf("mntrain report: step %lld, the slowest traced (%.1f ms), in %s\n", s, (double)(hi - lo) * 1e-6, ps);
    }
  }
  for (int i = 0; i < n; i++) json_decref(rs[i].j);
  free(rs);
  return st;
}
