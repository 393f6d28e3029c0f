/* args.c — see args.h. */
#include "args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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

static int set_value(const char *cmd, const mnt_opt *o, const char *flag, const char *val, int quiet) {
  char *end;
  errno = 0;
  switch (o->type) {
    case MNT_OPT_INT: {
      long v = strtol(val, &end, 10);
      if (errno || end == val || *end || v < -2147483647L || v > 2147483647L) break;
      *(int *)o->dest = (int)v;
      return 0;
    }
    case MNT_OPT_DOUBLE: {
      double v = strtod(val, &end);
      if (errno || end == val || *end) break;
      *(double *)o->dest = v;
      return 0;
    }
    case MNT_OPT_SIZE:
      if (mnt_parse_size(val, (size_t *)o->dest) != 0) break;
      return 0;
    case MNT_OPT_STRING:
      *(const char **)o->dest = val;
      return 0;
    default: break;
  }
  if (!quiet)
    fprintf(stderr, "mntrain %s: %s: '%s' is not a valid %s\n", cmd, flag, val,
            o->type == MNT_OPT_SIZE ? "size (e.g. 4096, 1K, 64M)" : o->type == MNT_OPT_INT ? "integer" : "number");
  return MNT_EARG;
}

int mnt_parse_opts(const char *cmd, const mnt_opt *opts, int argc, char **argv, int *help, int quiet) {
  *help = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      *help = 1;
      continue;
    }
    const mnt_opt *o = NULL;
    const char *val = NULL;
    char flag[64];
    if (a[0] == '-' && a[1] == '-' && a[2]) {
      const char *eq = strchr(a + 2, '=');
      size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (strlen(p->name) == len && !strncmp(p->name, a + 2, len)) o = p;
      snprintf(flag, sizeof flag, "--%.*s", (int)len, a + 2);
      if (eq) val = eq + 1;
    } else if (a[0] == '-' && a[1] && a[1] != '-') {
      for (const mnt_opt *p = opts; p->name && !o; p++)
        if (p->letter == a[1]) o = p;
      snprintf(flag, sizeof flag, "-%c", a[1]);
      if (a[2]) val = a + 2;
    } else {
      if (!quiet)
        fprintf(stderr, "mntrain %s: unexpected argument '%s' (see 'mntrain %s --help')\n", cmd, a, cmd);
      return MNT_EARG;
    }
    if (!o) {
      if (!quiet)
        fprintf(stderr, "mntrain %s: unknown option '%s' (see 'mntrain %s --help')\n", cmd, a, cmd);
      return MNT_EARG;
    }
    if (o->type == MNT_OPT_FLAG) {
      if (val) {
        if (!quiet) fprintf(stderr, "mntrain %s: %s takes no value\n", cmd, flag);
        return MNT_EARG;
      }
      *(int *)o->dest = 1;
      continue;
    }
    if (!val) {
      if (i + 1 >= argc) {
        if (!quiet) fprintf(stderr, "mntrain %s: %s needs a value (%s)\n", cmd, flag, o->metavar ? o->metavar : "");
        return MNT_EARG;
      }
      val = argv[++i];
    }
    int st = set_value(cmd, o, flag, val, quiet);
    if (st) return st;
  }
  return 0;
}

void mnt_print_help(FILE *f, const char *usage, const char *about, const mnt_opt *opts) {
  fprintf(f, "usage: %s\n\n%s\n\noptions:\n", usage, about);
  for (const mnt_opt *o = opts; o->name; o++) {
    char left[64];
    if (o->letter)
      snprintf(left, sizeof left, "-%c, --%s%s%s", o->letter, o->name, o->metavar ? " " : "",
               o->metavar ? o->metavar : "");
    else
      snprintf(left, sizeof left, "    --%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(f, "  %-28s %s\n", left, o->help);
  }
  fprintf(f, "  %-28s %s\n", "-h, --help", "show this help");
}
