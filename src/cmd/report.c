/* cmd/report.c — `mntrain report RUN_DIR...` (see cmd/cmd.h): the scaling table of a sweep of runs
 * from their summary.json (src/runsum.h; metrics.jsonl for the spread), and OUT/scaling.csv and
 * OUT/scaling.svg (cmd/report_svg.c: throughput and efficiency against ranks, with the ideal lines);
 * then, for runs with validation points, the learning table and curves (cmd/report_learn.c).
 * The numbers (README "Runs and their outputs"), with N0 the fewest ranks of the sweep (the baseline run):
 *   speedup    S_N = ips_N / ips_N0
 *   efficiency E_N = (ips_N / N) / (ips_N0 / N0)
 * Weak scaling (every run the same batch_per_rank) and strong scaling (every run the same
 * global_batch) share both formulas: with a fixed global batch G a step takes T = G / ips, so
 * S_N = T_N0 / T_N and E_N = S_N / (N / N0), the same numbers. A sweep that is neither is refused.
 * ips is summary.json's img_per_s (all steps after train's warm-up over their wall time); the
 * spread is the sample standard deviation of the per-interval img_per_s of metrics.jsonl over the
 * intervals that start after the warm-up (the steps summary.json's img_per_s leaves out).
 *
 * A run directory holds one run's files: train writes the run's identity (run_id, 16 hex digits, kept
 * by a resumed run) into config.json, summary.json and every metrics.jsonl line, and the report uses
 * only the run's own:
 *   refused (exit 2, naming the file and both run ids): a summary.json whose run_id is not one, or is
 *     not config.json's (another run's summary.json copied in; config.json, written when the run's
 *     last job started, has none or another); a metrics.jsonl with lines but none of the run's
 *     (another run's file swapped in, or another run's summary.json beside this run's lines);
 *   left out and named (a warning: the file, how many lines, which, the other run_id): another run's
 *     lines in metrics.jsonl, and lines without a run_id after the run's own (an older mntrain's run
 *     appended);
 *   read, and said: lines without a run_id before the run's first own line (its jobs from before run
 *     ids: a resumed run keeps its lines); runs from before run ids (no run_id in summary.json) as
 *     before, said once for the report (a line with a run_id is another run's there); one run given
 *     twice (the same run_id in two directories).
 * A report without a learning table says why (no run evaluated a validation set), and a learning
 * table names the runs it leaves out (no evaluation). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/cmd/cmd.h"
#include "src/args.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/cmd/report_internal.h"
#include "src/runsum.h"
#include "src/safefs.h"
#include "src/tmpfile.h"

enum { NPH = MNT_REPORT_NPH };


/* ---- reading a run ------------------------------------------------------------------------------ */

static int get_int(const mnt_run_summary *s, int k, const char *key, const char *path, long long lo,
                   long long *out) {
  if (!mnt_rs_is_int(s, k) || s->ival[k] < lo) {
    MNT_ERR("%s: '%s' is %s (an integer of at least %lld)", path, key, mnt_rs_present(s, k) ? "not valid" : "missing",
            lo);
    return MNT_EARG;
  }
  *out = (long long)s->ival[k];
  return MNT_OK;
}

/* a string of the summary into out[n]: "" in the summary is absent, not a string, or too long */
static int get_str(const char *v, int have, const char *key, const char *path, char *out, size_t n) {
  if (!*v || strlen(v) >= n) {
    MNT_ERR("%s: '%s' is %s (a short string)", path, key, have ? "not valid" : "missing");
    return MNT_EARG;
  }
  snprintf(out, n, "%s", v);
  return MNT_OK;
}

static long long opt_int(const mnt_run_summary *s, int k, long long dflt) {
  return mnt_rs_is_int(s, k) ? (long long)s->ival[k] : dflt;
}

/* ---- a run's own lines -------------------------------------------------------------------------- */

/* whose a metrics.jsonl line is: the run's (its run_id), one without a run_id (an mntrain from before
 * run ids wrote it), another run's (another run_id, or one that is not a run id) */
enum { OWN, IDLESS, OTHER };
enum { MAX_OTHERS = 8 }; /* other runs named one by one; past that, counted together */

typedef struct mline {
  json_t *j;
  long long lineno;
  int whose, use;
} mline;

typedef struct lines_of { /* some lines of a file: how many, the first and the last line number */
  char id[MNT_RUN_ID_HEX + 1];
  long long n, first, last;
} lines_of;

static void lines_add(lines_of *s, long long lineno) {
  if (!s->n++) s->first = lineno;
  s->last = lineno;
}

/* "line 7", "lines 7-12", "lines 7 to 30, not all" */
static void span_text(const lines_of *s, char *out, size_t len) {
  if (s->n == 1) snprintf(out, len, "line %lld", s->first);
  else if (s->last - s->first + 1 == s->n) snprintf(out, len, "lines %lld-%lld", s->first, s->last);
  else snprintf(out, len, "lines %lld to %lld, not all", s->first, s->last);
}

/* the sample standard deviation of x[0..n), n >= 2, scaled by the largest so that no square overflows */
static double sample_sd(const double *x, int n) {
  double big = 0, mean = 0, ss = 0;
  for (int i = 0; i < n; i++) big = fmax(big, fabs(x[i]));
  if (big == 0) return 0;
  for (int i = 0; i < n; i++) mean += x[i] / big / n;
  for (int i = 0; i < n; i++) ss += (x[i] / big - mean) * (x[i] / big - mean);
  return big * sqrt(ss / (n - 1));
}

/* the evaluations and intervals of the run's lines, in the file's order: intervals (lines with "step"
 * and "img_per_s"; validation and checkpoint lines have none) whose first step comes after step
 * `timed_from` (an interval's first step is the previous interval's last + 1), their img_per_s a
 * throughput above 0 (else the line is named); the evaluations into r's learning curve */
static int use_lines(mnt_report_run *r, const char *path, const mline *ls, size_t nl, long long timed_from) {
  long long prev = 0;
  double *x = NULL;
  int n = 0, cap = 0;
  for (size_t i = 0; i < nl; i++) {
    if (!ls[i].use) continue;
    json_t *l = ls[i].j, *step = json_object_get(l, "step"), *ips = json_object_get(l, "img_per_s");
    if (json_is_integer(step) && json_object_get(l, "val_top1")) { /* an evaluation */
      json_t *ep = json_object_get(l, "epoch"), *v = json_object_get(l, "val_top1"),
             *el = json_object_get(l, "elapsed_s");
      mnt_report_point p = {(long long)json_integer_value(step), json_number_value(ep), json_number_value(v), NAN};
      if (json_is_number(el) && isfinite(json_number_value(el)) && json_number_value(el) >= 0)
        p.time = json_number_value(el);
      if (!json_is_number(ep) || !json_is_number(v) || !(p.epoch >= 0) || !isfinite(p.epoch) || !(p.top1 >= 0) ||
          !(p.top1 <= 1) || p.step < 0) {
        MNT_WARN("%s:%lld: an evaluation without a valid epoch and val_top1 (a fraction): left out of the learning "
                 "curve", path, ls[i].lineno);
      } else if (mnt_report_add_point(r, p) != MNT_OK) {
        free(x);
        return MNT_ENOMEM;
      }
    } else if (json_is_integer(step) && ips) {
      long long s = (long long)json_integer_value(step);
      double v = json_number_value(ips);
      if (prev >= timed_from && s > prev && !(json_is_number(ips) && v > 0 && isfinite(v))) {
        MNT_WARN("%s:%lld: img_per_s is not a throughput (a number above 0): the interval is left out of the spread",
                 path, ls[i].lineno);
      } else if (prev >= timed_from && s > prev) {
        if (n == cap) {
          cap = cap ? 2 * cap : 64;
          double *q = realloc(x, (size_t)cap * sizeof *q);
          if (!q) {
            free(x);
            MNT_ERR("out of memory");
            return MNT_ENOMEM;
          }
          x = q;
        }
        x[n++] = v;
      }
      prev = s;
    }
  }
  r->intervals = n;
  if (n >= 2) r->spread = sample_sd(x, n);
  free(x);
  return MNT_OK;
}

/* which lines of metrics.jsonl are the run's (summary.json's run_id in r->run_id; "" from before
 * run ids): its own, and those without a run_id that come before its first own line (the jobs of a
 * run begun by an mntrain from before run ids: train keeps a resumed run's lines). A run from
 * before run ids owns the lines without a run_id. The rest is left out and named; a file with lines
 * but none of the run's is MNT_EARG (another run's metrics.jsonl, or another run's summary.json). */
static int choose_lines(const mnt_report_run *r, const char *path, mline *ls, size_t nl) {
  lines_of oth[MAX_OTHERS], more = {"", 0, 0, 0}, before = {"", 0, 0, 0}, after = {"", 0, 0, 0};
  int noth = 0;
  size_t first_own = nl, used = 0;
  for (size_t i = 0; i < nl && first_own == nl; i++)
    if (ls[i].whose == OWN) first_own = i;
  for (size_t i = 0; i < nl; i++) {
    mline *l = &ls[i];
    if (l->whose == OWN) {
      l->use = 1;
    } else if (l->whose == IDLESS && !r->run_id[0]) {
      l->use = 1;
    } else if (l->whose == IDLESS) {
      l->use = i < first_own && first_own < nl;
      lines_add(l->use ? &before : &after, l->lineno);
    } else {
      const char *v = json_string_value(json_object_get(l->j, "run_id"));
      const char *id = mnt_is_run_id(v) ? v : "(not a run id)";
      int k = 0;
      while (k < noth && strcmp(oth[k].id, id)) k++;
      if (k == noth && noth < MAX_OTHERS) {
        memset(&oth[noth], 0, sizeof oth[noth]);
        snprintf(oth[noth++].id, sizeof oth[0].id, "%s", id);
      }
      lines_add(k < noth ? &oth[k] : &more, l->lineno);
    }
    used += (size_t)l->use;
  }
  char span[96], this_run[64];
  if (r->run_id[0]) snprintf(this_run, sizeof this_run, "run_id %s", r->run_id);
  else snprintf(this_run, sizeof this_run, "no run_id: written before run ids");
  if (used == 0 && nl > 0) {
    char others[1024] = "";
    size_t len = 0;
    for (int k = 0; k < noth && len < sizeof others - 96; k++)
      len += (size_t)snprintf(others + len, sizeof others - len, "%s%lld line%s of run_id %s", len ? ", " : "",
                              oth[k].n, oth[k].n == 1 ? "" : "s", oth[k].id);
    if (more.n && len < sizeof others - 96)
      len += (size_t)snprintf(others + len, sizeof others - len, "%s%lld of more runs", len ? ", " : "", more.n);
    if (after.n && len < sizeof others - 96)
      snprintf(others + len, sizeof others - len, "%s%lld without a run_id", len ? ", " : "", after.n);
    MNT_ERR("%s: none of its %zu lines is of the run of %s/summary.json (%s): %s. Another run's metrics.jsonl or "
            "another run's summary.json: the run is not reported (a run directory holds one run's files)",
            path, nl, r->dir, this_run, others);
    return MNT_EARG;
  }
  for (int k = 0; k < noth; k++) {
    span_text(&oth[k], span, sizeof span);
    MNT_WARN("%s: %lld line%s of another run, run_id %s (%s), left out (this run: %s)", path, oth[k].n,
             oth[k].n == 1 ? "" : "s", oth[k].id, span, this_run);
  }
  if (more.n) {
    span_text(&more, span, sizeof span);
    MNT_WARN("%s: %lld more lines of other runs (%s) left out (this run: %s)", path, more.n, span, this_run);
  }
  if (after.n) {
    span_text(&after, span, sizeof span);
    MNT_WARN("%s: %lld line%s without a run_id after this run's own (%s), left out: another run's, written by an "
             "mntrain from before run ids", path, after.n, after.n == 1 ? "" : "s", span);
  }
  if (before.n) {
    span_text(&before, span, sizeof span);
    MNT_WARN("%s: %s %s no run_id: read as this run's jobs from before run ids (its later lines carry %s)", path,
             span, before.n == 1 ? "has" : "have", r->run_id);
  }
  return MNT_OK;
}

/* metrics.jsonl: the run's own lines (choose_lines) for the spread and the learning curve */
static int read_metrics(mnt_report_run *r, long long timed_from) {
  char path[MNT_PATH_MAX];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  r->spread = NAN;
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT) return MNT_OK; /* no spread, said in the table */
    return MNT_SYSERR("%s: cannot read", path);
  }
  r->have_metrics = 1;
  mline *ls = NULL;
  size_t nl = 0, capl = 0;
  char *line = NULL;
  size_t cap = 0;
  long long lineno = 0;
  int st = MNT_OK;
  while (st == MNT_OK && getline(&line, &cap, f) > 0) {
    lineno++;
    if (line[strspn(line, " \t\r\n")] == '\0') continue;
    json_error_t e;
    json_t *l = json_loads(line, 0, &e);
    if (!json_is_object(l)) {
      MNT_WARN("%s:%lld: not a JSON object (%s): line left out", path, lineno, l ? "" : e.text);
      json_decref(l);
      continue;
    }
    if (nl == capl) {
      size_t c = capl ? 2 * capl : 256;
      mline *q = realloc(ls, c * sizeof *q);
      if (!q) {
        json_decref(l);
        MNT_ERR("out of memory");
        st = MNT_ENOMEM;
        break;
      }
      ls = q;
      capl = c;
    }
    json_t *id = json_object_get(l, "run_id");
    const char *ids = json_string_value(id);
    int whose = !id ? IDLESS : r->run_id[0] && ids && !strcmp(ids, r->run_id) ? OWN : OTHER;
    ls[nl++] = (mline){l, lineno, whose, 0};
  }
  if (st == MNT_OK && ferror(f)) {
    MNT_ERR("%s: read error", path);
    st = MNT_ESYS;
  }
  free(line);
  fclose(f);
  if (st == MNT_OK) st = choose_lines(r, path, ls, nl);
  if (st == MNT_OK) st = use_lines(r, path, ls, nl, timed_from);
  for (size_t i = 0; i < nl; i++) json_decref(ls[i].j);
  free(ls);
  return st;
}

/* the run's identity: summary.json's run_id into r->run_id ("" for a run from before run ids),
 * checked against config.json (written when the run's last job started) when the directory has one.
 * MNT_EARG naming both files when they are not one run's. */
static int same_run(mnt_report_run *r, const mnt_run_summary *j, const char *sum_path) {
  if (j->have_run_id == 1) {
    MNT_ERR("%s: 'run_id' is not valid (16 lowercase hex digits: the run's identity)", sum_path);
    return MNT_EARG;
  }
  snprintf(r->run_id, sizeof r->run_id, "%.*s", (int)MNT_RUN_ID_HEX, j->run_id);
  char p[MNT_PATH_MAX];
  snprintf(p, sizeof p, "%s/config.json", r->dir);
  if (!r->run_id[0] || access(p, F_OK) != 0) /* before run ids, a later job's config.json may have one: a */
    return MNT_OK;                            /* run resumed at its end trains nothing and keeps its summary */
  json_error_t e;
  json_t *c = json_load_file(p, 0, &e), *id = json_object_get(c, "run_id");
  const char *cid = json_string_value(id);
  int st = MNT_OK;
  if (!json_is_object(c)) {
    MNT_WARN("%s: not a JSON object (%s): the run's identity is checked against metrics.jsonl alone", p,
             c ? "" : e.text);
  } else if (!mnt_is_run_id(cid)) {
    MNT_ERR("%s: run_id %s, but %s has %s: not one run's files (a run directory holds one run's): not reported",
            sum_path, r->run_id, p, id ? "a run_id that is not one" : "none (an mntrain from before run ids wrote it)");
    st = MNT_EARG;
  } else if (strcmp(cid, r->run_id)) {
    MNT_ERR("%s: run_id %s, but %s says %s: another run's summary.json (copied in?); a run directory holds one "
            "run's files: not reported", sum_path, r->run_id, p, cid);
    st = MNT_EARG;
  }
  json_decref(c);
  return st;
}

static int read_run(const char *arg, int order, mnt_report_run *r) {
  memset(r, 0, sizeof *r);
  r->order = r->group = order;
  char path[MNT_PATH_MAX];
  struct stat sb;
  if (strlen(arg) > MNT_PATH_MAX - MNT_PATH_ROOM) { /* a run's files are named inside it */
    MNT_ERR("%.64s...: path too long", arg);
    return MNT_EARG;
  }
  if (stat(arg, &sb) != 0) {
    MNT_SYSERR("%s: a run directory (the --out of mntrain train) was expected", arg);
    return MNT_EARG;
  }
  snprintf(r->dir, sizeof r->dir, "%s", arg);
  if (S_ISDIR(sb.st_mode)) {
    size_t n = strlen(r->dir);
    while (n > 1 && r->dir[n - 1] == '/') r->dir[--n] = '\0';
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
  } else { /* RUN_DIR/summary.json itself */
    snprintf(path, sizeof path, "%s", arg);
    char *s = strrchr(r->dir, '/');
    if (!s) snprintf(r->dir, sizeof r->dir, ".");
    else if (s == r->dir) s[1] = '\0';
    else *s = '\0';
  }
  if (access(path, F_OK) != 0) {
    MNT_ERR("%s: no summary.json: not a run directory, or its run has not finished (train writes summary.json "
            "at the end)", r->dir);
    return MNT_EARG;
  }
  mnt_run_summary sum, *j = &sum;
  if (mnt_run_summary_read(path, j) != MNT_OK) {
    MNT_ERR("%s: not a summary: %s (line %d)", path, j->err, j->err_line);
    return MNT_EARG;
  }
  int st = same_run(r, j, path);
  if (st == MNT_OK) st = get_str(j->arch, j->have_arch, "arch", path, r->arch, sizeof r->arch);
  if (st == MNT_OK) st = get_str(j->device, j->have_device, "device", path, r->device, sizeof r->device);
  if (st == MNT_OK) st = get_int(j, MNT_RS_IMAGE_SIZE, "image_size", path, 1, &r->image_size);
  if (st == MNT_OK) st = get_int(j, MNT_RS_RANKS, "ranks", path, 1, &r->ranks);
  if (st == MNT_OK) st = get_int(j, MNT_RS_NODES, "nodes", path, 1, &r->nodes);
  if (st == MNT_OK) st = get_int(j, MNT_RS_BATCH_PER_RANK, "batch_per_rank", path, 1, &r->batch_per_rank);
  if (st == MNT_OK) st = get_int(j, MNT_RS_GLOBAL_BATCH, "global_batch", path, 1, &r->global_batch);
  /* older summaries have no precision: fp32 was the only one */
  if (st == MNT_OK)
    snprintf(r->precision, sizeof r->precision, "%.*s", (int)sizeof r->precision - 1,
             *j->precision ? j->precision : "fp32");
  double ips = j->num[MNT_RS_IMG_PER_S];
  if (st == MNT_OK && !(ips > 0 && isfinite(ips))) {
    MNT_ERR("%s: 'img_per_s' is %s (a throughput above 0)", path,
            mnt_rs_present(j, MNT_RS_IMG_PER_S) ? "not valid" : "missing");
    st = MNT_EARG;
  }
  if (st == MNT_OK && j->phases_ms != 2) {
    MNT_ERR("%s: 'phases_ms' is %s (an object: data, forward, backward, comm_exposed, optimizer)", path,
            j->phases_ms ? "not valid" : "missing");
    st = MNT_EARG;
  }
  if (st != MNT_OK) return st;
  r->ips = ips;
  snprintf(r->optimizer, sizeof r->optimizer, "%.*s", (int)sizeof r->optimizer - 1, j->optimizer);
  snprintf(r->schedule, sizeof r->schedule, "%.*s", (int)sizeof r->schedule - 1, j->schedule);
  snprintf(r->bn_eval, sizeof r->bn_eval, "%.*s", (int)sizeof r->bn_eval - 1, j->bn_eval);
  /* the target of --target-top1: a fraction in (0, 1]; where it was reached, when */
  double tg = j->num[MNT_RS_TARGET_TOP1], te = j->num[MNT_RS_TARGET_EPOCH], tt = j->num[MNT_RS_TARGET_TIME_S];
  r->target = r->target_epoch = r->target_time = NAN;
  r->target_reached = -1;
  if (mnt_rs_present(j, MNT_RS_TARGET_TOP1) && !(tg > 0 && tg <= 1)) {
    MNT_WARN("%s: 'target_top1' is not a fraction in (0, 1]: the run is shown without its target", path);
  } else if (tg > 0) {
    r->target = tg;
    r->target_reached = j->target_reached == 1;
    if (j->target_reached < 0)
      MNT_WARN("%s: 'target_reached' is missing or not true/false: taken as not reached", path);
    if (r->target_reached) {
      r->target_epoch = te >= 0 && isfinite(te) ? te : NAN;
      r->target_time = tt >= 0 && isfinite(tt) ? tt : NAN;
    }
  }
  for (int k = 0; k < NPH; k++) r->ph[k] = j->num[MNT_RS_PHASE + k]; /* NAN: null, not finite when written */
  /* devices per rank: GPUs with cuda (one per rank), compute threads per rank on cpu */
  long long thr = opt_int(j, MNT_RS_THREADS_PER_RANK, 1);
  r->devices = opt_int(j, MNT_RS_DEVICES_PER_RANK, !strcmp(r->device, "cpu") && thr > 0 ? thr : 1);
  /* train's warm-up (cmd/train.c): the first 5 steps of a job of more than 20, 1 of more than 4 */
  long long todo = opt_int(j, MNT_RS_STEPS_THIS_JOB, opt_int(j, MNT_RS_STEPS, 0));
  long long warm = opt_int(j, MNT_RS_WARMUP_STEPS, todo > 20 ? 5 : todo > 4 ? 1 : 0);
  return read_metrics(r, opt_int(j, MNT_RS_RESUMED_FROM_STEP, 0) + warm);
}

/* ---- the sweep ---------------------------------------------------------------------------------- */

static int same_config(const mnt_report_run *a, const mnt_report_run *b) {
  return !strcmp(a->arch, b->arch) && a->image_size == b->image_size && !strcmp(a->device, b->device) &&
         !strcmp(a->precision, b->precision);
}

/* the first key in which a and b differ, with both values */
static void config_diff(const mnt_report_run *a, const mnt_report_run *b, char *out, size_t n) {
  if (strcmp(a->arch, b->arch)) snprintf(out, n, "arch (%s vs %s)", a->arch, b->arch);
  else if (a->image_size != b->image_size)
    snprintf(out, n, "image_size (%lld vs %lld)", (long long)a->image_size, (long long)b->image_size);
  else if (strcmp(a->device, b->device)) snprintf(out, n, "device (%s vs %s)", a->device, b->device);
  else snprintf(out, n, "precision (%s vs %s)", a->precision, b->precision);
}

static int cmp_run(const void *pa, const void *pb) {
  const mnt_report_run *a = pa, *b = pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  if (a->ranks != b->ranks) return a->ranks < b->ranks ? -1 : 1;
  if (a->nodes != b->nodes) return a->nodes < b->nodes ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

/* r[0..n) sorted, one configuration: weak or strong scaling, else MNT_EARG with why[] naming the runs */
static int scale(mnt_report_run *r, int n, int *strong, char *why, size_t whylen) {
  int ib = -1, ig = -1;
  for (int i = 1; i < n; i++) {
    if (ib < 0 && r[i].batch_per_rank != r[0].batch_per_rank) ib = i;
    if (ig < 0 && r[i].global_batch != r[0].global_batch) ig = i;
  }
  if (ib >= 0 && ig >= 0) {
    char also[2 * MNT_PATH_MAX + 16];
    if (ig == ib) snprintf(also, sizeof also, "and");
    else snprintf(also, sizeof also, "and %s and %s", r[0].dir, r[ig].dir);
    snprintf(why, whylen,
             "%s and %s differ in batch_per_rank (%lld vs %lld) %s in global_batch (%lld vs %lld): neither weak "
             "scaling (the same batch_per_rank) nor strong scaling (the same global_batch)",
             r[0].dir, r[ib].dir, (long long)r[0].batch_per_rank, (long long)r[ib].batch_per_rank, also,
             (long long)r[0].global_batch, (long long)r[ig].global_batch);
    return MNT_EARG;
  }
  *strong = ib >= 0;
  const mnt_report_run *b = &r[0];
  for (int i = 0; i < n; i++) {
    r[i].speedup = r[i].ips / b->ips;
    r[i].eff = (r[i].ips / (double)r[i].ranks) / (b->ips / (double)b->ranks);
  }
  return MNT_OK;
}

/* ---- output ------------------------------------------------------------------------------------- */

static void print_table(const mnt_report_run *r, int n, int strong) {
  char what[128];
  mnt_report_describe(r, strong, what, sizeof what);
  printf("== %s, %lld px, %s, %s: %s; baseline %lld rank%s (%s)\n", r[0].arch, (long long)r[0].image_size,
         r[0].device, r[0].precision, what, (long long)r[0].ranks, r[0].ranks == 1 ? "" : "s", r[0].dir);
  printf("%5s %5s %8s %12s %10s %-11s %7s %10s %8s %8s %8s %8s %8s  %s\n", "ranks", "nodes", "dev/rank", "global batch",
         "img/s", " \xc2\xb1 sd", "speedup", "efficiency", "data ms", "fwd ms", "bwd ms", "comm ms", "opt ms", "run");
  for (int i = 0; i < n; i++) {
    const mnt_report_run *x = &r[i];
    char sd[32], ph[NPH][32];
    if (isnan(x->spread)) snprintf(sd, sizeof sd, "   -");
    else snprintf(sd, sizeof sd, " \xc2\xb1 %.1f", x->spread);
    for (int k = 0; k < NPH; k++) {
      if (isnan(x->ph[k])) snprintf(ph[k], sizeof ph[k], "-");
      else snprintf(ph[k], sizeof ph[k], "%.2f", x->ph[k]);
    }
    /* "± sd": the sign is two bytes and one column */
    printf("%5lld %5lld %8lld %12lld %10.1f %-*s %6.2fx %9.1f%% %8s %8s %8s %8s %8s  %s\n", (long long)x->ranks,
           (long long)x->nodes, (long long)x->devices, (long long)x->global_batch, x->ips,
           isnan(x->spread) ? 10 : 11, sd, x->speedup, 100.0 * x->eff, ph[0], ph[1], ph[2], ph[3], ph[4], x->dir);
  }
  int no_metrics = 0, few = 0;
  for (int i = 0; i < n; i++) {
    no_metrics += !r[i].have_metrics;
    few += r[i].have_metrics && r[i].intervals < 2;
  }
  printf("   img/s: summary.json (every step after warm-up over its wall time); \xc2\xb1 sd: standard deviation of the "
         "metrics.jsonl intervals after warm-up%s\n",
         no_metrics || few ? " ('-': no metrics.jsonl, or fewer than two intervals)" : "");
  printf("   speedup S = img/s_N / img/s_N0; efficiency E = (img/s_N / N) / (img/s_N0 / N0)%s, N0 = %lld\n",
         strong ? " = S / (N / N0)" : "", (long long)r[0].ranks);
  printf("   dev/rank: %s; phases: ms per step after warm-up (data wait, forward, backward, exposed comm, "
         "optimizer)\n",
         !strcmp(r[0].device, "cpu") ? "compute threads per rank" : "devices per rank");
}

static int write_csv(const char *path, const mnt_report_run *r, int n) {
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "ranks,nodes,devices_per_rank,global_batch,img_per_s,img_per_s_spread,speedup,efficiency,data_ms,"
             "forward_ms,backward_ms,comm_exposed_ms,optimizer_ms,run\n");
  for (int i = 0; i < n; i++) {
    const mnt_report_run *x = &r[i];
    fprintf(f, "%lld,%lld,%lld,%lld", (long long)x->ranks, (long long)x->nodes, (long long)x->devices,
            (long long)x->global_batch);
    mnt_report_csv_num(f, 2, x->ips);
    mnt_report_csv_num(f, 2, x->spread);
    mnt_report_csv_num(f, 4, x->speedup);
    mnt_report_csv_num(f, 4, x->eff);
    for (int k = 0; k < NPH; k++) mnt_report_csv_num(f, 3, x->ph[k]);
    fputc(',', f);
    mnt_report_csv_str(f, x->dir);
    fputc('\n', f);
  }
  return mnt_tmp_fcommit(f, tmp, path);
}

/* scaling.csv / scaling.svg, or with several configurations scaling-ARCH-SIZEpx-DEVICE-PRECISION.* */
static void out_name(char *p, size_t n, const char *dir, const mnt_report_run *r, int several, const char *ext) {
  if (!several) {
    snprintf(p, n, "%s/scaling.%s", dir, ext);
    return;
  }
  char tag[200];
  snprintf(tag, sizeof tag, "%s-%lldpx-%s-%s", r->arch, (long long)r->image_size, r->device, r->precision);
  for (char *c = tag; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
          *c == '-' || *c == '_'))
      *c = '_';
  snprintf(p, n, "%s/scaling-%s.%s", dir, tag, ext);
}

/* ---- the command -------------------------------------------------------------------------------- */

static const char ABOUT[] =
    "A scaling report of a sweep of runs. Each RUN_DIR is the --out of a finished mntrain train (or\n"
    "its summary.json); its summary.json is read, and its metrics.jsonl for the spread. One table:\n"
    "a row per run, sorted by ranks (then nodes): ranks, nodes, devices per rank (GPUs per rank with\n"
    "cuda, compute threads per rank on cpu), global batch, img/s \xc2\xb1 sd, speedup, efficiency and\n"
    "the phases of a step in ms after warm-up (data wait, forward, backward, exposed comm, optimizer).\n"
    "Writes OUT/scaling.csv (columns ranks,nodes,devices_per_rank,global_batch,img_per_s,\n"
    "img_per_s_spread,speedup,efficiency,data_ms,forward_ms,backward_ms,comm_exposed_ms,optimizer_ms,\n"
    "run; efficiency as a fraction, an empty field where a value is unknown) and OUT/scaling.svg\n"
    "(throughput and efficiency against ranks with the ideal lines; log2 axis when every rank count\n"
    "is a power of two; opens in any browser).\n"
    "\n"
    "The sweep: every run the same arch, image_size, device and precision (else exit 2 naming two\n"
    "runs and the key; --group reports each configuration apart instead), and either the same\n"
    "batch_per_rank (weak scaling) or the same global_batch (strong scaling); runs that differ in\n"
    "both are exit 2. The baseline is the run with the fewest ranks N0 (fewest nodes, then the first\n"
    "given, on a tie):\n"
    "  speedup     S_N = img/s_N / img/s_N0            (strong scaling: T_N0 / T_N per step)\n"
    "  efficiency  E_N = (img/s_N / N) / (img/s_N0 / N0)   (README; strong scaling: S_N / (N / N0))\n"
    "img/s is summary.json's img_per_s (every step after train's warm-up over its wall time); sd is\n"
    "the sample standard deviation of metrics.jsonl's per-interval img_per_s over the intervals that\n"
    "start after the warm-up ('-' with fewer than two). A RUN_DIR without summary.json (missing, or\n"
    "not finished) is exit 2.\n"
    "\n"
    "A RUN_DIR holds one run's files: summary.json, config.json and every metrics.jsonl line carry the\n"
    "run's run_id (kept by a resumed run). Another run's summary.json (its run_id not config.json's),\n"
    "or a metrics.jsonl with none of the run's lines, is exit 2 naming the file and both run ids;\n"
    "another run's lines in metrics.jsonl are left out and named (file, lines, run_id). Runs from\n"
    "before run ids are read as before, said once.\n"
    "\n"
    "Learning (runs trained with --val): a second table, a row per run with validation points, sorted\n"
    "by ranks then global batch: optimizer, schedule, --bn-eval, evaluations, epochs, final and best\n"
    "validation top-1 and,\n"
    "with --target-top1, the target and the epochs and wall time to it (the run's, over all its jobs,\n"
    "at the first evaluation that reached it: MLPerf's time to accuracy; 'missed' when it ended\n"
    "below). Writes OUT/learning.csv (columns ranks,nodes,global_batch,optimizer,schedule,bn_eval,evaluations,epochs,\n"
    "final_top1,best_top1,target_top1,target_reached,target_epoch,target_time_s,run) and\n"
    "OUT/learning.svg (validation top-1 against epochs and against wall time, a line per run, the\n"
    "target dashed). A sweep of batch sizes on the same ranks is neither weak nor strong scaling: it\n"
    "gets no scaling table, only the learning one, when every run of it has validation points. Without\n"
    "validation points anywhere the report says the learning table is left out, and why.";

/* RUN_DIR... apart from the options (mnt_parse_opts takes one argument per row): an option and
 * its value go to oargv, everything else is a run directory */
static void split_args(int argc, char **argv, const mnt_opt *opts, char **oargv, int *oargc, const char **dirs,
                       int *ndirs) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !a[1]) {
      dirs[(*ndirs)++] = a;
      continue;
    }
    oargv[(*oargc)++] = argv[i];
    const mnt_opt *o = NULL;
    if (a[1] == '-') {
      size_t len = strcspn(a + 2, "=");
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (strlen(p->name) == len && !strncmp(p->name, a + 2, len) && !a[2 + len]) o = p;
    } else if (!a[2]) {
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (p->letter == a[1]) o = p;
    }
    if (o && o->type != MNT_OPT_FLAG && i + 1 < argc) oargv[(*oargc)++] = argv[++i]; /* its value */
  }
}

/* said once for the report: the runs from before run ids (read as before); and each run given twice */
static void say_identities(const mnt_report_run *r, int n) {
  char names[512] = "";
  size_t len = 0;
  int old = 0;
  for (int i = 0; i < n; i++) {
    if (!r[i].run_id[0]) {
      if (old++ < 8 && len < sizeof names)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", r[i].dir);
      continue;
    }
    for (int k = 0; k < i; k++)
      if (!strcmp(r[k].run_id, r[i].run_id)) {
        MNT_WARN("%s and %s are the same run (run_id %s): two rows of one run (a copied directory, or the outputs of "
                 "two jobs of one run)", r[k].dir, r[i].dir, r[i].run_id);
        break;
      }
  }
  if (old)
    MNT_WARN("%d run%s from before run ids (no run_id in summary.json): %s%s: read as before, without checking that "
             "%s files are one run's", old, old == 1 ? "" : "s", names, old > 8 ? ", ..." : "", old == 1 ? "its" : "their");
}

/* runs of one configuration share a group; without --group, a second configuration is refused
 * naming the first key the two differ in */
static int group_runs(mnt_report_run *runs, int ndirs, int group) {
  for (int i = 1; i < ndirs; i++) {
    int j = 0;
    while (j < i && !same_config(&runs[j], &runs[i])) j++;
    if (j < i) {
      runs[i].group = runs[j].group;
    } else if (!group) {
      char d[200];
      config_diff(&runs[0], &runs[i], d, sizeof d);
      MNT_ERR("%s and %s differ in %s: not one sweep (compare like with like, or --group to report each "
              "configuration apart)", runs[0].dir, runs[i].dir, d);
      return MNT_EARG;
    }
  }
  return MNT_OK;
}

int mnt_report_main(mnt_world *w, int argc, char **argv) {
  (void)w; /* reads files: runs anywhere, no PMIx */
  const char *out = ".", *trace = NULL;
  char trace_run[MNT_RUN_ID_HEX + 1] = ""; /* the run the --trace files are of ("" for version 1 files) */
  int group = 0, help = 0;
  const mnt_opt opts[] = {
      {"out", 'o', MNT_OPT_PATH, &out, "DIR",
       "where scaling.csv, scaling.svg, learning.csv and learning.svg go (default: the current directory; created)", 0, 0},
      {"group", 0, MNT_OPT_FLAG, &group, NULL,
       "several sweeps: grouped by arch, image_size, device and precision, a table and "
       "scaling-ARCH-SIZEpx-DEVICE-PRECISION.{csv,svg} each",
       0, 0},
      {"trace", 0, MNT_OPT_PATH, &trace, "DIR",
       "merge the timelines of mntrain train --trace DIR into OUT/trace.json (Chrome trace format: Perfetto, "
       "chrome://tracing; one process per rank, one track per thread, on rank 0's clock) and OUT/trace.svg (the "
       "slowest traced step, the critical rank marked); one job's files only (exit 2 naming a file of another "
       "rank, job or size, or one not a trace); a rank's incomplete timeline is named; RUN_DIRs are then optional",
       0, 0},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  /* RUN_DIR... apart from the options (mnt_parse_opts takes one argument per row) */
  char **oargv = calloc((size_t)argc + 1, sizeof *oargv);
  const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
  mnt_report_run *runs = NULL;
  int *strong = NULL, *start = NULL; /* per configuration: strong scaling (-1: no scaling table); its first row */
  char (*why)[4 * MNT_PATH_MAX + 512] = NULL; /* per configuration: why there is no scaling table */
  int oargc = 0, ndirs = 0, ngroups = 0, st = MNT_OK;
  if (!oargv || !dirs) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
    goto out;
  }
  split_args(argc, argv, opts, oargv, &oargc, dirs, &ndirs);
  MNT_CHECK_GOTO(mnt_parse_opts("report", opts, oargc, oargv, &help, 0), st, out);
  if (help) {
    mnt_print_help(stdout, "mntrain report RUN_DIR... [--out DIR] [--group] [--trace DIR]", ABOUT, opts);
    goto out;
  }
  if (trace) {
    MNT_CHECK_GOTO(mnt_report_trace(trace, out, trace_run), st, out);
    if (ndirs == 0) goto out;
    printf("\n");
  }
  if (ndirs == 0) {
    st = mnt_usage_error("report", "missing RUN_DIR (see 'mntrain report --help')");
    goto out;
  }
  if (!(runs = calloc((size_t)ndirs, sizeof *runs))) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
    goto out;
  }
  for (int i = 0; i < ndirs && st == MNT_OK; i++) st = read_run(dirs[i], i, &runs[i]);
  if (st == MNT_OK) say_identities(runs, ndirs);
  if (st == MNT_OK && trace_run[0]) { /* the timeline of one of the runs tabled, or said otherwise */
    int of = 0, ids = 0;
    for (int i = 0; i < ndirs; i++) of |= !strcmp(runs[i].run_id, trace_run), ids |= runs[i].run_id[0] != 0;
    if (!of && ids)
      MNT_WARN("--trace %s is of run %s, which none of the run directories given is: the timeline and the tables "
               "below are of different runs", trace, trace_run);
  }
  if (st == MNT_OK) st = group_runs(runs, ndirs, group);
  if (st != MNT_OK) goto out;
  qsort(runs, (size_t)ndirs, sizeof *runs, cmp_run);
  strong = calloc((size_t)ndirs, sizeof *strong);
  why = calloc((size_t)ndirs, sizeof *why);
  /* ndirs > 0 here; said again so that gcc 13 at -O3 can bound the size (-Walloc-size-larger-than) */
  start = calloc(ndirs > 0 ? (size_t)ndirs + 1 : 1, sizeof *start);
  if (!strong || !start || !why) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
  }
  for (int i = 0; i < ndirs && st == MNT_OK; i++)
    if (i == 0 || runs[i].group != runs[i - 1].group) start[ngroups++] = i;
  if (st == MNT_OK) start[ngroups] = ndirs;
  /* a sweep that is neither weak nor strong scaling (batch sizes on the same ranks): no scaling
   * table, but still a learning table when every run of it has validation points */
  for (int g = 0; g < ngroups && st == MNT_OK; g++) {
    int n = start[g + 1] - start[g], curves = 1;
    if (scale(runs + start[g], n, &strong[g], why[g], sizeof why[g]) == MNT_OK) continue;
    for (int i = start[g]; i < start[g + 1]; i++) curves &= runs[i].nval > 0;
    if (curves) {
      strong[g] = -1;
    } else {
      MNT_ERR("%s (a sweep of batch sizes is reported when every run has validation points: train --val)", why[g]);
      st = MNT_EARG;
    }
  }
  if (st == MNT_OK) st = mnt_dir_secure(out, "--out", 1, MNT_DIR_FILES);
  for (int g = 0; g < ngroups && st == MNT_OK; g++) {
    const mnt_report_run *r = runs + start[g];
    int n = start[g + 1] - start[g];
    char csv[MNT_PATH_MAX], svg[MNT_PATH_MAX];
    if (g) printf("\n");
    if (strong[g] < 0) {
      printf("== %s, %lld px, %s, %s: no scaling table: %s\n", r[0].arch, (long long)r[0].image_size, r[0].device,
             r[0].precision, why[g]);
      continue;
    }
    out_name(csv, sizeof csv, out, r, ngroups > 1, "csv");
    out_name(svg, sizeof svg, out, r, ngroups > 1, "svg");
    print_table(r, n, strong[g]);
    mnt_report_slow_ranks(r, n);
    mnt_report_rank_losses(r, n);
    if ((st = write_csv(csv, r, n)) == MNT_OK && (st = mnt_report_write_svg(svg, r, n, strong[g])) == MNT_OK)
      printf("   wrote %s and %s\n", csv, svg);
  }
  if (st == MNT_OK) {
    printf("\n");
    st = mnt_report_learning(runs, ndirs, out);
  }
  fflush(stdout);
out:
  for (int i = 0; runs && i < ndirs; i++) free(runs[i].val);
  free(why);
  free(strong);
  free(start);
  free(runs);
  free(oargv);
  free(dirs);
  return st;
}
