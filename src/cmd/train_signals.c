/* cmd/train_signals.c — the signal thread of `mntrain train` (see train_signals.h). */
#include "src/cmd/train_signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "src/check.h"
#include "src/progress.h"
#include "src/trace.h"

static int g_stop_signal; /* written by the signal thread, read by the loop: __atomic */
static int g_sig_quit;    /* the command's end: the signal thread returns at its next wake-up (__atomic) */
static sigset_t g_sigs;
static pthread_t g_thr;
static int g_running; /* the thread was started */
/* rank 0's checkpoint writer while it exists: a stop request commits the checkpoint in flight at
 * once when its shares are on disk (mnt_ckpt_commit_now), not at the next step boundary, which
 * may come after Slurm's KillWait. The mutex keeps the writer alive while that runs (it returns
 * when every share is on disk, when the loop's own mnt_ckpt_finish takes the checkpoint, or after
 * 60 s: a job that fails meanwhile may wait that long to exit, while it is being killed anyway). */
static pthread_mutex_t g_wr_mu = PTHREAD_MUTEX_INITIALIZER;
static mnt_ckpt_writer *g_wr;

void mnt_train_signal_writer(mnt_ckpt_writer *wr) {
  pthread_mutex_lock(&g_wr_mu);
  g_wr = wr;
  pthread_mutex_unlock(&g_wr_mu);
}

int mnt_train_stop_signal(void) { return __atomic_load_n(&g_stop_signal, __ATOMIC_RELAXED); }

static void *signal_thread(void *arg) {
  (void)arg;
  for (;;) {
    int sig;
    if (sigwait(&g_sigs, &sig) != 0) continue;
    if (__atomic_load_n(&g_sig_quit, __ATOMIC_ACQUIRE)) break;
    if (sig == SIGUSR2) { /* what every thread of this rank did last, on disk; the run goes on */
      mnt_trace_dump_last(NULL, "SIGUSR2 asked for it");
      continue;
    }
    __atomic_store_n(&g_stop_signal, sig, __ATOMIC_RELAXED);
    pthread_mutex_lock(&g_wr_mu);
    if (g_wr) { /* nothing in flight: it returns at once */
      double t0 = mnt_now();
      int committed = 0;
      if (mnt_ckpt_commit_now(g_wr, 60.0, &committed) == MNT_OK && committed) {
        printf("mntrain train: %s: the checkpoint in flight committed at once (%.2f s)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGUSR1", mnt_now() - t0);
        fflush(stdout);
      }
    }
    pthread_mutex_unlock(&g_wr_mu);
  }
  return NULL;
}

int mnt_train_signals_start(int ckpt_on) {
  sigemptyset(&g_sigs);
  sigaddset(&g_sigs, SIGUSR2);
  if (ckpt_on) {
    sigaddset(&g_sigs, SIGUSR1);
    sigaddset(&g_sigs, SIGTERM);
  }
  pthread_sigmask(SIG_BLOCK, &g_sigs, NULL);
  g_running = pthread_create(&g_thr, NULL, signal_thread, NULL) == 0;
  return g_running;
}

void mnt_train_signals_stop(void) {
  if (!g_running) return;
  /* woken to return (not cancelled: a cancellation unwinds through sigwait's frame, which
   * AddressSanitizer reports as a stack-buffer-underflow) */
  __atomic_store_n(&g_sig_quit, 1, __ATOMIC_RELEASE);
  pthread_kill(g_thr, SIGUSR2);
  pthread_join(g_thr, NULL);
}
