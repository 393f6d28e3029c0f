/* test_tcp.c — set-up connections on loopback, in one process: a listener that five silent
 * strangers, a half hello and a garbage message connect to first still takes the real peer's hello
 * at once (each connection has its own deadline, served together: before, each silent one cost
 * 10 s, one after another); a hello without the job secret is refused, one with it accepted.
 * 300 strangers (garbage hellos and silent connections) to one inbox make a few warning lines, not
 * 300: the first three with who and why, then a count by reason (before: one line each). With no
 * descriptor left to accept a connection with, the inbox says so at once, in one "out of file
 * descriptors" error with the limit (before: it spun on the readable listener until its deadline).
 * A flood of silent connections that stay open does not keep the peer out (before: once 64 waited,
 * every newcomer was refused). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/log.h"
#include "src/comm/cpu/transport.h"

#include "tests/expect.h"

static int stranger(const mnt_tcp_addr *a, const void *say, size_t n) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = a->port, .sin_addr.s_addr = a->ip};
  if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (s >= 0) close(s);
    return -1;
  }
  if (n && send(s, say, n, 0) != (ssize_t)n) {
    close(s);
    return -1;
  }
  return s;
}

/* ---- 300 strangers ------------------------------------------------------------------------- */
enum { STRANGERS = 300, SILENT_EVERY = 6 }; /* every 6th says nothing, the others send garbage */

typedef struct crowd {
  mnt_tcp_addr a;
  int fds[STRANGERS];
  int made;
  _Atomic int done;
} crowd;

static void *crowd_main(void *arg) {
  crowd *c = arg;
  char junk[sizeof(mnt_tcp_hello)];
  memset(junk, 'x', sizeof junk);
  for (int i = 0; i < STRANGERS; i++) {
    c->fds[i] = stranger(&c->a, junk, i % SILENT_EVERY ? sizeof junk : 0);
    c->made += c->fds[i] >= 0;
  }
  atomic_store(&c->done, 1);
  return NULL;
}

/* the inbox of a listener that 300 strangers connect to, with stderr in a file: how many warning
 * lines, how many connections the full ones and the counts account for */
static void many_strangers(void) {
  struct rlimit rl; /* 300 sockets on each side at most: the soft limit up to the hard one, as main does */
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * STRANGERS + 64)) {
    fprintf(stderr, "test_tcp: the 300-strangers part is not run: %llu open files allowed, it needs %d\n",
            (unsigned long long)rl.rlim_cur, 2 * STRANGERS + 64);
    return;
  }
  static crowd c; /* 300 fds: not on the stack of a test that also keeps others there */
  for (int i = 0; i < STRANGERS; i++) c.fds[i] = -1;
  int lfd;
  if (mnt_tcp_listen("lo", &lfd, &c.a) != MNT_OK) {
    EXPECT(0, "a second listener on loopback");
    return;
  }
  uint8_t secret[MNT_SECRET_BYTES] = {1, 2, 3};
  mnt_tcp_inbox *ib = NULL;
  EXPECT(mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 0.5) == MNT_OK, "inbox for 300");
  FILE *log = tmpfile();
  int saved = dup(2);
  if (!ib || !log || saved < 0) {
    EXPECT(0, "set-up of the 300-strangers part");
    return;
  }
  fflush(stderr);
  dup2(fileno(log), 2);
  pthread_t thr;
  int started = pthread_create(&thr, NULL, crowd_main, &c) == 0;
  double t0 = mnt_now(), quiet_since = 0;
  int accepted = 0;
  /* serve until every stranger has connected and the silent ones' 0.5 s have passed */
  while (started && mnt_now() - t0 < 20) {
    int fd, from, tag;
    int st = mnt_tcp_accept_auth(ib, secret, 9, mnt_now() + 0.2, &fd, &from, &tag);
    if (st == MNT_OK) accepted++, close(fd);
    if (!atomic_load(&c.done)) continue;
    if (quiet_since == 0) quiet_since = mnt_now();
    if (mnt_now() - quiet_since > 2.5) break;
  }
  mnt_tcp_inbox_close(ib); /* the count of what was not yet summed up */
  double took = mnt_now() - t0;
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (started) pthread_join(thr, NULL);
  EXPECT(started && c.made == STRANGERS, "%d of %d strangers connected", c.made, STRANGERS);
  EXPECT(accepted == 0, "%d strangers were accepted", accepted);
  /* lines: warnings in full ("refused/dropped a connection from IP:PORT: why") and counts
   * ("... and N more connections refused or dropped ...") */
  char line[1024];
  int lines = 0, full = 0, summaries = 0, first_ok = 0;
  long counted = 0;
  rewind(log);
  while (fgets(line, sizeof line, log)) {
    if (!strstr(line, "warning:")) continue;
    lines++;
    const char *more = strstr(line, "... and ");
    long k = 0;
    if (more && sscanf(more, "... and %ld more connection", &k) == 1) {
      summaries++;
      counted += k;
    } else if (strstr(line, "a connection from 127.0.0.1:")) {
      if (!full++) /* why: a garbage hello, a silent one timed out, or one too many waiting */
        first_ok = strstr(line, "does not carry this job's secret") || strstr(line, "no complete message") ||
                   strstr(line, "others waited");
    }
    if (lines <= 8) fprintf(stderr, "  log: %s", line);
  }
  fclose(log);
  if (lines > 8) fprintf(stderr, "  log: ... %d warning lines in all\n", lines);
  EXPECT(lines <= 6, "300 strangers made %d warning lines (want a few: the first ones, then counts)", lines);
  EXPECT(full >= 1 && first_ok, "the first stranger is not named with its address and what was wrong with it");
  EXPECT(summaries >= 1 && full + counted == STRANGERS,
         "the warnings account for %ld of %d strangers (%d in full, %ld counted in %d summaries)", full + counted,
         STRANGERS, full, counted, summaries);
  printf("test_tcp: 300 strangers: %d warning lines (%d in full, %ld counted), %.1f s\n", lines, full, counted, took);
  for (int i = 0; i < STRANGERS; i++)
    if (c.fds[i] >= 0) close(c.fds[i]);
  close(lfd);
}

/* ---- a flood of silent connections --------------------------------------------------------- */
enum { FLOOD_BEFORE = 150, FLOOD_AFTER = 100 };

typedef struct flood {
  mnt_tcp_addr a;
  int fds[FLOOD_BEFORE + FLOOD_AFTER];
  _Atomic int stage; /* 1: the first FLOOD_BEFORE are connected; 2: the peer has connected; 3: all */
} flood;

static void *flood_main(void *arg) {
  flood *f = arg;
  for (int i = 0; i < FLOOD_BEFORE + FLOOD_AFTER; i++) {
    if (i == FLOOD_BEFORE) {
      atomic_store(&f->stage, 1);
      while (atomic_load(&f->stage) < 2) usleep(1000);
    }
    f->fds[i] = stranger(&f->a, NULL, 0);
  }
  atomic_store(&f->stage, 3);
  return NULL;
}

/* 150 silent connections that stay open (more than the inbox holds, each allowed 10 s), then the
 * real peer, then 100 more while it is served: the peer is accepted at once (before: once 64 were
 * waiting every newcomer was refused, the peer too, for as long as the flood lasted) */
static void silent_flood(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 ||
      (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 2 * (FLOOD_BEFORE + FLOOD_AFTER) + 64)) {
    fprintf(stderr, "test_tcp: the flood part is not run: %llu open files allowed\n", (unsigned long long)rl.rlim_cur);
    return;
  }
  static flood f;
  int lfd;
  mnt_tcp_inbox *ib = NULL;
  if (mnt_tcp_listen("lo", &lfd, &f.a) != MNT_OK || mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 10.0) != MNT_OK) {
    EXPECT(0, "a listener and its inbox for the flood");
    return;
  }
  uint8_t secret[MNT_SECRET_BYTES] = {7, 7, 7};
  FILE *log = tmpfile();
  int saved = dup(2);
  fflush(stderr);
  if (log) dup2(fileno(log), 2);
  pthread_t thr;
  int started = pthread_create(&thr, NULL, flood_main, &f) == 0, fd = -1, from = -1, tag = -1, st = MNT_ETIMEOUT;
  double t0 = mnt_now();
  while (started && atomic_load(&f.stage) < 1 && mnt_now() - t0 < 20) /* the inbox fills while they connect */
    mnt_tcp_accept_auth(ib, secret, 9, mnt_now() + 0.05, &fd, &from, &tag);
  int peer = -1;
  mnt_tcp_hello h;
  mnt_tcp_hello_init(&h, secret, 9, 3, 1);
  double tp = mnt_now();
  int connected = mnt_tcp_start_connect(&f.a, &h, &peer, tp + 5, 0) == MNT_OK;
  atomic_store(&f.stage, 2);
  if (connected) st = mnt_tcp_accept_auth(ib, secret, 9, tp + 5, &fd, &from, &tag);
  double took = mnt_now() - tp;
  int heard = st == MNT_OK && mnt_tcp_finish_connect(peer, mnt_now() + 2, 0) == MNT_OK;
  if (started) pthread_join(thr, NULL);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (log) fclose(log);
  EXPECT(connected && st == MNT_OK && from == 3 && heard && took < 2.0,
         "the peer behind %d silent connections: status %d, rank %d, after %.1f s (want it accepted at once)",
         FLOOD_BEFORE, st, from, took);
  if (st == MNT_OK) printf("test_tcp: the peer behind %d silent connections accepted in %.3f s\n", FLOOD_BEFORE, took);
  mnt_tcp_inbox_close(ib);
  if (fd >= 0) close(fd);
  if (peer >= 0) close(peer);
  for (int i = 0; i < FLOOD_BEFORE + FLOOD_AFTER; i++)
    if (f.fds[i] > 0) close(f.fds[i]);
  close(lfd);
}

/* ---- no descriptor left to accept with ------------------------------------------------------- */
static void out_of_fds(void) {
  int lfd;
  mnt_tcp_addr a;
  mnt_tcp_inbox *ib = NULL;
  if (mnt_tcp_listen("lo", &lfd, &a) != MNT_OK || mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 5.0) != MNT_OK) {
    EXPECT(0, "a third listener and its inbox");
    return;
  }
  int cfd = stranger(&a, NULL, 0); /* queued on the listener */
  FILE *log = tmpfile();
  int saved = dup(2), lowest = dup(0);
  struct rlimit rl, low;
  if (cfd < 0 || !log || saved < 0 || lowest < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    EXPECT(0, "set-up of the out-of-descriptors part");
    return;
  }
  close(lowest); /* the lowest free descriptor: a soft limit at it leaves none to take */
  fflush(stderr);
  dup2(fileno(log), 2);
  low = rl;
  low.rlim_cur = (rlim_t)lowest;
  int lowered = setrlimit(RLIMIT_NOFILE, &low) == 0;
  int fd = -1, st1 = MNT_OK, st2 = MNT_OK;
  mnt_tcp_hello h;
  double t0 = mnt_now(), took1 = 0;
  if (lowered) {
    st1 = mnt_tcp_inbox_next(ib, mnt_now() + 3.0, -1, &fd, &h, NULL, 0);
    took1 = mnt_now() - t0;
    st2 = mnt_tcp_inbox_next(ib, mnt_now() + 0.3, -1, &fd, &h, NULL, 0); /* again: not logged again */
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char line[1024];
  int errors = 0, clear = 0;
  rewind(log);
  while (fgets(line, sizeof line, log)) {
    fprintf(stderr, "  log: %s", line);
    errors += strstr(line, "error:") != NULL;
    clear += strstr(line, "out of file descriptors accepting") && strstr(line, "ulimit -n");
  }
  fclose(log);
  EXPECT(lowered, "the soft limit could not be lowered to %d", lowest);
  EXPECT(st1 == MNT_ESYS && took1 < 1.0, "no descriptor to accept with: status %d after %.1f s (want %d at once)", st1,
         took1, MNT_ESYS);
  EXPECT(st2 == MNT_ESYS, "the second try: status %d", st2);
  EXPECT(errors == 1 && clear == 1, "want one error, \"out of file descriptors accepting ...\" with the limit: %d "
         "errors, %d such", errors, clear);
  mnt_tcp_inbox_close(ib);
  close(cfd);
  close(lfd);
}

int main(void) {
  int lfd;
  mnt_tcp_addr a;
  if (mnt_tcp_listen("lo", &lfd, &a) != MNT_OK) {
    fprintf(stderr, "SKIP: cannot listen on loopback here\n");
    return 77;
  }
  uint8_t secret[MNT_SECRET_BYTES], wrong[MNT_SECRET_BYTES];
  for (int i = 0; i < MNT_SECRET_BYTES; i++) secret[i] = (uint8_t)(i * 37 + 1), wrong[i] = secret[i];
  wrong[3] ^= 4;
  int silent[5], junk_fd, half_fd;
  for (int i = 0; i < 5; i++) EXPECT((silent[i] = stranger(&a, NULL, 0)) >= 0, "silent stranger %d", i);
  mnt_tcp_hello h;
  mnt_tcp_hello_init(&h, secret, 9, 3, 1);
  EXPECT((half_fd = stranger(&a, &h, sizeof h / 2)) >= 0, "a half hello");
  char junk[sizeof(mnt_tcp_hello)];
  memset(junk, 'x', sizeof junk);
  EXPECT((junk_fd = stranger(&a, junk, sizeof junk)) >= 0, "a garbage hello");
  double deadline = mnt_now() + 30;
  int bad_fd = -1, good_fd = -1;
  mnt_tcp_hello_init(&h, wrong, 9, 3, 1);
  EXPECT(mnt_tcp_start_connect(&a, &h, &bad_fd, deadline, 0) == MNT_OK, "connect without the secret");
  mnt_tcp_hello_init(&h, secret, 9, 3, 1);
  EXPECT(mnt_tcp_start_connect(&a, &h, &good_fd, deadline, 0) == MNT_OK, "connect with the secret");

  mnt_tcp_inbox *ib = NULL;
  EXPECT(mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 10.0) == MNT_OK, "inbox");
  double t0 = mnt_now();
  int fd = -1, from = -1, tag = -1;
  int st = ib ? mnt_tcp_accept_auth(ib, secret, 9, deadline, &fd, &from, &tag) : MNT_ESYS;
  double took = mnt_now() - t0;
  EXPECT(st == MNT_OK && from == 3 && tag == 1, "the real peer was not accepted (status %d, rank %d, tag %d)", st, from,
         tag);
  EXPECT(took < 2.0, "seven strangers delayed the real peer by %.1f s", took);
  EXPECT(mnt_tcp_finish_connect(good_fd, deadline, 0) == MNT_OK, "the real peer hears yes");
  /* nothing else carries the secret: the next accept answers the rest and times out at its
   * deadline, not later */
  t0 = mnt_now();
  int fd2, from2, tag2;
  st = ib ? mnt_tcp_accept_auth(ib, secret, 9, mnt_now() + 0.5, &fd2, &from2, &tag2) : MNT_ESYS;
  took = mnt_now() - t0;
  EXPECT(st == MNT_ETIMEOUT && took < 1.5, "an accept with only strangers left: status %d after %.1f s", st, took);
  EXPECT(mnt_tcp_finish_connect(bad_fd, mnt_now() + 2, 0) == MNT_EAUTH, "the peer without the secret hears no");
  if (fd >= 0) close(fd);
  for (int i = 0; i < 5; i++)
    if (silent[i] >= 0) close(silent[i]);
  close(junk_fd);
  close(half_fd);
  close(good_fd);
  close(bad_fd);
  mnt_tcp_inbox_close(ib);
  close(lfd);
  many_strangers();
  silent_flood();
  out_of_fds();
  if (failures) {
    fprintf(stderr, "test_tcp: %d failures\n", failures);
    return 1;
  }
  printf("test_tcp: ok (%d checks)\n", checks);
  return 0;
}
