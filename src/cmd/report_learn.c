/* cmd/report_learn.c — the learning part of `mntrain report` (see report_internal.h): for every run
 * with validation points (train --val), the final and best validation top-1 and, with
 * --target-top1, the epochs and wall time to the target (MLPerf's time to accuracy: the run's wall
 * time, over all its jobs, at the evaluation that reached it); OUT/learning.csv and
 * OUT/learning.svg: validation top-1 against epochs and against wall time, one line per run, the
 * target dashed. Rows and lines in the order ranks, global batch, then as given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/cmd/report_internal.h"
#include "src/tmpfile.h"


int mnt_report_add_point(mnt_report_run *r, mnt_report_point p) {
  while (r->nval > 0 && r->val[r->nval - 1].step >= p.step) r->nval--; /* superseded by a resumed job */
  if (r->nval == r->capval) {
    int cap = r->capval ? 2 * r->capval : 64;
    mnt_report_point *v = realloc(r->val, (size_t)cap * sizeof *v);
    if (!v) {
      MNT_ERR("out of memory");
      return MNT_ENOMEM;
    }
    r->val = v;
    r->capval = cap;
  }
  r->val[r->nval++] = p;
  return MNT_OK;
}

static double best_of(const mnt_report_run *r) {
  double b = 0;
  for (int i = 0; i < r->nval; i++)
    if (r->val[i].top1 > b) b = r->val[i].top1;
  return b;
}

static const char *opt_name(const mnt_report_run *r) { return *r->optimizer ? r->optimizer : "sgd"; }
static const char *sched_name(const mnt_report_run *r) { return *r->schedule ? r->schedule : "step"; }
static const char *bn_name(const mnt_report_run *r) { return *r->bn_eval ? r->bn_eval : "running"; }

static int cmp_learn(const void *pa, const void *pb) {
  const mnt_report_run *a = *(const mnt_report_run *const *)pa, *b = *(const mnt_report_run *const *)pb;
  if (a->ranks != b->ranks) return a->ranks < b->ranks ? -1 : 1;
  if (a->global_batch != b->global_batch) return a->global_batch < b->global_batch ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

/* ---- the table and the CSV ---------------------------------------------------------------------- */

static void print_table(const mnt_report_run *const *r, int n, int targets) {
  printf("== learning: validation top-1 of %d run%s (metrics.jsonl)%s\n", n, n == 1 ? "" : "s",
         targets ? "; to target: the first evaluation at or above it, in epochs and in the run's wall time" : "");
  printf("%5s %12s %14s %10s %9s %6s %7s %11s %10s", "ranks", "global batch", "optimizer", "schedule", "bn-eval",
         "evals", "epochs", "final top-1", "best top-1");
  if (targets) printf(" %8s %10s %11s", "target", "to target", "time to it");
  printf("  run\n");
  for (int i = 0; i < n; i++) {
    const mnt_report_run *x = r[i];
    const mnt_report_point *last = &x->val[x->nval - 1];
    printf("%5lld %12lld %14s %10s %9s %6d %7.2f %10.2f%% %9.2f%%", x->ranks, x->global_batch, opt_name(x),
           sched_name(x), bn_name(x), x->nval, last->epoch, 100 * last->top1, 100 * best_of(x));
    if (targets) {
      char tg[32] = "-", ep[32] = "-", tm[32] = "-";
      if (x->target_reached >= 0) snprintf(tg, sizeof tg, "%.2f%%", 100 * x->target);
      if (x->target_reached == 0) snprintf(ep, sizeof ep, "missed");
      if (x->target_reached == 1 && !isnan(x->target_epoch)) snprintf(ep, sizeof ep, "%.2f ep", x->target_epoch);
      if (x->target_reached == 1 && !isnan(x->target_time)) snprintf(tm, sizeof tm, "%.1f s", x->target_time);
      printf(" %8s %10s %11s", tg, ep, tm);
    }
    printf("  %s\n", x->dir);
  }
  printf("   final: the last evaluation; best: the highest; evals: evaluations (a resumed job's replace the stopped "
         "job's after its checkpoint)\n");
}

static int write_csv(const char *path, const mnt_report_run *const *r, int n) {
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  fprintf(f, "ranks,nodes,global_batch,optimizer,schedule,bn_eval,evaluations,epochs,final_top1,best_top1,target_top1,target_reached,"
             "target_epoch,target_time_s,run\n");
  for (int i = 0; i < n; i++) {
    const mnt_report_run *x = r[i];
    fprintf(f, "%lld,%lld,%lld,", x->ranks, x->nodes, x->global_batch);
    mnt_report_csv_str(f, opt_name(x));
    fputc(',', f);
    mnt_report_csv_str(f, sched_name(x));
    fputc(',', f);
    mnt_report_csv_str(f, bn_name(x));
    fprintf(f, ",%d", x->nval);
    mnt_report_csv_num(f, 4, x->val[x->nval - 1].epoch);
    mnt_report_csv_num(f, 4, x->val[x->nval - 1].top1);
    mnt_report_csv_num(f, 4, best_of(x));
    mnt_report_csv_num(f, 4, x->target_reached >= 0 ? x->target : NAN);
    fprintf(f, ",%s", x->target_reached < 0 ? "" : x->target_reached ? "true" : "false");
    mnt_report_csv_num(f, 4, x->target_epoch);
    mnt_report_csv_num(f, 2, x->target_time);
    fputc(',', f);
    mnt_report_csv_str(f, x->dir);
    fputc('\n', f);
  }
  return mnt_tmp_fcommit(f, tmp, path);
}

/* ---- the SVG ------------------------------------------------------------------------------------ */

enum { W = 1000, PLOT_TOP = 80, PLOT_H = 300, PLOT_W = 380, LEGEND_TOP = 450, LEGEND_ROW = 18 };

/* ten colours that stay apart (Tableau's), then again dashed */
static const char *const COLOURS[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct frame {
  double left, x0, x1, y0, y1; /* data ranges */
} frame;

static double px_x(const frame *F, double v) { return F->left + 20 + (v - F->x0) / (F->x1 - F->x0) * (PLOT_W - 40); }
static double px_y(const frame *F, double v) { return PLOT_TOP + PLOT_H - (v - F->y0) / (F->y1 - F->y0) * PLOT_H; }

static void axes(FILE *f, const frame *F, const char *title, const char *xlabel, double ystep) {
  double top = PLOT_TOP, bottom = PLOT_TOP + PLOT_H;
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
          F->left + PLOT_W / 2.0, top - 14, title);
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", F->left, top,
          PLOT_W, PLOT_H);
  for (int k = 0; k <= MNT_REPORT_MAX_TICKS && F->y0 + k * ystep <= F->y1 + 1e-9; k++) {
    double v = F->y0 + k * ystep;
    double py = px_y(F, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", F->left, py,
            F->left + PLOT_W, py);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g%%</text>\n", F->left - 6, py + 4,
            round(v * 1e4) / 100);
  }
  double xs = mnt_report_nice_step(F->x1 - F->x0, 6);
  double x0 = ceil(F->x0 / xs) * xs;
  for (int k = 0; k <= MNT_REPORT_MAX_TICKS && x0 + k * xs <= F->x1 * (1 + 1e-9); k++) {
    double v = x0 + k * xs;
    double px = px_x(F, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", px, top, px, bottom);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", px, bottom + 16, v);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", F->left + PLOT_W / 2.0, bottom + 36,
          xlabel);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">validation "
             "top-1</text>\n",
          F->left - 56, top + PLOT_H / 2.0, F->left - 56, top + PLOT_H / 2.0);
}

/* run k's line against epochs (p = 0) or wall time (p = 1), with a tooltip per mnt_report_point */
static void curve(FILE *f, const frame *F, int p, const mnt_report_run *x, int k) {
  const char *c = COLOURS[k % 10];
  fprintf(f, "<polyline id=\"%s-%d\" class=\"run\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
          p == 0 ? "epochs" : "time", k, c, k >= 10 ? " stroke-dasharray=\"5 3\"" : "");
  int first = 1;
  for (int i = 0; i < x->nval; i++) {
    double v = p == 0 ? x->val[i].epoch : x->val[i].time;
    if (isnan(v)) continue;
    fprintf(f, "%s%.1f,%.1f", first ? "" : " ", px_x(F, v), px_y(F, x->val[i].top1));
    first = 0;
  }
  fprintf(f, "\"/>\n");
  for (int i = 0; i < x->nval; i++) {
    double v = p == 0 ? x->val[i].epoch : x->val[i].time;
    if (isnan(v)) continue;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>", px_x(F, v), px_y(F, x->val[i].top1), c);
    mnt_report_xml_text(f, x->dir);
    fprintf(f, ": step %lld, epoch %.2f", x->val[i].step, x->val[i].epoch);
    if (!isnan(x->val[i].time)) fprintf(f, ", %.1f s", x->val[i].time);
    fprintf(f, ": top-1 %.2f%%</title></circle>\n", 100 * x->val[i].top1);
  }
}

static int write_svg(const char *path, const mnt_report_run *const *r, int n) {
  double emax = 0, tmax = 0, ylo = 1, yhi = 0;
  int timed = 0;
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < r[i]->nval; j++) {
      const mnt_report_point *p = &r[i]->val[j];
      if (p->epoch > emax) emax = p->epoch;
      if (!isnan(p->time)) {
        timed = 1;
        if (p->time > tmax) tmax = p->time;
      }
      if (p->top1 < ylo) ylo = p->top1;
      if (p->top1 > yhi) yhi = p->top1;
    }
    if (r[i]->target_reached >= 0) {
      if (r[i]->target < ylo) ylo = r[i]->target;
      if (r[i]->target > yhi) yhi = r[i]->target;
    }
  }
  double ystep = mnt_report_nice_step(yhi - ylo > 0.01 ? yhi - ylo : 0.01, 5);
  ylo = fmax(0, floor(ylo / ystep - 1e-9) * ystep);
  yhi = fmin(1, ceil(yhi / ystep + 1e-9) * ystep);
  if (!(yhi > ylo)) yhi = ylo + ystep;
  int h = LEGEND_TOP + LEGEND_ROW * n + 30;
  char tmp[MNT_PATH_MAX];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  mnt_report_svg_open(f, W, h);
  fprintf(f, "<title>mntrain report: validation top-1 of %d run%s</title>\n", n, n == 1 ? "" : "s");
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, h);
  fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">", W / 2);
  mnt_report_xml_text(f, r[0]->arch);
  fprintf(f, ", %lld px: validation top-1 of %d run%s</text>\n", r[0]->image_size, n, n == 1 ? "" : "s");
  for (int p = 0; p < 2; p++) {
    frame F = {p == 0 ? 90 : 590, 0, p == 0 ? emax : tmax, ylo, yhi};
    if (!(F.x1 > 0)) F.x1 = 1;
    fprintf(f, "<g id=\"%s\">\n", p == 0 ? "against-epochs" : "against-time");
    axes(f, &F, p == 0 ? "against epochs" : "against wall time", p == 0 ? "epochs" : "wall time (s)", ystep);
    if (p == 1 && !timed) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#666\">no elapsed_s in metrics.jsonl "
                 "(runs of an older mntrain)</text>\n",
              F.left + PLOT_W / 2.0, PLOT_TOP + PLOT_H / 2.0);
    }
    double drawn[16]; /* each target once */
    int nd = 0;
    for (int i = 0; i < n && nd < 16; i++) {
      int seen = r[i]->target_reached < 0;
      for (int j = 0; j < nd && !seen; j++) seen = drawn[j] == r[i]->target;
      if (seen) continue;
      drawn[nd++] = r[i]->target;
      double py = px_y(&F, r[i]->target);
      fprintf(f, "<line class=\"target\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
                 "stroke-dasharray=\"6 4\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">target %g%%</text>\n",
              F.left, py, F.left + PLOT_W, py, F.left + 4, py - 4, round(r[i]->target * 1e4) / 100);
    }
    for (int k = 0; k < n; k++)
      if (p == 0 || timed) curve(f, &F, p, r[k], k);
    fprintf(f, "</g>\n");
  }
  fprintf(f, "<g id=\"legend\">\n");
  for (int k = 0; k < n; k++) {
    const mnt_report_run *x = r[k];
    double y = LEGEND_TOP + LEGEND_ROW * k;
    fprintf(f, "<line x1=\"90\" y1=\"%.1f\" x2=\"118\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>", y - 4, y - 4,
            COLOURS[k % 10], k >= 10 ? " stroke-dasharray=\"5 3\"" : "");
    fprintf(f, "<text x=\"126\" y=\"%.1f\">%lld rank%s, global batch %lld, ", y, x->ranks, x->ranks == 1 ? "" : "s",
            x->global_batch);
    mnt_report_xml_text(f, opt_name(x));
    fprintf(f, ": final %.2f%%, best %.2f%%", 100 * x->val[x->nval - 1].top1, 100 * best_of(x));
    if (x->target_reached == 1 && !isnan(x->target_epoch)) fprintf(f, "; target at epoch %.2f", x->target_epoch);
    if (x->target_reached == 0) fprintf(f, "; target missed");
    fprintf(f, " (");
    mnt_report_xml_text(f, x->dir);
    fprintf(f, ")</text>\n");
  }
  fprintf(f, "</g>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\" font-size=\"11\">mntrain report "
             "(metrics.jsonl: val_top1 at each evaluation; wall time: the run's, over all its jobs)</text>\n",
          W / 2, h - 10);
  fprintf(f, "</svg>\n");
  return mnt_tmp_fcommit(f, tmp, path);
}

/* ---- the learning report ------------------------------------------------------------------------ */

int mnt_report_learning(const mnt_report_run *r, int n, const char *out) {
  const mnt_report_run **v = calloc(n > 0 ? (size_t)n : 1, sizeof *v);
  if (!v) {
    MNT_ERR("out of memory");
    return MNT_ENOMEM;
  }
  int m = 0, targets = 0;
  for (int i = 0; i < n; i++)
    if (r[i].nval > 0) {
      v[m++] = &r[i];
      targets |= r[i].target_reached >= 0;
    }
  int st = MNT_OK;
  if (m == 0) printf("== learning table: left out, no run evaluated a validation set (train --val)\n");
  if (m > 0) {
    qsort(v, (size_t)m, sizeof *v, cmp_learn);
    print_table(v, m, targets);
    if (m < n) { /* the runs without evaluations, named */
      printf("   left out of the learning table (no evaluation: train --val):");
      for (int i = 0, k = 0; i < n; i++)
        if (r[i].nval == 0) printf("%s %s", k++ ? "," : "", r[i].dir);
      printf("\n");
    }
    char csv[MNT_PATH_MAX], svg[MNT_PATH_MAX];
    snprintf(csv, sizeof csv, "%s/learning.csv", out);
    snprintf(svg, sizeof svg, "%s/learning.svg", out);
    if ((st = write_csv(csv, v, m)) == MNT_OK && (st = write_svg(svg, v, m)) == MNT_OK)
      printf("   wrote %s and %s\n", csv, svg);
  }
  free(v);
  return st;
}
