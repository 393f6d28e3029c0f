/* analysis.h — the commands that read runs rather than train: `mntrain report` (cmd/report.c:
 * scaling tables, CSV and SVG from run directories) and `mntrain model` (cmd/model.c: predicted
 * step time and efficiency for 1 ... 4,096 GPUs). Commands as in main.c: they parse their
 * options and return an mnt_status; neither needs a world (run them anywhere). */
#ifndef MNT_ANALYSIS_H
#define MNT_ANALYSIS_H

#include "world.h"

int mnt_report_main(mnt_world *w, int argc, char **argv);
int mnt_model_main(mnt_world *w, int argc, char **argv);

#endif
