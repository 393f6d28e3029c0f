/* args.h — command-line options of the subcommands.
 * defines: mnt_opt (a table row: long name, short letter, type, destination, help, range),
 *          MNT_RANGE, MNT_ANY_INT, mnt_parse_opts, mnt_print_help, mnt_parse_size,
 *          mnt_format_size.
 * Every numeric option has a range in its row, so that every value is checked where it is parsed
 * and the message names the flag; reals must be finite. */
#ifndef MNT_ARGS_H
#define MNT_ARGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
  MNT_OPT_FLAG,   /* int set to 1 */
  MNT_OPT_INT,    /* int */
  MNT_OPT_SIZE,   /* size_t, "4096", "64M" */
  MNT_OPT_DOUBLE, /* double, finite */
  MNT_OPT_STRING, /* const char * */
  MNT_OPT_ARG     /* a positional argument (const char *), required; name is its metavar */
} mnt_opt_type;

typedef struct mnt_opt {
  const char *name;  /* long name without "--" (MNT_OPT_ARG: "IMAGES") */
  char letter;       /* short option, 0 for none */
  mnt_opt_type type;
  void *dest;
  const char *metavar;
  const char *help;
  double min, max;   /* INT, SIZE, DOUBLE: accepted values, inclusive */
} mnt_opt;

#define MNT_RANGE(lo, hi) (double)(lo), (double)(hi)
#define MNT_ANY_INT MNT_RANGE(-2147483647.0, 2147483647.0)

/* Parse argv[0..argc) (argv[0] is the first option, not the program). When "--help" or "-h"
 * appears anywhere, *help is set and nothing else is parsed or assigned. Positional arguments
 * fill the MNT_OPT_ARG rows in order and may come before, between or after options. Errors name
 * the flag and are printed to stderr unless quiet; returns 0 or MNT_EARG. The table ends with a
 * row whose name is NULL. */
int mnt_parse_opts(const char *cmd, const mnt_opt *opts, int argc, char **argv, int *help, int quiet);
void mnt_print_help(FILE *f, const char *usage, const char *about, const mnt_opt *opts);
/* A usage error of command cmd ("train", "bench step"): "mntrain CMD: MESSAGE" on stderr, by the
 * first rank only (PMIX_RANK 0, or no PMIx: N ranks do not print N copies); returns MNT_EARG
 * (exit 2). The one way commands report a bad flag or a missing argument. */
int mnt_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "4096", "1K", "64M", "2G" (binary: K = 1024). Returns 0 on success. */
int mnt_parse_size(const char *s, size_t *out);
/* 1024 -> "1K", 67108864 -> "64M", 1000 -> "1000" */
void mnt_format_size(size_t v, char *out, size_t n);

#endif
