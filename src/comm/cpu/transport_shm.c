/* transport_shm.c — per-node shared-memory segment: FIFOs between local ranks, doorbells
 * (futex words) and owner pids; see transport.h. The segment is unlinked as soon as every
 * local rank has mapped it, so nothing is left in /dev/shm after an exit, a crash or an abort. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/comm/cpu/transport.h"

#define SHM_MAGIC 0x4d4e5453484d3031ull /* "MNTSHM01" */

typedef struct shm_header {
  uint64_t magic;
  uint32_t nlocal;
  uint32_t pad;
  uint64_t fifo_cap;
} shm_header;

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }
static size_t slots_off(void) { return round_up(sizeof(shm_header), 64); }
static size_t fifo_stride(size_t cap) { return round_up(sizeof(mnt_shm_fifo) + cap, 4096); }
static size_t fifos_off(int nlocal) {
  return round_up(slots_off() + (size_t)nlocal * sizeof(mnt_shm_slot), 4096);
}

int mnt_shm_open(mnt_shm *s, const char *name, int nlocal, int me, size_t fifo_cap, int create) {
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->nlocal = nlocal;
  s->me = me;
  s->fifo_cap = fifo_cap;
  s->bytes = fifos_off(nlocal) + (size_t)nlocal * fifo_stride(fifo_cap);
  int fd = shm_open(name, create ? (O_CREAT | O_EXCL | O_RDWR) : O_RDWR, 0600);
  if (fd < 0) return MNT_SYSERR("shm_open(/dev/shm%s) failed", name);
  if (create && ftruncate(fd, (off_t)s->bytes) != 0) {
    int st = MNT_SYSERR("ftruncate(/dev/shm%s, %zu) failed (is /dev/shm large enough?)", name, s->bytes);
    close(fd);
    shm_unlink(name);
    return st;
  }
  if (!create) {
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size != s->bytes) {
      MNT_ERR("/dev/shm%s has %lld bytes, expected %zu", name, (long long)st.st_size, s->bytes);
      close(fd);
      return MNT_ESYS;
    }
  }
  s->base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->base == MAP_FAILED) {
    s->base = NULL;
    int st = MNT_SYSERR("mmap(/dev/shm%s, %zu) failed", name, s->bytes);
    if (create) shm_unlink(name);
    return st;
  }
  shm_header *h = s->base;
  s->slots = (mnt_shm_slot *)((char *)s->base + slots_off());
  if (create) {
    /* ftruncate gave zeroed pages: counters start at 0. */
    h->nlocal = (uint32_t)nlocal;
    h->fifo_cap = fifo_cap;
    atomic_thread_fence(memory_order_seq_cst);
    h->magic = SHM_MAGIC;
  } else if (h->magic != SHM_MAGIC || h->nlocal != (uint32_t)nlocal || h->fifo_cap != fifo_cap) {
    MNT_ERR("/dev/shm%s is not this job's segment (magic or geometry differ)", name);
    mnt_shm_close(s);
    return MNT_ESYS;
  }
  atomic_store(&s->slots[me].pid, (int32_t)getpid());
  atomic_store(&s->slots[me].attached, 1);
  return MNT_OK;
}

void mnt_shm_unlink(mnt_shm *s) {
  if (s->base && !s->unlinked) {
    shm_unlink(s->name);
    s->unlinked = 1;
  }
}

void mnt_shm_close(mnt_shm *s) {
  if (s->base) munmap(s->base, s->bytes);
  s->base = NULL;
  s->slots = NULL;
}

mnt_shm_fifo *mnt_shm_fifo_of(mnt_shm *s, int from_local) {
  return (mnt_shm_fifo *)((char *)s->base + fifos_off(s->nlocal) +
                          (size_t)from_local * fifo_stride(s->fifo_cap));
}

void mnt_shm_ring(mnt_shm *s, int local) {
  mnt_shm_slot *sl = &s->slots[local];
  atomic_fetch_add(&sl->bell, 1u);
  if (atomic_load(&sl->sleeping))
    syscall(SYS_futex, (uint32_t *)&sl->bell, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

int mnt_shm_peer_alive(mnt_shm *s, int local) {
  pid_t pid = (pid_t)atomic_load(&s->slots[local].pid);
  if (pid <= 0) return 1; /* not attached yet: setup has its own deadline */
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  /* A killed process stays a zombie until its parent (slurmstepd) reaps it. */
  char path[MNT_PATH_MAX], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')) return 0;
  return 1;
}
