/* test_jsonio.c — JSON outputs: a value that is not finite becomes null (NaN is not JSON), a file
 * is written whole or not at all (no temporary file left behind, the error names the file and the
 * reason), never through a symbolic link planted at its name or its old temporary name, and an appended line that cannot be written is an error naming the file; the "time"
 * of metrics lines is ISO 8601 UTC with milliseconds. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "src/jsonio.h"
#include "src/log.h"
#include "src/progress.h"

#include "tests/expect.h"

int main(void) {
  mode_t mask = umask(022);
  umask(mask);
  char dir[] = "/tmp/mntrain-test-jsonio-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  json_t *o = json_pack("{s:o, s:o, s:o}", "a", mnt_json_num(1.5), "nan", mnt_json_num(NAN), "inf", mnt_json_num(-INFINITY));
  EXPECT(o && json_is_real(json_object_get(o, "a")) && json_is_null(json_object_get(o, "nan")) &&
             json_is_null(json_object_get(o, "inf")),
         "non-finite values become null");
  EXPECT(mnt_json_save(dir, "x.json", o) == MNT_OK, "save");
  char p[600];
  snprintf(p, sizeof p, "%s/x.json", dir);
  json_error_t e;
  json_t *back = json_load_file(p, 0, &e);
  EXPECT(back && json_is_null(json_object_get(back, "nan")) && json_real_value(json_object_get(back, "a")) == 1.5,
         "what was saved reads back as JSON: %s", back ? "" : e.text);
  json_decref(back);
  /* nothing to encode: an error naming the file, and no tmp file */
  EXPECT(mnt_json_save(dir, "y.json", NULL) != MNT_OK && strstr(mnt_last_error(), "y.json"), "an unencodable value");
  /* links planted where the file goes, and where the old NAME.tmp went: the victim is untouched, the
   * link at NAME is replaced by the file, and nothing but the saved files is left */
  char victim[600], link1[600], link2[600];
  snprintf(victim, sizeof victim, "%s/victim", dir);
  snprintf(link1, sizeof link1, "%s/s.json", dir);
  snprintf(link2, sizeof link2, "%s/s.json.tmp", dir);
  FILE *v = fopen(victim, "w");
  EXPECT(v && fputs("precious\n", v) >= 0 && fclose(v) == 0, "victim file");
  EXPECT(symlink(victim, link1) == 0 && symlink(victim, link2) == 0, "symlinks");
  EXPECT(mnt_json_save(dir, "s.json", o) == MNT_OK, "save over a symlink");
  char buf[64] = "";
  v = fopen(victim, "r");
  EXPECT(v && fgets(buf, sizeof buf, v) && !strcmp(buf, "precious\n"), "the symlink's target was written: %s", buf);
  if (v) fclose(v);
  struct stat sb;
  EXPECT(lstat(link1, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 0777) == (0644 & ~mask),
         "s.json is a regular file of mode 0644 less the umask (mode %o)", (unsigned)(sb.st_mode & 0777));
  unlink(link2);
  unlink(victim);
  DIR *dd = opendir(dir);
  struct dirent *de;
  int others = 0;
  while (dd && (de = readdir(dd)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, "x.json") &&
        strcmp(de->d_name, "s.json")) {
      fprintf(stderr, "left behind: %s\n", de->d_name);
      others++;
    }
  if (dd) closedir(dd);
  EXPECT(others == 0, "%d temporary files left behind", others);
  /* a directory that does not exist: the error names it */
  EXPECT(mnt_json_save("/nonexistent-dir", "z.json", o) == MNT_ESYS && strstr(mnt_last_error(), "/nonexistent-dir/z.json"),
         "an unwritable directory: %s", mnt_last_error());
  /* a full disk: /dev/full takes nothing */
  FILE *full = fopen("/dev/full", "w");
  if (full) {
    EXPECT(mnt_json_append(full, "/dev/full", o) == MNT_ESYS && strstr(mnt_last_error(), "/dev/full") &&
               strstr(mnt_last_error(), "No space"),
           "a line that cannot be written: %s", mnt_last_error());
    fclose(full);
  }
  json_decref(o);
  char ts[MNT_ISO_TIME_LEN];
  mnt_iso_time(ts, 1796259723.456);
  EXPECT(!strcmp(ts, "2026-12-03T01:02:03.456Z"), "ISO time: %s", ts);
  mnt_iso_time(ts, 946684799.9996);
  EXPECT(!strcmp(ts, "2000-01-01T00:00:00.000Z"), "ISO time rounds to the millisecond: %s", ts);
  mnt_iso_time_now(ts);
  int y, mo, d, h, mi, sec, ms, n = 0;
  EXPECT(strlen(ts) == 24 && sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &y, &mo, &d, &h, &mi, &sec, &ms, &n) == 7 &&
             n == 24 && y >= 2024,
         "ISO time now: %s", ts);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  if (failures) {
    fprintf(stderr, "test_jsonio: %d failures\n", failures);
    return 1;
  }
  printf("test_jsonio: ok (%d checks)\n", checks);
  return 0;
}
