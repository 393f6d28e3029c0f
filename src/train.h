/* train.h — `mntrain train` (see train.c). defines: mnt_train_main (returns 0, MNT_EARG for bad
 * arguments, or the mnt_status of a failure, which main turns into a job abort). */
#ifndef MNT_TRAIN_H
#define MNT_TRAIN_H

#include "world.h"

int mnt_train_main(mnt_world *w, int argc, char **argv);

#endif
