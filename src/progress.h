/* progress.h — progress of long commands on stderr: a line rewritten in place on a terminal,
 * a line every MNT_PROGRESS_INTERVAL seconds (default 30) in a batch job's log, each with the
 * count, the rate and the time left; and the wall-clock stamp of progress and metrics lines.
 * defines: mnt_progress, mnt_progress_start, mnt_progress_update, mnt_progress_end,
 *          MNT_ISO_TIME_LEN, mnt_iso_time, mnt_iso_time_now. */
#ifndef MNT_PROGRESS_H
#define MNT_PROGRESS_H

#include <stdint.h>

typedef struct mnt_progress {
  const char *what, *unit; /* "convert", "images" */
  int64_t total;
  double t0, last, interval;
  int tty, printed;
} mnt_progress;

void mnt_progress_start(mnt_progress *p, const char *what, const char *unit, int64_t total);
/* done of total so far; detail (may be NULL) says where, e.g. "shard 3/64" */
void mnt_progress_update(mnt_progress *p, int64_t done, const char *detail);
/* ends the line on a terminal */
void mnt_progress_end(mnt_progress *p);

/* ISO 8601 UTC with milliseconds, "2026-12-03T01:02:03.456Z": 24 characters and the NUL */
#define MNT_ISO_TIME_LEN 25
/* unix_s: seconds since the epoch, to the nearest millisecond */
void mnt_iso_time(char out[MNT_ISO_TIME_LEN], double unix_s);
/* the wall clock now (CLOCK_REALTIME; milliseconds truncated, as `date -u +%FT%T.%3NZ` does) */
void mnt_iso_time_now(char out[MNT_ISO_TIME_LEN]);

#endif
