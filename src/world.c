/* world.c — PMIx client; see world.h. Every PMIx call follows OpenPMIx's pattern:
 * if (PMIX_SUCCESS != (rc = ...)) { breadcrumb; goto out; } */
#include "src/world.h"

#include <pmix.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/env.h"
#include "src/check.h"
#include "src/log.h"

static pmix_proc_t g_me;

/* Any integer-typed PMIx value as a long; -1 when absent or not an integer. */
static long get_long(const pmix_proc_t *proc, const char *key) {
  pmix_value_t *v = NULL;
  long out = -1;
  if (PMIX_SUCCESS != PMIx_Get(proc, key, NULL, 0, &v) || !v) return -1;
  switch (v->type) {
    case PMIX_UINT32: out = (long)v->data.uint32; break;
    case PMIX_UINT16: out = (long)v->data.uint16; break;
    case PMIX_UINT8: out = (long)v->data.uint8; break;
    case PMIX_INT: out = (long)v->data.integer; break;
    case PMIX_INT32: out = (long)v->data.int32; break;
    case PMIX_UINT: out = (long)v->data.uint; break;
    case PMIX_UINT64: out = (long)v->data.uint64; break;
    case PMIX_SIZE: out = (long)v->data.size; break;
    case PMIX_PROC_RANK: out = (long)v->data.rank; break;
    default: break;
  }
  PMIX_VALUE_RELEASE(v);
  return out;
}

static int get_string(const pmix_proc_t *proc, const char *key, char *out, size_t n) {
  pmix_value_t *v = NULL;
  int ok = 0;
  if (PMIX_SUCCESS != PMIx_Get(proc, key, NULL, 0, &v) || !v) return 0;
  if (v->type == PMIX_STRING && v->data.string) {
    snprintf(out, n, "%s", v->data.string);
    ok = 1;
  }
  PMIX_VALUE_RELEASE(v);
  return ok;
}

/* Slurm names the namespace "slurm.pmix.<jobid>.<stepid>". */
static void jobid_from_nspace(const char *ns, char *out, size_t n) {
  const char *p = strncmp(ns, "slurm.pmix.", 11) == 0 ? ns + 11 : ns;
  size_t len = strcspn(p, ".");
  if (len >= n) len = n - 1;
  memcpy(out, p, len);
  out[len] = '\0';
}

/* ---- fences with a deadline mntrain keeps itself --------------------------------------------
 * Slurm's PMIx server does not honour PMIX_TIMEOUT on a fence (seen with Slurm 22.05's mpi/pmix_v4:
 * a rank stopped during set-up held the others in PMIx_Fence for the plugin's own 300 s, twice).
 * So every fence is PMIx_Fence_nb, waited for until MNT_COMM_TIMEOUT. Each rank then commits an
 * arrival record for the fence (mnt.at.N): after PMIx_Fence_nb, because the client sends its
 * messages to its server in order, so a record seen means the rank's part of the fence reached its
 * server. (Committed before the fence, a rank stopped between its commit and its fence was seen
 * as arrived: rank 0 then blamed the PMIx server, naming no one, once in a CI run of
 * setup_stall.sh.) When the deadline passes, rank 0 asks every rank for
 * its record (PMIx_Get_nb, answered by the rank's node from what the rank committed: direct modex)
 * and names those that did not arrive with their nodes; the other ranks ask rank 0 only. Seen here:
 * a rank that arrived answers at once, one stopped before or after PMIx_Init answers NOT-FOUND,
 * TIMEOUT or not at all, whether or not earlier fences filled the caches. */

/* non-blocking PMIx calls waited for until a deadline: the callbacks may come after the waiter has
 * given up, so this lives on the heap and the last of waiter and callbacks frees it */
typedef struct pwait pwait;
typedef struct pprobe {
  pwait *pw;
  int rank;
} pprobe;
struct pwait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int pending;        /* callbacks still to come */
  int abandoned;      /* the waiter has left: the last callback frees */
  pmix_status_t st;   /* a fence's status */
  unsigned want;      /* a probe: the fence number the record must hold */
  int n;
  unsigned char *here; /* a probe: 1 for every rank whose record answered */
  pprobe probe[];
};

static pwait *pwait_new(int n, int pending) {
  pwait *p = calloc(1, sizeof *p + (size_t)n * sizeof(pprobe) + (size_t)n);
  if (!p) return NULL;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  p->n = n;
  p->pending = pending;
  p->here = (unsigned char *)(p->probe + n);
  return p;
}

static void pwait_free(pwait *p) {
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}

/* one callback has come (its result recorded by the caller under the lock); frees when last */
static void pwait_done_locked(pwait *p) {
  int last = --p->pending == 0 && p->abandoned;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (last) pwait_free(p);
}

/* wait until every callback came or `seconds` passed; copy what is needed, then leave. Returns 1
 * when all came. The caller must not touch p afterwards. */
static int pwait_until(pwait *p, double seconds, pmix_status_t *st, unsigned char *here) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double end = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + seconds;
  ts.tv_sec = (time_t)end;
  ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
  pthread_mutex_lock(&p->mu);
  while (p->pending > 0 && pthread_cond_timedwait(&p->cv, &p->mu, &ts) == 0) {
  }
  int all = p->pending == 0;
  if (st) *st = p->st;
  if (here) memcpy(here, p->here, (size_t)p->n);
  p->abandoned = 1;
  int last = p->pending == 0;
  pthread_mutex_unlock(&p->mu);
  if (last) pwait_free(p);
  return all;
}

static void fence_cb(pmix_status_t status, void *cbdata) {
  pwait *p = cbdata;
  pthread_mutex_lock(&p->mu);
  p->st = status;
  pwait_done_locked(p);
}

static void probe_cb(pmix_status_t status, pmix_value_t *v, void *cbdata) {
  pprobe *q = cbdata;
  pwait *p = q->pw;
  pthread_mutex_lock(&p->mu);
  if (status == PMIX_SUCCESS && v && v->type == PMIX_UINT32 && v->data.uint32 == p->want) p->here[q->rank] = 1;
  pwait_done_locked(p);
}

/* which of ranks[0..n) committed their arrival record of fence `no`, asked within `seconds`:
 * here[i] = 1 for those that answered with it */
static void probe_arrivals(mnt_world *w, unsigned no, const int *ranks, int n, double seconds, unsigned char *here) {
  memset(here, 0, (size_t)n);
  pwait *p = pwait_new(n, n);
  if (!p) return;
  p->want = no;
  char key[32];
  snprintf(key, sizeof key, "mnt.at.%u", no);
  int tmo = (int)(seconds + 0.5) > 0 ? (int)(seconds + 0.5) : 1;
  for (int i = 0; i < n; i++) {
    pmix_proc_t proc;
    pmix_info_t info;
    PMIX_LOAD_PROCID(&proc, g_me.nspace, (pmix_rank_t)ranks[i]);
    PMIx_Info_load(&info, PMIX_TIMEOUT, &tmo, PMIX_INT);
    p->probe[i] = (pprobe){p, i};
    pmix_status_t rc = ranks[i] == w->rank ? PMIX_ERR_NOT_FOUND : PMIx_Get_nb(&proc, key, &info, 1, probe_cb, &p->probe[i]);
    PMIX_INFO_DESTRUCT(&info);
    if (ranks[i] == w->rank) p->here[i] = 1; /* this rank is here */
    if (rc != PMIX_SUCCESS) {                /* no callback will come */
      pthread_mutex_lock(&p->mu);
      p->pending--;
      pthread_mutex_unlock(&p->mu);
    }
  }
  pwait_until(p, seconds, NULL, here);
}

/* "rank 1 on node2, rank 5 on node3 and 2 more" */
static void name_ranks(const mnt_world *w, const int *ranks, int n, char *out, size_t len) {
  size_t l = 0;
  out[0] = '\0';
  for (int i = 0; i < n && l + 1 < len; i++) {
    if (i == 8) {
      snprintf(out + l, len - l, " and %d more", n - i);
      return;
    }
    const char *node = w->node_name && w->node_of && w->node_name[w->node_of[ranks[i]]][0]
                           ? w->node_name[w->node_of[ranks[i]]] : "a node not known yet";
    l += (size_t)snprintf(out + l, len - l, "%srank %d on %s", i ? ", " : "", ranks[i], node);
  }
}

/* the fence did not complete within the deadline (or the server gave up on it: server_rc): who did
 * not arrive, said; MNT_ETIMEOUT */
static int fence_late(mnt_world *w, unsigned no, pmix_status_t server_rc) {
  double probe_s = w->timeout_s / 2 < 5 ? w->timeout_s / 2 : 5;
  int n = w->rank == 0 ? w->size : 1, *ranks = malloc((size_t)n * sizeof *ranks), *late = malloc((size_t)n * sizeof *late);
  unsigned char *here = malloc((size_t)n);
  if (!ranks || !late || !here) {
    free(ranks), free(late), free(here);
    MNT_ERR("a PMIx exchange (fence %u) did not complete within %.0f s (MNT_COMM_TIMEOUT)", no, w->timeout_s);
    return MNT_ETIMEOUT;
  }
  for (int i = 0; i < n; i++) ranks[i] = i; /* rank 0: every rank; the others: rank 0 */
  probe_arrivals(w, no, ranks, n, probe_s, here);
  int nlate = 0;
  for (int i = 0; i < n; i++)
    if (!here[i]) late[nlate++] = ranks[i];
  char names[600], what[200];
  name_ranks(w, late, nlate, names, sizeof names);
  if (server_rc == PMIX_SUCCESS)
    snprintf(what, sizeof what, "a PMIx exchange of the job (fence %u) did not complete within %.0f s (MNT_COMM_TIMEOUT)",
             no, w->timeout_s);
  else
    snprintf(what, sizeof what, "a PMIx exchange of the job (fence %u) failed: %s (MNT_COMM_TIMEOUT %.0f s)", no,
             PMIx_Error_string(server_rc), w->timeout_s);
  if (nlate > 0) {
    MNT_ERR("%s: %s did not arrive (%s)", what, names,
            nlate == 1 ? "stopped, hung, slow or gone" : "each stopped, hung or slow, or waiting for one that is");
  } else if (w->rank == 0) {
    MNT_ERR("%s, although every rank arrived at it (the PMIx server or the network between nodes is stuck)", what);
  } else {
    /* rank 0 is there and names the ranks missing: its abort should be the job's message */
    MNT_ERR("%s: rank 0 names the ranks that did not arrive", what);
    struct timespec ts = {(time_t)(probe_s + 2), 0};
    nanosleep(&ts, NULL);
  }
  free(ranks), free(late), free(here);
  return MNT_ETIMEOUT;
}

static int fence_(mnt_world *w) {
  unsigned no = w->fences++;
  char key[32];
  snprintf(key, sizeof key, "mnt.at.%u", no); /* this rank's arrival, for the names of those late */
  pmix_value_t val;
  PMIX_VALUE_CONSTRUCT(&val);
  val.type = PMIX_UINT32;
  val.data.uint32 = no;
  pmix_status_t rc;
  pmix_info_t info[2];
  bool flag = true; /* always: see mnt_world_barrier */
  int tmo = (int)(w->timeout_s + 0.5);
  PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
  PMIx_Info_load(&info[1], PMIX_TIMEOUT, &tmo, PMIX_INT); /* for servers that honour it */
  pwait *p = pwait_new(0, 1);
  if (!p) return MNT_ENOMEM;
  rc = PMIx_Fence_nb(NULL, 0, info, 2, fence_cb, p);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) { /* no callback will come */
    pwait_free(p);
  } else if (PMIX_SUCCESS != (rc = PMIx_Put(PMIX_GLOBAL, key, &val)) || PMIX_SUCCESS != (rc = PMIx_Commit())) {
    MNT_ERR("PMIx_Put/Commit(%s) failed: %s", key, PMIx_Error_string(rc));
    pwait_until(p, 0, NULL, NULL); /* leave the fence's callback to free it */
    return MNT_EPMIX;
  } else if (!pwait_until(p, w->timeout_s, &rc, NULL)) {
    return fence_late(w, no, PMIX_SUCCESS);
  } else if (rc == PMIX_ERR_TIMEOUT) { /* a server that keeps PMIX_TIMEOUT: the same question */
    return fence_late(w, no, rc);
  }
  if (rc != PMIX_SUCCESS) {
    MNT_ERR("PMIx_Fence failed: %s (a rank died or did not arrive within %.0f s)", PMIx_Error_string(rc), w->timeout_s);
    return MNT_EPMIX;
  }
  return MNT_OK;
}

static int fence(mnt_world *w) {
  if (w->fence_failed) { /* a fence left behind: the ranks are out of step for good, no wait helps */
    MNT_DBG("fence %u not entered: fence %u failed", w->fences, w->fences - 1);
    return w->fence_failed;
  }
  int st = fence_(w);
  if (st != MNT_OK) w->fence_failed = st;
  return st;
}

typedef struct {
  int32_t node_id, local_rank;
  char host[MNT_NODENAME_MAX];
} ident;

/* the key of a rank's node: PMIx's node id, or its host name when a server gives no id */
static uint64_t node_key_hash(const ident *a) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  if (a->node_id >= 0) return (uint64_t)a->node_id * 0x9e3779b97f4a7c15ull + 1;
  for (const char *s = a->host; *s && s < a->host + MNT_NODENAME_MAX; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static int same_node(const ident *a, const ident *b) {
  return a->node_id >= 0 ? a->node_id == b->node_id : strncmp(a->host, b->host, MNT_NODENAME_MAX) == 0;
}

/* Nodes numbered 0..nnodes-1 in order of first appearance by rank, through a hash table of the
 * nodes seen (open addressing, twice the ranks' slots): O(N) per rank, not the O(N^2) of comparing
 * each rank with all before it (4096 ranks: 8 M comparisons on every rank). */
static int number_nodes(mnt_world *w, const ident *all) {
  size_t cap = 2;
  while (cap < 2 * (size_t)w->size) cap *= 2;
  int *first = malloc(cap * sizeof *first); /* a node's first rank, -1: empty */
  if (!first) return MNT_ENOMEM;
  for (size_t i = 0; i < cap; i++) first[i] = -1;
  w->nnodes = 0;
  for (int r = 0; r < w->size; r++) {
    size_t i = (size_t)node_key_hash(&all[r]) & (cap - 1);
    while (first[i] >= 0 && !same_node(&all[first[i]], &all[r])) i = (i + 1) & (cap - 1);
    if (first[i] < 0) {
      first[i] = r;
      w->node_of[r] = w->nnodes++;
      memcpy(w->node_name[w->node_of[r]], all[r].host, MNT_NODENAME_MAX);
    } else {
      w->node_of[r] = w->node_of[first[i]];
    }
    w->local_of[r] = all[r].local_rank;
  }
  free(first);
  return MNT_OK;
}

/* Every rank's node from the job map the server hands each process at launch: the job's nodes
 * (PMIx_Resolve_nodes) and each node's ranks (PMIx_Resolve_peers), the same answer on every rank,
 * O(N) local reads per rank and nothing sent. 1 when every rank was placed exactly once, else 0.
 * Not from each rank's PMIX_HOSTNAME: OpenPMIx 5's client answers that for its own rank with its
 * own gethostname(), and for the others with the server's node name (Slurm 24.11's local cluster,
 * whose nodes node1 and node2 share the machine's name: rank 0 saw itself on "vm" and rank 1 on
 * "node1", rank 1 saw the reverse, and the ranks counted 3 nodes for 2); OpenPMIx 4 under Slurm
 * 22.05 answered the server's name for all. PMIX_NODEID and PMIX_LOCAL_RANK of other nodes' ranks
 * are not given (Slurm's PMIx plugin: only of the node's own ranks). */
static int hosts_from_job_map(mnt_world *w, ident *all) {
  char *nodes = NULL;
  if (PMIx_Resolve_nodes(g_me.nspace, &nodes) != PMIX_SUCCESS || !nodes) {
    MNT_DBG("PMIx gives no node list of the job: the identities are exchanged");
    return 0;
  }
  for (int r = 0; r < w->size; r++) all[r] = (ident){.node_id = -1, .local_rank = -1}; /* nodes keyed by host */
  int ok = 1, placed = 0;
  char *save = NULL;
  for (char *n = strtok_r(nodes, ",", &save); n && ok; n = strtok_r(NULL, ",", &save)) {
    pmix_proc_t *procs = NULL;
    size_t np = 0;
    ok = PMIx_Resolve_peers(n, g_me.nspace, &procs, &np) == PMIX_SUCCESS;
    for (size_t i = 0; ok && i < np; i++) {
      pmix_rank_t r = procs[i].rank;
      ok = r < (pmix_rank_t)w->size && !all[r].host[0];
      if (ok) snprintf(all[r].host, sizeof all[r].host, "%s", n);
      placed += ok;
    }
    if (procs) PMIX_PROC_FREE(procs, np);
  }
  free(nodes);
  ok = ok && placed == w->size;
  if (!ok) MNT_DBG("PMIx's node map does not place every rank once: the identities are exchanged");
  return ok;
}

/* Local ranks numbered in rank order on each node, as Slurm numbers them (SLURM_LOCALID). Should a
 * server number them otherwise, this rank's own is taken from the map (every rank must agree on
 * it: the rings are built from the map), with a warning. */
static int local_ranks_by_order(mnt_world *w) {
  int *next = calloc((size_t)w->nnodes, sizeof *next);
  if (!next) return MNT_ENOMEM;
  for (int r = 0; r < w->size; r++) w->local_of[r] = next[w->node_of[r]]++;
  int mine = w->local_of[w->rank], count = next[w->node_of[w->rank]];
  free(next);
  if (mine != w->local_rank || count != w->local_size)
    MNT_WARN("PMIx's local rank %d of %d differs from rank order on %s (%d of %d): using rank order",
             w->local_rank, w->local_size, w->hostname, mine, count);
  w->local_rank = mine;
  w->local_size = count;
  return MNT_OK;
}

/* mnt_now() at this process's start: /proc/self/stat's starttime (clock ticks since boot) against
 * CLOCK_BOOTTIME now; now itself when it cannot be read */
static double process_start(void) {
  double now = mnt_now();
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return now;
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  unsigned long long start = 0;
  /* after ") ": state (field 3) ... starttime is field 22 */
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                   &start) != 1)
    return now;
  struct timespec bt;
  if (clock_gettime(CLOCK_BOOTTIME, &bt) != 0) return now;
  double since = (double)bt.tv_sec + 1e-9 * (double)bt.tv_nsec - (double)start / (double)sysconf(_SC_CLK_TCK);
  return since >= 0 && since < 86400 ? now - since : now;
}

void mnt_world_phase(mnt_world *w, int phase) {
  double now = mnt_now();
  if (phase >= 0 && phase < MNT_NPHASES) w->phase_s[phase] += now - w->phase_t;
  w->phase_t = now;
}

int mnt_world_phases(mnt_world *w, char *out, size_t n) {
  static const char *const NAME[MNT_NPHASES] = {"PMIx init", "identities", "preparation", "secret",
                                                "shared memory", "TCP", "first step"};
  enum { K = MNT_NPHASES + 1 }; /* each rank's phases, then the records it has read */
  double mine[K], one[K], mx[K] = {0}, slowest = 0; /* the largest sum of one rank's phases */
  memcpy(mine, w->phase_s, sizeof w->phase_s);
  mine[MNT_NPHASES] = (double)__atomic_load_n(&w->records_read, __ATOMIC_RELAXED);
  out[0] = '\0';
  unsigned key = 0;
  if (w->have_pmix) MNT_CHECK(mnt_world_publish(w, mine, sizeof mine, &key));
  if (w->rank != 0) return MNT_OK; /* only rank 0 reads them all: O(1) for the others */
  for (int r = 0; r < w->size; r++) {
    if (r == w->rank) memcpy(one, mine, sizeof one);
    else MNT_CHECK(mnt_world_lookup(w, key, r, one, sizeof one));
    double sum = 0;
    for (int p = 0; p < K; p++) mx[p] = one[p] > mx[p] ? one[p] : mx[p];
    for (int p = 0; p < MNT_NPHASES; p++) sum += one[p];
    slowest = sum > slowest ? sum : slowest;
  }
  size_t len = 0;
  for (int p = 0; p < MNT_NPHASES; p++)
    if (mx[p] > 0 && len < n) len += (size_t)snprintf(out + len, n - len, "%s %.2f s, ", NAME[p], mx[p]);
  if (len < n)
    snprintf(out + len, n - len, "total %.2f s since the process started, %.0f PMIx records read", slowest,
             mx[MNT_NPHASES]);
  return MNT_OK;
}


/* the job's ranks as they start: each is its own (mnt_world_shrink renumbers them) */
static int job_ranks(mnt_world *w) {
  w->job_size = w->size;
  if (!(w->job_of = malloc((size_t)w->size * sizeof *w->job_of))) return MNT_ENOMEM;
  for (int r = 0; r < w->size; r++) w->job_of[r] = r;
  return MNT_OK;
}

const char *mnt_world_pmix_version(void) {
  static char s[64];
  const char *v = PMIx_Get_version();
  if (!v) return "?";
  size_t n = strcspn(v, ",("); /* "OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, ...)" */
  while (n && v[n - 1] == ' ') n--;
  snprintf(s, sizeof s, "%.*s", (int)n, v);
  return s;
}

int mnt_world_init(mnt_world *w) {
  memset(w, 0, sizeof *w);
  w->phase_t = process_start();
  MNT_CHECK(mnt_env_comm_timeout(&w->timeout_s));
  pmix_status_t rc = PMIx_Init(&g_me, NULL, 0);
  if (rc != PMIX_SUCCESS) {
    /* UNREACHABLE: not started by a PMIx server (e.g. not under srun --mpi=pmix): run alone. */
    if (getenv("PMIX_NAMESPACE") || getenv("PMIX_SERVER_URI41") || getenv("PMIX_SERVER_URI4")) {
      MNT_ERR("PMIx_Init failed: %s, although a PMIx server was announced in the environment",
              PMIx_Error_string(rc));
      return MNT_EPMIX;
    }
    /* Several tasks in this Slurm step but no PMIx: each would train alone into the same output. */
    const char *ntasks = getenv("SLURM_STEP_NUM_TASKS");
    if (ntasks && atoi(ntasks) > 1) {
      MNT_ERR("Slurm started %s tasks in this step but no PMIx server answered (%s): run it with "
              "srun --mpi=pmix (check srun --mpi=list; the site's MpiDefault is not pmix)",
              ntasks, PMIx_Error_string(rc));
      return MNT_EARG;
    }
    w->rank = 0;
    w->size = w->local_size = w->nnodes = 1;
    if (gethostname(w->hostname, sizeof w->hostname) != 0) snprintf(w->hostname, sizeof w->hostname, "localhost");
    w->hostname[sizeof w->hostname - 1] = '\0';
    snprintf(w->nspace, sizeof w->nspace, "single-%ld", (long)getpid());
    snprintf(w->jobid, sizeof w->jobid, "%s", "");
    w->node_of = calloc(1, sizeof *w->node_of);
    w->local_of = calloc(1, sizeof *w->local_of);
    w->node_name = calloc(1, sizeof *w->node_name);
    w->up = 1;
    if (!w->node_of || !w->local_of || !w->node_name) return MNT_ENOMEM;
    memcpy(w->node_name[0], w->hostname, MNT_NODENAME_MAX);
    MNT_INFO("no PMIx server (%s): running as a single process, rank 0 of 1", PMIx_Error_string(rc));
    return job_ranks(w);
  }
  w->have_pmix = 1;
  w->up = 1;
  mnt_world_phase(w, MNT_PHASE_LAUNCH);
  w->rank = (int)g_me.rank;
  snprintf(w->nspace, sizeof w->nspace, "%s", g_me.nspace);
  jobid_from_nspace(w->nspace, w->jobid, sizeof w->jobid);

  pmix_proc_t wild;
  PMIX_LOAD_PROCID(&wild, g_me.nspace, PMIX_RANK_WILDCARD);
  long v;
  if ((v = get_long(&wild, PMIX_JOB_SIZE)) <= 0) {
    MNT_ERR("PMIx did not report %s for namespace %s", PMIX_JOB_SIZE, g_me.nspace);
    return MNT_EPMIX;
  }
  w->size = (int)v;
  w->local_rank = (int)get_long(&g_me, PMIX_LOCAL_RANK);
  w->local_size = (int)get_long(&wild, PMIX_LOCAL_SIZE);
  long node_id = get_long(&g_me, PMIX_NODEID);
  if (!get_string(&g_me, PMIX_HOSTNAME, w->hostname, sizeof w->hostname) &&
      gethostname(w->hostname, sizeof w->hostname) != 0)
    snprintf(w->hostname, sizeof w->hostname, "unknown");
  w->hostname[sizeof w->hostname - 1] = '\0';
  if (w->local_rank < 0 || w->local_size <= 0) {
    MNT_ERR("PMIx did not report %s/%s (rank %d of %s)", PMIX_LOCAL_RANK, PMIX_LOCAL_SIZE, w->rank,
            g_me.nspace);
    return MNT_EPMIX;
  }
  mnt_log_set_identity(w->rank, w->hostname);

  /* Every rank's node and local rank: from the job's node map when the server gives one that places
   * every rank (Slurm's does, at launch: no exchange), else one exchange. */
  w->node_of = calloc((size_t)w->size, sizeof *w->node_of);
  w->local_of = calloc((size_t)w->size, sizeof *w->local_of);
  w->node_name = calloc((size_t)w->size, sizeof *w->node_name);
  ident *all = calloc((size_t)w->size, sizeof *all);
  ident me = {.node_id = (int32_t)node_id, .local_rank = w->local_rank};
  memcpy(me.host, w->hostname, sizeof me.host);
  int st = MNT_ENOMEM;
  if (!w->node_of || !w->local_of || !w->node_name || !all) goto out;
  int from_info = hosts_from_job_map(w, all);
  if (!from_info) MNT_CHECK_GOTO(mnt_world_allgather(w, &me, sizeof me, all), st, out);
  /* The key is PMIx's node id; only when a server does not give one do we fall back to the host
   * name. */
  MNT_CHECK_GOTO(number_nodes(w, all), st, out);
  if (from_info) {
    MNT_CHECK_GOTO(local_ranks_by_order(w), st, out);
    /* this rank goes by its node's name in the map, as its peers name it (not its own PMIX_HOSTNAME,
     * which may be its gethostname(): hosts_from_job_map) */
    snprintf(w->hostname, sizeof w->hostname, "%s", w->node_name[w->node_of[w->rank]]);
    mnt_log_set_identity(w->rank, w->hostname);
  }
  mnt_world_phase(w, MNT_PHASE_IDENT);
  w->node_rank = w->node_of[w->rank];
  st = job_ranks(w);
out:
  free(all);
  return st;
}

/* mine under key, committed */
static int put_commit(const char *key, const void *mine, size_t bytes) {
  pmix_value_t val;
  PMIX_VALUE_CONSTRUCT(&val);
  val.type = PMIX_BYTE_OBJECT;
  val.data.bo.bytes = (char *)mine;
  val.data.bo.size = bytes;
  pmix_status_t rc;
  if (PMIX_SUCCESS != (rc = PMIx_Put(PMIX_GLOBAL, key, &val))) {
    MNT_ERR("PMIx_Put(%s) failed: %s", key, PMIx_Error_string(rc));
    return MNT_EPMIX;
  }
  if (PMIX_SUCCESS != (rc = PMIx_Commit())) {
    MNT_ERR("PMIx_Commit failed: %s", PMIx_Error_string(rc));
    return MNT_EPMIX;
  }
  return MNT_OK;
}

/* what rank r put under key (exactly bytes), after a fence that collected it */
static int get_one(mnt_world *w, const char *key, int r, void *out, size_t bytes) {
  __atomic_fetch_add(&w->records_read, 1, __ATOMIC_RELAXED);
  pmix_proc_t p;
  pmix_value_t *v = NULL;
  PMIX_LOAD_PROCID(&p, g_me.nspace, (pmix_rank_t)r);
  pmix_status_t rc = PMIx_Get(&p, key, NULL, 0, &v);
  if (rc != PMIX_SUCCESS || !v) {
    MNT_ERR("PMIx_Get(%s) from rank %d failed: %s", key, r, PMIx_Error_string(rc));
    return MNT_EPMIX;
  }
  int ok = v->type == PMIX_BYTE_OBJECT && v->data.bo.size == bytes;
  if (ok) memcpy(out, v->data.bo.bytes, bytes);
  PMIX_VALUE_RELEASE(v);
  if (!ok) {
    MNT_ERR("rank %d published %s with a different size than %zu bytes", r, key, bytes);
    return MNT_EPMIX;
  }
  return MNT_OK;
}

int mnt_world_publish(mnt_world *w, const void *mine, size_t bytes, unsigned *key) {
  if (!w->have_pmix) {
    MNT_ERR("nothing to publish to: no PMIx server (a job of one process)");
    return MNT_EARG;
  }
  char name[64];
  *key = w->seq++;
  snprintf(name, sizeof name, "mnt.x.%u", *key);
  MNT_CHECK(put_commit(name, mine, bytes));
  return fence(w);
}

int mnt_world_lookup(mnt_world *w, unsigned key, int rank, void *out, size_t bytes) {
  char name[64];
  if (!w->have_pmix || rank < 0 || rank >= w->size) {
    MNT_ERR("no record of rank %d to look up (%d ranks%s)", rank, w->size, w->have_pmix ? "" : ", no PMIx");
    return MNT_EARG;
  }
  snprintf(name, sizeof name, "mnt.x.%u", key);
  return get_one(w, name, rank, out, bytes);
}

/* an exchange after mnt_world_leave: refused (a job of one process has nothing to exchange) */
static int left_pmix(const mnt_world *w, const char *what) {
  if (!w->left) return MNT_OK;
  MNT_ERR("%s after this rank left PMIx (--on-rank-loss shrink): only agreement goes on, over the communicator", what);
  return MNT_EARG;
}

int mnt_world_allgather(mnt_world *w, const void *mine, size_t bytes, void *all) {
  MNT_CHECK(left_pmix(w, "a PMIx allgather"));
  if (!w->have_pmix) {
    memcpy(all, mine, bytes);
    return MNT_OK;
  }
  unsigned key;
  MNT_CHECK(mnt_world_publish(w, mine, bytes, &key));
  for (int r = 0; r < w->size; r++) MNT_CHECK(mnt_world_lookup(w, key, r, (char *)all + (size_t)r * bytes, bytes));
  return MNT_OK;
}


int mnt_world_bcast(mnt_world *w, void *buf, size_t bytes, int root) {
  MNT_CHECK(left_pmix(w, "a PMIx broadcast"));
  if (!w->have_pmix) return MNT_OK;
  if (root < 0 || root >= w->size) {
    MNT_ERR("broadcast root %d is not a rank (size %d)", root, w->size);
    return MNT_EARG;
  }
  /* Only the root's value travels: the others publish nothing. */
  char key[64];
  snprintf(key, sizeof key, "mnt.b.%u", w->seq++);
  if (w->rank == root) MNT_CHECK(put_commit(key, buf, bytes));
  MNT_CHECK(fence(w));
  return w->rank == root ? MNT_OK : get_one(w, key, root, buf, bytes);
}

int mnt_world_agree(mnt_world *w, int status) {
  int st = status;
  if (w->left && w->size > 1) {
    st = w->agree_fn(w->agree_ctx, status);
  } else if (w->size > 1) {
    int *all = calloc((size_t)w->size, sizeof *all);
    if (!all) return MNT_ENOMEM;
    int rc = mnt_world_allgather(w, &status, sizeof status, all);
    int first = -1;
    for (int r = 0; r < w->size && rc == MNT_OK && first < 0; r++)
      if (all[r] != MNT_OK) first = r;
    st = rc != MNT_OK ? rc : first >= 0 ? all[first] : MNT_OK;
    if (rc == MNT_OK && first > 0 && w->rank == 0)
      MNT_ERR("rank %d on %s failed (its own message says why); every rank stops", first,
              w->node_name[w->node_of[first]]);
    free(all);
    MNT_CHECK(rc); /* not agreed: the exchange itself failed */
  }
  if (st != MNT_OK) w->failed_together = st;
  return st;
}

int mnt_world_barrier(mnt_world *w) {
  MNT_CHECK(left_pmix(w, "a PMIx barrier"));
  if (!w->have_pmix) return MNT_OK;
  /* A fence that collects data (as every fence here), though there is none: Slurm 22.05's mpi/pmix runs
   * fences without PMIX_COLLECT_DATA on another collective (tree, not ring) that here returned at
   * once on every node while a rank on another node was still 1.5 s away from it (cluster_world_3
   * asserts the wait). Only the node's own ranks were waited for. */
  return fence(w);
}

void mnt_world_abort(mnt_world *w, int status, const char *msg) {
  if (status == 0) status = 1;
  if (w && w->left) { /* no PMIx: this rank alone; the others find it gone (--on-rank-loss shrink) */
    fprintf(stderr, "mntrain: rank %d on %s: exiting: %s\n", w->job_of ? w->job_of[w->rank] : w->rank, w->hostname, msg);
    fflush(stderr);
    _exit(status);
  }
  fprintf(stderr, "mntrain: rank %d on %s: aborting the job: %s\n", w ? w->rank : 0,
          w ? w->hostname : "?", msg);
  fflush(stderr);
  if (w && w->have_pmix) {
    PMIx_Abort(status, msg, NULL, 0);
    /* PMIx_Abort returns once the server has the request; the server kills the job. */
  }
  _exit(status);
}

void mnt_world_finalize(mnt_world *w) {
  if (w->have_pmix) {
    PMIx_Finalize(NULL, 0);
    w->have_pmix = 0;
  }
  free(w->node_of);
  free(w->local_of);
  free(w->node_name);
  free(w->job_of);
  w->node_of = w->local_of = w->job_of = NULL;
  w->node_name = NULL;
}

int mnt_world_leave(mnt_world *w, int (*agree)(void *ctx, int status), void *ctx) {
  if (w->have_pmix) {
    pmix_status_t rc = PMIx_Finalize(NULL, 0);
    if (rc != PMIX_SUCCESS) MNT_WARN("PMIx_Finalize: %s (going on without PMIx)", PMIx_Error_string(rc));
    w->have_pmix = 0;
  }
  w->left = 1;
  w->agree_fn = agree;
  w->agree_ctx = ctx;
  return MNT_OK;
}

int mnt_world_shrink(mnt_world *w, const int *keep, int n) {
  int me = -1;
  for (int i = 0; i < n; i++) {
    if (keep[i] < 0 || keep[i] >= w->size || (i > 0 && keep[i] <= keep[i - 1])) {
      MNT_ERR("shrink: rank list not increasing within 0..%d", w->size - 1);
      return MNT_EARG;
    }
    if (keep[i] == w->rank) me = i;
  }
  if (me < 0) {
    MNT_ERR("shrink: this rank is not among those kept");
    return MNT_EARG;
  }
  int *node_of = malloc((size_t)n * sizeof *node_of), *local_of = malloc((size_t)n * sizeof *local_of);
  int *job_of = malloc((size_t)n * sizeof *job_of), *renum = malloc((size_t)w->nnodes * sizeof *renum);
  int *count = calloc((size_t)w->nnodes, sizeof *count);
  char(*names)[MNT_NODENAME_MAX] = calloc((size_t)w->nnodes, sizeof *names);
  int st = MNT_ENOMEM;
  if (!node_of || !local_of || !job_of || !renum || !count || !names) goto out;
  for (int k = 0; k < w->nnodes; k++) renum[k] = -1;
  int nn = 0;
  for (int i = 0; i < n; i++) { /* nodes numbered again in order of first appearance */
    int old = w->node_of[keep[i]];
    if (renum[old] < 0) {
      memcpy(names[nn], w->node_name[old], MNT_NODENAME_MAX);
      renum[old] = nn++;
    }
    node_of[i] = renum[old];
    local_of[i] = count[node_of[i]]++;
    job_of[i] = w->job_of[keep[i]];
  }
  memcpy(w->node_name, names, (size_t)nn * sizeof *names);
  free(w->node_of), free(w->local_of), free(w->job_of);
  w->node_of = node_of, w->local_of = local_of, w->job_of = job_of;
  node_of = local_of = job_of = NULL;
  w->rank = me;
  w->size = n;
  w->nnodes = nn;
  w->node_rank = w->node_of[me];
  w->local_rank = w->local_of[me];
  w->local_size = count[w->node_rank];
  w->epoch++;
  st = MNT_OK;
out:
  free(node_of), free(local_of), free(job_of), free(renum), free(count), free(names);
  return st;
}
