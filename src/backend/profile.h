/* profile.h — where a step's time goes, op by op: the backend's ops table wrapped so that every op
 * waits for the stream before and after it and adds its wall time to a row of (op, layer).
 * defines: mnt_backend_profile_start, mnt_backend_profile_reset, mnt_backend_profile_print.
 *
 * The waits serialise host and device, so a profiled step is slower than a plain one by the launch
 * gaps it no longer hides (on cuda about 5-10 us per op); the rows are the ops' own times, and their
 * sum against the profiled step's time says how much the waits cost. One backend per process is
 * profiled (`mntrain bench step --profile`); layers created before the start are not named. */
#ifndef MNT_PROFILE_H
#define MNT_PROFILE_H

#include <stdio.h>

#include "src/backend/backend.h"

/* b's ops now go through the profiler (before any layer is created); MNT_EARG when another
 * backend is already profiled */
int mnt_backend_profile_start(mnt_backend *b);
/* forget what was measured (after warm-up steps) */
void mnt_backend_profile_reset(void);
/* the table: per row the op, the layer, calls per step, ms per step and its share of the measured
 * time, largest first, rows under 0.5% folded into one; then the time per op kind. steps: the
 * steps measured since the reset; step_s: their mean wall time */
void mnt_backend_profile_print(FILE *f, int steps, double step_s);

#endif
