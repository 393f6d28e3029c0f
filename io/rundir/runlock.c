/* runlock.c — see runlock.h. */
#include "io/rundir/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/check.h"
#include "src/env.h"
#include "src/log.h"
#include "src/path.h"
#include "src/progress.h"

struct mnt_runlock {
  char path[MNT_PATH_MAX];
  char token[17];
  char job[64], step[32], restart[32], host[256], user[64], started[64];
  int epoch;
  int fd;
  double beat_s;
  pthread_t thr;
  int have_thr;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
};

/* the holder, as its lock file says */
typedef struct holder {
  char job[64], step[32], restart[32], host[256], user[64], started[64], token[17];
  long long pid, epoch; /* epoch: its membership epoch (0 before any shrink, or before mntrain wrote one) */
  int parsed;        /* the content parsed (a lock being written has none yet) */
  double age_s;      /* since its heartbeat (the file's modification time) */
} holder;

static double stale_limit_s(void) {
  double s = 300;
  if (mnt_env_lock_stale_s(&s) != MNT_OK) s = 300; /* reported by main (mnt_env_check) */
  return s;
}

static int read_holder(const char *path, holder *h) {
  memset(h, 0, sizeof *h);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat sb;
  char buf[4096];
  ssize_t n = fstat(fd, &sb) == 0 ? read(fd, buf, sizeof buf - 1) : -1;
  int e = errno;
  close(fd);
  if (n < 0) {
    errno = e;
    return -1;
  }
  buf[n] = 0;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  h->age_s = (double)(now.tv_sec - sb.st_mtim.tv_sec) + (double)(now.tv_nsec - sb.st_mtim.tv_nsec) * 1e-9;
  json_t *j = json_loads(buf, 0, NULL);
  if (j) {
    const char *s;
    h->parsed = 1;
    snprintf(h->job, sizeof h->job, "%s", (s = json_string_value(json_object_get(j, "job_id"))) ? s : "");
    snprintf(h->host, sizeof h->host, "%s", (s = json_string_value(json_object_get(j, "host"))) ? s : "?");
    snprintf(h->user, sizeof h->user, "%s", (s = json_string_value(json_object_get(j, "user"))) ? s : "?");
    snprintf(h->started, sizeof h->started, "%s", (s = json_string_value(json_object_get(j, "started"))) ? s : "?");
    snprintf(h->token, sizeof h->token, "%s", (s = json_string_value(json_object_get(j, "token"))) ? s : "");
    snprintf(h->step, sizeof h->step, "%s", (s = json_string_value(json_object_get(j, "step_id"))) ? s : "");
    snprintf(h->restart, sizeof h->restart, "%s", (s = json_string_value(json_object_get(j, "restart"))) ? s : "");
    h->pid = json_integer_value(json_object_get(j, "pid"));
    h->epoch = json_integer_value(json_object_get(j, "membership_epoch"));
    json_decref(j);
  }
  return 0;
}

static void describe(const holder *h, char *out, size_t n) {
  if (!h->parsed) {
    snprintf(out, n, "an unreadable lock (heartbeat %.0f s ago)", h->age_s);
    return;
  }
  snprintf(out, n, "%s%s%shost %s, pid %lld, user %s, since %s", h->job[0] ? "Slurm job " : "", h->job,
           h->job[0] ? ", " : "", h->host, h->pid, h->user, h->started);
}

/* Slurm's word on a job: 1 ended or unknown to Slurm, 0 not ended (state in state), -1 no answer */
static int slurm_job_ended(const char *job, char *state, size_t n) {
  snprintf(state, n, "?");
  for (const char *p = job; *p; p++) /* a job id is digits, '_' and '+' (arrays, het jobs) */
    if (!((*p >= '0' && *p <= '9') || *p == '_' || *p == '+')) return -1;
  char cmd[200];
  snprintf(cmd, sizeof cmd, "timeout 10 scontrol show job -o %s 2>&1", job);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[8192] = "";
  size_t got = fread(line, 1, sizeof line - 1, p);
  line[got] = 0;
  int rc = pclose(p);
  if (strstr(line, "Invalid job id")) {
    snprintf(state, n, "unknown to Slurm (Invalid job id)");
    return 1;
  }
  const char *js = strstr(line, "JobState=");
  if (rc != 0 || !js) return -1;
  js += 9;
  size_t k = strcspn(js, " \n");
  snprintf(state, n, "%.*s", (int)(k < 60 ? k : 60), js);
  static const char *const ENDED[] = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                                      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"};
  for (size_t i = 0; i < sizeof ENDED / sizeof ENDED[0]; i++)
    if (!strcmp(state, ENDED[i])) return 1;
  return 0;
}

/* 1 when the holder is provably gone (why says how we know), 0 when it holds the lock */
static int holder_gone(const holder *h, const mnt_runlock *me, char *why, size_t n) {
  const char *myjob = me->job, *myhost = me->host;
  double limit = stale_limit_s();
  if (!h->parsed) { /* created but not written yet, or a writer that died in between */
    snprintf(why, n, "its content does not parse and its heartbeat is %.0f s old (limit %.0f s)", h->age_s, limit);
    return h->age_s > limit;
  }
  if (h->job[0] && myjob[0] && !strcmp(h->job, myjob) && h->step[0] && !strcmp(h->step, me->step) &&
      !strcmp(h->restart, me->restart)) { /* this very job step: rank 0 of another membership */
    if (h->epoch < me->epoch) {
      snprintf(why, n, "it is rank 0's of an earlier membership of this job step (epoch %lld; this rank 0's is %d)",
               h->epoch, me->epoch);
      return 1;
    }
    snprintf(why, n,
             "it is held by rank 0 of membership epoch %lld of this same job step (this rank's is %d): a "
             "group that went on without this one",
             h->epoch, me->epoch);
    return 0;
  }
  if (h->job[0] && myjob[0] && !strcmp(h->job, myjob)) {
    snprintf(why, n, "it is this Slurm job's own (an earlier start of job %s: requeued)", myjob);
    return 1;
  }
  if (h->job[0]) {
    char state[80];
    int ended = slurm_job_ended(h->job, state, sizeof state);
    if (ended == 1) {
      snprintf(why, n, "Slurm job %s has ended (scontrol: %s)", h->job, state);
      return 1;
    }
    if (ended == 0) {
      snprintf(why, n, "Slurm says job %s is %s", h->job, state);
      return 0;
    }
  }
  if (!strcmp(h->host, myhost) && h->pid > 0 && kill((pid_t)h->pid, 0) != 0 && errno == ESRCH) {
    snprintf(why, n, "its process %lld on this host (%s) is gone", h->pid, myhost);
    return 1;
  }
  if (h->age_s > limit) {
    snprintf(why, n, "its heartbeat is %.0f s old, more than MNT_LOCK_STALE_S=%.0f s", h->age_s, limit);
    return 1;
  }
  snprintf(why, n, "its heartbeat was %.0f s ago; a lock is stale after MNT_LOCK_STALE_S=%.0f s without one", h->age_s,
           limit);
  return 0;
}

static void *heartbeat(void *arg) {
  mnt_runlock *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)l->beat_s;
    pthread_cond_timedwait(&l->cv, &l->mu, &until);
    if (!l->stop && futimens(l->fd, NULL) != 0) MNT_DBG("%s: heartbeat failed: %s", l->path, strerror(errno));
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* the lock's content (the holder) into fd from offset 0; 0, or -1 with errno */
static int write_content(const mnt_runlock *l, int fd) {
  json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:i, s:s, s:s, s:i}", "job_id", l->job, "step_id", l->step,
                        "restart", l->restart, "host", l->host, "pid", (json_int_t)getpid(), "user", l->user, "uid",
                        (int)geteuid(), "started", l->started, "token", l->token, "membership_epoch", l->epoch);
  char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  size_t len = txt ? strlen(txt) : 0;
  int bad = !txt || pwrite(fd, txt, len, 0) != (ssize_t)len || pwrite(fd, "\n", 1, (off_t)len) != 1 ||
            ftruncate(fd, (off_t)len + 1) != 0 || fsync(fd) != 0;
  int e = errno;
  free(txt);
  errno = e ? e : EIO;
  return bad ? -1 : 0;
}

/* create the lock with our content; 0, or -1 with errno (EEXIST: someone holds it) */
static int create_lock(mnt_runlock *l) {
  int fd = open(l->path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  mnt_iso_time_now(l->started);
  int bad = write_content(l, fd) != 0;
  int e = errno;
  if (bad) {
    close(fd);
    unlink(l->path);
    errno = e ? e : EIO;
    return -2;
  }
  l->fd = fd;
  return 0;
}

/* Take over a stale lock (h, described in who and why): move it aside under a name of our own,
 * and check that it is the one we judged. MNT_OK: try to create ours again. */
static int take_over(mnt_runlock *l, const holder *h, const char *jobid, const char *who, const char *why) {
  char aside[MNT_PATH_MAX];
  int too_long = snprintf(aside, sizeof aside, "%s.stale-%s", l->path, l->token) >= (int)sizeof aside;
  if (too_long) errno = ENAMETOOLONG;
  if (too_long || rename(l->path, aside) != 0) /* ENOENT: released meanwhile */
    return errno == ENOENT ? MNT_OK : MNT_SYSERR("%s: cannot take over the stale lock", l->path);
  holder moved;
  int same = read_holder(aside, &moved) == 0 && moved.parsed == h->parsed && !strcmp(moved.token, h->token);
  if (!same) { /* another job took it over first and this is its fresh lock: put it back */
    if (link(aside, l->path) != 0) MNT_DBG("%s: %s", l->path, strerror(errno));
    unlink(aside);
    return MNT_OK;
  }
  unlink(aside);
  if (!(h->job[0] && jobid[0] && !strcmp(h->job, jobid)))
    MNT_WARN("%s: took over the lock of %s: %s", l->path, who, why);
  return MNT_OK;
}

int mnt_runlock_take(const char *dir, const char *what, const char *jobid, mnt_runlock **out) {
  return mnt_runlock_take_epoch(dir, what, jobid, 0, out);
}

int mnt_runlock_take_epoch(const char *dir, const char *what, const char *jobid, int epoch, mnt_runlock **out) {
  *out = NULL;
  mnt_runlock *l = calloc(1, sizeof *l);
  if (!l) return MNT_ENOMEM;
  l->fd = -1;
  l->epoch = epoch;
  int st = mnt_path_join(l->path, dir, MNT_RUNLOCK_FILE);
  if (st != MNT_OK) {
    free(l);
    return st;
  }
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
  snprintf(l->token, sizeof l->token, "%016" PRIx64, r);
  snprintf(l->host, sizeof l->host, "?");
  gethostname(l->host, sizeof l->host - 1);
  if (!jobid || !*jobid) jobid = getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "";
  snprintf(l->job, sizeof l->job, "%s", jobid);
  snprintf(l->step, sizeof l->step, "%s", getenv("SLURM_STEP_ID") ? getenv("SLURM_STEP_ID") : "");
  snprintf(l->restart, sizeof l->restart, "%s", getenv("SLURM_RESTART_COUNT") ? getenv("SLURM_RESTART_COUNT") : "0");
  snprintf(l->user, sizeof l->user, "?");
  struct passwd pw, *res = NULL;
  char pbuf[1024];
  if (getpwuid_r(geteuid(), &pw, pbuf, sizeof pbuf, &res) == 0 && res)
    snprintf(l->user, sizeof l->user, "%s", res->pw_name);
  st = MNT_EARG;
  for (int attempt = 0; attempt < 8; attempt++) {
    int c = create_lock(l);
    if (c == 0) {
      st = MNT_OK;
      break;
    }
    if (c == -2 || errno != EEXIST) {
      st = MNT_SYSERR("%s: cannot create the run's lock", l->path);
      break;
    }
    holder h;
    if (read_holder(l->path, &h) != 0) {
      if (errno == ENOENT) continue; /* released meanwhile */
      MNT_SYSERR("%s: cannot read the lock in place%s", l->path,
                 errno == ELOOP ? " (a symbolic link: not ours; remove it)" : "");
      st = MNT_EARG;
      break;
    }
    char who[600], why[400];
    describe(&h, who, sizeof who);
    if (!h.parsed && h.age_s < 5 && attempt < 5) { /* being written right now */
      struct timespec ts = {0, 500 * 1000 * 1000};
      nanosleep(&ts, NULL);
      continue;
    }
    if (!holder_gone(&h, l, why, sizeof why)) {
      MNT_ERR("%s %s is in use by another run: %s is held by %s (%s): wait for it to end, cancel it, or choose "
              "another %s", what, dir, l->path, who, why, what);
      st = MNT_EARG;
      break;
    }
    int taken = take_over(l, &h, jobid, who, why);
    if (taken != MNT_OK) {
      st = taken;
      break;
    }
  }
  if (st == MNT_OK) {
    l->beat_s = stale_limit_s() / 10;
    if (l->beat_s > 30) l->beat_s = 30;
    if (l->beat_s < 1) l->beat_s = 1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->have_thr = pthread_create(&l->thr, NULL, heartbeat, l) == 0;
    *out = l;
    return MNT_OK;
  }
  free(l);
  return st;
}

int mnt_runlock_held(const mnt_runlock *l) {
  holder h;
  if (read_holder(l->path, &h) == 0 && h.parsed && !strcmp(h.token, l->token)) return MNT_OK;
  char who[600] = "nothing (it is gone)";
  if (h.parsed) describe(&h, who, sizeof who);
  else if (errno != ENOENT) snprintf(who, sizeof who, "an unreadable lock");
  MNT_ERR(
      "%s is no longer this rank's (membership epoch %d): it now holds %s; this rank's group went on without "
      "the lock (a network split?) and writes nothing more",
      l->path, l->epoch, who);
  return MNT_EFENCED;
}

int mnt_runlock_set_epoch(mnt_runlock *l, int epoch) {
  pthread_mutex_lock(&l->mu);
  l->epoch = epoch;
  int bad = write_content(l, l->fd);
  pthread_mutex_unlock(&l->mu);
  return bad ? MNT_SYSERR("%s: cannot record membership epoch %d", l->path, epoch) : MNT_OK;
}

/* the heartbeat stopped and the memory freed; the file left alone */
static void forget(mnt_runlock *l) {
  if (l->have_thr) {
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thr, NULL);
  }
  if (l->fd >= 0) close(l->fd);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

void mnt_runlock_abandon(mnt_runlock *l) {
  if (l) forget(l);
}

void mnt_runlock_release(mnt_runlock *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu); /* the heartbeat, then the file */
  l->stop = 1;
  pthread_mutex_unlock(&l->mu);
  holder h;
  if (read_holder(l->path, &h) == 0 && !strcmp(h.token, l->token)) unlink(l->path);
  else MNT_WARN("%s is no longer this run's (taken over while it ran?): left in place", l->path);
  forget(l);
}
