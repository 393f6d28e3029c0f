/* progress.c — see progress.h. */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "env.h"
#include "log.h"

void mnt_progress_start(mnt_progress *p, const char *what, const char *unit, int64_t total) {
  *p = (mnt_progress){.what = what, .unit = unit, .total = total, .tty = isatty(2)};
  p->t0 = p->last = mnt_now();
  if (p->tty) p->interval = 0.5;
  else if (mnt_env_seconds("MNT_PROGRESS_INTERVAL", &p->interval) != MNT_OK) p->interval = 30; /* reported by main */
}

void mnt_progress_update(mnt_progress *p, int64_t done, const char *detail) {
  double now = mnt_now();
  if (now - p->last < p->interval) return;
  p->last = now;
  double el = now - p->t0, rate = done / (el > 1e-9 ? el : 1e-9);
  double left = rate > 0 ? (double)(p->total - done) / rate : 0;
  fprintf(stderr, "%s%s: %s%s%lld/%lld %s (%.1f%%), %.0f %s/s, %.0f s elapsed, ETA %.0f s%s", p->tty ? "\r" : "",
          p->what, detail ? detail : "", detail ? ", " : "", (long long)done, (long long)p->total, p->unit,
          p->total > 0 ? 100.0 * done / p->total : 100.0, rate, p->unit, el, left, p->tty ? "   " : "\n");
  fflush(stderr);
  p->printed = 1;
}

void mnt_progress_end(mnt_progress *p) {
  if (p->tty && p->printed) fprintf(stderr, "\n");
}
