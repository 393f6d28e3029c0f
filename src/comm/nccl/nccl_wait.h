/* nccl_wait.h — private to src/comm/nccl/: the NCCL communicator's wait loop (poll, nap, deadline),
 * apart from CUDA and NCCL so that what it costs can be measured on a CPU with a stub poll
 * (tests/unit/test_nccl_wait.c).
 * defines: MNT_NCCL_NAP_FIRST_NS, MNT_NCCL_NAP_MAX_NS, mnt_nccl_next_nap, mnt_nccl_poll_fn,
 *          mnt_nccl_wait_loop.
 *
 * The nap between two polls starts at 20 us and doubles up to 50 us. The kernel's timer slack
 * (50 us for a normal thread: prctl(PR_GET_TIMERSLACK)) comes on top of every nanosleep, so the
 * polls are about 70, 90, then 105-110 us apart. Measured on the 2-core CI VM
 * (tests/unit/test_nccl_wait.c, a stub poll; 4 runs): a 50 us nap is a poll every 105-111 us,
 * 5.9-9.7 us of CPU per poll (the nanosleep system call and the clock read: 6-9% of one core, only
 * while a wait lasts), and a wait ends a median 49-59 us (worst 102-114 us) after its work did.
 * The poll's own calls (cudaEventQuery, one ncclCommGetAsyncError per communicator: a driver
 * query and atomic loads) add to that on a GPU machine; they cannot be measured here. The earlier
 * cap, 1.28 ms (a poll every 1.35 ms with the slack), ended a wait a median 653 us (worst
 * 1.32 ms) after its work in the same test: up to ~1.5% of an ~85 ms ResNet-50 step per wait. */
#ifndef MNT_NCCL_WAIT_H
#define MNT_NCCL_WAIT_H

#include <time.h>

#include "src/log.h"
#include "src/trace.h"

#define MNT_NCCL_NAP_FIRST_NS 20000L /* 20 us */
#define MNT_NCCL_NAP_MAX_NS 50000L   /* 50 us: with the timer slack a poll about every 100 us */

/* the nap after one of nap_ns: doubled, at most MNT_NCCL_NAP_MAX_NS */
static inline long mnt_nccl_next_nap(long nap_ns) {
  long next = nap_ns * 2;
  return next < MNT_NCCL_NAP_MAX_NS ? next : MNT_NCCL_NAP_MAX_NS;
}

/* One poll: *done = 1 when what is waited for has completed; returns MNT_OK, or a failing status
 * (its message already logged) that ends the wait. */
typedef int (*mnt_nccl_poll_fn)(void *arg, int *done);

/* Poll until done, a failure, or timeout_s seconds (MNT_ETIMEOUT, logged naming `what`). A
 * warning names the wait at half the timeout (at most 30 s) and again at each doubling. *polls
 * (may be NULL) counts the polls. */
static inline int mnt_nccl_wait_loop(mnt_nccl_poll_fn poll, void *arg, double timeout_s, const char *what,
                                     long *polls) {
  double t0 = mnt_now(), warn = timeout_s < 60 ? timeout_s / 2 : 30;
  struct timespec nap = {0, MNT_NCCL_NAP_FIRST_NS};
  long n = 0;
  int st;
  for (;;) {
    int done = 0;
    n++;
    if ((st = poll(arg, &done)) != MNT_OK || done) break;
    double el = mnt_now() - t0;
    if (el > timeout_s) {
      MNT_ERR("NCCL %s did not complete in %.0f s (MNT_COMM_TIMEOUT): aborting the NCCL communicators", what,
              timeout_s);
      mnt_trace_dump_last(NULL, "an NCCL wait reached MNT_COMM_TIMEOUT");
      st = MNT_ETIMEOUT;
      break;
    }
    if (el > warn) {
      MNT_WARN("NCCL %s has waited %.0f s (a peer stopped, died or is not in it?)", what, el);
      mnt_trace_dump_last(NULL, "an NCCL wait stalled");
      warn *= 2;
    }
    nanosleep(&nap, NULL);
    nap.tv_nsec = mnt_nccl_next_nap(nap.tv_nsec);
  }
  if (polls) *polls = n;
  return st;
}

#endif
