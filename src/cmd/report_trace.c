/* cmd/report_trace.c — `mntrain report --trace DIR` (see report_internal.h): every rank's timeline
 * (DIR/trace-rank-RRRRR.json, written by train --trace; src/trace.h) merged on rank 0's clock into
 *   OUT/trace.json  the Chrome trace event format (Perfetto, chrome://tracing): one process per rank
 *                   named "rank R (node)", one track per thread, complete ("X") events in us;
 *   OUT/trace.svg   the slowest traced step: ranks as rows, the step's phases as coloured spans, the
 *                   communicator's work under them, and the critical rank (the last to end its
 *                   backward pass: the others wait in the allreduce for it) marked.
 * Only the files of one job are merged: each says its version, rank, size, job (the job step's PMIx
 * namespace, unique per launch) and run_id (version 2; version 1 has neither), and its spans; since
 * train --on-rank-loss shrink also job_size (the ranks the job started with: the rank and the file's
 * name count them, a survivor keeps its rank of the start) and membership_epoch (the shrinks applied),
 * "size" being the ranks left (files without them: job_size = size, membership_epoch 0).
 *   Refused (exit 2, naming the file and what is wrong; nothing written): a file that is not a trace
 *   (not JSON, a key missing or of another type, an event that is not [thread, start, duration,
 *   name, arg, step, depth] of a thread the file lists); a version other than 1 and 2; a "rank"
 *   other than the file name's (a rank's file copied under another's name); a rank not below the
 *   file's "job_size" (rank 5 of 2); a size above job_size, or below it without a shrink; a negative
 *   start, duration or depth, or one past 2^62 ns (train writes unsigned clock readings: the file was
 *   edited); two files of different job sizes, versions, jobs or runs, or of one membership epoch and
 *   different sizes (naming both: another launch's files in the directory); a file cut short before
 *   its events (nothing of the rank to merge).
 *   Merged, with a warning naming the file: a file cut short inside its events (the events before
 *   the cut are read) and a file whose "truncated" is true (the window's span cap was hit): the
 *   rank's timeline is incomplete, which trace.json (otherData "incomplete_ranks", the process's
 *   label) and trace.svg (the rank's row) say too; ranks of the job without a file (a failed job:
 *   what is there is still worth merging); a file named trace-rank-*.json that train never names
 *   so (left out); version 1 files, whose job cannot be checked (said once); a job that failed
 *   ("ended": "failed": its timelines end where each rank stopped).
 *   Said (stdout): a job that shrank, from how many ranks to how many, and the job's ranks without a
 *   file (lost mid-run: a warning only when more are missing than the shrinks lost); a rank's file of
 *   an earlier epoch (left out at a shrink); the survivors' "recovery" spans, which trace.json holds
 *   like any span and trace.svg draws when in the slowest step (otherData: ranks = job_size,
 *   ranks_at_end, membership_epoch, missing_ranks). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/path.h"
#include "src/cmd/report_internal.h"
#include "src/safefs.h"
#include "src/runsum.h"
#include "src/tmpfile.h"
#include "src/trace.h"

enum { MAIN_PHASES = 5 };
static const char *const PHASES[MAIN_PHASES] = {"data", "forward", "backward", "comm", "optimizer"};
/* the phases' colours, then a recovery's (train --on-rank-loss shrink: the survivors' "recovery" span) */
static const char *const COLOURS[MAIN_PHASES + 1] = {"#8c8c8c", "#4c72b0", "#dd8452", "#c44e52", "#55a868", "#937860"};

/* a start, duration or clock offset past this is not a clock reading (2^62 ns: 146 years), and sums
 * of two stay inside int64_t */
#define MAX_NS ((int64_t)1 << 62)
enum { MAX_TID = 4096 }; /* thread ids: train numbers its buffers 0..127 */

typedef struct rank_trace {
  json_t *j;        /* the file */
  char path[MNT_PATH_MAX + 64];
  int rank, size, version;
  int job_size;     /* "job_size": the ranks the job started with, which rank counts (absent: size) */
  int epoch;        /* "membership_epoch": shrinks applied when it was written (absent: 0) */
  const char *node; /* its node (owned by j; "?" when absent) */
  const char *job, *run_id; /* version 2: who wrote it (owned by j); version 1: "" */
  int64_t offset;   /* ns to add to get rank 0's clock */
  json_t *events;   /* [thread, t0, dur, name, arg, step, depth] */
  json_t *threads;  /* [{id, name, track}] */
  int main_tid, comm_tid; /* the threads named "main" and "comm" (-1: none) */
  int truncated;    /* "truncated": true: the window's span cap was hit */
  long long trunc_step; /* "truncated_at_step": the first step the cap left spans out of (-1: not said) */
  int failed;       /* "ended": "failed": the rank's job ended in an error */
  long long last_step;  /* "last_step": the step in progress when it wrote the file (-1: not said) */
  size_t cut;       /* cut short: the file's bytes (its events up to the cut are read); 0: whole */
} rank_trace;

static int incomplete(const rank_trace *r) { return r->truncated || r->cut; }

static int tid_named(json_t *threads, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(threads, i, t) {
    const char *n = json_string_value(json_object_get(t, "name"));
    if (n && !strcmp(n, name)) return (int)json_integer_value(json_object_get(t, "id"));
  }
  return -1;
}

/* the rank of a file name train writes (MNT_TRACE_FILE_FMT: the rank in 5 digits or more); -1 for a
 * name of another form */
static int rank_of_name(const char *name) {
  const char *p = name + strlen("trace-rank-");
  size_t digits = strspn(p, "0123456789");
  if (digits < 5 || digits > 10 || strcmp(p + digits, ".json")) return -1;
  long long v = strtoll(p, NULL, 10);
  char want[64];
  if (v > INT_MAX) return -1;
  snprintf(want, sizeof want, MNT_TRACE_FILE_FMT, (int)v);
  return strcmp(want, name) ? -1 : (int)v;
}

/* path's bytes, NUL-terminated (MNT_EARG logged when it cannot be read) */
static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0, cap = 0;
  if (!f) {
    MNT_SYSERR("%s: cannot read", path);
    return NULL;
  }
  for (;;) {
    if (cap - n < 65536) {
      size_t c = cap ? 2 * cap : 1 << 20;
      char *q = realloc(buf, c + 1);
      if (!q) {
        MNT_ERR("%s: out of memory", path);
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = q, cap = c;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    MNT_ERR("%s: read error", path);
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

/* buf (a file cut short) up to its last whole event, closed: train writes one event a line, so what
 * follows that event is at most the start of one more line; NULL when the cut is not inside the
 * events (or what precedes it is not a trace either) */
static json_t *salvage(const char *buf, size_t len) {
  const char *ev = memmem(buf, len, "\"events\"", 8);
  if (!ev) return NULL;
  char *tmp = malloc(len + 4);
  if (!tmp) return NULL;
  memcpy(tmp, buf, len);
  json_t *j = NULL;
  int breaks = 0;
  for (size_t p = len; p-- > (size_t)(ev - buf) && !j;) {
    if (buf[p] == '\n' && ++breaks > 1) break;
    if (buf[p] != ']') continue;
    memcpy(tmp + p + 1, "\n]}", 3);
    j = json_loadb(tmp, p + 4, JSON_REJECT_DUPLICATES, NULL);
    if (j && !json_is_array(json_object_get(j, "events"))) json_decref(j), j = NULL;
  }
  free(tmp);
  return j;
}

/* "path: " and what is wrong with the file, logged at error level with the caller's file:line; MNT_EARG */
#define refuse(path, ...) refuse_at(__FILE__, __LINE__, path, __VA_ARGS__)
static int refuse_at(const char *file, int line, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse_at(const char *file, int line, const char *path, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  mnt_log_at(MNT_LOG_ERROR, file, line, "%s: %s", path, why);
  return MNT_EARG;
}

/* an integer of the file in [lo, hi] into *out; 0 when absent, not an integer or out of range */
static int int_in(json_t *v, long long lo, long long hi, long long *out) {
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) return 0;
  *out = (long long)json_integer_value(v);
  return 1;
}

/* r's threads and events: MNT_EARG naming the first that is not what train writes */
static int check_spans(rank_trace *r) {
  static const char *const WHAT[7] = {"thread", "start", "duration", "name", "arg", "step", "depth"};
  unsigned char listed[MAX_TID] = {0};
  size_t i;
  json_t *t, *ev;
  json_array_foreach(r->threads, i, t) {
    long long id;
    json_t *name = json_object_get(t, "name");
    if (!int_in(json_object_get(t, "id"), 0, MAX_TID - 1, &id) || (name && !json_is_string(name)))
      return refuse(r->path, "thread %zu is not {id (0 to %d), name, track}", i, MAX_TID - 1);
    listed[id] = 1;
  }
  json_array_foreach(r->events, i, ev) {
    if (!json_is_array(ev) || json_array_size(ev) != 7 || !json_is_string(json_array_get(ev, 3)))
      return refuse(r->path, "event %zu is not [thread, start, duration, name, arg, step, depth]", i);
    for (size_t k = 0; k < 7; k++) {
      json_t *v = json_array_get(ev, k);
      if (k == 3) continue;
      if (!json_is_integer(v))
        return refuse(r->path, "event %zu: its %s is not an integer ([thread, start, duration, name, arg, step, "
                               "depth])", i, WHAT[k]);
      long long x = (long long)json_integer_value(v);
      if ((k == 1 || k == 2 || k == 6) && x < 0)
        return refuse(r->path, "event %zu has a negative %s (%lld): not a span train writes", i, WHAT[k], x);
      if ((k == 1 || k == 2) && x > MAX_NS)
        return refuse(r->path, "event %zu: its %s %lld ns is past any clock reading", i, WHAT[k], x);
    }
    long long tid = (long long)json_integer_value(json_array_get(ev, 0));
    if (tid < 0 || tid >= MAX_TID || !listed[tid])
      return refuse(r->path, "event %zu is of thread %lld, which the file's threads do not list", i, tid);
  }
  return MNT_OK;
}

/* one rank's file (name_rank: its name's), checked on its own: MNT_EARG naming it and what is wrong */
static int load_rank(const char *path, int name_rank, rank_trace *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", path);
  r->main_tid = r->comm_tid = -1;
  size_t len = 0;
  char *buf = read_all(path, &len);
  if (!buf) return MNT_EARG;
  json_error_t e;
  r->j = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &e);
  if (!r->j) {
    enum json_error_code c = json_error_code(&e);
    int at_end = c == json_error_premature_end_of_input ||
                 ((size_t)e.position >= len && c != json_error_end_of_input_expected);
    if (at_end) r->j = salvage(buf, len);
    if (r->j) r->cut = len;
    free(buf);
    if (!r->j && at_end && len > 0)
      return refuse(path, "cut short before its events (the file ends at byte %zu, %s): nothing of rank %d to "
                          "merge (copy it again, or move it aside to merge the others)", len, e.text, name_rank);
    if (!r->j) return refuse(path, "not a trace: %s (line %d)", e.text, e.line);
  } else {
    free(buf);
  }
  json_t *j = r->j;
  long long rank, size, version, offset;
  json_t *tr = json_object_get(j, "truncated");
  const char *node = json_string_value(json_object_get(j, "node"));
  r->events = json_object_get(j, "events");
  r->threads = json_object_get(j, "threads");
  if (!json_is_object(j) || !json_is_array(r->events) || !json_is_array(r->threads))
    return refuse(path, "not a trace of mntrain train --trace (version, rank, size, offset_ns, threads, events)");
  if (!int_in(json_object_get(j, "version"), 1, 2, &version))
    return refuse(path, "version %s: this mntrain merges trace files of versions 1 and 2",
                  json_is_integer(json_object_get(j, "version")) ? "too new" : "missing or not an integer");
  if (!int_in(json_object_get(j, "rank"), 0, INT_MAX, &rank))
    return refuse(path, "'rank' is missing or not a rank (an integer of at least 0)");
  if (rank != name_rank)
    return refuse(path, "says rank %lld: a file of rank %lld under rank %d's name (copied?)", rank, rank, name_rank);
  if (!int_in(json_object_get(j, "size"), 1, INT_MAX, &size))
    return refuse(path, "'size' is missing or not a rank count (an integer of at least 1)");
  /* after train --on-rank-loss shrink: "size" the ranks left, "job_size" the ranks the job started
   * with, which the rank and the file's name count (files without them: a job that never shrank) */
  long long job_size = size, epoch = 0;
  json_t *js = json_object_get(j, "job_size"), *me = json_object_get(j, "membership_epoch");
  if (js && !int_in(js, size, INT_MAX, &job_size))
    return refuse(path, "'job_size' is not a rank count of at least its 'size' %lld (the ranks the job started with)",
                  size);
  if (me && !int_in(me, 0, job_size, &epoch))
    return refuse(path, "'membership_epoch' is not a count of shrinks (an integer from 0 to its job_size %lld)",
                  job_size);
  if (epoch == 0 && size != job_size)
    return refuse(path, "says %lld of its job's %lld ranks were left but no shrink ('membership_epoch' 0)", size,
                  job_size);
  if (rank >= job_size) return refuse(path, "says rank %lld of %lld: not a rank of its job", rank, job_size);
  if (!int_in(json_object_get(j, "offset_ns"), -MAX_NS, MAX_NS, &offset))
    return refuse(path, "'offset_ns' is missing or not a clock offset (an integer of ns)");
  if (tr && !json_is_boolean(tr)) return refuse(path, "'truncated' is not true or false");
  /* how the rank's job ended and where the span cap was hit (written since version 2; optional) */
  json_t *ended = json_object_get(j, "ended"), *ls = json_object_get(j, "last_step"),
         *ts = json_object_get(j, "truncated_at_step");
  const char *ev = json_string_value(ended);
  if (ended && (!ev || (strcmp(ev, "finished") && strcmp(ev, "stopped") && strcmp(ev, "failed"))))
    return refuse(path, "'ended' is not finished, stopped or failed");
  r->last_step = r->trunc_step = -1;
  if (ls && !int_in(ls, 0, (long long)1 << 40, &r->last_step)) return refuse(path, "'last_step' is not a step");
  if (ts && !int_in(ts, -1, (long long)1 << 40, &r->trunc_step)) return refuse(path, "'truncated_at_step' is not a step");
  r->failed = ev && !strcmp(ev, "failed");
  r->version = (int)version;
  r->job = r->run_id = "";
  if (version >= 2) {
    r->job = json_string_value(json_object_get(j, "job"));
    r->run_id = json_string_value(json_object_get(j, "run_id"));
    if (!r->job || !*r->job) return refuse(path, "version 2 without its 'job' (the job step that wrote it)");
    if (!mnt_is_run_id(r->run_id)) return refuse(path, "version 2 without a valid 'run_id' (16 lowercase hex digits)");
  }
  r->rank = (int)rank;
  r->size = (int)size;
  r->job_size = (int)job_size;
  r->epoch = (int)epoch;
  r->offset = (int64_t)offset;
  r->truncated = json_is_true(tr);
  r->node = node ? node : "?";
  MNT_CHECK(check_spans(r));
  r->main_tid = tid_named(r->threads, "main");
  r->comm_tid = tid_named(r->threads, "comm");
  return MNT_OK;
}

/* the files r[0..n) (sorted by rank) of one job: the same version, job size, job and run, and of one
 * membership epoch the same size, else MNT_EARG naming two files that differ (files of different epochs:
 * a rank left out at a shrink wrote its file before the others shrank again) */
static int one_job(const rank_trace *r, int n) {
  for (int i = 1; i < n; i++) {
    const rank_trace *a = &r[0], *b = &r[i];
    if (a->version != b->version) {
      MNT_ERR("%s is version %d, %s version %d: not one job's files (an mntrain writes one version)", a->path,
              a->version, b->path, b->version);
      return MNT_EARG;
    }
    if (strcmp(a->job, b->job)) {
      MNT_ERR("%s is of job %s, %s of job %s: not one job's ranks (another launch's files in the directory: give "
              "each job its own --trace DIR)", a->path, a->job, b->path, b->job);
      return MNT_EARG;
    }
    if (strcmp(a->run_id, b->run_id)) {
      MNT_ERR("%s is of run %s, %s of run %s: not one run's ranks", a->path, a->run_id, b->path, b->run_id);
      return MNT_EARG;
    }
    if (a->job_size != b->job_size) {
      MNT_ERR("%s says its job has %d ranks, %s says %d: not one job's ranks", a->path, a->job_size, b->path,
              b->job_size);
      return MNT_EARG;
    }
  }
  for (int i = 0; i < n; i++)
    for (int k = i + 1; k < n; k++)
      if (r[i].epoch == r[k].epoch && r[i].size != r[k].size) {
        MNT_ERR("%s says %d ranks were left after %d shrinks, %s says %d: not one job's ranks", r[i].path, r[i].size,
                r[i].epoch, r[k].path, r[k].size);
        return MNT_EARG;
      }
  return MNT_OK;
}

/* the file of the latest membership epoch (the ranks at the job's end) */
static const rank_trace *last_epoch(const rank_trace *rs, int n) {
  const rank_trace *e = &rs[0];
  for (int i = 1; i < n; i++)
    if (rs[i].epoch > e->epoch) e = &rs[i];
  return e;
}

/* the job's ranks without a file, as "2 5 7" (" ..." past what fits); their count */
static int missing_ranks(const rank_trace *rs, int n, char *out, size_t cap) {
  size_t l = 0;
  int count = 0;
  out[0] = '\0';
  for (int r = 0, i = 0; r < rs[0].job_size; r++) {
    while (i < n && rs[i].rank < r) i++;
    if (i < n && rs[i].rank == r) continue;
    count++;
    if (l + 16 < cap) l += (size_t)snprintf(out + l, cap - l, "%s%d", l ? " " : "", r);
    else if (l + 5 < cap && strcmp(out + l - 4, " ...")) l += (size_t)snprintf(out + l, cap - l, " ...");
  }
  return count;
}

/* what the merge leaves out or cannot check, named: ranks without a file, incomplete timelines,
 * version 1 files */
static void say_gaps(const char *dir, const rank_trace *rs, int n) {
  int job_size = rs[0].job_size;
  const rank_trace *end = last_epoch(rs, n);
  char missing[256];
  int nmissing = missing_ranks(rs, n, missing, sizeof missing);
  if (end->epoch > 0) { /* train --on-rank-loss shrink: the ranks lost mid-run wrote nothing */
    printf(
        "mntrain report: the job shrank from %d to %d ranks (%d shrink%s, train --on-rank-loss shrink); ranks are "
        "numbered as the job started them; %d of %d wrote a trace%s%s\n",
        job_size, end->size, end->epoch, end->epoch == 1 ? "" : "s", n, job_size,
        nmissing ? "; without one (lost mid-run): " : "", missing);
    for (int i = 0; i < n; i++)
      if (rs[i].epoch < end->epoch)
        printf(
            "mntrain report: rank %d's file is of %d shrink%s, the others' of %d: it was left out of the job at a "
            "shrink and its timeline ends there\n",
            rs[i].rank, rs[i].epoch, rs[i].epoch == 1 ? "" : "s", end->epoch);
  }
  if (nmissing > job_size - end->size) /* more than the shrinks lost: a failed job, still worth merging */
    MNT_WARN("--trace %s: %d of %d ranks wrote a trace; missing: %s", dir, n, job_size, missing);
  for (int i = 0; i < n; i++) {
    const rank_trace *r = &rs[i];
    if (r->cut)
      MNT_WARN("%s: cut short (the file ends at byte %zu, inside its events): rank %d's timeline is incomplete, its "
               "%zu events before the cut merged", r->path, r->cut, r->rank, json_array_size(r->events));
    if (r->truncated && r->trunc_step >= 0)
      MNT_WARN("%s: rank %d's timeline is incomplete: the trace reached its span cap in step %lld (\"truncated\": "
               "true) and recorded no span after it (a shorter --trace-steps window keeps them all)", r->path, r->rank,
               r->trunc_step);
    else if (r->truncated)
      MNT_WARN("%s: rank %d's timeline is incomplete: the trace reached its span cap (\"truncated\": true) and "
               "recorded no span after it (a shorter --trace-steps window keeps them all)", r->path, r->rank);
  }
  int nfailed = 0, first_failed = -1;
  for (int i = 0; i < n; i++)
    if (rs[i].failed && !nfailed++) first_failed = i;
  if (nfailed) /* a failed job's timelines end where each rank stopped: not a slow step */
    MNT_WARN("--trace %s: the job failed (%d of its ranks say so; rank %d in step %lld): each timeline ends where its "
             "rank stopped", dir, nfailed, rs[first_failed].rank, rs[first_failed].last_step);
  if (rs[0].version == 1)
    MNT_WARN("--trace %s: version 1 files (an mntrain from before job and run ids wrote them): that the %d ranks are "
             "one job's is not checked", dir, n);
}

#define EV_TID(ev) ((int)json_integer_value(json_array_get(ev, 0)))
#define EV_T0(r, ev) ((int64_t)json_integer_value(json_array_get(ev, 1)) + (r)->offset)
#define EV_DUR(ev) ((int64_t)json_integer_value(json_array_get(ev, 2)))
#define EV_NAME(ev) json_string_value(json_array_get(ev, 3))
#define EV_ARG(ev) ((long long)json_integer_value(json_array_get(ev, 4)))
#define EV_STEP(ev) ((long long)json_integer_value(json_array_get(ev, 5)))
#define EV_DEPTH(ev) ((int)json_integer_value(json_array_get(ev, 6)))

/* OUT/trace.json */
static int write_chrome(const char *path, rank_trace *rs, int n, int64_t t0) {
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"clock\": \"rank 0's CLOCK_MONOTONIC\"");
  if (rs[0].version >= 2) { /* one job's files (one_job): who wrote them */
    fprintf(f, ", \"job\": ");
    mnt_json_fput_str(f, rs[0].job);
    fprintf(f, ", \"run_id\": ");
    mnt_json_fput_str(f, rs[0].run_id);
  }
  const rank_trace *end = last_epoch(rs, n);
  /* ranks: the job's at its start (the processes' ids count them); ranks_at_end and membership_epoch:
   * after train --on-rank-loss shrink; missing_ranks: the job's ranks without a file */
  fprintf(f, ", \"ranks\": %d, \"ranks_at_end\": %d, \"membership_epoch\": %d, \"missing_ranks\": [", rs[0].job_size,
          end->size, end->epoch);
  for (int r = 0, i = 0, k = 0; r < rs[0].job_size; r++) {
    while (i < n && rs[i].rank < r) i++;
    if (!(i < n && rs[i].rank == r)) fprintf(f, "%s%d", k++ ? ", " : "", r);
  }
  fprintf(f, "], \"incomplete_ranks\": [");
  for (int i = 0, k = 0; i < n; i++)
    if (incomplete(&rs[i])) fprintf(f, "%s%d", k++ ? ", " : "", rs[i].rank);
  fprintf(f, "]},\n\"traceEvents\": [");
  int first = 1;
  for (int i = 0; i < n; i++) {
    rank_trace *r = &rs[i];
    fprintf(f, "%s\n{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, \"args\": {\"name\": \"rank %d (",
            first ? "" : ",", r->rank, r->rank);
    mnt_json_fput_chars(f, r->node);
    fprintf(f, ")\"}},\n{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": %d, \"args\": {\"sort_index\": %d}}",
            r->rank, r->rank);
    if (incomplete(r))
      fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"process_labels\", \"pid\": %d, \"args\": {\"labels\": \"timeline "
                 "incomplete (%s)\"}}",
              r->rank, r->cut ? "the file is cut short" : "the span cap was hit");
    first = 0;
    size_t k;
    json_t *t;
    json_array_foreach(r->threads, k, t) {
      int id = (int)json_integer_value(json_object_get(t, "id"));
      const char *name = json_string_value(json_object_get(t, "name"));
      fprintf(f, ",\n{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": ", r->rank,
              id);
      mnt_json_fput_str(f, name ? name : "?");
      fprintf(f, "}},\n{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": %d, \"tid\": %d, \"args\": "
                 "{\"sort_index\": %d}}",
              r->rank, id, id);
    }
    json_t *ev;
    json_array_foreach(r->events, k, ev) {
      fprintf(f, ",\n{\"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"name\": ", r->rank,
              EV_TID(ev), (double)(EV_T0(r, ev) - t0) * 1e-3, (double)EV_DUR(ev) * 1e-3);
      mnt_json_fput_str(f, EV_NAME(ev));
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
 * (a recovery from a lost rank in it included: train --on-rank-loss shrink) is longest; -1 when no
 * step is in every file */
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
      for (int m = 0; sp && m < 2; m++, sp = step_span(&rs[i], s, "recovery")) {
        int64_t a = EV_T0(&rs[i], sp), b = a + EV_DUR(sp);
        if (a < lo) lo = a;
        if (b > hi) hi = b;
      }
    }
    if (all && (double)(hi - lo) > best_len) best_len = (double)(hi - lo), best = s, *lo_out = lo, *hi_out = hi;
  }
  return best;
}

enum { W = 1100, LEFT = 170, RIGHT = 30, TOP = 70, ROW = 34, BAR = 18, SUB = 7 };

/* OUT/trace.svg: step `s` of every rank, [lo, hi] on rank 0's clock */
static int write_svg(const char *path, rank_trace *rs, int n, long long s, int64_t lo, int64_t hi) {
  /* the critical rank: the last to end its backward pass */
  int crit = 0, recovered = 0;
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
    fprintf(f, "<text x=\"%d\" y=\"40\" fill=\"#b00\">critical: rank %d (", LEFT, rs[crit].rank);
    mnt_report_xml_text(f, rs[crit].node);
    fprintf(f, ") ended its backward pass last, %.1f ms after the first rank</text>\n",
            (double)(crit_end - first_end) * 1e-6);
  }
  /* the time axis, ms from the step's start */
  double ms = span * 1e-6, tick = ms > 1000 ? mnt_report_nice_step(ms, 10) : ms > 500 ? 100 : ms > 200 ? 50
                                  : ms > 100 ? 20 : ms > 40 ? 10 : ms > 10 ? 2 : 1;
  for (int k = 0; k <= MNT_REPORT_MAX_TICKS && k * tick <= ms + 1e-9; k++) {
    double t = k * tick;
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
    mnt_report_xml_text(f, r->node);
    fprintf(f, ")%s%s</text>\n", incomplete(r) ? ", incomplete" : "", i == crit ? " &#9664;" : "");
    size_t k;
    json_t *ev;
    json_array_foreach(r->events, k, ev) {
      if (EV_STEP(ev) != s) continue;
      int tid = EV_TID(ev), ph = -1;
      for (int p = 0; p < MAIN_PHASES; p++)
        if (!strcmp(EV_NAME(ev), PHASES[p])) ph = p;
      int on_main = tid == r->main_tid && ph >= 0 && EV_DEPTH(ev) == 1;
      int on_comm = tid == r->comm_tid && EV_DEPTH(ev) == 0 && strcmp(EV_NAME(ev), "idle");
      int on_rec = tid == r->main_tid && !strcmp(EV_NAME(ev), "recovery"); /* from a lost rank */
      if (on_rec) on_main = 1, ph = MAIN_PHASES, recovered = 1;
      if (!on_main && !on_comm) continue;
      double x0 = LEFT + (double)(EV_T0(r, ev) - lo) * px, w = (double)EV_DUR(ev) * px;
      if (x0 < LEFT) w -= LEFT - x0, x0 = LEFT;
      if (x0 + w > W - RIGHT) w = W - RIGHT - x0;
      if (w <= 0) continue;
      if (w < 0.5) w = 0.5;
      fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>rank %d ", x0,
              on_main ? y : y + BAR + 1, w, on_main ? BAR : SUB, on_main ? COLOURS[ph] : "#7a5195", r->rank);
      mnt_report_xml_text(f, EV_NAME(ev)); /* a name from the file */
      fprintf(f, " %.2f ms%s</title></rect>\n", (double)EV_DUR(ev) * 1e-6, on_comm ? " (communicator thread)" : "");
    }
  }
  int ly = TOP + n * ROW + 30, lx = LEFT;
  for (int p = 0; p < MAIN_PHASES; p++, lx += 120)
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s%s</text>\n", lx,
            ly - 10, COLOURS[p], lx + 18, ly, PHASES[p], p == 3 ? " (exposed)" : "");
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"6\" fill=\"#7a5195\"/><text x=\"%d\" y=\"%d\">communicator "
             "thread at work (under each rank)</text>\n",
          lx, ly - 7, lx + 18, ly);
  if (recovered)
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">recovery "
            "from a lost rank (train --on-rank-loss shrink)</text>\n",
            LEFT, ly + 8, COLOURS[MAIN_PHASES], LEFT + 18, ly + 18);
  fprintf(f, "</svg>\n");
  return mnt_tmp_fcommit(f, tmp, path);
}

/* the survivors' "recovery" spans (train --on-rank-loss shrink), one line: rank, step, seconds */
static void say_recoveries(const rank_trace *rs, int n) {
  char line[512];
  size_t l = 0;
  int count = 0;
  for (int i = 0; i < n; i++) {
    size_t k;
    json_t *ev;
    json_array_foreach(rs[i].events, k, ev) {
      if (EV_TID(ev) != rs[i].main_tid || strcmp(EV_NAME(ev), "recovery")) continue;
      if (count++ < 8 && l < sizeof line)
        l += (size_t)snprintf(line + l, sizeof line - l, "%srank %d in step %lld %.3f s", l ? ", " : "", rs[i].rank,
                              EV_STEP(ev), (double)EV_DUR(ev) * 1e-9);
    }
  }
  if (count)
    printf("mntrain report: %d recovery span%s (survivors regrouping after a lost rank): %s%s\n", count,
           count == 1 ? "" : "s", line, count > 8 ? ", ..." : "");
}

static int cmp_rank(const void *a, const void *b) { return ((const rank_trace *)a)->rank - ((const rank_trace *)b)->rank; }

int mnt_report_trace(const char *dir, const char *out, char run_id[MNT_RUN_ID_HEX + 1]) {
  run_id[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) {
    MNT_SYSERR("--trace %s: cannot read the directory", dir);
    return MNT_EARG;
  }
  rank_trace *rs = NULL;
  int n = 0, cap = 0, st = MNT_OK;
  struct dirent *e;
  while ((e = readdir(d)) && st == MNT_OK) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, "trace-rank-", 11) || len < 16 || strcmp(e->d_name + len - 5, ".json")) continue;
    int rk = rank_of_name(e->d_name);
    if (rk < 0) {
      MNT_WARN("%s/%s: not a name train writes (trace-rank-RRRRR.json, the rank in 5 digits or more): left out", dir,
               e->d_name);
      continue;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      rank_trace *q = realloc(rs, (size_t)cap * sizeof *q);
      if (!q) {
        MNT_ERR("out of memory");
        st = MNT_ENOMEM;
        break;
      }
      rs = q;
    }
    char p[MNT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    st = load_rank(p, rk, &rs[n++]);
  }
  closedir(d);
  if (st == MNT_OK && n == 0) {
    MNT_ERR("--trace %s: no trace-rank-*.json (mntrain train --trace %s writes them)", dir, dir);
    st = MNT_EARG;
  }
  if (st == MNT_OK) {
    qsort(rs, (size_t)n, sizeof *rs, cmp_rank);
    st = one_job(rs, n);
  }
  if (st == MNT_OK) say_gaps(dir, rs, n);
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
    char inc[128] = "";
    for (int i = 0, l = 0; i < n; i++) {
      events += json_array_size(rs[i].events);
      if (incomplete(&rs[i]) && l < (int)sizeof inc - 16)
        l += snprintf(inc + l, sizeof inc - (size_t)l, "%s%d", l ? " " : "; the timeline is incomplete on rank ",
                      rs[i].rank);
    }
    printf("mntrain report: %d ranks, %zu spans merged on rank 0's clock (offsets measured at set-up) into %s%s\n", n,
           events, pj, inc);
    say_recoveries(rs, n);
    json_t *win = json_object_get(rs[0].j, "steps");
    if (events == 0) { /* the window missed the job: said, with what the files know of both */
      char last[96] = "";
      if (rs[0].last_step >= 0)
        snprintf(last, sizeof last, ", and rank %d's job was at step %lld when it wrote its file", rs[0].rank,
                 rs[0].last_step);
      MNT_WARN("--trace %s: no span in any file: the window was steps %lld to %lld%s (train --trace-steps outside "
               "the steps the job trained?)", dir, (long long)json_integer_value(json_array_get(win, 0)),
               (long long)json_integer_value(json_array_get(win, 1)), last);
    }
    if (s < 0) {
      printf("mntrain report: no step traced on every rank: no %s\n", ps);
    } else if ((st = write_svg(ps, rs, n, s, lo, hi)) == MNT_OK) {
      printf("mntrain report: step %lld, the slowest traced (%.1f ms), in %s\n", s, (double)(hi - lo) * 1e-6, ps);
    }
  }
  if (st == MNT_OK && n > 0) snprintf(run_id, MNT_RUN_ID_HEX + 1, "%s", rs[0].run_id);
  for (int i = 0; i < n; i++) json_decref(rs[i].j);
  free(rs);
  return st;
}
