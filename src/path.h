/* path.h — the one length of a path buffer, and joining a directory and a name into one.
 * defines: MNT_PATH_MAX, MNT_PATH_ROOM, mnt_path_join.
 * Every buffer that holds a file or directory path is char[MNT_PATH_MAX] (Linux's PATH_MAX, the
 * most open(2) takes). A path built from parts goes through mnt_path_join, whose failure names
 * the parts, so that a too-long --out or --data is an error (exit 2), never a truncated path that
 * would open some other file. */
#ifndef MNT_PATH_H
#define MNT_PATH_H

#include <stddef.h>

enum {
  MNT_PATH_MAX = 4096,
  /* what mntrain appends to a file or directory named on its command line: "/step-00000042/
   * state.h5.partial", "/.summary.json.XXXXXX", "/samples-rank-00127.txt", with room to spare. A
   * path option (MNT_OPT_PATH, args.h) is at most MNT_PATH_MAX - MNT_PATH_ROOM bytes, so that
   * every path built from it fits. */
  MNT_PATH_ROOM = 256
};

/* out = dir "/" name (name alone when dir is NULL or ""). Returns 0, or MNT_EARG (logged, naming
 * both parts) when the result would not fit in MNT_PATH_MAX bytes. */
int mnt_path_join(char out[MNT_PATH_MAX], const char *dir, const char *name);

#endif
