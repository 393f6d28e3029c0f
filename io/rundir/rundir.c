/* rundir.c — see rundir.h. */
#include "io/rundir/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "src/safefs.h"
#include "src/tmpfile.h"
#include "src/log.h"
#include "src/path.h"

/* The files of a run in --out; a directory holding any of them holds an earlier run. */
static const char *const RUN_FILES[] = {"config.json", "metrics.jsonl", "summary.json", "config.json.tmp",
                                        "summary.json.tmp"};

static int remove_run(const mnt_rundir_cfg *o) {
  char p[MNT_PATH_MAX];
  for (size_t i = 0; i < sizeof RUN_FILES / sizeof RUN_FILES[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", o->out, RUN_FILES[i]);
    if (unlink(p) != 0 && errno != ENOENT) {
      MNT_SYSERR("cannot remove %s", p);
      return MNT_EARG;
    }
  }
  DIR *d = opendir(o->out); /* sample logs */
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "samples-rank-", 13)) {
      snprintf(p, sizeof p, "%s/%s", o->out, e->d_name);
      unlink(p);
    }
  if (d) closedir(d);
  return MNT_OK;
}

static int holds_run(const mnt_rundir_cfg *o, char *found, size_t n) {
  char p[MNT_PATH_MAX];
  found[0] = 0;
  for (size_t i = 0; i < sizeof RUN_FILES / sizeof RUN_FILES[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", o->out, RUN_FILES[i]);
    if (access(p, F_OK) != 0) continue;
    size_t k = strlen(found);
    snprintf(found + k, n - k, "%s%s", k ? ", " : "", RUN_FILES[i]);
  }
  return found[0] != 0;
}

/* the "ckpt_dir" of the earlier run's config.json in --out ("" if none) */
static void earlier_ckpt_dir(const mnt_rundir_cfg *o, char *out, size_t n) {
  char p[MNT_PATH_MAX];
  snprintf(p, sizeof p, "%s/config.json", o->out);
  json_t *c = json_load_file(p, 0, NULL);
  const char *s = json_string_value(json_object_get(c, "ckpt_dir"));
  snprintf(out, n, "%s", s ? s : "");
  json_decref(c);
}

/* What an earlier run in --out says about its checkpoints: the newest one metrics.jsonl records as
 * committed (-1: none) and where, and the step config.json says it resumed from (-1: none). */
typedef struct evidence {
  long long step, resumed;
  char dir[MNT_PATH_MAX];
  int lines;
} evidence;

static void run_evidence(const mnt_rundir_cfg *o, evidence *ev) {
  char p[MNT_PATH_MAX];
  *ev = (evidence){.step = -1, .resumed = -1};
  snprintf(p, sizeof p, "%s/metrics.jsonl", o->out);
  FILE *f = fopen(p, "re");
  char *line = NULL;
  size_t cap = 0;
  while (f && getline(&line, &cap, f) > 0) {
    ev->lines++;
    json_t *j = json_loads(line, 0, NULL);
    const char *d = json_string_value(json_object_get(j, "checkpoint"));
    json_t *cs = json_object_get(j, "checkpoint_step");
    if (d && json_is_integer(cs) && json_integer_value(cs) >= ev->step) {
      ev->step = json_integer_value(cs);
      snprintf(ev->dir, sizeof ev->dir, "%s", d);
    }
    json_decref(j);
  }
  free(line);
  if (f) fclose(f);
  snprintf(p, sizeof p, "%s/config.json", o->out);
  json_t *c = json_load_file(p, 0, NULL);
  json_t *r = json_object_get(c, "resumed_from_step");
  if (json_is_integer(r)) ev->resumed = json_integer_value(r);
  json_decref(c);
}

/* --trace: DIR is the user's own, and holds no trace of an earlier run (a merge of the two would
 * mix them) */
static int prepare_trace(const mnt_rundir_cfg *o) {
  if (!o->trace_dir) return MNT_OK;
  MNT_CHECK(mnt_dir_secure(o->trace_dir, "--trace", 1, MNT_DIR_RUN));
  DIR *d = opendir(o->trace_dir);
  struct dirent *e;
  int st = MNT_OK;
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "trace-rank-", 11)) {
      char p[MNT_PATH_MAX];
      snprintf(p, sizeof p, "%s/%s", o->trace_dir, e->d_name);
      if (unlink(p) != 0 && errno != ENOENT) st = MNT_SYSERR("cannot remove %s", p);
    }
  if (d) closedir(d);
  return st;
}

int mnt_rundir_prepare(const mnt_rundir_cfg *o, const char *jobid, mnt_ckpt *ck, int *found, mnt_runlock **locks) {
  *found = 0;
  MNT_CHECK(mnt_dir_secure(o->out, "--out", 1, MNT_DIR_RUN));
  MNT_CHECK(prepare_trace(o));
  MNT_CHECK(mnt_runlock_take(o->out, "--out", jobid, &locks[0]));
  struct stat sb;
  int ckpt_exists = o->ckpt_dir && lstat(o->ckpt_dir, &sb) == 0;
  if (ckpt_exists) { /* a missing one is made below, once it is known to be wanted */
    MNT_CHECK(mnt_dir_secure(o->ckpt_dir, "--ckpt-dir", 0, MNT_DIR_RUN));
    MNT_CHECK(mnt_runlock_take(o->ckpt_dir, "--ckpt-dir", jobid, &locks[1]));
  }
  char run[200];
  int has_run = holds_run(o, run, sizeof run);
  evidence ev;
  run_evidence(o, &ev);
  if (o->force) {
    MNT_CHECK(remove_run(o));
    if (ckpt_exists) MNT_CHECK(mnt_ckpt_remove_all(o->ckpt_dir));
  } else if (!strcmp(o->resume, "none")) {
    if (ckpt_exists && mnt_ckpt_newest(o->ckpt_dir) >= 0) {
      MNT_ERR("--ckpt-dir %s holds checkpoints of an earlier run: --resume auto continues it, --force starts over",
              o->ckpt_dir);
      return MNT_EARG;
    }
  } else {
    int autor = !strcmp(o->resume, "auto");
    const char *path = autor ? o->ckpt_dir : o->resume;
    if (!autor || ckpt_exists) {
      int st = mnt_ckpt_open_checked(path, !o->no_verify, o->accept, o->accept_arg, ck, found);
      if (st != MNT_OK) return st == MNT_EDATA && !autor ? MNT_EARG : st;
      if (!*found && !autor) {
        MNT_ERR("--resume %s: no valid checkpoint there", path);
        return MNT_EARG;
      }
    }
    if (*found) {
      printf("mntrain train: resuming from %s (step %lld%s)\n", ck->dir, (long long)ck->step,
             ck->verified ? ", checksums verified" : ", checksums not verified");
      struct stat nb;
      if (ev.step > ck->step)
        MNT_WARN("%s/metrics.jsonl records a newer checkpoint, %s (step %lld), than the one resumed from (step %lld): "
                 "%s; the steps after %lld are trained again", o->out, ev.dir, ev.step, (long long)ck->step,
                 lstat(ev.dir, &nb) == 0 ? "it is damaged (said above) and kept, set aside as STEP.superseded-K "
                                           "when the run writes its next checkpoint"
                                         : "it is gone",
                 (long long)ck->step);
      has_run = 0;
    } else if (ev.step >= 0 || ev.resumed >= 0) { /* the run had checkpoints: they are missing, not absent */
      char what[MNT_PATH_MAX + 256];
      if (ev.step >= 0)
        snprintf(what, sizeof what, "%s/metrics.jsonl records checkpoint %s (step %lld) as committed", o->out, ev.dir,
                 ev.step);
      else
        snprintf(what, sizeof what, "%s/config.json says the run resumed from a checkpoint of step %lld", o->out,
                 ev.resumed);
      MNT_ERR("%s, but --ckpt-dir %s %s: not starting over (is its filesystem mounted?). Resume from where the "
              "checkpoints are with --resume PATH, or start the run over with --force", what, o->ckpt_dir,
              ckpt_exists ? "holds no checkpoint" : "does not exist");
      return MNT_EDATA;
    } else if (has_run) {
      char earlier[MNT_PATH_MAX];
      earlier_ckpt_dir(o, earlier, sizeof earlier);
      if (o->ckpt_dir && !strcmp(earlier, o->ckpt_dir)) {
        printf("mntrain train: %s holds an attempt of this run (%s) that committed no checkpoint (%d lines of "
               "metrics.jsonl record none; --ckpt-dir %s %s): starting over\n",
               o->out, run, ev.lines, o->ckpt_dir, ckpt_exists ? "holds none" : "does not exist");
        MNT_CHECK(remove_run(o));
        has_run = 0;
      }
    }
  }
  if (has_run && !o->force) {
    MNT_ERR("--out %s holds an earlier run (%s): choose another --out, add --force to replace it, or resume it with "
            "--resume auto and its --ckpt-dir", o->out, run);
    return MNT_EARG;
  }
  if (o->ckpt_dir && !ckpt_exists) {
    MNT_CHECK(mnt_dir_secure(o->ckpt_dir, "--ckpt-dir", 1, MNT_DIR_RUN));
    MNT_CHECK(mnt_runlock_take(o->ckpt_dir, "--ckpt-dir", jobid, &locks[1]));
  }
  return o->export_path ? mnt_output_probe(o->export_path, "--export") : MNT_OK;
}

/* the step a line of metrics.jsonl (a JSON object) or of a sample log ("STEP id id ...") is about;
 * -1 when it has none */
static long long metrics_step(const char *line) {
  json_t *j = json_loads(line, 0, NULL);
  long long s = json_is_integer(json_object_get(j, "step")) ? json_integer_value(json_object_get(j, "step")) : -1;
  json_decref(j);
  return s;
}
static long long samples_step(const char *line) {
  char *end;
  long long s = strtoll(line, &end, 10);
  return end == line ? -1 : s;
}

FILE *mnt_rundir_open_log(const char *path, int64_t resumed_step, mnt_run_log kind) {
  long long (*step_of_line)(const char *) = kind == MNT_RUN_LOG_SAMPLES ? samples_step : metrics_step;
  if (resumed_step < 0) return mnt_open_log(path, 0);
  FILE *in = fopen(path, "re");
  if (!in) return mnt_open_log(path, 1);
  char tmp[MNT_PATH_MAX];
  FILE *out = mnt_tmp_fopen(path, tmp, sizeof tmp);
  char *line = NULL;
  size_t cap = 0;
  while (out && getline(&line, &cap, in) > 0) {
    long long s = step_of_line(line);
    if (s >= 0 && s <= resumed_step && fputs(line, out) == EOF) break; /* ferror: fcommit refuses */
  }
  free(line);
  fclose(in);
  if (!out || mnt_tmp_fcommit(out, tmp, path) != MNT_OK) {
    MNT_ERR("%s: cannot rewrite it for the resumed run", path);
    return NULL;
  }
  return mnt_open_log(path, 1);
}

int mnt_rundir_same_run(json_t *old, json_t *now, const char *dir, const char *const *KEYS, int nkeys) {
  json_t *sgd = json_string("sgd"), *running = json_string("running");
  for (int i = 0; i < nkeys; i++) {
    json_t *a = json_object_get(old, KEYS[i]), *b = json_object_get(now, KEYS[i]);
    /* a run recorded before the optimizer was a choice ran sgd (whose momentum means another thing
     * than lars's: a run keeps its optimizer) */
    if (!strcmp(KEYS[i], "optimizer")) a = a ? a : sgd, b = b ? b : sgd;
    if (!strcmp(KEYS[i], "bn_eval")) a = a ? a : running, b = b ? b : running; /* before --bn-eval: running */
    if ((!a && !b) || json_equal(a, b) || (json_is_number(a) && json_is_number(b) && json_number_value(a) == json_number_value(b)))
      continue;
    char *x = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15)) : NULL,
         *y = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_REAL_PRECISION(15)) : NULL;
    if (!strcmp(KEYS[i], "target_top1")) /* the time to accuracy counts from the run's first step */
      MNT_ERR("--target-top1 %s is not the run's: the checkpoint %s was trained toward %s, and a run keeps its "
              "target (its time to accuracy counts from its first step); give the run's own, or start a new run "
              "with another --out and --ckpt-dir, or --force", y ? y : "(none)", dir, x ? x : "no target");
    else
      MNT_ERR("the checkpoint %s is of another run: its %s is %s, this command's is %s (start a new run with another "
              "--out and --ckpt-dir, or --force)", dir, KEYS[i], x ? x : "missing", y ? y : "missing");
    free(x);
    free(y);
    json_decref(sgd);
    json_decref(running);
    return MNT_EARG;
  }
  json_decref(sgd);
  json_decref(running);
  return MNT_OK;
}

/* the directory of an output file: "." for a bare name; MNT_EARG (logged) when path is too long */
static int dir_of(const char *path, char out[MNT_PATH_MAX]) {
  MNT_CHECK(mnt_path_join(out, NULL, path)); /* the whole path fits, and so does its directory */
  char *slash = strrchr(out, '/');
  if (!slash) snprintf(out, MNT_PATH_MAX, ".");
  else if (slash == out) out[1] = '\0'; /* "/NAME": the root */
  else *slash = '\0';
  return MNT_OK;
}

int mnt_output_probe(const char *path, const char *what) {
  char dir[MNT_PATH_MAX], tmp[MNT_PATH_MAX];
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    MNT_ERR("%s %s is a directory, not a file to write", what, path);
    return MNT_EARG;
  }
  MNT_CHECK(dir_of(path, dir));
  if (stat(dir, &sb) != 0) {
    MNT_SYSERR("%s %s cannot be written: %s", what, path, dir);
    return MNT_EARG;
  }
  if (mnt_dir_secure(dir, what, 0, MNT_DIR_FILES) != MNT_OK) return MNT_EARG;
  int fd = mnt_tmp_create(path, tmp, sizeof tmp);
  if (fd < 0) {
    MNT_SYSERR("%s %s cannot be written", what, path);
    return MNT_EARG;
  }
  close(fd);
  unlink(tmp);
  return MNT_OK;
}

