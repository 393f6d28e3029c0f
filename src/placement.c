/* placement.c — see placement.h. */
#include "src/placement.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/env.h"
#include "src/log.h"

/* "0-3" or "0,2,4" for a short message */
static void cpu_list(const cpu_set_t *s, char *out, size_t n) {
  size_t l = 0;
  out[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE && l + 16 < n; c++) {
    if (!CPU_ISSET(c, s)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, s)) e++;
    l += (size_t)snprintf(out + l, n - l, "%s%d", l ? "," : "", c);
    if (e > c) l += (size_t)snprintf(out + l, n - l, "-%d", e);
    c = e;
  }
}

void mnt_place_rank(const mnt_world *w, mnt_placement *p) {
  memset(p, 0, sizeof *p);
  cpu_set_t all;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof all, &all) != 0) {
    snprintf(p->why, sizeof p->why, "left as it is (sched_getaffinity: %s)", strerror(errno));
    return;
  }
  int n = CPU_COUNT(&all), L = w->local_size > 0 ? w->local_size : 1, l = w->local_rank;
  p->cpus = p->node_cpus = n;
  p->share = n / L > 1 ? n / L : 1; /* where the node's CPUs stay shared */
  const char *mode = mnt_env_cpu_bind(), *slurm = getenv("SLURM_CPU_BIND_TYPE");
  if (mode && !strcasecmp(mode, "none")) {
    snprintf(p->why, sizeof p->why, "left as it is (MNT_CPU_BIND=none): %d CPUs", n);
    return;
  }
  if (slurm && *slurm && strncasecmp(slurm, "none", 4)) {
    snprintf(p->why, sizeof p->why, "bound by Slurm (%s): %d CPUs", slurm, n);
    p->share = n; /* its own */
    return;
  }
  if (L <= 1 || n < L) {
    snprintf(p->why, sizeof p->why, "%d CPUs for %d rank%s on the node: not split", n, L, L == 1 ? "" : "s");
    return;
  }
  int share = n / L, extra = n % L, first = l * share + (l < extra ? l : extra), mine = share + (l < extra);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < first + mine; c++) {
    if (!CPU_ISSET(c, &all)) continue;
    if (k >= first) CPU_SET(c, &set);
    k++;
  }
  char list[96];
  cpu_list(&set, list, sizeof list);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    snprintf(p->why, sizeof p->why, "left as it is (sched_setaffinity to CPUs %s: %s)", list, strerror(errno));
    return;
  }
  p->bound = 1;
  p->cpus = p->share = mine;
  snprintf(p->why, sizeof p->why, "local rank %d of %d on CPUs %s (%d of the node's %d; MNT_CPU_BIND=none leaves it)",
           l, L, list, mine, n);
}
