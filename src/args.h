/* args.h — command-line options of the subcommands.
 * defines: mnt_opt (a table row: long name, short letter, type, destination, help, range),
 *          MNT_RANGE, MNT_ANY_INT, mnt_parse_opts, mnt_print_help, mnt_usage_error, mnt_parse_size,
 *          mnt_format_size, mnt_choice_index, mnt_choices, mnt_opts_quiet.
 * Every value is checked where it is parsed, and the message names the flag: every numeric option
 * has a range in its row (reals must be finite), a size may be required to be a power of two, a
 * choice is one of the words of its row. One flag name means one thing across the commands; an
 * old spelling stays as an alias that warns and points to the new one. */
#ifndef MNT_ARGS_H
#define MNT_ARGS_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum {
  MNT_OPT_FLAG,   /* int set to 1 */
  MNT_OPT_INT,    /* int */
  MNT_OPT_SIZE,   /* size_t, "4096", "64M" */
  MNT_OPT_DOUBLE, /* double, finite */
  MNT_OPT_STRING, /* const char * */
  MNT_OPT_PATH,   /* const char *, a file or directory: at most MNT_PATH_MAX - MNT_PATH_ROOM bytes */
  MNT_OPT_CHOICE, /* const char *, one of the words of metavar: "cpu|cuda|auto" */
  MNT_OPT_SIZE2,  /* size_t as MNT_OPT_SIZE, and a power of two */
  MNT_OPT_ALIAS,  /* an old spelling: metavar names the option it stands for; using it warns */
  MNT_OPT_ARG,    /* a positional argument (const char *), required; name is its metavar; a path's
                     length limit (MNT_OPT_PATH) applies */
  MNT_OPT_ENUM    /* int: the index of the word given among the words of metavar ("step|cosine|poly"),
                     an enum's value when metavar is made from its name table (mnt_choices) */
} mnt_opt_type;

typedef struct mnt_opt {
  const char *name;  /* long name without "--" (MNT_OPT_ARG: "IMAGES") */
  char letter;       /* short option, 0 for none */
  mnt_opt_type type;
  void *dest;
  const char *metavar;
  const char *help;
  double min, max;   /* INT, SIZE, SIZE2, DOUBLE: accepted values, inclusive */
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
/* 1 when this process is not a job's first rank (PMIX_RANK from the environment; 0 without PMIx):
 * it leaves usage errors and help to rank 0, so that N ranks do not print N copies. Read before
 * the world is initialised, which a usage error never reaches. */
static inline int mnt_opts_quiet(void) {
  const char *e = getenv("PMIX_RANK");
  return e && *e && atoi(e) != 0;
}
/* A usage error of command cmd ("train", "bench step"): "mntrain CMD: MESSAGE" on stderr, by the
 * first rank only (PMIX_RANK 0, or no PMIx: N ranks do not print N copies); returns MNT_EARG
 * (exit 2). The one way commands report a bad flag or a missing argument. */
int mnt_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The position of word in a choice list "a|b|c" (0, 1, 2), or -1. */
int mnt_choice_index(const char *choices, const char *word);
/* names[0..n) joined as a choice list "a|b|c" into buf (an MNT_OPT_ENUM row's metavar); buf */
const char *mnt_choices(char *buf, size_t len, const char *const *names, int n);
/* "4096", "1K", "64M", "2G" (binary: K = 1024). Returns 0 on success. */
int mnt_parse_size(const char *s, size_t *out);
/* 1024 -> "1K", 67108864 -> "64M", 1000 -> "1000" */
void mnt_format_size(size_t v, char *out, size_t n);

#endif
