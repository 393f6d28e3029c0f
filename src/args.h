/* args.h — command-line options of the subcommands.
 * defines: mnt_opt (a table row: long name, short letter, type, destination, help),
 *          mnt_parse_opts, mnt_print_help, mnt_parse_size, mnt_format_size. */
#ifndef MNT_ARGS_H
#define MNT_ARGS_H

#include <stddef.h>
#include <stdio.h>

typedef enum { MNT_OPT_FLAG, MNT_OPT_INT, MNT_OPT_SIZE, MNT_OPT_DOUBLE, MNT_OPT_STRING } mnt_opt_type;

typedef struct mnt_opt {
  const char *name;  /* long name without "--" */
  char letter;       /* short option, 0 for none */
  mnt_opt_type type; /* FLAG: int set to 1; INT: int; SIZE: size_t ("64M"); DOUBLE; STRING */
  void *dest;
  const char *metavar;
  const char *help;
} mnt_opt;

/* Parse argv[0..argc) (argv[0] is the first option, not the program). "--help"/"-h" sets *help.
 * Positional arguments are not accepted. Errors name the flag and are printed to stderr unless
 * quiet; returns 0 or 2 (MNT_EARG). The table ends with a row whose name is NULL. */
int mnt_parse_opts(const char *cmd, const mnt_opt *opts, int argc, char **argv, int *help, int quiet);
void mnt_print_help(FILE *f, const char *usage, const char *about, const mnt_opt *opts);
/* "4096", "1K", "64M", "2G" (binary: K = 1024). Returns 0 on success. */
int mnt_parse_size(const char *s, size_t *out);
/* 1024 -> "1K", 67108864 -> "64M", 1000 -> "1000" */
void mnt_format_size(size_t v, char *out, size_t n);

#endif
