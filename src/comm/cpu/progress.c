/* progress.c — the CPU communicator's progress thread and its requests: every collective is queued
 * to one thread per communicator and run in order (iallreduce returns at once, wait completes it);
 * the ops table, destroy. See cpu_comm.h. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "src/log.h"
#include "src/dtype.h"
#include "src/comm/cpu/cpu_comm.h"
#include "src/comm/cpu/watchdog.h"
#include "src/trace.h"

static const char *const REQ_NAME[] = {"allreduce", "broadcast", "allgather", "barrier"};

static void *progress_main(void *arg) {
  mnt_ccomm_comm *c = arg;
  mnt_trace_thread("comm");
  pthread_mutex_lock(&c->mu);
  for (;;) {
    if (!c->head && !c->stop) {
      mnt_trace_push("idle", 0); /* on the timeline: no request */
      while (!c->head && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
      mnt_trace_pop();
    }
    if (!c->head) break;
    mnt_comm_req *q = c->head;
    int broken = c->broken;
    pthread_mutex_unlock(&c->mu);
    mnt_trace_push(REQ_NAME[q->kind], (int64_t)(q->kind == REQ_ALLREDUCE ? q->count * mnt_dtype_size(q->t) : q->bytes));
    int st = broken ? broken : mnt_ccomm_execute(c, q);
    mnt_trace_pop();
    pthread_mutex_lock(&c->mu);
    if (st != MNT_OK && !c->broken) c->broken = st;
    c->head = q->next;
    if (!c->head) c->tail = NULL;
    q->status = st;
    q->done = 1;
    if (q->detached) free(q);
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static int submit(mnt_ccomm_comm *c, mnt_comm_req *q) {
  q->next = NULL;
  pthread_mutex_lock(&c->mu);
  if (c->tail) c->tail->next = q;
  else c->head = q;
  c->tail = q;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return MNT_OK;
}

static int cpu_wait(mnt_comm *pc, mnt_comm_req *q) {
  mnt_ccomm_comm *c = pc->impl;
  pthread_mutex_lock(&c->mu);
  while (!q->done) pthread_cond_wait(&c->cv, &c->mu); /* the engine enforces the deadline */
  pthread_mutex_unlock(&c->mu);
  int st = q->status;
  free(q);
  return st;
}

static int run_sync(mnt_ccomm_comm *c, mnt_comm_req *q) {
  mnt_comm_req *h = malloc(sizeof *h);
  if (!h) return MNT_ENOMEM;
  *h = *q;
  submit(c, h);
  return cpu_wait(&c->pub, h);
}

static int cpu_iallreduce(mnt_comm *pc, void *buf, size_t count, mnt_dtype t, mnt_redop op,
                          mnt_stream *stream, mnt_comm_req **req) {
  mnt_comm_req *q = calloc(1, sizeof *q);
  if (!q) return MNT_ENOMEM;
  *q = (mnt_comm_req){.kind = REQ_ALLREDUCE, .buf = buf, .count = count, .t = t, .op = op};
  *req = q;
  return submit(pc->impl, q);
}

static int cpu_allreduce(mnt_comm *pc, void *buf, size_t count, mnt_dtype t, mnt_redop op,
                         mnt_stream *stream) {
  mnt_comm_req q = {.kind = REQ_ALLREDUCE, .buf = buf, .count = count, .t = t, .op = op};
  return run_sync(pc->impl, &q);
}

static int cpu_broadcast(mnt_comm *pc, void *buf, size_t bytes, int root, mnt_stream *stream) {
  mnt_ccomm_comm *c = pc->impl;
  if (root < 0 || root >= c->w->size) {
    MNT_ERR("broadcast root %d is not a rank (size %d)", root, c->w->size);
    return MNT_EARG;
  }
  mnt_comm_req q = {.kind = REQ_BCAST, .buf = buf, .bytes = bytes, .root = root};
  return run_sync(c, &q);
}

static int cpu_allgather(mnt_comm *pc, const void *send, void *recv, size_t bytes, mnt_stream *stream) {
  mnt_comm_req q = {.kind = REQ_ALLGATHER, .send = send, .buf = recv, .bytes = bytes};
  return run_sync(pc->impl, &q);
}

static int cpu_barrier(mnt_comm *pc) {
  mnt_comm_req q = {.kind = REQ_BARRIER};
  return run_sync(pc->impl, &q);
}

int mnt_ccomm_progress_start(mnt_ccomm_comm *c) {
  if (pthread_create(&c->thr, NULL, progress_main, c) != 0) {
    MNT_ERR("could not start the communicator's progress thread");
    return MNT_ESYS;
  }
  c->thr_started = 1;
  return MNT_OK;
}

void mnt_ccomm_progress_stop(mnt_ccomm_comm *c) {
  if (c->thr_started) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thr, NULL);
  }
}

static void cpu_destroy(mnt_comm *pc) {
  mnt_ccomm_comm *c = pc->impl;
  mnt_ccomm_progress_stop(c);
  mnt_watchdog_stop(c->wd); /* its thread reads the membership */
  mnt_ccomm_member_free(c->mb);
  mnt_ccomm_fabric_close(&c->fab);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static int cpu_interrupted(mnt_comm *pc) { return mnt_ccomm_member_interrupted(pc->impl); }

const mnt_comm_ops mnt_ccomm_ops = {
    .name = "cpu",
    .allreduce = cpu_allreduce,
    .iallreduce = cpu_iallreduce,
    .wait = cpu_wait,
    .broadcast = cpu_broadcast,
    .allgather = cpu_allgather,
    .barrier = cpu_barrier,
    .destroy = cpu_destroy,
    .enable_shrink = mnt_ccomm_enable_shrink,
    .shrink = mnt_ccomm_shrink,
    .interrupted = cpu_interrupted,
};
