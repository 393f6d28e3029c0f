/* path.c — see path.h. */
#include "src/path.h"

#include <stdio.h>
#include <string.h>

#include "src/log.h"

int mnt_path_join(char out[MNT_PATH_MAX], const char *dir, const char *name) {
  int n = dir && dir[0] ? snprintf(out, MNT_PATH_MAX, "%s/%s", dir, name) : snprintf(out, MNT_PATH_MAX, "%s", name);
  if (n >= 0 && n < MNT_PATH_MAX) return MNT_OK;
  out[0] = '\0';
  MNT_ERR("path too long: %s/%s is %d bytes, at most %d are possible", dir ? dir : "", name, n, MNT_PATH_MAX - 1);
  return MNT_EARG;
}
