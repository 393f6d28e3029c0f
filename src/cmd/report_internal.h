/* report_internal.h — what cmd/report.c (the table, the CSV) and cmd/report_svg.c (the SVG)
 * share; not an interface outside `mntrain report`.
 * defines: mnt_report_run (one run of the sweep), MNT_REPORT_NPH,
 *          mnt_report_describe, mnt_report_write_svg (files written whole or not at all through
 *          tmpfile.h's mnt_tmp_fopen / mnt_tmp_fcommit), mnt_report_slow_ranks (report_ranks.c),
 *          mnt_report_trace (report_trace.c) */
#ifndef MNT_REPORT_INTERNAL_H
#define MNT_REPORT_INTERNAL_H

#include <stddef.h>
#include <stdio.h>

#include "path.h"

enum { MNT_REPORT_NPH = 5 };

typedef struct mnt_report_run {
  char dir[MNT_PATH_MAX];      /* as given (of a summary.json path: its directory) */
  int order;                   /* position on the command line */
  int group;                   /* with --group: the order of the first run of its configuration */
  char arch[64], device[32], precision[32];
  long long image_size, ranks, nodes, devices, batch_per_rank, global_batch;
  double ips, ph[MNT_REPORT_NPH]; /* phases: data, forward, backward, comm_exposed, optimizer */
  double spread;                  /* NAN with fewer than two intervals after warm-up */
  int intervals, have_metrics;
  double speedup, eff;
} mnt_report_run;

/* "weak scaling, B images per rank" or "strong scaling, global batch G" of the sweep r[0..] */
void mnt_report_describe(const mnt_report_run *r, int strong, char *out, size_t len);
/* path: throughput and efficiency against ranks of the sorted sweep r[0..n), with the ideal lines */
int mnt_report_write_svg(const char *path, const mnt_report_run *r, int n, int strong);
/* after the table: each multi-rank run's imbalance and slowest ranks (summary.json "rank_stats") */
void mnt_report_slow_ranks(const mnt_report_run *r, int n);
/* --trace DIR: the ranks' timelines merged into OUT/trace.json and OUT/trace.svg */
int mnt_report_trace(const char *dir, const char *out);

#endif
