/* test_run_keys.c — what defines a run (src/cmd/train_runkeys.h) is what a resume checks: every key of
 * the table is in the config.json files given (train runs whose options make every key's condition
 * hold in one of them), and for every key present a changed value makes mnt_rundir_same_run refuse
 * the resume, naming that key's checkpoint, while the unchanged configuration is accepted.
 *   test_run_keys CONFIG.json...        (tests/unit/run_keys.sh makes them) */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "io/rundir/rundir.h"
#include "src/cmd/train_runkeys.h"
#include "src/log.h"
#include "tests/expect.h"

/* a value that differs from v, of the same JSON type */
static json_t *changed(json_t *v) {
  switch (json_typeof(v)) {
    case JSON_STRING: {
      char s[512];
      snprintf(s, sizeof s, "%s-changed", json_string_value(v));
      return json_string(s);
    }
    case JSON_INTEGER: return json_integer(json_integer_value(v) + 1);
    case JSON_REAL: return json_real(json_real_value(v) * 2 + 1);
    case JSON_TRUE: return json_false();
    case JSON_FALSE: return json_true();
    case JSON_ARRAY: {
      json_t *a = json_deep_copy(v);
      json_array_append_new(a, json_integer(7));
      return a;
    }
    default: return json_string("changed");
  }
}

int main(int argc, char **argv) {
  static const char *const keys[] = MNT_TRAIN_RUN_KEY_NAMES;
  int n = MNT_TRAIN_NRUN_KEYS, seen[MNT_TRAIN_NRUN_KEYS] = {0};
  EXPECT(n == (int)(sizeof keys / sizeof keys[0]) && n > 20, "the table has %d keys", n);
  for (int a = 1; a < argc; a++) {
    json_error_t e;
    json_t *cfg = json_load_file(argv[a], 0, &e);
    EXPECT(cfg, "%s: %s", argv[a], e.text);
    if (!cfg) continue;
    EXPECT(mnt_rundir_same_run(cfg, cfg, "ckpt", keys, n) == MNT_OK, "%s: the same configuration refused", argv[a]);
    for (int k = 0; k < n; k++) {
      json_t *v = json_object_get(cfg, keys[k]);
      if (!v) continue;
      seen[k] = 1;
      json_t *now = json_deep_copy(cfg);
      json_object_set_new(now, keys[k], changed(v));
      EXPECT(mnt_rundir_same_run(cfg, now, "ckpt", keys, n) == MNT_EARG, "%s: a changed %s is not refused", argv[a],
             keys[k]);
      char flag[64]; /* or as its flag spells it: --target-top1 */
      snprintf(flag, sizeof flag, "--%s", keys[k]);
      for (char *p = flag; *p; p++) *p = *p == '_' ? '-' : *p;
      EXPECT(strstr(mnt_last_error(), keys[k]) || strstr(mnt_last_error(), flag),
             "%s: the refusal of a changed %s does not name it: %s", argv[a], keys[k], mnt_last_error());
      json_object_del(now, keys[k]); /* and one that lost the key */
      EXPECT(mnt_rundir_same_run(cfg, now, "ckpt", keys, n) == MNT_EARG || !strcmp(keys[k], "optimizer") ||
                 !strcmp(keys[k], "bn_eval"),
             "%s: a configuration without %s is not refused", argv[a], keys[k]);
      json_decref(now);
    }
    json_decref(cfg);
  }
  for (int k = 0; k < n; k++) EXPECT(seen[k], "no config.json given has %s", keys[k]);
  printf("%d checks, %d failures (%d keys define a run)\n", checks, failures, n);
  return failures ? 1 : 0;
}
