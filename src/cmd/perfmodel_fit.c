/* cmd/perfmodel_fit.c — `mntrain model --calibrate`: latency and bus bandwidth fitted to allreduce
 * tables (see perfmodel_fit.h). Reads mntrain's `bench allreduce` layout (size count type time algbw
 * busbw #wrong ...) and nccl-tests' (size count type redop root time algbw busbw #wrong ...); the
 * rank and node counts come from the header ("# mntrain: P ranks on N nodes", "bench allreduce: P
 * ranks on N nodes", or nccl-tests' "# Rank R ... on HOST" lines), else from busbw / algbw. */
#include "src/cmd/perfmodel_fit.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm/comm.h" /* mnt_busbw_factor */
#include "src/log.h"

static int is_num(const char *s) {
  char *end;
  if (!s || !*s) return 0;
  strtod(s, &end);
  return *end == 0;
}

static int is_uint(const char *s) {
  if (!s || !*s) return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

static int acc_row(mnt_calib *a, int p, double s, double t) {
  if (a->rows == a->cap) {
    int cap = a->cap ? 2 * a->cap : 64;
    double *x0 = realloc(a->x0, (size_t)cap * sizeof *x0);
    if (x0) a->x0 = x0;
    double *x1 = realloc(a->x1, (size_t)cap * sizeof *x1);
    if (x1) a->x1 = x1;
    double *tt = realloc(a->t, (size_t)cap * sizeof *tt);
    if (tt) a->t = tt;
    if (!x0 || !x1 || !tt) {
      MNT_ERR("out of memory for calibration rows");
      return MNT_ENOMEM;
    }
    a->cap = cap;
  }
  /* latency steps of a ring, and the bytes each rank moves (busbw) */
  double x0 = 2.0 * (p - 1), x1 = mnt_busbw_factor(p) * s, w = 1.0 / (t * t);
  a->x0[a->rows] = x0;
  a->x1[a->rows] = x1;
  a->t[a->rows] = t;
  a->rows++;
  a->sw[0][0] += w * x0 * x0;
  a->sw[0][1] += w * x0 * x1;
  a->sw[1][1] += w * x1 * x1;
  a->sy[0] += w * x0 * t;
  a->sy[1] += w * x1 * t;
  a->x1y += w * x1 * t;
  a->x1x1 += w * x1 * x1;
  return MNT_OK;
}

int mnt_calib_read(const char *path, double gpn, int inplace, mnt_calib acc[2]) {
  FILE *f = fopen(path, "r");
  if (!f) {
    MNT_ERR("%s: cannot open", path);
    return MNT_EARG;
  }
  char line[1024], hosts[64][128];
  int ranks = 0, nodes = 0, rank_lines = 0, nhosts = 0, nrows = 0, st = MNT_OK;
  double ratio = 0, rs[4096], rt[4096];
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#') {
      int r, n;
      char host[128];
      const char *m = strstr(p, "bench allreduce:");
      if (m && sscanf(m, "bench allreduce: %d ranks on %d nodes", &r, &n) == 2) ranks = r, nodes = n;
      if (sscanf(p, "# mntrain: %d ranks on %d nodes", &r, &n) == 2) ranks = r, nodes = n;
      if (sscanf(p, "# Rank %d Group %*d Pid %*d on %127s", &r, host) == 2) {
        rank_lines++;
        int k = 0;
        while (k < nhosts && strcmp(hosts[k], host)) k++;
        if (k == nhosts && nhosts < 64) snprintf(hosts[nhosts++], sizeof hosts[0], "%s", host);
      }
      continue;
    }
    char *tok[16];
    int nt = 0;
    for (char *s = strtok(p, " \t\r\n"); s && nt < 16; s = strtok(NULL, " \t\r\n")) tok[nt++] = s;
    if (nt < 6 || !is_uint(tok[0]) || !is_uint(tok[1]) || is_num(tok[2])) continue;
    int i = is_num(tok[3]) ? 3 : 5; /* nccl-tests: type redop root time ...; mntrain: type time ... */
    if (i + 2 >= nt || !is_num(tok[i]) || !is_num(tok[i + 1]) || !is_num(tok[i + 2])) continue;
    /* in-place columns follow out-of-place time algbw busbw #wrong, when the table has them */
    if (inplace && i + 6 < nt && is_num(tok[i + 4]) && is_num(tok[i + 5]) && is_num(tok[i + 6])) i += 4;
    double size = strtod(tok[0], NULL), t = strtod(tok[i], NULL) * 1e-6, alg = strtod(tok[i + 1], NULL),
           bus = strtod(tok[i + 2], NULL);
    if (size <= 0 || t <= 0) continue;
    if (alg > 0 && size >= 1e6) ratio = bus / alg;
    if (nrows < 4096) {
      rs[nrows] = size;
      rt[nrows++] = t;
    }
  }
  fclose(f);
  if (!ranks && rank_lines) ranks = rank_lines, nodes = nhosts;
  /* busbw / algbw = mnt_busbw_factor(n) = 2(n-1)/n, so n = 2 / (2 - ratio) */
  if (!ranks && ratio > 0 && ratio < 2) ranks = (int)lround(2.0 / (2.0 - ratio));
  if (nrows < 2 || ranks < 2) {
    MNT_ERR("%s: %s", path, nrows < 2 ? "fewer than 2 rows of size, count, type, time (us) ..."
                                      : "cannot tell the rank count (no header, busbw = algbw)");
    return MNT_EARG;
  }
  if (!nodes) nodes = ranks > gpn ? 2 : 1; /* unknown: as many per node as --gpus-per-node allows */
  mnt_calib *a = &acc[nodes > 1];
  for (int r = 0; r < nrows && st == MNT_OK; r++) st = acc_row(a, ranks, rs[r], rt[r]);
  if (!a->files || ranks < a->ranks_min) a->ranks_min = ranks;
  if (!a->files || ranks > a->ranks_max) a->ranks_max = ranks;
  size_t len = strlen(a->names);
  snprintf(a->names + len, sizeof a->names - len, "%s%s (%d ranks, %d nodes)", len ? ", " : "", path, ranks, nodes);
  a->files++;
  return st;
}

int mnt_calib_fit(const mnt_calib *a, double *alpha, double *beta, double *rms) {
  double det = a->sw[0][0] * a->sw[1][1] - a->sw[0][1] * a->sw[0][1];
  if (a->rows < 2 || !(fabs(det) > 1e-30 * a->sw[0][0] * a->sw[1][1])) {
    MNT_ERR("calibration needs at least two message sizes (%d rows)", a->rows);
    return MNT_EARG;
  }
  *alpha = (a->sy[0] * a->sw[1][1] - a->sy[1] * a->sw[0][1]) / det;
  *beta = (a->sw[0][0] * a->sy[1] - a->sw[0][1] * a->sy[0]) / det;
  if (*alpha < 0) {
    *alpha = 0;
    *beta = a->x1y / a->x1x1;
  }
  if (!(*beta > 0)) {
    MNT_ERR("calibration: the times do not grow with the message size (beta %g)", *beta);
    return MNT_EARG;
  }
  double ss = 0;
  for (int r = 0; r < a->rows; r++) {
    double e = (*alpha * a->x0[r] + *beta * a->x1[r] - a->t[r]) / a->t[r];
    ss += e * e;
  }
  *rms = sqrt(ss / a->rows);
  return MNT_OK;
}

void mnt_calib_free(mnt_calib acc[2]) {
  for (int lv = 0; lv < 2; lv++) {
    free(acc[lv].x0);
    free(acc[lv].x1);
    free(acc[lv].t);
  }
}
