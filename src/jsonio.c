/* jsonio.c — see jsonio.h. */
#include "src/jsonio.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/check.h"
#include "src/tmpfile.h"
#include "src/log.h"
#include "src/path.h"

#define FLAGS (JSON_SORT_KEYS | JSON_REAL_PRECISION(15))

json_t *mnt_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static int save(const char *dir, const char *name, json_t *o, size_t flags) {
  char tmp[MNT_PATH_MAX], path[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(path, dir, name));
  char *txt = o ? json_dumps(o, flags) : NULL;
  if (!txt) {
    MNT_ERR("%s: internal: the content cannot be encoded as JSON", path);
    return MNT_ESYS;
  }
  size_t len = strlen(txt);
  int st = MNT_OK, fd = mnt_tmp_create(path, tmp, sizeof tmp); /* DIR/.NAME.XXXXXX, exclusive */
  if (fd < 0) {
    free(txt);
    return MNT_ESYS;
  }
  size_t done = 0;
  while (done < len && st == MNT_OK) {
    ssize_t w = write(fd, txt + done, len - done);
    if (w > 0) done += (size_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else if (w < 0) st = MNT_SYSERR("%s: cannot write", tmp);
    else {
      MNT_ERR("%s: cannot write: short write", tmp);
      st = MNT_ESYS;
    }
  }
  if (st == MNT_OK && (write(fd, "\n", 1) != 1 || fsync(fd) != 0)) st = MNT_SYSERR("%s: cannot write", tmp);
  if (close(fd) != 0 && st == MNT_OK) st = MNT_SYSERR("%s: cannot write", tmp);
  free(txt);
  if (st == MNT_OK) return mnt_tmp_commit(tmp, path);
  unlink(tmp);
  return st;
}

int mnt_json_save(const char *dir, const char *name, json_t *o) {
  return save(dir, name, o, JSON_INDENT(2) | FLAGS);
}

int mnt_json_save_precise(const char *dir, const char *name, json_t *o) {
  return save(dir, name, o, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
}

int mnt_json_append(FILE *f, const char *path, json_t *o) {
  char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7)) : NULL;
  if (!txt) {
    MNT_ERR("%s: internal: a line cannot be encoded as JSON", path);
    return MNT_ESYS;
  }
  errno = 0;
  int bad = fputs(txt, f) == EOF || fputc('\n', f) == EOF || fflush(f) != 0;
  free(txt);
  if (bad && errno) return MNT_SYSERR("%s: cannot write", path);
  if (bad) {
    MNT_ERR("%s: cannot write: write error", path);
    return MNT_ESYS;
  }
  return MNT_OK;
}

void mnt_json_fput_chars(FILE *f, const char *s) {
  for (; s && *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
    else fputc(*s, f);
  }
}

void mnt_json_fput_str(FILE *f, const char *s) {
  fputc('"', f);
  mnt_json_fput_chars(f, s);
  fputc('"', f);
}
