/* test_env.c — the environment variables: one parser, one behaviour. Unset or empty is the
 * default; a value of the wrong type or out of range is an error naming the variable (never a
 * silent fallback); mnt_env_check finds every bad one; the help lists every variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/env.h"
#include "src/log.h"

#include "tests/expect.h"

static const char *const NAMES[] = {"MNT_COMM_TIMEOUT", "MNT_COMM_IFACE", "MNT_LOG_LEVEL", "MNT_SHM_FIFO_BYTES",
                                    "MNT_TCP_BUF", "MNT_PROGRESS_INTERVAL"};

int main(void) {
  for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) unsetenv(NAMES[i]);
  double s;
  size_t b;
  int lvl;
  EXPECT(mnt_env_check() == MNT_OK, "defaults are valid");
  EXPECT(mnt_env_seconds("MNT_COMM_TIMEOUT", &s) == MNT_OK && s == 600, "default timeout %g", s);
  EXPECT(mnt_env_bytes("MNT_SHM_FIFO_BYTES", &b) == MNT_OK && b == 4u << 20, "default fifo %zu", b);
  EXPECT(mnt_env_bytes("MNT_TCP_BUF", &b) == MNT_OK && b == 0, "default tcp buf %zu", b);
  EXPECT(mnt_env_string("MNT_COMM_IFACE") == NULL, "default iface");
  EXPECT(mnt_env_log_level(&lvl) == MNT_OK && lvl == MNT_LOG_INFO, "default level");
  setenv("MNT_COMM_TIMEOUT", "", 1);
  EXPECT(mnt_env_seconds("MNT_COMM_TIMEOUT", &s) == MNT_OK && s == 600, "empty means the default");

  setenv("MNT_COMM_TIMEOUT", "15", 1);
  setenv("MNT_SHM_FIFO_BYTES", "1M", 1);
  setenv("MNT_TCP_BUF", "262144", 1);
  setenv("MNT_LOG_LEVEL", "DEBUG", 1);
  setenv("MNT_COMM_IFACE", "eth", 1);
  EXPECT(mnt_env_check() == MNT_OK, "good values");
  EXPECT(mnt_env_seconds("MNT_COMM_TIMEOUT", &s) == MNT_OK && s == 15, "timeout %g", s);
  EXPECT(mnt_env_bytes("MNT_SHM_FIFO_BYTES", &b) == MNT_OK && b == 1u << 20, "fifo %zu", b);
  EXPECT(mnt_env_bytes("MNT_TCP_BUF", &b) == MNT_OK && b == 262144, "tcp buf %zu", b);
  EXPECT(mnt_env_log_level(&lvl) == MNT_OK && lvl == MNT_LOG_DEBUG, "level %d", lvl);
  EXPECT(mnt_env_string("MNT_COMM_IFACE") && !strcmp(mnt_env_string("MNT_COMM_IFACE"), "eth"), "iface");

  /* bad values: an error naming the variable, for the getter and for the check */
  struct { const char *name, *value; } bad[] = {
      {"MNT_COMM_TIMEOUT", "abc"}, {"MNT_COMM_TIMEOUT", "0"},        {"MNT_COMM_TIMEOUT", "-5"},
      {"MNT_COMM_TIMEOUT", "nan"}, {"MNT_COMM_TIMEOUT", "10s"},      {"MNT_SHM_FIFO_BYTES", "3000"},
      {"MNT_SHM_FIFO_BYTES", "5000"}, {"MNT_SHM_FIFO_BYTES", "lots"}, {"MNT_TCP_BUF", "-1"},
      {"MNT_LOG_LEVEL", "loud"},   {"MNT_PROGRESS_INTERVAL", "0"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *keep = getenv(bad[i].name);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", keep ? keep : "");
    setenv(bad[i].name, bad[i].value, 1);
    int st = mnt_env_check();
    EXPECT(st == MNT_EARG && strstr(mnt_last_error(), bad[i].name) && strstr(mnt_last_error(), bad[i].value),
           "%s='%s' must be refused naming it (got %d: %s)", bad[i].name, bad[i].value, st, mnt_last_error());
    if (strcmp(bad[i].name, "MNT_LOG_LEVEL") == 0)
      EXPECT(mnt_env_log_level(&lvl) == MNT_EARG, "a bad level is refused by the getter too");
    else if (strcmp(bad[i].name, "MNT_COMM_TIMEOUT") == 0 || strcmp(bad[i].name, "MNT_PROGRESS_INTERVAL") == 0)
      EXPECT(mnt_env_seconds(bad[i].name, &s) == MNT_EARG, "%s='%s' from the getter", bad[i].name, bad[i].value);
    else
      EXPECT(mnt_env_bytes(bad[i].name, &b) == MNT_EARG, "%s='%s' from the getter", bad[i].name, bad[i].value);
    setenv(bad[i].name, saved, 1);
  }
  /* the help names every variable */
  char buf[8192] = "";
  FILE *f = fmemopen(buf, sizeof buf - 1, "w");
  mnt_env_print_help(f);
  fclose(f);
  for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) EXPECT(strstr(buf, NAMES[i]), "help lacks %s", NAMES[i]);
  if (failures) {
    fprintf(stderr, "test_env: %d failures\n", failures);
    return 1;
  }
  printf("test_env: ok (%d checks)\n", checks);
  return 0;
}
