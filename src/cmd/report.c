/* cmd/report.c — `mntrain report RUN_DIR...` (see analysis.h): the scaling table of a sweep of runs
 * from their summary.json (metrics.jsonl for the spread), and OUT/scaling.csv and OUT/scaling.svg
 * (written here with fprintf: throughput and efficiency against ranks, with the ideal lines).
 * The numbers (DESIGN.md "Metrics"), with N0 the fewest ranks of the sweep (the baseline run):
 *   speedup    S_N = ips_N / ips_N0
 *   efficiency E_N = (ips_N / N) / (ips_N0 / N0)
 * Weak scaling (every run the same batch_per_rank) and strong scaling (every run the same
 * global_batch) share both formulas: with a fixed global batch G a step takes T = G / ips, so
 * S_N = T_N0 / T_N and E_N = S_N / (N / N0), the same numbers. A sweep that is neither is refused.
 * ips is summary.json's img_per_s (all steps after train's warm-up over their wall time); the
 * spread is the sample standard deviation of the per-interval img_per_s of metrics.jsonl over the
 * intervals that start after the warm-up (the steps summary.json's img_per_s leaves out). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis.h"
#include "args.h"
#include "log.h"
#include "safefs.h"

enum { NPH = 5, DIRMAX = 1024 };
static const char *const PHASE_KEYS[NPH] = {"data", "forward", "backward", "comm_exposed", "optimizer"};

typedef struct run {
  char dir[DIRMAX]; /* as given (of a summary.json path: its directory) */
  int order;        /* position on the command line */
  int group;        /* with --group: the order of the first run of its configuration */
  char arch[64], device[32], precision[32];
  json_int_t image_size, ranks, nodes, devices, batch_per_rank, global_batch;
  double ips, ph[NPH];
  double spread; /* NAN with fewer than two intervals after warm-up */
  int intervals, have_metrics;
  double speedup, eff;
} run;

/* ---- reading a run ------------------------------------------------------------------------------ */

static int get_int(json_t *j, const char *key, const char *path, json_int_t lo, json_int_t *out) {
  json_t *v = json_object_get(j, key);
  if (!json_is_integer(v) || json_integer_value(v) < lo) {
    MNT_ERR("%s: '%s' is %s (an integer of at least %lld)", path, key, v ? "not valid" : "missing", (long long)lo);
    return MNT_EARG;
  }
  *out = json_integer_value(v);
  return MNT_OK;
}

static int get_str(json_t *j, const char *key, const char *path, char *out, size_t n) {
  const char *s = json_string_value(json_object_get(j, key));
  if (!s || !*s || strlen(s) >= n) {
    MNT_ERR("%s: '%s' is %s (a short string)", path, key, json_object_get(j, key) ? "not valid" : "missing");
    return MNT_EARG;
  }
  snprintf(out, n, "%s", s);
  return MNT_OK;
}

static json_int_t opt_int(json_t *j, const char *key, json_int_t dflt) {
  json_t *v = json_object_get(j, key);
  return json_is_integer(v) ? json_integer_value(v) : dflt;
}

/* metrics.jsonl: the intervals (lines with "step" and "img_per_s"; validation and checkpoint lines
 * have none) whose first step comes after step `timed_from` (an interval's first step is the
 * previous interval's last + 1). Welford's mean and variance. */
static int read_metrics(run *r, json_int_t timed_from) {
  char path[DIRMAX + 32];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  r->spread = NAN;
  FILE *f = fopen(path, "r");
  if (!f) {
    if (errno == ENOENT) return MNT_OK; /* no spread, said in the table */
    MNT_ERR("%s: cannot read: %s", path, strerror(errno));
    return MNT_ESYS;
  }
  r->have_metrics = 1;
  char *line = NULL;
  size_t cap = 0;
  long long prev = 0, lineno = 0;
  double mean = 0, m2 = 0;
  int n = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    if (line[strspn(line, " \t\r\n")] == '\0') continue;
    json_error_t e;
    json_t *l = json_loads(line, 0, &e);
    json_t *step = json_object_get(l, "step"), *ips = json_object_get(l, "img_per_s");
    if (!json_is_object(l)) {
      MNT_WARN("%s:%lld: not a JSON object (%s): line left out of the spread", path, lineno, l ? "" : e.text);
    } else if (json_is_integer(step) && ips) {
      long long s = (long long)json_integer_value(step);
      if (prev >= timed_from && s > prev && json_is_number(ips)) {
        double x = json_number_value(ips), d = x - mean;
        n++;
        mean += d / n;
        m2 += d * (x - mean);
      }
      prev = s;
    }
    json_decref(l);
  }
  int bad = ferror(f);
  free(line);
  fclose(f);
  if (bad) {
    MNT_ERR("%s: read error", path);
    return MNT_ESYS;
  }
  r->intervals = n;
  if (n >= 2) r->spread = sqrt(m2 / (n - 1));
  return MNT_OK;
}

static int read_run(const char *arg, int order, run *r) {
  memset(r, 0, sizeof *r);
  r->order = r->group = order;
  char path[DIRMAX + 32];
  struct stat sb;
  if (strlen(arg) >= DIRMAX - 1) {
    MNT_ERR("%.64s...: path too long", arg);
    return MNT_EARG;
  }
  if (stat(arg, &sb) != 0) {
    MNT_ERR("%s: %s (a run directory, the --out of mntrain train, expected)", arg, strerror(errno));
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
  json_error_t e;
  json_t *j = json_load_file(path, 0, &e);
  if (!json_is_object(j)) {
    MNT_ERR("%s: not a summary: %s (line %d)", path, j ? "not a JSON object" : e.text, e.line);
    json_decref(j);
    return MNT_EARG;
  }
  int st = MNT_OK;
  if (st == MNT_OK) st = get_str(j, "arch", path, r->arch, sizeof r->arch);
  if (st == MNT_OK) st = get_str(j, "device", path, r->device, sizeof r->device);
  if (st == MNT_OK) st = get_int(j, "image_size", path, 1, &r->image_size);
  if (st == MNT_OK) st = get_int(j, "ranks", path, 1, &r->ranks);
  if (st == MNT_OK) st = get_int(j, "nodes", path, 1, &r->nodes);
  if (st == MNT_OK) st = get_int(j, "batch_per_rank", path, 1, &r->batch_per_rank);
  if (st == MNT_OK) st = get_int(j, "global_batch", path, 1, &r->global_batch);
  if (st == MNT_OK) { /* older summaries have no precision: fp32 was the only one */
    const char *p = json_string_value(json_object_get(j, "precision"));
    snprintf(r->precision, sizeof r->precision, "%s", p && *p ? p : "fp32");
  }
  json_t *ips = json_object_get(j, "img_per_s"), *ph = json_object_get(j, "phases_ms");
  if (st == MNT_OK && !(json_is_number(ips) && json_number_value(ips) > 0 && isfinite(json_number_value(ips)))) {
    MNT_ERR("%s: 'img_per_s' is %s (a throughput above 0)", path, ips ? "not valid" : "missing");
    st = MNT_EARG;
  }
  if (st == MNT_OK && !json_is_object(ph)) {
    MNT_ERR("%s: 'phases_ms' is %s (an object: data, forward, backward, comm_exposed, optimizer)", path,
            ph ? "not valid" : "missing");
    st = MNT_EARG;
  }
  if (st == MNT_OK) {
    r->ips = json_number_value(ips);
    for (int k = 0; k < NPH; k++) { /* null: not finite when written */
      json_t *v = json_object_get(ph, PHASE_KEYS[k]);
      r->ph[k] = json_is_number(v) ? json_number_value(v) : NAN;
    }
    /* devices per rank: GPUs with cuda (one per rank), compute threads per rank on cpu */
    json_int_t thr = opt_int(j, "threads_per_rank", 1);
    r->devices = opt_int(j, "devices_per_rank", !strcmp(r->device, "cpu") && thr > 0 ? thr : 1);
    /* train's warm-up (cmd/train.c): the first 5 steps of a job of more than 20, 1 of more than 4 */
    json_int_t todo = opt_int(j, "steps_this_job", opt_int(j, "steps", 0));
    json_int_t warm = opt_int(j, "warmup_steps", todo > 20 ? 5 : todo > 4 ? 1 : 0);
    st = read_metrics(r, opt_int(j, "resumed_from_step", 0) + warm);
  }
  json_decref(j);
  return st;
}

/* ---- the sweep ---------------------------------------------------------------------------------- */

static int same_config(const run *a, const run *b) {
  return !strcmp(a->arch, b->arch) && a->image_size == b->image_size && !strcmp(a->device, b->device) &&
         !strcmp(a->precision, b->precision);
}

/* the first key in which a and b differ, with both values */
static void config_diff(const run *a, const run *b, char *out, size_t n) {
  if (strcmp(a->arch, b->arch)) snprintf(out, n, "arch (%s vs %s)", a->arch, b->arch);
  else if (a->image_size != b->image_size)
    snprintf(out, n, "image_size (%lld vs %lld)", (long long)a->image_size, (long long)b->image_size);
  else if (strcmp(a->device, b->device)) snprintf(out, n, "device (%s vs %s)", a->device, b->device);
  else snprintf(out, n, "precision (%s vs %s)", a->precision, b->precision);
}

static int cmp_run(const void *pa, const void *pb) {
  const run *a = pa, *b = pb;
  if (a->group != b->group) return a->group < b->group ? -1 : 1;
  if (a->ranks != b->ranks) return a->ranks < b->ranks ? -1 : 1;
  if (a->nodes != b->nodes) return a->nodes < b->nodes ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

/* r[0..n) sorted, one configuration: weak or strong scaling, else MNT_EARG naming the runs */
static int scale(run *r, int n, int *strong) {
  int ib = -1, ig = -1;
  for (int i = 1; i < n; i++) {
    if (ib < 0 && r[i].batch_per_rank != r[0].batch_per_rank) ib = i;
    if (ig < 0 && r[i].global_batch != r[0].global_batch) ig = i;
  }
  if (ib >= 0 && ig >= 0) {
    char also[2 * DIRMAX + 16];
    if (ig == ib) snprintf(also, sizeof also, "and");
    else snprintf(also, sizeof also, "and %s and %s", r[0].dir, r[ig].dir);
    MNT_ERR("%s and %s differ in batch_per_rank (%lld vs %lld) %s in global_batch (%lld vs %lld): neither weak "
            "scaling (the same batch_per_rank) nor strong scaling (the same global_batch)",
            r[0].dir, r[ib].dir, (long long)r[0].batch_per_rank, (long long)r[ib].batch_per_rank, also,
            (long long)r[0].global_batch, (long long)r[ig].global_batch);
    return MNT_EARG;
  }
  *strong = ib >= 0;
  const run *b = &r[0];
  for (int i = 0; i < n; i++) {
    r[i].speedup = r[i].ips / b->ips;
    r[i].eff = (r[i].ips / (double)r[i].ranks) / (b->ips / (double)b->ranks);
  }
  return MNT_OK;
}

/* ---- output ------------------------------------------------------------------------------------- */

static void describe(const run *r, int strong, char *out, size_t len) {
  if (strong)
    snprintf(out, len, "strong scaling, global batch %lld", (long long)r[0].global_batch);
  else
    snprintf(out, len, "weak scaling, %lld images per rank", (long long)r[0].batch_per_rank);
}

static void print_table(const run *r, int n, int strong) {
  char what[128];
  describe(r, strong, what, sizeof what);
  printf("== %s, %lld px, %s, %s: %s; baseline %lld rank%s (%s)\n", r[0].arch, (long long)r[0].image_size,
         r[0].device, r[0].precision, what, (long long)r[0].ranks, r[0].ranks == 1 ? "" : "s", r[0].dir);
  printf("%5s %5s %8s %12s %10s %-11s %7s %10s %8s %8s %8s %8s %8s  %s\n", "ranks", "nodes", "dev/rank", "global batch",
         "img/s", " \xc2\xb1 sd", "speedup", "efficiency", "data ms", "fwd ms", "bwd ms", "comm ms", "opt ms", "run");
  for (int i = 0; i < n; i++) {
    const run *x = &r[i];
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

/* FILE for DIR/.NAME.XXXXXX (created exclusively: io/safefs.h); commit renames it over path when
 * every write succeeded */
static FILE *open_tmp(const char *path, char *tmp, size_t n) {
  int fd = mnt_tmp_create(path, tmp, n);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) {
    MNT_ERR("%s: cannot open: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
  }
  return f;
}

static int commit(FILE *f, const char *tmp, const char *path) {
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    MNT_ERR("%s: cannot write: %s", tmp, errno ? strerror(errno) : "write error");
    unlink(tmp);
    return MNT_ESYS;
  }
  return mnt_tmp_commit(tmp, path);
}

/* ",v" with `digits` decimals, or "," alone when v is unknown */
static void csv_num(FILE *f, int digits, double v) {
  if (isnan(v)) fputc(',', f);
  else fprintf(f, ",%.*f", digits, v);
}

static int write_csv(const char *path, const run *r, int n) {
  char tmp[DIRMAX + 320];
  FILE *f = open_tmp(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "ranks,nodes,devices_per_rank,global_batch,img_per_s,img_per_s_spread,speedup,efficiency,data_ms,"
             "forward_ms,backward_ms,comm_exposed_ms,optimizer_ms,run\n");
  for (int i = 0; i < n; i++) {
    const run *x = &r[i];
    fprintf(f, "%lld,%lld,%lld,%lld", (long long)x->ranks, (long long)x->nodes, (long long)x->devices,
            (long long)x->global_batch);
    csv_num(f, 2, x->ips);
    csv_num(f, 2, x->spread);
    csv_num(f, 4, x->speedup);
    csv_num(f, 4, x->eff);
    for (int k = 0; k < NPH; k++) csv_num(f, 3, x->ph[k]);
    fputc(',', f);
    if (strpbrk(x->dir, ",\"\r\n")) { /* RFC 4180 */
      fputc('"', f);
      for (const char *c = x->dir; *c; c++) {
        if (*c == '"') fputc('"', f);
        fputc(*c, f);
      }
      fputc('"', f);
    } else {
      fputs(x->dir, f);
    }
    fputc('\n', f);
  }
  return commit(f, tmp, path);
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

/* 1, 2 or 5 times a power of ten: about `target` steps over range */
static double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  double raw = range / target, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

typedef struct axis {
  double lo, hi; /* data */
  int log2;
  double px0, px1; /* pixels of lo and hi */
} axis;

static double ax_t(const axis *a, double v) { return a->log2 ? log2(v) : v; }
static double ax_px(const axis *a, double v) {
  return a->px0 + (ax_t(a, v) - ax_t(a, a->lo)) / (ax_t(a, a->hi) - ax_t(a, a->lo)) * (a->px1 - a->px0);
}

static int is_pow2(json_int_t v) { return v > 0 && (v & (v - 1)) == 0; }

enum { SVG_W = 1000, SVG_H = 470, PLOT_TOP = 90, PLOT_H = 300, PLOT_W = 380 };

static int write_svg(const char *path, const run *r, int n, int strong) {
  char tmp[DIRMAX + 320], what[128];
  FILE *f = open_tmp(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  describe(r, strong, what, sizeof what);
  const run *b = &r[0];
  json_int_t nmin = r[0].ranks, nmax = r[0].ranks;
  int pow2 = 1;
  double ymax0 = 0, emax = 1.0;
  for (int i = 0; i < n; i++) {
    if (r[i].ranks < nmin) nmin = r[i].ranks;
    if (r[i].ranks > nmax) nmax = r[i].ranks;
    pow2 &= is_pow2(r[i].ranks);
    double top = r[i].ips + (isnan(r[i].spread) ? 0 : r[i].spread);
    if (top > ymax0) ymax0 = top;
    if (r[i].eff > emax) emax = r[i].eff;
  }
  axis x = {(double)nmin, (double)nmax, pow2 && nmax > nmin, 0, 0};
  if (nmax == nmin) { /* one rank count: a little room either side */
    x.lo = (double)nmin - 1;
    x.hi = (double)nmax + 1;
  }
  double ideal_max = b->ips * x.hi / (double)b->ranks;
  if (ideal_max > ymax0) ymax0 = ideal_max;
  double ystep[2] = {nice_step(ymax0, 5), nice_step(emax * 1.05, 6)};
  double ytop[2] = {ceil(ymax0 * 1.02 / ystep[0]) * ystep[0], ceil(emax * 1.05 / ystep[1]) * ystep[1]};

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
          SVG_W, SVG_H, SVG_W, SVG_H);
  fprintf(f, "<title>mntrain report: ");
  xml_text(f, b->arch);
  fprintf(f, " %lld px %s %s, %s</title>\n", (long long)b->image_size, b->device, b->precision, what);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, SVG_H);
  fprintf(f, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">", SVG_W / 2);
  xml_text(f, b->arch);
  fprintf(f, ", %lld px, %s, %s: %s</text>\n", (long long)b->image_size, b->device, b->precision, what);
  fprintf(f, "<text x=\"%d\" y=\"50\" text-anchor=\"middle\" fill=\"#444\">baseline: %lld rank%s, %.1f img/s; "
             "efficiency E = (img/s_N / N) / (img/s_N0 / N0)</text>\n",
          SVG_W / 2, (long long)b->ranks, b->ranks == 1 ? "" : "s", b->ips);

  for (int p = 0; p < 2; p++) { /* 0: throughput, 1: efficiency */
    double left = p == 0 ? 90 : 590, top = PLOT_TOP, bottom = PLOT_TOP + PLOT_H;
    x.px0 = left + 20;
    x.px1 = left + PLOT_W - 20;
    axis y = {0, ytop[p], 0, bottom, top};
    fprintf(f, "<g id=\"%s\">\n", p == 0 ? "throughput" : "efficiency");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
            left + PLOT_W / 2.0, top - 14, p == 0 ? "throughput" : "efficiency");
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
            PLOT_W, PLOT_H);
    for (double v = 0; v <= ytop[p] * (1 + 1e-9); v += ystep[p]) { /* y grid and labels */
      double py = ax_px(&y, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", left, py,
              left + PLOT_W, py);
      if (p == 0 && ystep[0] >= 1)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", left - 6, py + 4, v);
      else if (p == 0)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left - 6, py + 4, v);
      else
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n", left - 6, py + 4, v * 100);
    }
    if (x.log2) { /* x ticks: every power of two */
      for (double v = x.lo; v <= x.hi * (1 + 1e-9); v *= 2) {
        double px = ax_px(&x, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", px, top, px, bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, bottom + 16, v);
      }
    } else {
      double s = nice_step(x.hi - x.lo, 6);
      if (s < 1) s = 1;
      for (double v = ceil(x.lo / s) * s; v <= x.hi * (1 + 1e-9); v += s) {
        double px = ax_px(&x, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", px, top, px, bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, bottom + 16, v);
      }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">ranks%s</text>\n", left + PLOT_W / 2.0,
            bottom + 36, x.log2 ? " (log2 scale)" : "");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
            left - 56, top + PLOT_H / 2.0, left - 56, top + PLOT_H / 2.0,
            p == 0 ? "images per second" : "efficiency (% of ideal)");
    /* the ideal: linear in ranks from the baseline (a curve on a log2 axis: sampled), or 100% */
    fprintf(f, "<polyline id=\"ideal-%s\" class=\"ideal\" fill=\"none\" stroke=\"#777\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"6 4\" points=\"",
            p == 0 ? "throughput" : "efficiency");
    for (int k = 0; k <= 64; k++) {
      double t = ax_t(&x, x.lo) + (ax_t(&x, x.hi) - ax_t(&x, x.lo)) * k / 64.0;
      double v = x.log2 ? exp2(t) : t;
      double yv = p == 0 ? b->ips * v / (double)b->ranks : 1.0;
      fprintf(f, "%s%.1f,%.1f", k ? " " : "", ax_px(&x, v), ax_px(&y, yv));
    }
    fprintf(f, "\"/>\n");
    /* measured: error bars (± sd), the line, the points with a tooltip */
    if (p == 0)
      for (int i = 0; i < n; i++) {
        if (isnan(r[i].spread)) continue;
        double px = ax_px(&x, (double)r[i].ranks), y0 = ax_px(&y, r[i].ips - r[i].spread),
               y1 = ax_px(&y, r[i].ips + r[i].spread);
        fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#1f77b4\" fill=\"none\"/>\n", px,
                y0, y1, px - 4, y0, px + 4, px - 4, y1, px + 4);
      }
    fprintf(f, "<polyline id=\"measured-%s\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"",
            p == 0 ? "throughput" : "efficiency");
    for (int i = 0; i < n; i++)
      fprintf(f, "%s%.1f,%.1f", i ? " " : "", ax_px(&x, (double)r[i].ranks),
              ax_px(&y, p == 0 ? r[i].ips : r[i].eff));
    fprintf(f, "\"/>\n");
    for (int i = 0; i < n; i++) {
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f77b4\"><title>%lld ranks on %lld nodes: %.1f img/s",
              ax_px(&x, (double)r[i].ranks), ax_px(&y, p == 0 ? r[i].ips : r[i].eff), (long long)r[i].ranks,
              (long long)r[i].nodes, r[i].ips);
      if (!isnan(r[i].spread)) fprintf(f, " \xc2\xb1 %.1f", r[i].spread);
      fprintf(f, ", speedup %.2f, efficiency %.1f%% (", r[i].speedup, 100 * r[i].eff);
      xml_text(f, r[i].dir);
      fprintf(f, ")</title></circle>\n");
    }
    /* legend, top left inside the frame */
    double lx = left + 12, ly = top + 16;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"40\" fill=\"white\" fill-opacity=\"0.85\" "
               "stroke=\"#ccc\"/>\n",
            lx - 6, ly - 12, p == 0 ? 250 : 150);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>"
               "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f77b4\"/>\n",
            lx, ly - 4, lx + 28, ly - 4, lx + 14, ly - 4);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">measured%s</text>\n", lx + 36, ly, p == 0 ? " (\xc2\xb1 sd)" : "");
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#777\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"6 4\"/>\n",
            lx, ly + 14, lx + 28, ly + 14);
    if (p == 0)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ideal: %.1f img/s \xc3\x97 N / %lld</text>\n", lx + 36, ly + 18,
              b->ips, (long long)b->ranks);
    else
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ideal: 100%%</text>\n", lx + 36, ly + 18);
    fprintf(f, "</g>\n");
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\" font-size=\"11\">mntrain report of %d "
             "run%s (summary.json; \xc2\xb1 sd over the metrics.jsonl intervals after warm-up)</text>\n",
          SVG_W / 2, SVG_H - 12, n, n == 1 ? "" : "s");
  fprintf(f, "</svg>\n");
  return commit(f, tmp, path);
}

/* scaling.csv / scaling.svg, or with several configurations scaling-ARCH-SIZEpx-DEVICE-PRECISION.* */
static void out_name(char *p, size_t n, const char *dir, const run *r, int several, const char *ext) {
  if (!several) {
    snprintf(p, n, "%s/scaling.%s", dir, ext);
    return;
  }
  char tag[160];
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
    "  efficiency  E_N = (img/s_N / N) / (img/s_N0 / N0)   (DESIGN.md; strong scaling: S_N / (N / N0))\n"
    "img/s is summary.json's img_per_s (every step after train's warm-up over its wall time); sd is\n"
    "the sample standard deviation of metrics.jsonl's per-interval img_per_s over the intervals that\n"
    "start after the warm-up ('-' with fewer than two). A RUN_DIR without summary.json (missing, or\n"
    "not finished) is exit 2.";

int mnt_report_main(mnt_world *w, int argc, char **argv) {
  (void)w; /* reads files: runs anywhere, no PMIx */
  const char *out = ".";
  int group = 0, help = 0;
  const mnt_opt opts[] = {
      {"out", 'o', MNT_OPT_STRING, &out, "DIR",
       "where scaling.csv and scaling.svg go (default: the current directory; created)", 0, 0},
      {"group", 0, MNT_OPT_FLAG, &group, NULL,
       "several sweeps: grouped by arch, image_size, device and precision, a table and "
       "scaling-ARCH-SIZEpx-DEVICE-PRECISION.{csv,svg} each",
       0, 0},
      {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  /* RUN_DIR... apart from the options (mnt_parse_opts takes one argument per row) */
  char **oargv = calloc((size_t)argc + 1, sizeof *oargv);
  const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
  run *runs = NULL;
  int *strong = NULL, *start = NULL; /* per configuration: strong scaling; its first row */
  int oargc = 0, ndirs = 0, ngroups = 0, st = MNT_OK;
  if (!oargv || !dirs) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
    goto done;
  }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || !a[1]) {
      dirs[ndirs++] = a;
      continue;
    }
    oargv[oargc++] = argv[i];
    const mnt_opt *o = NULL;
    if (a[1] == '-') {
      size_t len = strcspn(a + 2, "=");
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (strlen(p->name) == len && !strncmp(p->name, a + 2, len) && !a[2 + len]) o = p;
    } else if (!a[2]) {
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (p->letter == a[1]) o = p;
    }
    if (o && o->type != MNT_OPT_FLAG && i + 1 < argc) oargv[oargc++] = argv[++i]; /* its value */
  }
  if ((st = mnt_parse_opts("report", opts, oargc, oargv, &help, 0)) != MNT_OK) goto done;
  if (help) {
    mnt_print_help(stdout, "mntrain report RUN_DIR... [--out DIR] [--group]", ABOUT, opts);
    goto done;
  }
  if (ndirs == 0) {
    fprintf(stderr, "mntrain report: missing RUN_DIR (see 'mntrain report --help')\n");
    st = MNT_EARG;
    goto done;
  }
  if (!(runs = calloc((size_t)ndirs, sizeof *runs))) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
    goto done;
  }
  for (int i = 0; i < ndirs && st == MNT_OK; i++) st = read_run(dirs[i], i, &runs[i]);
  for (int i = 1; i < ndirs && st == MNT_OK; i++) {
    int j = 0;
    while (j < i && !same_config(&runs[j], &runs[i])) j++;
    if (j < i) {
      runs[i].group = runs[j].group;
    } else if (!group) {
      char d[200];
      config_diff(&runs[0], &runs[i], d, sizeof d);
      MNT_ERR("%s and %s differ in %s: not one sweep (compare like with like, or --group to report each "
              "configuration apart)", runs[0].dir, runs[i].dir, d);
      st = MNT_EARG;
    }
  }
  if (st != MNT_OK) goto done;
  qsort(runs, (size_t)ndirs, sizeof *runs, cmp_run);
  strong = calloc((size_t)ndirs, sizeof *strong);
  start = calloc((size_t)ndirs + 1, sizeof *start);
  if (!strong || !start) {
    MNT_ERR("out of memory");
    st = MNT_ENOMEM;
  }
  for (int i = 0; i < ndirs && st == MNT_OK; i++)
    if (i == 0 || runs[i].group != runs[i - 1].group) start[ngroups++] = i;
  if (st == MNT_OK) start[ngroups] = ndirs;
  for (int g = 0; g < ngroups && st == MNT_OK; g++) st = scale(runs + start[g], start[g + 1] - start[g], &strong[g]);
  if (st == MNT_OK && strlen(out) >= DIRMAX) {
    MNT_ERR("--out %.64s...: path too long", out);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = mnt_dir_secure(out, "--out", 1, MNT_DIR_FILES);
  for (int g = 0; g < ngroups && st == MNT_OK; g++) {
    const run *r = runs + start[g];
    int n = start[g + 1] - start[g];
    char csv[DIRMAX + 256], svg[DIRMAX + 256];
    out_name(csv, sizeof csv, out, r, ngroups > 1, "csv");
    out_name(svg, sizeof svg, out, r, ngroups > 1, "svg");
    if (g) printf("\n");
    print_table(r, n, strong[g]);
    if ((st = write_csv(csv, r, n)) == MNT_OK && (st = write_svg(svg, r, n, strong[g])) == MNT_OK)
      printf("   wrote %s and %s\n", csv, svg);
  }
  fflush(stdout);
done:
  free(strong);
  free(start);
  free(runs);
  free(oargv);
  free(dirs);
  return st;
}
