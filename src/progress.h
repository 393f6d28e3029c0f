/* progress.h — progress of long commands on stderr: a line rewritten in place on a terminal,
 * a line every MNT_PROGRESS_INTERVAL seconds (default 30) in a batch job's log, each with the
 * count, the rate and the time left.
 * defines: mnt_progress, mnt_progress_start, mnt_progress_update, mnt_progress_end. */
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

#endif
