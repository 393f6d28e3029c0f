/* cmd/report_ranks.c — the slow ranks of a run (see report_internal.h): from summary.json's
 * "rank_stats" (every rank's phases and step times, gathered by train at the end), the imbalance
 * (the slowest rank's compute against the mean, compute = data + forward + backward + optimizer),
 * the slowest ranks with their node and the phase where each loses most against the mean of that
 * phase, and how long the others waited for the slowest (their exposed communication beyond its
 * own: in a collective everyone waits for the last to arrive). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/log.h"
#include "src/path.h"
#include "src/cmd/report_internal.h"

static const char *const KEYS[5] = {"data", "forward", "backward", "comm_exposed", "optimizer"};
enum { COMM = 3 };

typedef struct rstat {
  int rank;
  char node[64];
  double ph[5], compute;
} rstat;

static int by_compute(const void *a, const void *b) {
  double x = ((const rstat *)a)->compute, y = ((const rstat *)b)->compute;
  return (x < y) - (x > y);
}

/* the ranks of summary.json's rank_stats into *out (n of them); 0 when absent or malformed */
static int read_stats(const char *dir, rstat **out) {
  char path[MNT_PATH_MAX + 16];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  json_t *j = json_load_file(path, 0, NULL), *a = json_object_get(j, "rank_stats");
  int n = json_is_array(a) ? (int)json_array_size(a) : 0;
  rstat *rs = n ? calloc((size_t)n, sizeof *rs) : NULL;
  for (int i = 0; rs && i < n; i++) {
    json_t *o = json_array_get(a, (size_t)i), *ph = json_object_get(o, "phases_ms");
    const char *node = json_string_value(json_object_get(o, "node"));
    rs[i].rank = (int)json_integer_value(json_object_get(o, "rank"));
    snprintf(rs[i].node, sizeof rs[i].node, "%s", node ? node : "?");
    for (int k = 0; k < 5; k++) {
      json_t *v = json_object_get(ph, KEYS[k]);
      if (!json_is_number(v)) { /* not train's: no slow-rank lines rather than wrong ones */
        free(rs);
        json_decref(j);
        return 0;
      }
      rs[i].ph[k] = json_number_value(v);
      if (k != COMM) rs[i].compute += rs[i].ph[k];
    }
  }
  json_decref(j);
  *out = rs;
  return rs ? n : 0;
}

void mnt_report_slow_ranks(const mnt_report_run *r, int nruns) {
  for (int i = 0; i < nruns; i++) {
    rstat *rs = NULL;
    int n = read_stats(r[i].dir, &rs);
    if (n < 2) {
      free(rs);
      continue;
    }
    double mean[5] = {0}, mc = 0;
    for (int k = 0; k < n; k++) {
      for (int p = 0; p < 5; p++) mean[p] += rs[k].ph[p] / n;
      mc += rs[k].compute / n;
    }
    qsort(rs, (size_t)n, sizeof *rs, by_compute);
    printf("   slow ranks of %s: imbalance %.2f (the slowest rank's compute %.1f ms per step against a mean of "
           "%.1f ms)\n",
           r[i].dir, mc > 0 ? rs[0].compute / mc : 1.0, rs[0].compute, mc);
    for (int k = 0; k < n && k < 3; k++) {
      int worst = 0;
      double excess = -INFINITY;
      for (int p = 0; p < 5; p++)
        if (p != COMM && rs[k].ph[p] - mean[p] > excess) excess = rs[k].ph[p] - mean[p], worst = p;
      double others = 0;
      for (int q = 0; q < n; q++)
        if (q != k) others += rs[q].ph[COMM] / (n - 1);
      printf("     rank %d on %s: compute %.1f ms, %s %+.1f ms against the mean", rs[k].rank, rs[k].node,
             rs[k].compute, KEYS[worst], excess);
      if (k == 0) printf("; the others waited %.1f ms per step for it (their exposed comm beyond its own)",
                         others - rs[k].ph[COMM]);
      printf("\n");
    }
    free(rs);
  }
}

void mnt_report_rank_losses(const mnt_report_run *r, int nruns) {
  for (int i = 0; i < nruns; i++) {
    char path[MNT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/summary.json", r[i].dir);
    json_t *j = json_load_file(path, 0, NULL), *a = json_object_get(j, "rank_losses");
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    for (size_t k = 0; k < n; k++) {
      json_t *o = json_array_get(a, k);
      const char *node = json_string_value(json_object_get(o, "node"));
      printf("   lost by %s: rank %lld on %s in step %lld (detected %.1f s after the step before, recovered in %.1f s)\n",
             r[i].dir, (long long)json_integer_value(json_object_get(o, "rank")), node ? node : "?",
             (long long)json_integer_value(json_object_get(o, "step")) + 1,
             json_number_value(json_object_get(o, "detected_after_s")),
             json_number_value(json_object_get(o, "recovered_after_s")));
    }
    if (n) printf("   (its row's ranks are those it ended with; its img/s spans every size it ran at)\n");
    json_decref(j);
  }
}
