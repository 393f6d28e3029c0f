/* cmd/report_svg.c — OUT/scaling.svg of `mntrain report` (see report_internal.h): two plots side by
 * side, throughput and efficiency against ranks, each with its ideal line (linear from the baseline,
 * or 100%), the measured runs (± sd bars on throughput, a tooltip per point) and a legend. Plain SVG
 * 1.1 written with fprintf; opens in any browser. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "src/log.h"
#include "src/path.h"
#include "src/cmd/report_internal.h"
#include "src/tmpfile.h"


/* the bytes of a UTF-8 character that starts at s (1 to 4), 0 when s does not start a whole one (a
 * string cut short in a fixed-size field) */
static int utf8_len(const unsigned char *s) {
  int n = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
        : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  for (int k = 1; k < n; k++)
    if ((s[k] & 0xc0) != 0x80) return 0;
  return n;
}

/* the sweep in words, for the table's title and the SVG's (report.c's table calls it too) */
void mnt_report_describe(const mnt_report_run *r, int strong, char *out, size_t len) {
  if (strong)
    snprintf(out, len, "strong scaling, global batch %lld", (long long)r[0].global_batch);
  else
    snprintf(out, len, "weak scaling, %lld images per rank", (long long)r[0].batch_per_rank);
}

void mnt_report_xml_text(FILE *f, const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  while (*u) {
    int n = utf8_len(u);
    if (*u == '&') fputs("&amp;", f);
    else if (*u == '<') fputs("&lt;", f);
    else if (*u == '>') fputs("&gt;", f);
    else if (*u == '"') fputs("&quot;", f);
    else if (n == 0 || (*u < 0x20 && *u != '\t' && *u != '\n')) fputc('?', f); /* not XML 1.0 text */
    else fwrite(u, 1, (size_t)n, f);
    u += n ? n : 1;
  }
}

void mnt_report_svg_open(FILE *f, int w, int h) {
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
             "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
          w, h, w, h);
}

void mnt_report_csv_num(FILE *f, int digits, double v) {
  if (isnan(v)) fputc(',', f);
  else fprintf(f, ",%.*f", digits, v);
}

void mnt_report_csv_str(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f); /* RFC 4180 */
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

double mnt_report_nice_step(double range, int target) {
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

static int is_pow2(long long v) { return v > 0 && (v & (v - 1)) == 0; }

enum { SVG_W = 1000, SVG_H = 470, PLOT_TOP = 90, PLOT_H = 300, PLOT_W = 380 };

/* the scales of both plots: x over the rank counts (log2 when all are powers of two), y's top and
 * grid step of throughput (0) and efficiency (1) */
typedef struct layout {
  axis x;
  double ystep[2], ytop[2];
} layout;

static void svg_layout(const mnt_report_run *r, int n, layout *L) {
  const mnt_report_run *b = &r[0];
  long long nmin = r[0].ranks, nmax = r[0].ranks;
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
  L->x = x;
  L->ystep[0] = mnt_report_nice_step(ymax0, 5);
  L->ystep[1] = mnt_report_nice_step(emax * 1.05, 6);
  L->ytop[0] = ceil(ymax0 * 1.02 / L->ystep[0]) * L->ystep[0];
  L->ytop[1] = ceil(emax * 1.05 / L->ystep[1]) * L->ystep[1];
}

/* the XML declaration, <svg>, the title and the heading */
static void svg_head(FILE *f, const mnt_report_run *b, const char *what) {
  mnt_report_svg_open(f, SVG_W, SVG_H);
  fprintf(f, "<title>mntrain report: ");
  mnt_report_xml_text(f, b->arch);
  fprintf(f, " %lld px ", (long long)b->image_size);
  mnt_report_xml_text(f, b->device);
  fputc(' ', f);
  mnt_report_xml_text(f, b->precision);
  fprintf(f, ", %s</title>\n", what);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", SVG_W, SVG_H);
  fprintf(f, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">", SVG_W / 2);
  mnt_report_xml_text(f, b->arch);
  fprintf(f, ", %lld px, ", (long long)b->image_size);
  mnt_report_xml_text(f, b->device);
  fprintf(f, ", ");
  mnt_report_xml_text(f, b->precision);
  fprintf(f, ": %s</text>\n", what);
  fprintf(f, "<text x=\"%d\" y=\"50\" text-anchor=\"middle\" fill=\"#444\">baseline: %lld rank%s, %.1f img/s; "
             "efficiency E = (img/s_N / N) / (img/s_N0 / N0)</text>\n",
          SVG_W / 2, (long long)b->ranks, b->ranks == 1 ? "" : "s", b->ips);
}

/* plot p's frame, grid, tick labels and axis titles */
static void svg_axes(FILE *f, int p, double left, const axis *x, const axis *y, const layout *L) {
  double top = PLOT_TOP, bottom = PLOT_TOP + PLOT_H;
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">%s</text>\n",
          left + PLOT_W / 2.0, top - 14, p == 0 ? "throughput" : "efficiency");
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n", left, top,
          PLOT_W, PLOT_H);
  for (int k = 0; k <= MNT_REPORT_MAX_TICKS && k * L->ystep[p] <= L->ytop[p] * (1 + 1e-9); k++) { /* y grid */
    double v = k * L->ystep[p];
    double py = ax_px(y, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", left, py,
            left + PLOT_W, py);
    if (p == 0 && L->ystep[0] >= 1)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n", left - 6, py + 4, v);
    else if (p == 0)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", left - 6, py + 4, v);
    else
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f%%</text>\n", left - 6, py + 4, v * 100);
  }
  if (x->log2) { /* x ticks: every power of two */
    for (double v = x->lo; v <= x->hi * (1 + 1e-9) && v < 0x1p64; v *= 2) {
      double px = ax_px(x, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", px, top, px, bottom);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, bottom + 16, v);
    }
  } else {
    double s = mnt_report_nice_step(x->hi - x->lo, 6);
    if (s < 1) s = 1;
    double v0 = ceil(x->lo / s) * s;
    for (int k = 0; k <= MNT_REPORT_MAX_TICKS && v0 + k * s <= x->hi * (1 + 1e-9); k++) {
      double v = v0 + k * s;
      double px = ax_px(x, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", px, top, px, bottom);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, bottom + 16, v);
    }
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">ranks%s</text>\n", left + PLOT_W / 2.0,
          bottom + 36, x->log2 ? " (log2 scale)" : "");
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
          left - 56, top + PLOT_H / 2.0, left - 56, top + PLOT_H / 2.0,
          p == 0 ? "images per second" : "efficiency (% of ideal)");
}

/* plot p's ideal line and the measured runs: error bars, the line, the points with a tooltip */
static void svg_data(FILE *f, int p, const mnt_report_run *r, int n, const axis *x, const axis *y) {
  const mnt_report_run *b = &r[0];
  /* the ideal: linear in ranks from the baseline (a curve on a log2 axis: sampled), or 100% */
  fprintf(f, "<polyline id=\"ideal-%s\" class=\"ideal\" fill=\"none\" stroke=\"#777\" stroke-width=\"1.5\" "
             "stroke-dasharray=\"6 4\" points=\"",
          p == 0 ? "throughput" : "efficiency");
  for (int k = 0; k <= 64; k++) {
    double t = ax_t(x, x->lo) + (ax_t(x, x->hi) - ax_t(x, x->lo)) * k / 64.0;
    double v = x->log2 ? exp2(t) : t;
    double yv = p == 0 ? b->ips * v / (double)b->ranks : 1.0;
    fprintf(f, "%s%.1f,%.1f", k ? " " : "", ax_px(x, v), ax_px(y, yv));
  }
  fprintf(f, "\"/>\n");
  if (p == 0)
    for (int i = 0; i < n; i++) {
      if (isnan(r[i].spread)) continue;
      double px = ax_px(x, (double)r[i].ranks), y0 = ax_px(y, r[i].ips - r[i].spread),
             y1 = ax_px(y, r[i].ips + r[i].spread);
      fprintf(f, "<path d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#1f77b4\" fill=\"none\"/>\n", px,
              y0, y1, px - 4, y0, px + 4, px - 4, y1, px + 4);
    }
  fprintf(f, "<polyline id=\"measured-%s\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"",
          p == 0 ? "throughput" : "efficiency");
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%.1f,%.1f", i ? " " : "", ax_px(x, (double)r[i].ranks), ax_px(y, p == 0 ? r[i].ips : r[i].eff));
  fprintf(f, "\"/>\n");
  for (int i = 0; i < n; i++) {
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f77b4\"><title>%lld ranks on %lld nodes: %.1f img/s",
            ax_px(x, (double)r[i].ranks), ax_px(y, p == 0 ? r[i].ips : r[i].eff), (long long)r[i].ranks,
            (long long)r[i].nodes, r[i].ips);
    if (!isnan(r[i].spread)) fprintf(f, " \xc2\xb1 %.1f", r[i].spread);
    fprintf(f, ", speedup %.2f, efficiency %.1f%% (", r[i].speedup, 100 * r[i].eff);
    mnt_report_xml_text(f, r[i].dir);
    fprintf(f, ")</title></circle>\n");
  }
}

/* plot p's legend, top left inside the frame */
static void svg_legend(FILE *f, int p, double left, const mnt_report_run *b) {
  double lx = left + 12, ly = PLOT_TOP + 16;
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
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ideal: %.1f img/s \xc3\x97 N / %lld</text>\n", lx + 36, ly + 18, b->ips,
            (long long)b->ranks);
  else
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">ideal: 100%%</text>\n", lx + 36, ly + 18);
}

int mnt_report_write_svg(const char *path, const mnt_report_run *r, int n, int strong) {
  char tmp[MNT_PATH_MAX], what[128];
  FILE *f = mnt_tmp_fopen(path, tmp, sizeof tmp);
  if (!f) return MNT_ESYS;
  mnt_report_describe(r, strong, what, sizeof what);
  layout L;
  svg_layout(r, n, &L);
  svg_head(f, &r[0], what);
  for (int p = 0; p < 2; p++) { /* 0: throughput, 1: efficiency */
    double left = p == 0 ? 90 : 590;
    axis x = L.x, y = {0, L.ytop[p], 0, PLOT_TOP + PLOT_H, PLOT_TOP};
    x.px0 = left + 20;
    x.px1 = left + PLOT_W - 20;
    fprintf(f, "<g id=\"%s\">\n", p == 0 ? "throughput" : "efficiency");
    svg_axes(f, p, left, &x, &y, &L);
    svg_data(f, p, r, n, &x, &y);
    svg_legend(f, p, left, &r[0]);
    fprintf(f, "</g>\n");
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#666\" font-size=\"11\">mntrain report of %d "
             "run%s (summary.json; \xc2\xb1 sd over the metrics.jsonl intervals after warm-up)</text>\n",
          SVG_W / 2, SVG_H - 12, n, n == 1 ? "" : "s");
  fprintf(f, "</svg>\n");
  return mnt_tmp_fcommit(f, tmp, path);
}
