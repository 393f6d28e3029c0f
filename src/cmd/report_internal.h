/* report_internal.h — what cmd/report.c (the table, the CSV) and cmd/report_svg.c (the SVG)
 * share; not an interface outside `mntrain report`.
 * defines: mnt_report_run (one run of the sweep), mnt_report_point (one evaluation), MNT_REPORT_NPH,
 *          mnt_report_describe, mnt_report_write_svg (files written whole or not at all through
 *          tmpfile.h's mnt_tmp_fopen / mnt_tmp_fcommit), mnt_report_svg_open, mnt_report_xml_text,
 *          mnt_report_nice_step, mnt_report_csv_num, mnt_report_csv_str (report_svg.c: what the
 *          report's files are written with; it calls nothing of report.c), mnt_report_slow_ranks, mnt_report_rank_losses (report_ranks.c), mnt_report_trace (report_trace.c),
 *          mnt_report_add_point, mnt_report_learning (report_learn.c) */
#ifndef MNT_REPORT_INTERNAL_H
#define MNT_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "src/path.h"
#include "src/runsum.h"

enum { MNT_REPORT_NPH = 5 };
/* the most grid lines of an axis: a loop over ticks ends there even when its step stops adding up
 * (a rank count of 2^62 plus one is 2^62 in a double) */
enum { MNT_REPORT_MAX_TICKS = 100 };

typedef struct mnt_report_run {
  char dir[MNT_PATH_MAX];      /* as given (of a summary.json path: its directory) */
  int order;                   /* position on the command line */
  int group;                   /* with --group: the order of the first run of its configuration */
  char arch[64], device[32], precision[64];
  char run_id[MNT_RUN_ID_HEX + 1]; /* summary.json's run_id; "" for a run from before run ids */
  long long image_size, ranks, nodes, devices, batch_per_rank, global_batch;
  double ips, ph[MNT_REPORT_NPH]; /* phases: data, forward, backward, comm_exposed, optimizer */
  double spread;                  /* NAN with fewer than two intervals after warm-up */
  int intervals, have_metrics;
  double speedup, eff;
  /* learning: the validation points of metrics.jsonl in step order (a resumed job's lines replace
   * the first job's from the same step on), and summary.json's optimizer and target */
  struct mnt_report_point *val;
  int nval, capval;
  char optimizer[64];          /* "" when summary.json does not say (runs before LARS: sgd) */
  char schedule[64];           /* "" when summary.json does not say (runs before it did: step) */
  char bn_eval[64];            /* "" when summary.json does not say (runs before --bn-eval: running) */
  double target, target_epoch, target_time; /* NAN where not set, or not reached */
  int target_reached;          /* -1 no target, 0 missed, 1 reached */
} mnt_report_run;

/* one evaluation: metrics.jsonl's step, epoch, val_top1 and elapsed_s (NAN when the line has none) */
typedef struct mnt_report_point {
  long long step;
  double epoch, top1, time;
} mnt_report_point;

/* "weak scaling, B images per rank" or "strong scaling, global batch G" of the sweep r[0..] */
void mnt_report_describe(const mnt_report_run *r, int strong, char *out, size_t len);
/* path: throughput and efficiency against ranks of the sorted sweep r[0..n), with the ideal lines */
int mnt_report_write_svg(const char *path, const mnt_report_run *r, int n, int strong);
/* the XML declaration and an SVG 1.1 <svg> of w x h pixels (the caller closes it) */
void mnt_report_svg_open(FILE *f, int w, int h);
/* CSV fields: ",v" with `digits` decimals (",": unknown, NAN); s quoted as RFC 4180 where it must be */
void mnt_report_csv_num(FILE *f, int digits, double v);
void mnt_report_csv_str(FILE *f, const char *s);
/* SVG text: & < > " escaped */
void mnt_report_xml_text(FILE *f, const char *s);
/* 1, 2 or 5 times a power of ten: about `target` steps over range */
double mnt_report_nice_step(double range, int target);
/* r's curve: p appended, dropping the points from p's step on first (a resumed job's evaluations
 * replace what the stopped job logged after its checkpoint); MNT_ENOMEM */
int mnt_report_add_point(mnt_report_run *r, mnt_report_point p);
/* after the scaling tables, when a run has validation points: the learning table (final and best
 * top-1, epochs and wall time to the target) of every such run of r[0..n), OUT/learning.csv and
 * OUT/learning.svg (validation top-1 against epochs and against wall time, a line per run) */
int mnt_report_learning(const mnt_report_run *r, int n, const char *out);
/* after the table: each multi-rank run's imbalance and slowest ranks (summary.json "rank_stats") */
void mnt_report_slow_ranks(const mnt_report_run *r, int n);
/* the ranks each run lost (--on-rank-loss shrink: summary.json's rank_losses), a line each */
void mnt_report_rank_losses(const mnt_report_run *r, int n);
/* --trace DIR: the ranks' timelines merged into OUT/trace.json and OUT/trace.svg; run_id: the run the files
 * are of ("" when they do not say: version 1) */
int mnt_report_trace(const char *dir, const char *out, char run_id[MNT_RUN_ID_HEX + 1]);

#endif
