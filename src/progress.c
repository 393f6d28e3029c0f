/* progress.c — see progress.h. */
#include "src/progress.h"

#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "src/env.h"
#include "src/log.h"

void mnt_progress_start(mnt_progress *p, const char *what, const char *unit, int64_t total) {
  *p = (mnt_progress){.what = what, .unit = unit, .total = total, .tty = isatty(2)};
  p->t0 = p->last = mnt_now();
  if (p->tty) p->interval = 0.5;
  else if (mnt_env_progress_interval(&p->interval) != MNT_OK) p->interval = 30; /* reported by main */
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

static void iso_time(char out[MNT_ISO_TIME_LEN], time_t s, int ms) {
  struct tm tm;
  if (!gmtime_r(&s, &tm)) tm = (struct tm){.tm_year = 70, .tm_mday = 1}; /* out of range: the epoch */
  char day[32];
  strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out, MNT_ISO_TIME_LEN, "%.19s.%03dZ", day, ms < 0 ? 0 : ms > 999 ? 999 : ms);
}

void mnt_iso_time(char out[MNT_ISO_TIME_LEN], double unix_s) {
  double ms = floor(unix_s * 1000.0 + 0.5), s = floor(ms / 1000.0);
  iso_time(out, (time_t)s, (int)(ms - s * 1000.0));
}

void mnt_iso_time_now(char out[MNT_ISO_TIME_LEN]) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  iso_time(out, ts.tv_sec, (int)(ts.tv_nsec / 1000000));
}
