/* train.h — `mntrain train` (see cmd/train.c; the trainer is src/train/trainer.h). defines: mnt_train_main, a command (see main.c): it
 * parses its options, initialises the world w, and returns an mnt_status. */
#ifndef MNT_TRAIN_H
#define MNT_TRAIN_H

#include "world.h"

int mnt_train_main(mnt_world *w, int argc, char **argv);

#endif
