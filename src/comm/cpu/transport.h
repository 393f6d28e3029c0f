/* transport.h — point-to-point links under the CPU collectives (internal to src/comm/cpu/).
 * defines: mnt_link (one direction between two ranks: shared memory FIFO or TCP socket),
 *          mnt_shm_* (per-node segment: FIFOs, doorbells, pids), mnt_tcp_* (listen, connect,
 *          an inbox of connections served concurrently, authenticated accept),
 *          mnt_link_send / peek / consume / recv_into.
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
  _Atomic int32_t closed;             /* 1: the survivors of a loss left this segment (shrink.c) */
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

/* a link's hello (magic "MNTRAIN1") with this job's secret, whatever its communicator id */
int mnt_tcp_hello_ok(const mnt_tcp_hello *h, const uint8_t *secret);
/* answer a hello taken from an inbox: yes (ok = 1) or refused, before the deadline */
int mnt_tcp_answer(int fd, int ok, double deadline);
/* Fill a hello for this job. */
void mnt_tcp_hello_init(mnt_tcp_hello *h, const uint8_t *secret, uint32_t comm_id, int from_rank,
                        int tag);
/* Listen on this node's address (iface: an interface name or prefix, MNT_COMM_IFACE; NULL: the
 * first non-loopback IPv4 interface that is up, else loopback) on an ephemeral port. */
int mnt_tcp_listen(const char *iface, int *fd, mnt_tcp_addr *addr);
void mnt_tcp_addr_str(const mnt_tcp_addr *a, char *out, size_t n);
/* Non-blocking connect and send the hello; the answer is read by mnt_tcp_finish_connect. */
int mnt_tcp_start_connect(const mnt_tcp_addr *to, const mnt_tcp_hello *h, int *fd, double deadline,
                          int peer_rank);
int mnt_tcp_finish_connect(int fd, double deadline, int peer_rank);
/* Connect (non-blocking, before the deadline) and send n bytes; *fd is then yours. On failure
 * why (if not NULL) says what went wrong; nothing is logged. MNT_ESYS: this process could not
 * open a socket (out of file descriptors: why says so, with the limit), nothing about the peer. */
int mnt_tcp_dial(const mnt_tcp_addr *to, const void *msg, size_t n, double deadline, int *fd, char *why,
                 size_t why_n);
/* Send or receive exactly n bytes of a small message before the deadline. */
int mnt_tcp_xfer(int fd, void *buf, size_t n, int writing, double deadline);

/* An inbox: connections to a listener that have not yet sent their first message (a fixed number
 * of bytes), served together with poll(): a silent or slow connection is dropped after its own
 * per_conn_s and cannot delay the others, and at most MNT_INBOX_MAX wait at a time (a new one
 * then takes the place of the oldest that has sent the least: a flood of silent connections
 * cannot keep a peer out, a peer's message arrives with its connection). Connections
 * refused or dropped (here and by mnt_tcp_accept_auth) are warned about with who and why for the
 * first three; later ones are counted and summed up in one warning at most every 30 s and when
 * the inbox closes. */
#define MNT_INBOX_MAX 64
typedef struct mnt_tcp_inbox mnt_tcp_inbox;
int mnt_tcp_inbox_open(mnt_tcp_inbox **ib, int lfd, size_t msg_bytes, double per_conn_s);
/* The next connection whose message is complete: *fd (yours to close), msg, and its address in
 * from. MNT_ETIMEOUT when `until` passes or wake_fd (if >= 0) becomes readable first; MNT_ESYS
 * when no descriptor is left to accept a connection with (logged the first time only: the
 * connection stays queued, so a caller that goes on should wait a while first). */
int mnt_tcp_inbox_next(mnt_tcp_inbox *ib, double until, int wake_fd, int *fd, void *msg, char *from,
                       size_t from_n);
/* closes what is pending, not the listener; warns the count of connections not yet summed up */
void mnt_tcp_inbox_close(mnt_tcp_inbox *ib);
/* The next connection from the inbox whose hello carries the secret and comm id; it is answered
 * "yes" and described by *fd_out, *from_rank, *tag. Others are answered "refused", closed and
 * logged. MNT_OK, or MNT_ETIMEOUT at the deadline. */
int mnt_tcp_accept_auth(mnt_tcp_inbox *ib, const uint8_t *secret, uint32_t comm_id, double deadline,
                        int *fd_out, int *from_rank, int *tag);
/* TCP_NODELAY, and SO_SNDBUF/SO_RCVBUF when buf_bytes > 0 (MNT_TCP_BUF) */
void mnt_tcp_tune(int fd, size_t buf_bytes);

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
