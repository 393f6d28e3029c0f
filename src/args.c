/* args.c — see args.h. */
#include "src/args.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"

/* a usage error: "mntrain CMD: MESSAGE" on stderr unless quiet; MNT_EARG */
static int vrefuse(const char *cmd, int quiet, const char *fmt, va_list ap) {
  if (quiet) return MNT_EARG;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fprintf(stderr, "mntrain %s: %s\n", cmd, msg);
  return MNT_EARG;
}

/* the parser's usage errors (quiet as its caller says) */
static int refuse(const char *cmd, int quiet, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(const char *cmd, int quiet, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int st = vrefuse(cmd, quiet, fmt, ap);
  va_end(ap);
  return st;
}

int mnt_parse_size(const char *s, size_t *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || s[0] == '-') return -1;
  unsigned long long mul = 1;
  if (*end) {
    switch (*end) {
      case 'k': case 'K': mul = 1ull << 10; break;
      case 'm': case 'M': mul = 1ull << 20; break;
      case 'g': case 'G': mul = 1ull << 30; break;
      case 't': case 'T': mul = 1ull << 40; break;
      default: return -1;
    }
    end++;
    if (*end == 'i') end++;           /* "64Mi" */
    if (*end == 'B' || *end == 'b') end++; /* "64MB" */
    if (*end) return -1;
  }
  if (v > ~0ull / mul) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

void mnt_format_size(size_t v, char *out, size_t n) {
  static const char suf[] = "KMGT";
  int i = -1;
  while (v >= 1024 && v % 1024 == 0 && i < 3) {
    v /= 1024;
    i++;
  }
  if (i < 0) snprintf(out, n, "%zu", v);
  else snprintf(out, n, "%zu%c", v, suf[i]);
}

static int is_numeric(mnt_opt_type t) {
  return t == MNT_OPT_INT || t == MNT_OPT_SIZE || t == MNT_OPT_SIZE2 || t == MNT_OPT_DOUBLE;
}

int mnt_choice_index(const char *choices, const char *word) {
  size_t n = strlen(word);
  int i = 0;
  for (const char *p = choices; p; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncmp(p, word, n)) return i;
    p = bar ? bar + 1 : NULL;
  }
  return -1;
}

const char *mnt_choices(char *buf, size_t len, const char *const *names, int n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && k < len; i++) k += (size_t)snprintf(buf + k, len - k, "%s%s", i ? "|" : "", names[i]);
  return buf;
}

/* "a|b|c" -> "a, b or c" */
static void choice_text(const char *choices, char *out, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  for (const char *p = choices; p && len < n;) {
    const char *bar = strchr(p, '|');
    int w = bar ? (int)(bar - p) : (int)strlen(p);
    const char *sep = p == choices ? "" : bar ? ", " : " or ";
    len += (size_t)snprintf(out + len, n - len, "%s%.*s", sep, w, p);
    p = bar ? bar + 1 : NULL;
  }
}

static void range_text(const mnt_opt *o, char *out, size_t n) {
  if ((o->type == MNT_OPT_SIZE || o->type == MNT_OPT_SIZE2) && o->max < 1e15) { /* "from 4K to 1G" */
    char lo[32], hi[32];
    mnt_format_size((size_t)o->min, lo, sizeof lo);
    mnt_format_size((size_t)o->max, hi, sizeof hi);
    snprintf(out, n, "must be from %s to %s", lo, hi);
  } else if (o->max >= 1e15 || (o->type == MNT_OPT_INT && o->max >= 2147483647.0)) snprintf(out, n, "must be >= %g", o->min);
  else if (o->min <= -1e15 || (o->type == MNT_OPT_INT && o->min <= -2147483647.0)) snprintf(out, n, "must be <= %g", o->max);
  else snprintf(out, n, "must be from %g to %g", o->min, o->max);
}

static int set_value(const char *cmd, const mnt_opt *o, const char *flag, const char *val, int quiet) {
  char *end;
  double x = 0;
  int size = o->type == MNT_OPT_SIZE || o->type == MNT_OPT_SIZE2;
  const char *what = size ? "size (e.g. 4096, 1K, 64M)" : o->type == MNT_OPT_INT ? "integer" : "finite number";
  int ok = 0;
  errno = 0;
  switch (o->type) {
    case MNT_OPT_INT: {
      long v = strtol(val, &end, 10);
      ok = !errno && end != val && !*end;
      x = (double)v;
      break;
    }
    case MNT_OPT_DOUBLE:
      x = strtod(val, &end);
      ok = !errno && end != val && !*end && isfinite(x);
      break;
    case MNT_OPT_SIZE:
    case MNT_OPT_SIZE2: {
      size_t v;
      ok = mnt_parse_size(val, &v) == 0;
      x = (double)v;
      break;
    }
    case MNT_OPT_CHOICE:
    case MNT_OPT_ENUM: {
      int i = mnt_choice_index(o->metavar, val);
      if (i < 0) {
        char c[256];
        choice_text(o->metavar, c, sizeof c);
        return refuse(cmd, quiet, "%s: %s ('%s' is none of them)", flag, c, val);
      }
      if (o->type == MNT_OPT_ENUM) *(int *)o->dest = i;
      else *(const char **)o->dest = val;
      return 0;
    }
    case MNT_OPT_PATH:
      if (strlen(val) > MNT_PATH_MAX - MNT_PATH_ROOM)
        return refuse(cmd, quiet, "%s %.40s...: a path of %zu bytes, at most %d are taken", flag, val, strlen(val),
                      MNT_PATH_MAX - MNT_PATH_ROOM);
      *(const char **)o->dest = val;
      return 0;
    case MNT_OPT_STRING:
    case MNT_OPT_ARG:
      *(const char **)o->dest = val;
      return 0;
    default: break;
  }
  if (!ok) {
    return refuse(cmd, quiet, "%s: '%s' is not a valid %s", flag, val, what);
  }
  if (x < o->min || x > o->max) {
    char r[96];
    range_text(o, r, sizeof r);
    return refuse(cmd, quiet, "%s %s: out of range (%s)", flag, val, r);
  }
  if (o->type == MNT_OPT_SIZE2 && ((size_t)x & ((size_t)x - 1)))
    return refuse(cmd, quiet, "%s %s: a power of two (e.g. 1M, 4M) is needed", flag, val);
  if (o->type == MNT_OPT_INT) *(int *)o->dest = (int)x;
  else if (o->type == MNT_OPT_DOUBLE) *(double *)o->dest = x;
  else *(size_t *)o->dest = (size_t)x;
  return 0;
}

/* the table itself: a numeric row without a range would let values through unchecked, a choice
 * needs its words, an alias the row it stands for (a programming error, said even when quiet) */
static int check_table(const char *cmd, const mnt_opt *opts) {
  for (const mnt_opt *p = opts; p->name; p++) {
    const char *why = is_numeric(p->type) && !(p->min < p->max)                               ? "has no range"
                      : (p->type == MNT_OPT_CHOICE || p->type == MNT_OPT_ENUM) && !p->metavar ? "has no choices"
                                                                                              : NULL;
    if (p->type == MNT_OPT_ALIAS) {
      why = "is an alias of no option";
      for (const mnt_opt *q = opts; q->name && why; q++)
        if (q->type != MNT_OPT_ALIAS && p->metavar && !strcmp(q->name, p->metavar)) why = NULL;
    }
    if (why) return refuse(cmd, 0, "internal: option --%s %s", p->name, why);
  }
  return MNT_OK;
}

/* the row of option a ("--name", "--name=value", "-x", "-xvalue"), its spelling in flag and an
 * attached value in *val; an old spelling resolved to its row with a warning; NULL: unknown */
static const mnt_opt *find_option(const char *cmd, const mnt_opt *opts, const char *a, char *flag, size_t n,
                                  const char **val, int quiet) {
  const mnt_opt *o = NULL;
  *val = NULL;
  if (a[1] == '-') {
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    for (const mnt_opt *p = opts; p->name && !o; p++)
      if (p->type != MNT_OPT_ARG && strlen(p->name) == len && !strncmp(p->name, a + 2, len)) o = p;
    snprintf(flag, n, "--%.*s", (int)len, a + 2);
    if (eq) *val = eq + 1;
  } else {
    for (const mnt_opt *p = opts; p->name && !o; p++)
      if (p->type != MNT_OPT_ARG && p->letter == a[1]) o = p;
    snprintf(flag, n, "-%c", a[1]);
    if (a[2]) *val = a + 2;
  }
  if (o && o->type == MNT_OPT_ALIAS) { /* the old spelling: the same option, and a warning */
    const char *to = o->metavar;
    for (o = opts; o->name && (o->type == MNT_OPT_ALIAS || strcmp(o->name, to)); o++) continue;
    if (!quiet) fprintf(stderr, "mntrain %s: warning: %s is the old spelling of --%s: use --%s\n", cmd, flag, to, to);
  }
  return o;
}

int mnt_parse_opts(const char *cmd, const mnt_opt *opts, int argc, char **argv, int *help, int quiet) {
  *help = 0;
  MNT_CHECK(check_table(cmd, opts));
  for (int i = 0; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      *help = 1; /* help and nothing else: no value is parsed or assigned */
      return 0;
    }
  const mnt_opt *next_arg = opts;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *val;
    char flag[64];
    if (a[0] != '-' || !a[1] || (a[1] == '-' && !a[2])) { /* a positional argument: the next MNT_OPT_ARG row */
      while (next_arg->name && next_arg->type != MNT_OPT_ARG) next_arg++;
      if (!next_arg->name) return refuse(cmd, quiet, "unexpected argument '%s' (see 'mntrain %s --help')", a, cmd);
      if (strlen(a) > MNT_PATH_MAX - MNT_PATH_ROOM) /* positional arguments are files and directories */
        return refuse(cmd, quiet, "%s %.40s...: a path of %zu bytes, at most %d are taken", next_arg->name, a,
                      strlen(a), MNT_PATH_MAX - MNT_PATH_ROOM);
      *(const char **)(next_arg++)->dest = a;
      continue;
    }
    const mnt_opt *o = find_option(cmd, opts, a, flag, sizeof flag, &val, quiet);
    if (!o) return refuse(cmd, quiet, "unknown option '%s' (see 'mntrain %s --help')", a, cmd);
    if (o->type == MNT_OPT_FLAG) {
      if (val) return refuse(cmd, quiet, "%s takes no value", flag);
      *(int *)o->dest = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) return refuse(cmd, quiet, "%s needs a value (%s)", flag, o->metavar ? o->metavar : "");
      val = argv[++i];
    }
    MNT_CHECK(set_value(cmd, o, flag, val, quiet));
  }
  while (next_arg->name && next_arg->type != MNT_OPT_ARG) next_arg++;
  if (next_arg->name) return refuse(cmd, quiet, "missing %s (see 'mntrain %s --help')", next_arg->name, cmd);
  return 0;
}

void mnt_print_help(FILE *f, const char *usage, const char *about, const mnt_opt *opts) {
  fprintf(f, "usage: %s\n\n%s\n", usage, about);
  int args = 0;
  for (const mnt_opt *o = opts; o->name; o++)
    if (o->type == MNT_OPT_ARG && o->help && o->help[0]) {
      if (!args++) fprintf(f, "\narguments:\n");
      fprintf(f, "  %-28s %s\n", o->name, o->help);
    }
  fprintf(f, "\noptions:\n");
  for (const mnt_opt *o = opts; o->name; o++) {
    if (o->type == MNT_OPT_ARG) continue;
    if (o->type == MNT_OPT_ALIAS) {
      char left[64], help[96];
      snprintf(left, sizeof left, "    --%s", o->name);
      snprintf(help, sizeof help, "old spelling of --%s (warns)", o->metavar);
      fprintf(f, "  %-28s %s\n", left, help);
      continue;
    }
    char left[64];
    if (o->letter)
      snprintf(left, sizeof left, "-%c, --%s%s%s", o->letter, o->name, o->metavar ? " " : "",
               o->metavar ? o->metavar : "");
    else
      snprintf(left, sizeof left, "    --%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(f, "  %-28s %s\n", left, o->help);
  }
  fprintf(f, "  %-28s %s\n", "-h, --help", "show this help and do nothing else");
  fprintf(f, "\nexit codes: 0 success, 1 failure at run time, 2 usage, 3 preempted after a checkpoint\n(see mntrain --help)\n");
}

int mnt_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int st = vrefuse(cmd, mnt_opts_quiet(), fmt, ap);
  va_end(ap);
  return st;
}
