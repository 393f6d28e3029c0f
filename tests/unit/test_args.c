/* test_args.c — option parsing and sizes, as `mntrain <cmd>` uses them. */
#include <stdio.h>
#include <string.h>

#include "src/args.h"
#include "src/log.h"
#include "src/path.h"

#include "tests/expect.h"

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
  const char *dt = "float", *in = NULL, *out = NULL;
  const mnt_opt opts[] = {{"IN", 0, MNT_OPT_ARG, &in, NULL, "", 0, 0},
                          {"minbytes", 'b', MNT_OPT_SIZE, &minb, "SIZE", "", MNT_RANGE(1, 1 << 30)},
                          {"maxbytes", 'e', MNT_OPT_SIZE, &maxb, "SIZE", "", MNT_RANGE(1, 1 << 30)},
                          {"iters", 'n', MNT_OPT_INT, &iters, "N", "", MNT_RANGE(0, 100)},
                          {"stepfactor", 'f', MNT_OPT_DOUBLE, &f, "F", "", MNT_RANGE(1.5, 4)},
                          {"datatype", 'd', MNT_OPT_STRING, &dt, "T", "", 0, 0},
                          {"verbose", 'v', MNT_OPT_FLAG, &flag, NULL, "", 0, 0},
                          {"OUT", 0, MNT_OPT_ARG, &out, NULL, "", 0, 0},
                          {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  /* positionals before, between and after options */
  char *ok[] = {"a", "-b", "1K", "--maxbytes=64M", "-n5", "--stepfactor", "2.5", "b", "-d", "bf16", "-v"};
  EXPECT(mnt_parse_opts("t", opts, 11, ok, &help, 1) == 0, "good options");
  EXPECT(minb == 1024 && maxb == 64u << 20 && iters == 5 && f == 2.5 && !strcmp(dt, "bf16") && flag == 1 && !help &&
             in && !strcmp(in, "a") && out && !strcmp(out, "b"),
         "values %zu %zu %d %g %s %d %s %s", minb, maxb, iters, f, dt, flag, in, out);
  /* --help anywhere: help, and nothing parsed or assigned, not even what comes before it */
  iters = 7;
  char *h[] = {"x", "y", "-n", "9", "--bogus", "--help"};
  EXPECT(mnt_parse_opts("t", opts, 6, h, &help, 1) == 0 && help == 1 && iters == 7, "--help at the end: %d %d", help,
         iters);
  char *h2[] = {"-h", "-n", "lots"};
  EXPECT(mnt_parse_opts("t", opts, 3, h2, &help, 1) == 0 && help == 1, "-h first");
  char *bad1[] = {"a", "b", "--nope", "1"};
  EXPECT(mnt_parse_opts("t", opts, 4, bad1, &help, 1) == MNT_EARG, "unknown option");
  char *bad2[] = {"a", "b", "-n", "x"};
  EXPECT(mnt_parse_opts("t", opts, 4, bad2, &help, 1) == MNT_EARG, "bad integer");
  char *bad3[] = {"a", "b", "-b"};
  EXPECT(mnt_parse_opts("t", opts, 3, bad3, &help, 1) == MNT_EARG, "missing value");
  char *bad4[] = {"a", "b", "stray"};
  EXPECT(mnt_parse_opts("t", opts, 3, bad4, &help, 1) == MNT_EARG, "a third positional");
  char *bad4b[] = {"a"};
  EXPECT(mnt_parse_opts("t", opts, 1, bad4b, &help, 1) == MNT_EARG, "a missing positional");
  char *bad5[] = {"a", "b", "--verbose=1"};
  EXPECT(mnt_parse_opts("t", opts, 3, bad5, &help, 1) == MNT_EARG, "flag with value");
  /* ranges and finiteness, checked where the value is parsed; the value is not assigned */
  iters = 5;
  char *r1[] = {"a", "b", "-n", "-5"};
  EXPECT(mnt_parse_opts("t", opts, 4, r1, &help, 1) == MNT_EARG && iters == 5, "-n -5 is below the range");
  char *r2[] = {"a", "b", "-n", "101"};
  EXPECT(mnt_parse_opts("t", opts, 4, r2, &help, 1) == MNT_EARG, "-n 101 is above the range");
  char *r3[] = {"a", "b", "-n", "100", "-f", "1.5"};
  EXPECT(mnt_parse_opts("t", opts, 6, r3, &help, 1) == 0 && iters == 100 && f == 1.5, "the range is inclusive");
  const char *nonfinite[] = {"nan", "NaN", "inf", "-inf", "1e999", "infinity"};
  for (int k = 0; k < 6; k++) {
    char *r4[] = {"a", "b", "-f", (char *)nonfinite[k]};
    f = 2;
    EXPECT(mnt_parse_opts("t", opts, 4, r4, &help, 1) == MNT_EARG && f == 2, "-f %s must be refused", nonfinite[k]);
  }
  char *r5[] = {"a", "b", "-b", "0"};
  EXPECT(mnt_parse_opts("t", opts, 4, r5, &help, 1) == MNT_EARG, "-b 0 is below the range");
  char *r6[] = {"a", "b", "-n", "99999999999"};
  EXPECT(mnt_parse_opts("t", opts, 4, r6, &help, 1) == MNT_EARG, "an integer beyond int");
  /* a numeric option without a range is a table error, found at the first parse */
  int x = 0;
  const mnt_opt unranged[] = {{"x", 0, MNT_OPT_INT, &x, "X", "", 0, 0}, {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  EXPECT(mnt_parse_opts("t", unranged, 0, NULL, &help, 1) == MNT_EARG, "an option without a range");

  /* a choice is one of its words; a power-of-two size; an old spelling stands for its new name */
  EXPECT(mnt_choice_index("cpu|cuda|auto", "cuda") == 1 && mnt_choice_index("cpu|cuda|auto", "auto") == 2 &&
             mnt_choice_index("cpu|cuda|auto", "cu") == -1 && mnt_choice_index("cpu|cuda|auto", "cpu|cuda") == -1 &&
             mnt_choice_index("cpu", "cpu") == 0,
         "mnt_choice_index");
  const char *dev = "auto";
  size_t stripe = 1 << 20;
  int threads = 1;
  const mnt_opt typed[] = {{"device", 0, MNT_OPT_CHOICE, &dev, "cpu|cuda|auto", "", 0, 0},
                           {"stripe", 0, MNT_OPT_SIZE2, &stripe, "BYTES", "", MNT_RANGE(4096, 1 << 30)},
                           {"loader-threads", 0, MNT_OPT_INT, &threads, "T", "", MNT_RANGE(1, 256)},
                           {"threads", 0, MNT_OPT_ALIAS, NULL, "loader-threads", NULL, 0, 0},
                           {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  char *c1[] = {"--device", "cuda", "--stripe", "4M", "--threads", "3"};
  EXPECT(mnt_parse_opts("t", typed, 6, c1, &help, 1) == 0 && !strcmp(dev, "cuda") && stripe == 4u << 20 && threads == 3,
         "choice, power of two and alias: %s %zu %d", dev, stripe, threads);
  char *c2[] = {"--device", "tpu"};
  EXPECT(mnt_parse_opts("t", typed, 2, c2, &help, 1) == MNT_EARG && !strcmp(dev, "cuda"), "a word not in the choice");
  char *c3[] = {"--device=cpu|cuda"};
  EXPECT(mnt_parse_opts("t", typed, 1, c3, &help, 1) == MNT_EARG, "the list itself is not a choice");
  char *c4[] = {"--stripe", "12K"};
  EXPECT(mnt_parse_opts("t", typed, 2, c4, &help, 1) == MNT_EARG && stripe == 4u << 20, "12K is not a power of two");
  char *c5[] = {"--stripe", "2K"};
  EXPECT(mnt_parse_opts("t", typed, 2, c5, &help, 1) == MNT_EARG, "2K: a power of two below the range");
  char *c6[] = {"--threads", "0"};
  EXPECT(mnt_parse_opts("t", typed, 2, c6, &help, 1) == MNT_EARG && threads == 3, "the alias's value is checked");
  static char longpath[8192];
  memset(longpath, 'p', MNT_PATH_MAX - MNT_PATH_ROOM);
  const char *pth = NULL;
  const mnt_opt paths[] = {{"out", 0, MNT_OPT_PATH, &pth, "DIR", "", 0, 0}, {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  char *p1[] = {"--out", longpath};
  EXPECT(mnt_parse_opts("t", paths, 2, p1, &help, 1) == 0 && pth == longpath, "a path of the longest length");
  longpath[MNT_PATH_MAX - MNT_PATH_ROOM] = 'p';
  pth = NULL;
  EXPECT(mnt_parse_opts("t", paths, 2, p1, &help, 1) == MNT_EARG && !pth, "a path one byte too long");
  const mnt_opt orphan[] = {{"old", 0, MNT_OPT_ALIAS, NULL, "new", NULL, 0, 0}, {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  EXPECT(mnt_parse_opts("t", orphan, 0, NULL, &help, 1) == MNT_EARG, "an alias of no option is a table error");
  const mnt_opt nochoice[] = {{"x", 0, MNT_OPT_CHOICE, &dev, NULL, "", 0, 0}, {NULL, 0, 0, NULL, NULL, NULL, 0, 0}};
  EXPECT(mnt_parse_opts("t", nochoice, 0, NULL, &help, 1) == MNT_EARG, "a choice without words is a table error");
  if (failures) {
    fprintf(stderr, "test_args: %d failures\n", failures);
    return 1;
  }
  printf("test_args: ok (%d checks)\n", checks);
  return 0;
}
