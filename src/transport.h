/* transport.h — point-to-point links under the CPU collectives (internal to src/comm_cpu.c).
 * defines: mnt_link (one direction between two ranks: shared memory FIFO or TCP socket),
 *          mnt_shm_* (per-node segment: FIFOs, doorbells, pids), mnt_tcp_* (listen, connect,
 *          authenticated accept), mnt_link_send / peek / consume / recv_into, mnt_waiter.
 * Links never block: they move what they can and return; the collective engine waits. */
#ifndef MNT_TRANSPORT_H
#define MNT_TRANSPORT_H

#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MNT_SECRET_BYTES 32

enum { MNT_LINK_SHM = 1, MNT_LINK_TCP = 2 };

/* ---- shared memory -------------------------------------------------------------------- */
typedef struct mnt_shm_fifo {
  _Alignas(64) _Atomic uint64_t head; /* bytes written so far (producer) */
  _Alignas(64) _Atomic uint64_t tail; /* bytes consumed so far (consumer) */
  _Alignas(64) uint8_t guard[64];     /* see mnt_link_peek: an element split by the wrap */
  uint8_t data[];                     /* capacity bytes, a power of two */
} mnt_shm_fifo;

typedef struct mnt_shm_slot {        /* one per local rank, on its own cache line */
  _Alignas(64) _Atomic uint32_t bell; /* rung whenever this rank may have something to do */
  _Atomic uint32_t sleeping;          /* 1 while the owner waits in futex */
  _Atomic int32_t pid;                /* owner's pid, for liveness checks */
  _Atomic int32_t attached;
} mnt_shm_slot;

typedef struct mnt_shm {
  char name[200];
  void *base;
  size_t bytes, fifo_cap;
  int nlocal, me;
  mnt_shm_slot *slots;
  int unlinked;
} mnt_shm;

/* Local rank 0 creates (create=1), the others attach after a barrier. Layout: header, nlocal
 * slots, nlocal FIFOs (FIFO l carries data from local rank l to local rank (l+1) mod nlocal). */
int mnt_shm_open(mnt_shm *s, const char *name, int nlocal, int me, size_t fifo_cap, int create);
void mnt_shm_unlink(mnt_shm *s); /* once every local rank is attached: nothing is left behind */
void mnt_shm_close(mnt_shm *s);
mnt_shm_fifo *mnt_shm_fifo_of(mnt_shm *s, int from_local);
void mnt_shm_ring(mnt_shm *s, int local);      /* ring local rank's doorbell */
int mnt_shm_peer_alive(mnt_shm *s, int local); /* 0 when that process is gone */

/* ---- TCP -------------------------------------------------------------------------------- */
typedef struct mnt_tcp_addr {
  uint32_t ip;   /* network byte order */
  uint16_t port; /* network byte order */
  uint16_t pad;
} mnt_tcp_addr;

typedef struct mnt_tcp_hello {
  char magic[8];       /* "MNTRAIN1" */
  uint32_t comm_id;
  int32_t from_rank;
  int32_t tag;
  uint8_t secret[MNT_SECRET_BYTES];
} mnt_tcp_hello;

/* Fill a hello for this job. */
void mnt_tcp_hello_init(mnt_tcp_hello *h, const uint8_t *secret, uint32_t comm_id, int from_rank,
                        int tag);
/* Listen on this node's address (MNT_COMM_IFACE names the interface; otherwise the first
 * non-loopback IPv4 interface that is up, else loopback) on an ephemeral port. */
int mnt_tcp_listen(int *fd, mnt_tcp_addr *addr);
void mnt_tcp_addr_str(const mnt_tcp_addr *a, char *out, size_t n);
/* Non-blocking connect and send the hello; the answer is read by mnt_tcp_finish_connect. */
int mnt_tcp_start_connect(const mnt_tcp_addr *to, const mnt_tcp_hello *h, int *fd, double deadline,
                          int peer_rank);
int mnt_tcp_finish_connect(int fd, double deadline, int peer_rank);
/* Accept one connection and check its hello against the secret and comm id. On a wrong secret
 * the peer is answered "refused", closed, and MNT_EAUTH is returned (the listener stays open).
 * On success *fd_out, *from_rank and *tag describe the new link. */
int mnt_tcp_accept_auth(int lfd, const uint8_t *secret, uint32_t comm_id, double deadline,
                        int *fd_out, int *from_rank, int *tag);
void mnt_tcp_tune(int fd);

/* ---- links --------------------------------------------------------------------------- */
typedef struct mnt_link {
  int kind;
  int peer_rank;
  const char *peer_node;
  /* shm */
  mnt_shm *shm;
  mnt_shm_fifo *fifo;
  int peer_local;
  /* tcp */
  int fd;
  uint8_t *stage_mem; /* receive staging ring (tcp): 64 guard bytes, then stage */
  uint8_t *stage;
  size_t stage_cap;
  uint64_t stage_head, stage_tail;
  int eof;
} mnt_link;

/* Send up to n bytes; *moved says how many went. Returns MNT_OK or MNT_EPEER. */
int mnt_link_send(mnt_link *l, const void *src, size_t n, size_t *moved);
/* Contiguous received bytes ready to read in place (at most max). When fewer than `unit` bytes
 * (an element, <= 64) are contiguous before the ring wraps, they are copied just below the start
 * of the ring (a guard area) so that the element can be read whole. */
int mnt_link_peek(mnt_link *l, const void **ptr, size_t *avail, size_t max, size_t unit);
void mnt_link_consume(mnt_link *l, size_t n);
/* Receive up to n bytes straight into dst. */
int mnt_link_recv_into(mnt_link *l, void *dst, size_t n, size_t *moved);
void mnt_link_close(mnt_link *l);

#endif
