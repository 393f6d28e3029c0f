/* env.c — see env.h. Every variable mntrain reads is a row of MNT_ENV_VARS (env.h); adding one
 * means adding a row (and its line in README's table, which tests/unit/cli.sh compares with
 * `mntrain --help`), and its typed getter exists at once. */
#include "src/env.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/args.h"
#include "src/check.h"
#include "src/log.h"

typedef enum { SECONDS, BYTES, STRING, LEVEL, CHOICE } kind;

typedef struct var {
  const char *name;
  kind k;
  const char *deflt; /* as the user would write it */
  double min, max;   /* SECONDS and BYTES, inclusive */
  int pow2;          /* BYTES: must be a power of two (0 allowed when min is 0) */
  const char *choices; /* CHOICE: "a|b|c" */
  const char *help;
} var;

static const var VARS[] = {
#define MNT_ENV_ROW(id, name, k, deflt, min, max, pow2, choices, help) {name, k, deflt, min, max, pow2, choices, help},
    MNT_ENV_VARS(MNT_ENV_ROW)
#undef MNT_ENV_ROW
};
enum { NVARS = sizeof VARS / sizeof VARS[0] };

static const char *const LEVELS[] = {"error", "warn", "info", "debug"};

static const var *find(const char *name) {
  for (int i = 0; i < NVARS; i++)
    if (!strcmp(VARS[i].name, name)) return &VARS[i];
  return NULL;
}

static const char *value_of(const var *v) {
  const char *e = getenv(v->name);
  return e && *e ? e : v->deflt;
}

/* parse v's value into *d (SECONDS, BYTES, LEVEL) or check it (STRING); 0 or a message */
static const char *parse(const var *v, const char *s, double *d) {
  static _Thread_local char why[160];
  *d = 0;
  switch (v->k) {
    case STRING: return NULL;
    case CHOICE: {
      char word[32];
      size_t n = strlen(s);
      for (size_t i = 0; i <= n && i < sizeof word; i++) word[i] = (char)tolower((unsigned char)s[i]);
      if (n < sizeof word && mnt_choice_index(v->choices, word) >= 0) return NULL;
      snprintf(why, sizeof why, "expected one of %s", v->choices);
      return why;
    }
    case LEVEL:
      for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, LEVELS[i])) {
          *d = i;
          return NULL;
        }
      return "expected error, warn, info or debug";
    case SECONDS: {
      char *end;
      errno = 0;
      double x = strtod(s, &end);
      if (errno || end == s || *end || !isfinite(x)) return "expected a number of seconds";
      *d = x;
      break;
    }
    case BYTES: {
      size_t x;
      if (mnt_parse_size(s, &x) != 0) return "expected a size in bytes (e.g. 4096, 64K, 4M)";
      *d = (double)x;
      if (v->pow2 && x && (x & (x - 1))) return "expected a power of two";
      break;
    }
  }
  if (*d < v->min || *d > v->max) {
    snprintf(why, sizeof why, "expected a value from %g to %g", v->min, v->max);
    return why;
  }
  return NULL;
}

static int get(const char *name, kind k, double *d, int quiet) {
  const var *v = find(name);
  if (!v || v->k != k) {
    MNT_ERR("internal: %s is not a documented environment variable of this kind", name);
    return MNT_EARG;
  }
  const char *s = value_of(v), *why = parse(v, s, d);
  if (why) {
    if (!quiet) MNT_ERR("environment variable %s='%s': %s (see mntrain --help)", name, s, why);
    return MNT_EARG;
  }
  return MNT_OK;
}

int mnt_env_check(void) {
  int st = MNT_OK;
  for (int i = 0; i < NVARS; i++) {
    double d;
    const char *s = value_of(&VARS[i]), *why = parse(&VARS[i], s, &d);
    if (why) {
      MNT_ERR("environment variable %s='%s': %s (see mntrain --help)", VARS[i].name, s, why);
      st = MNT_EARG;
    }
  }
  return st;
}

int mnt_env_seconds(const char *name, double *out) { return get(name, SECONDS, out, 0); }

int mnt_env_bytes(const char *name, size_t *out) {
  double d;
  MNT_CHECK(get(name, BYTES, &d, 0));
  *out = (size_t)d;
  return MNT_OK;
}

const char *mnt_env_string(const char *name) {
  const var *v = find(name);
  const char *s = v && (v->k == STRING || v->k == CHOICE) ? value_of(v) : NULL;
  return s && *s ? s : NULL;
}

int mnt_env_log_level(int *level) {
  double d;
  MNT_CHECK(get("MNT_LOG_LEVEL", LEVEL, &d, 1));
  *level = (int)d;
  return MNT_OK;
}

/* the typed getters, one per row of the table (env.h) */
#define GET_SECONDS(id, name) \
  int mnt_env_##id(double *out) { return mnt_env_seconds(name, out); }
#define GET_BYTES(id, name) \
  int mnt_env_##id(size_t *out) { return mnt_env_bytes(name, out); }
#define GET_STRING(id, name) \
  const char *mnt_env_##id(void) { return mnt_env_string(name); }
#define GET_CHOICE(id, name) GET_STRING(id, name)
#define GET_LEVEL(id, name) /* mnt_env_log_level, above: quiet (the logger cannot log its own setting) */
#define GETTER(id, name, k, ...) GET_##k(id, name)
MNT_ENV_VARS(GETTER)
#undef GETTER

void mnt_env_print_help(FILE *f) {
  fprintf(f, "environment:\n");
  for (int i = 0; i < NVARS; i++) {
    const var *v = &VARS[i];
    fprintf(f, "  %-22s %s", v->name, v->help);
    if (v->deflt[0]) fprintf(f, " (default %s)", v->deflt);
    fprintf(f, "\n");
  }
}
