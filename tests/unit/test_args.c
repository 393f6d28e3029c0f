/* test_args.c — option parsing and sizes, as `mntrain <cmd>` uses them. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "log.h"

#include "check.h"

int main(void) {
  size_t v = 0;
  EXPECT(mnt_parse_size("4096", &v) == 0 && v == 4096, "4096");
  EXPECT(mnt_parse_size("1K", &v) == 0 && v == 1024, "1K");
  EXPECT(mnt_parse_size("64M", &v) == 0 && v == 64u << 20, "64M");
  EXPECT(mnt_parse_size("2G", &v) == 0 && v == 2ull << 30, "2G");
  EXPECT(mnt_parse_size("64MiB", &v) == 0 && v == 64u << 20, "64MiB");
  EXPECT(mnt_parse_size("", &v) != 0, "empty");
  EXPECT(mnt_parse_size("-1", &v) != 0, "negative");
  EXPECT(mnt_parse_size("12X", &v) != 0, "bad suffix");
  EXPECT(mnt_parse_size("1M2", &v) != 0, "trailing junk");
  EXPECT(mnt_parse_size("99999999999999999999", &v) != 0, "overflow");
  char s[32];
  mnt_format_size(64u << 20, s, sizeof s);
  EXPECT(!strcmp(s, "64M"), "format 64M: %s", s);
  mnt_format_size(1000, s, sizeof s);
  EXPECT(!strcmp(s, "1000"), "format 1000: %s", s);

  size_t minb = 1, maxb = 2;
  int iters = 0, flag = 0, help = 0;
  double f = 0;
  const char *dt = "float";
  const mnt_opt opts[] = {{"minbytes", 'b', MNT_OPT_SIZE, &minb, "SIZE", ""},
                          {"maxbytes", 'e', MNT_OPT_SIZE, &maxb, "SIZE", ""},
                          {"iters", 'n', MNT_OPT_INT, &iters, "N", ""},
                          {"stepfactor", 'f', MNT_OPT_DOUBLE, &f, "F", ""},
                          {"datatype", 'd', MNT_OPT_STRING, &dt, "T", ""},
                          {"verbose", 'v', MNT_OPT_FLAG, &flag, NULL, ""},
                          {NULL, 0, 0, NULL, NULL, NULL}};
  char *ok[] = {"-b", "1K", "--maxbytes=64M", "-n5", "--stepfactor", "2.5", "-d", "bf16", "-v"};
  EXPECT(mnt_parse_opts("t", opts, 9, ok, &help, 1) == 0, "good options");
  EXPECT(minb == 1024 && maxb == 64u << 20 && iters == 5 && f == 2.5 && !strcmp(dt, "bf16") && flag == 1 && !help,
         "values %zu %zu %d %g %s %d", minb, maxb, iters, f, dt, flag);
  char *h[] = {"--help"};
  EXPECT(mnt_parse_opts("t", opts, 1, h, &help, 1) == 0 && help == 1, "--help");
  char *bad1[] = {"--nope", "1"};
  EXPECT(mnt_parse_opts("t", opts, 2, bad1, &help, 1) == MNT_EARG, "unknown option");
  char *bad2[] = {"-n", "x"};
  EXPECT(mnt_parse_opts("t", opts, 2, bad2, &help, 1) == MNT_EARG, "bad integer");
  char *bad3[] = {"-b"};
  EXPECT(mnt_parse_opts("t", opts, 1, bad3, &help, 1) == MNT_EARG, "missing value");
  char *bad4[] = {"stray"};
  EXPECT(mnt_parse_opts("t", opts, 1, bad4, &help, 1) == MNT_EARG, "positional");
  char *bad5[] = {"--verbose=1"};
  EXPECT(mnt_parse_opts("t", opts, 1, bad5, &help, 1) == MNT_EARG, "flag with value");
  if (failures) {
    fprintf(stderr, "test_args: %d failures\n", failures);
    return 1;
  }
  printf("test_args: ok\n");
  return 0;
}
