/* path.h — the one length of a path buffer, and joining a directory and a name into one.
 * defines: MNT_PATH_MAX, mnt_path_join.
 * Every buffer that holds a file or directory path is char[MNT_PATH_MAX] (Linux's PATH_MAX, the
 * most open(2) takes). A path built from parts goes through mnt_path_join, whose failure names
 * the parts, so that a too-long --out or --data is an error (exit 2), never a truncated path that
 * would open some other file. */
#ifndef MNT_PATH_H
#define MNT_PATH_H

#include <stddef.h>

enum { MNT_PATH_MAX = 4096 };

/* out = dir "/" name (name alone when dir is NULL or ""). Returns 0, or MNT_EARG (logged, naming
 * both parts) when the result would not fit in MNT_PATH_MAX bytes. */
int mnt_path_join(char out[MNT_PATH_MAX], const char *dir, const char *name);

#endif
