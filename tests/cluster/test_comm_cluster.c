/* test_comm_cluster.c — the CPU communicator on a real Slurm + PMIx job.
 *   srun ... test_comm_cluster [--big]      allreduce sum/avg, fp32/bf16/fp16, sizes 0, 1, 7,
 *                                           1Mi+3 (and 64Mi with --big) against a reference
 *                                           computed locally; flat and hier; hier == flat on
 *                                           random data; broadcast, allgather, iallreduce
 *   srun ... test_comm_cluster --kill-rank R [--stop]   rank R SIGKILLs (SIGSTOPs) itself
 *                                           mid-allreduce; the others must fail (the driver script
 *                                           checks how and when)
 *   srun ... test_comm_cluster --secret     a connection without the job secret is refused */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>
#include <unistd.h>

#include "src/comm/comm.h"
#include "src/log.h"
#include "src/comm/cpu/transport.h"
#include "src/world.h"

#include "tests/expect.h"

static mnt_world w;

/* small integers: exact in every type, for every partial sum of up to 4 ranks */
static float pattern(size_t i, int rank) { return (float)((int)((i * 131u + (size_t)rank * 31u) % 17u) - 8); }

static void fail_job(int st) {
  char msg[512];
  snprintf(msg, sizeof msg, "test_comm_cluster: %s", mnt_last_error());
  mnt_world_abort(&w, st, msg);
}

static void check_allreduce(mnt_comm *c, mnt_dtype t, mnt_redop op, size_t count) {
  size_t es = mnt_dtype_size(t);
  float *ref = malloc((count ? count : 1) * sizeof(float));
  uint8_t *buf = malloc((count ? count : 1) * es), *want = malloc((count ? count : 1) * es);
  for (size_t i = 0; i < count; i++) ref[i] = pattern(i, w.rank);
  mnt_from_f32(t, ref, buf, count);
  for (size_t i = 0; i < count; i++) {
    float s = 0;
    for (int r = 0; r < w.size; r++) s += pattern(i, r);
    ref[i] = op == MNT_AVG ? s / (float)w.size : s;
  }
  mnt_from_f32(t, ref, want, count);
  int st = mnt_allreduce(c, buf, count, t, op);
  if (st != MNT_OK) fail_job(st);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp(buf + i * es, want + i * es, es) != 0 && wrong++ == 0) first = i;
  EXPECT(wrong == 0, "%s allreduce %s %s count %zu: %zu wrong, first at %zu", mnt_topology_name(c->topology),
         mnt_dtype_name(t), mnt_redop_name(op), count, wrong, first);
  free(ref);
  free(buf);
  free(want);
}

static uint32_t rng(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

/* random (non-integer) data: flat and hier reduce in different orders, so agree to rounding */
static void hier_equals_flat(mnt_comm *flat, mnt_comm *hier) {
  size_t count = (1u << 20) + 3;
  float *a = malloc(count * 4), *b = malloc(count * 4);
  uint64_t s = 1234567u + (uint64_t)w.rank * 7919u;
  for (size_t i = 0; i < count; i++) a[i] = (float)rng(&s) / 4294967296.0f - 0.5f;
  memcpy(b, a, count * 4);
  int st;
  if ((st = mnt_allreduce(flat, a, count, MNT_FP32, MNT_AVG)) != MNT_OK) fail_job(st);
  if ((st = mnt_allreduce(hier, b, count, MNT_FP32, MNT_AVG)) != MNT_OK) fail_job(st);
  double worst = 0;
  for (size_t i = 0; i < count; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > worst) worst = d;
  }
  EXPECT(worst <= 1e-6, "hier and flat differ by %g (> 1e-6) on random fp32 data", worst);
  free(a);
  free(b);
}

static void check_bcast_allgather(mnt_comm *c) {
  size_t n = (1u << 20) + 5;
  uint8_t *b = malloc(n);
  for (int root = 0; root < w.size; root += (w.size > 2 ? w.size - 1 : 1)) {
    for (size_t i = 0; i < n; i++) b[i] = w.rank == root ? (uint8_t)(i * 13 + (size_t)root) : 0xee;
    int st = mnt_broadcast(c, b, n, root);
    if (st != MNT_OK) fail_job(st);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += b[i] != (uint8_t)(i * 13 + (size_t)root);
    EXPECT(wrong == 0, "broadcast of %zu bytes from root %d: %zu wrong", n, root, wrong);
  }
  free(b);
  size_t m = 12345;
  uint8_t *mine = malloc(m), *all = malloc(m * (size_t)w.size);
  for (size_t i = 0; i < m; i++) mine[i] = (uint8_t)(i + (size_t)w.rank * 101);
  int st = mnt_allgather(c, mine, all, m);
  if (st != MNT_OK) fail_job(st);
  size_t wrong = 0;
  for (int r = 0; r < w.size; r++)
    for (size_t i = 0; i < m; i++) wrong += all[(size_t)r * m + i] != (uint8_t)(i + (size_t)r * 101);
  EXPECT(wrong == 0, "allgather of %zu bytes per rank: %zu wrong", m, wrong);
  free(mine);
  free(all);
}

static void check_async(mnt_comm *c) {
  enum { K = 3 };
  size_t count = 100003;
  float *b[K];
  mnt_comm_req *q[K];
  for (int k = 0; k < K; k++) {
    b[k] = malloc(count * 4);
    for (size_t i = 0; i < count; i++) b[k][i] = pattern(i + (size_t)k, w.rank);
    int st = c->ops->iallreduce(c, b[k], count, MNT_FP32, MNT_SUM, NULL, &q[k]);
    if (st != MNT_OK) fail_job(st);
  }
  for (int k = 0; k < K; k++) {
    int st = c->ops->wait(c, q[k]);
    if (st != MNT_OK) fail_job(st);
    size_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
      float s = 0;
      for (int r = 0; r < w.size; r++) s += pattern(i + (size_t)k, r);
      wrong += b[k][i] != s;
    }
    EXPECT(wrong == 0, "iallreduce %d of %d: %zu wrong", k, K, wrong);
    free(b[k]);
  }
}

static int suite(int big) {
  mnt_comm *flat, *hier;
  int st;
  if ((st = mnt_comm_create(&w, "cpu", MNT_TOPO_FLAT, &flat)) != MNT_OK) fail_job(st);
  if ((st = mnt_comm_create(&w, "cpu", MNT_TOPO_HIER, &hier)) != MNT_OK) fail_job(st);
  size_t counts[] = {0, 1, 7, (1u << 20) + 3, 64u << 20};
  int ncounts = big ? 5 : 4;
  mnt_dtype types[] = {MNT_FP32, MNT_BF16, MNT_FP16};
  mnt_comm *comms[] = {flat, hier};
  for (int ci = 0; ci < 2; ci++)
    for (int ti = 0; ti < 3; ti++)
      for (int op = 0; op < 2; op++)
        for (int k = 0; k < ncounts; k++) check_allreduce(comms[ci], types[ti], (mnt_redop)op, counts[k]);
  hier_equals_flat(flat, hier);
  check_bcast_allgather(flat);
  check_bcast_allgather(hier);
  check_async(flat);
  check_async(hier);
  if ((st = mnt_barrier(hier)) != MNT_OK) fail_job(st);
  if (w.rank == 0)
    printf("test_comm_cluster: %d ranks on %d nodes, hier %s\n", w.size, w.nnodes,
           hier->topology == MNT_TOPO_HIER ? "in use" : "fell back to flat (nodes differ in size)");
  mnt_comm_destroy(flat);
  mnt_comm_destroy(hier);
  return 0;
}

static double kill_after = 1.0;
static int kill_signal = SIGKILL;
static void *killer(void *arg) {
  struct timespec ts = {.tv_sec = (time_t)kill_after, .tv_nsec = (long)((kill_after - (double)(time_t)kill_after) * 1e9)};
  nanosleep(&ts, NULL);
  fprintf(stderr, "test_comm_cluster: rank %d on %s %s now\n", w.rank, w.hostname,
          kill_signal == SIGKILL ? "kills itself (SIGKILL)" : "stops itself (SIGSTOP): a hung peer");
  fflush(stderr);
  raise(kill_signal);
  return arg;
}

static int kill_mode(int victim) {
  mnt_comm *c;
  int st;
  if ((st = mnt_comm_create(&w, "cpu", MNT_TOPO_FLAT, &c)) != MNT_OK) fail_job(st);
  size_t count = 8u << 20;
  float *b = calloc(count, sizeof(float));
  pthread_t t;
  if (w.rank == victim) pthread_create(&t, NULL, killer, NULL);
  double end = mnt_now() + 120;
  while (mnt_now() < end) {
    st = mnt_allreduce(c, b, count, MNT_FP32, MNT_SUM);
    if (st != MNT_OK) fail_job(st); /* what main() does: take the job down */
  }
  fprintf(stderr, "test_comm_cluster: rank %d: still running after 120 s\n", w.rank);
  return 1;
}

static int secret_mode(void) {
  uint8_t secret[MNT_SECRET_BYTES] = {0};
  if (w.rank == 0 && getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) fail_job(MNT_ESYS);
  if (mnt_world_bcast(&w, secret, sizeof secret, 0) != MNT_OK) fail_job(MNT_EPMIX);
  mnt_tcp_addr a = {0}, *all = calloc((size_t)w.size, sizeof *all);
  int lfd = -1;
  if (w.rank == 0 && mnt_tcp_listen(NULL, &lfd, &a) != MNT_OK) fail_job(MNT_ESYS);
  if (mnt_world_allgather(&w, &a, sizeof a, all) != MNT_OK) fail_job(MNT_EPMIX);
  double deadline = mnt_now() + 30;
  if (w.rank == 1) {
    mnt_tcp_hello h;
    uint8_t wrong[MNT_SECRET_BYTES];
    memcpy(wrong, secret, sizeof wrong);
    wrong[5] ^= 1; /* one bit off */
    int fd;
    mnt_tcp_hello_init(&h, wrong, 7, w.rank, 0);
    EXPECT(mnt_tcp_start_connect(&all[0], &h, &fd, deadline, 0) == MNT_OK, "connect (wrong secret)");
    EXPECT(mnt_tcp_finish_connect(fd, deadline, 0) == MNT_EAUTH, "a wrong secret must be refused");
    close(fd);
    mnt_tcp_hello_init(&h, secret, 7, w.rank, 0);
    EXPECT(mnt_tcp_start_connect(&all[0], &h, &fd, deadline, 0) == MNT_OK, "connect (right secret)");
    EXPECT(mnt_tcp_finish_connect(fd, deadline, 0) == MNT_OK, "the job secret must be accepted");
    close(fd);
  } else if (w.rank == 0) {
    /* the connection without the secret comes first: it is refused, and the accept goes on to the
     * one with the secret */
    int fd, from, tag;
    mnt_tcp_inbox *ib = NULL;
    EXPECT(mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 10.0) == MNT_OK, "inbox");
    int st = ib ? mnt_tcp_accept_auth(ib, secret, 7, deadline, &fd, &from, &tag) : MNT_ESYS;
    EXPECT(st == MNT_OK && from == 1, "accept must take the connection with the secret (st %d from %d)", st, from);
    if (st == MNT_OK) close(fd);
    mnt_tcp_inbox_close(ib);
    close(lfd);
  }
  free(all);
  if (mnt_world_barrier(&w) != MNT_OK) fail_job(MNT_EPMIX);
  return 0;
}

int main(int argc, char **argv) {
  if (mnt_world_init(&w) != MNT_OK) {
    fprintf(stderr, "FAIL: world init: %s\n", mnt_last_error());
    return 1;
  }
  check_rank = w.rank;
  int big = 0, victim = -1, secret = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--big")) big = 1;
    else if (!strcmp(argv[i], "--kill-rank") && i + 1 < argc) victim = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kill-after") && i + 1 < argc) kill_after = atof(argv[++i]);
    else if (!strcmp(argv[i], "--stop")) kill_signal = SIGSTOP;
    else if (!strcmp(argv[i], "--secret")) secret = 1;
    else {
      fprintf(stderr, "usage: test_comm_cluster [--big] [--kill-rank R [--kill-after S] [--stop]] [--secret]\n");
      return 2;
    }
  }
  if (victim >= 0) return kill_mode(victim);
  if (secret && w.size < 2) {
    fprintf(stderr, "test_comm_cluster --secret needs 2 ranks\n");
    return 2;
  }
  double t0 = mnt_now();
  if (secret) secret_mode();
  else suite(big);
  int *all = calloc((size_t)w.size, sizeof *all), total = 0;
  if (mnt_world_allgather(&w, &failures, sizeof failures, all) != MNT_OK) fail_job(MNT_EPMIX);
  for (int r = 0; r < w.size; r++) total += all[r];
  if (w.rank == 0)
    printf("test_comm_cluster%s: %d ranks on %d nodes: %d checks per rank, %d failed (%.1f s)\n",
           secret ? " --secret" : "", w.size, w.nnodes, checks, total, mnt_now() - t0);
  free(all);
  mnt_world_finalize(&w);
  return total ? 1 : 0;
}
