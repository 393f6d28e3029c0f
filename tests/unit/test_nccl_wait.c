/* test_nccl_wait.c — the NCCL communicator's wait loop (src/comm/nccl/nccl_wait.h) on a CPU, with
 * a stub poll in place of cudaEventQuery and ncclCommGetAsyncError:
 *   - the nap between polls never exceeds MNT_NCCL_NAP_MAX_NS (about 100 us between polls with the
 *     kernel's timer slack; the old loop backed off to 1.28 ms);
 *   - how late a wait ends after its work did (a stub that says done at a known time), median
 *     over waits of 3-12 ms: under 0.4 ms (the old back-off gave about 0.7 ms);
 *   - what polling costs: the interval between polls at the cap and the CPU time per poll (the
 *     nanosleep system call and the clock read), printed for the record;
 *   - a failing poll ends the wait with its status, and the deadline with MNT_ETIMEOUT.
 * Needs no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

#include "tests/expect.h"
#include "src/comm/nccl/nccl_wait.h"
#include "src/log.h"

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* done once mnt_now() passes `at`; the first poll that sees it records when */
typedef struct stub {
  double at, seen;
  int fail_after; /* > 0: the n-th poll fails */
  long n;
} stub;

static int stub_poll(void *arg, int *done) {
  stub *s = arg;
  s->n++;
  if (s->fail_after > 0 && s->n >= s->fail_after) return MNT_EPEER;
  double t = mnt_now();
  *done = t >= s->at;
  if (*done && s->seen == 0) s->seen = t;
  return MNT_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  /* the schedule: doubling from the first nap, never above the cap, which stays near 100 us of
   * poll interval once the timer slack is added */
  long nap = MNT_NCCL_NAP_FIRST_NS, most = nap;
  for (int i = 0; i < 64; i++) {
    nap = mnt_nccl_next_nap(nap);
    if (nap > most) most = nap;
  }
  EXPECT(most == MNT_NCCL_NAP_MAX_NS && most <= 100000, "the nap grows to %ld ns, not at most 100 us", most);
  int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);

  /* lateness: waits of 3..12 ms, the time from "done" to the loop's return */
  enum { WAITS = 40 };
  double late[WAITS], polls_per_ms = 0;
  for (int i = 0; i < WAITS; i++) {
    double start = mnt_now();
    stub s = {.at = start + 0.003 + 0.009 * (double)(i * 7 % WAITS) / WAITS};
    long polls = 0;
    int st = mnt_nccl_wait_loop(stub_poll, &s, 10.0, "test wait", &polls);
    double end = mnt_now();
    EXPECT(st == MNT_OK && s.seen > 0, "wait %d: status %d", i, st);
    late[i] = end - s.at;
    polls_per_ms += (double)polls / ((end - start) * 1e3) / WAITS;
  }
  qsort(late, WAITS, sizeof *late, cmp_double);
  double median = late[WAITS / 2], worst = late[WAITS - 1];
  EXPECT(median < 0.4e-3, "a wait ends a median %.0f us after its work (the poll every ~100 us should give ~60 us)",
         median * 1e6);

  /* the cost of polling at the cap: a stub never done, for 0.3 s of naps at MNT_NCCL_NAP_MAX_NS */
  stub never = {.at = 1e300};
  double t0 = mnt_now(), c0 = cpu_now();
  long n = 0;
  struct timespec cap = {0, MNT_NCCL_NAP_MAX_NS};
  while (mnt_now() - t0 < 0.3) {
    int done;
    stub_poll(&never, &done);
    nanosleep(&cap, NULL);
    n++;
  }
  double wall = mnt_now() - t0, cpu = cpu_now() - c0;
  double interval = wall / (double)n, per_poll = cpu / (double)n;
  printf("wait loop: nap %ld..%ld ns (timer slack %d ns): a poll every %.0f us at the cap, %.2f us of CPU per poll "
         "(%.1f%% of a core while waiting); waits end a median %.0f us (worst %.0f us) after their work, %.1f polls "
         "per ms\n",
         (long)MNT_NCCL_NAP_FIRST_NS, (long)MNT_NCCL_NAP_MAX_NS, slack, interval * 1e6, per_poll * 1e6,
         100.0 * cpu / wall, median * 1e6, worst * 1e6, polls_per_ms);
  EXPECT(interval < 1e-3, "polls %.0f us apart at the cap", interval * 1e6);

  /* a failing poll ends the wait with its status; the deadline with MNT_ETIMEOUT */
  stub bad = {.at = 1e300, .fail_after = 3};
  long polls = 0;
  int st = mnt_nccl_wait_loop(stub_poll, &bad, 10.0, "test failure", &polls);
  EXPECT(st == MNT_EPEER && polls == 3, "a failing poll: status %d after %ld polls", st, polls);
  stub slow = {.at = 1e300};
  t0 = mnt_now();
  st = mnt_nccl_wait_loop(stub_poll, &slow, 0.05, "test deadline", NULL);
  double took = mnt_now() - t0;
  EXPECT(st == MNT_ETIMEOUT && took >= 0.05 && took < 1.0, "the deadline: status %d after %.3f s", st, took);

  printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "ok", checks, failures);
  return failures ? 1 : 0;
}
