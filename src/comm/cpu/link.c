/* link.c — the two kinds of mnt_link behind one set of non-blocking calls; see transport.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/check.h"
#include "src/log.h"
#include "src/comm/cpu/transport.h"

#define TCP_SEND_MAX (4u << 20)  /* bytes per send() call */
#define SHM_PIECE (256u << 10)   /* bytes published at a time, so the reader starts early */

static int tcp_error(mnt_link *l, const char *what, int err) {
  if (err == 0) {
    MNT_ERR("rank %d on %s closed its connection during %s (the process died or aborted)",
            l->peer_rank, l->peer_node, what);
    return MNT_EPEER;
  }
  errno = err;
  MNT_SYSERR("lost rank %d on %s during %s (the process died or its node is unreachable)", l->peer_rank, l->peer_node,
             what);
  return MNT_EPEER;
}

int mnt_link_send(mnt_link *l, const void *src, size_t n, size_t *moved) {
  *moved = 0;
  if (n == 0) return MNT_OK;
  if (l->kind == MNT_LINK_TCP) {
    ssize_t r = send(l->fd, src, n < TCP_SEND_MAX ? n : TCP_SEND_MAX, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      *moved = (size_t)r;
      return MNT_OK;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return MNT_OK;
    return tcp_error(l, "send", errno);
  }
  mnt_shm_fifo *f = l->fifo;
  size_t cap = l->shm->fifo_cap;
  uint64_t head = atomic_load_explicit(&f->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_acquire);
  size_t space = cap - (size_t)(head - tail);
  size_t pos = (size_t)(head & (cap - 1));
  size_t k = n;
  if (k > space) k = space;
  if (k > cap - pos) k = cap - pos;
  if (k > SHM_PIECE) k = SHM_PIECE;
  if (k == 0) return MNT_OK;
  memcpy(f->data + pos, src, k);
  atomic_store_explicit(&f->head, head + k, memory_order_release);
  mnt_shm_ring(l->shm, l->peer_local);
  *moved = k;
  return MNT_OK;
}

/* The readable run at the ring's tail. Elements never straddle the wrap within one collective,
 * but a stream of odd-length fp16 messages followed by fp32 ones shifts the phase, so an element
 * may: its first bytes are then copied into the 64 guard bytes below data[0]. */
static void contiguous(uint8_t *data, size_t cap, uint64_t tail, size_t used, const void **ptr,
                       size_t *avail, size_t max, size_t unit) {
  size_t pos = (size_t)(tail & (cap - 1));
  size_t k = used < cap - pos ? used : cap - pos;
  if (k < unit && used >= unit) {
    memcpy(data - k, data + pos, k);
    *ptr = data - k;
    k = used;
  } else {
    *ptr = data + pos;
  }
  *avail = k < max ? k : max;
}

int mnt_link_peek(mnt_link *l, const void **ptr, size_t *avail, size_t max, size_t unit) {
  *avail = 0;
  if (l->kind == MNT_LINK_TCP) {
    size_t cap = l->stage_cap;
    size_t used = (size_t)(l->stage_head - l->stage_tail);
    if (used < cap / 2 && !l->eof) { /* top up the staging ring */
      size_t pos = (size_t)(l->stage_head & (cap - 1));
      size_t room = cap - used;
      if (room > cap - pos) room = cap - pos;
      ssize_t r = recv(l->fd, l->stage + pos, room, MSG_DONTWAIT);
      if (r > 0) l->stage_head += (uint64_t)r;
      else if (r == 0) l->eof = 1;
      else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return tcp_error(l, "receive", errno);
      used = (size_t)(l->stage_head - l->stage_tail);
    }
    if (used == 0 && l->eof) return tcp_error(l, "receive", 0);
    contiguous(l->stage, cap, l->stage_tail, used, ptr, avail, max, unit);
    return MNT_OK;
  }
  mnt_shm_fifo *f = l->fifo;
  size_t cap = l->shm->fifo_cap;
  uint64_t tail = atomic_load_explicit(&f->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&f->head, memory_order_acquire);
  contiguous(f->data, cap, tail, (size_t)(head - tail), ptr, avail, max, unit);
  return MNT_OK;
}

void mnt_link_consume(mnt_link *l, size_t n) {
  if (n == 0) return;
  if (l->kind == MNT_LINK_TCP) {
    l->stage_tail += n;
    return;
  }
  uint64_t tail = atomic_load_explicit(&l->fifo->tail, memory_order_relaxed);
  atomic_store_explicit(&l->fifo->tail, tail + n, memory_order_release);
  mnt_shm_ring(l->shm, l->peer_local);
}

int mnt_link_recv_into(mnt_link *l, void *dst, size_t n, size_t *moved) {
  *moved = 0;
  if (n == 0) return MNT_OK;
  if (l->kind == MNT_LINK_TCP && l->stage_head == l->stage_tail) {
    if (l->eof) return tcp_error(l, "receive", 0);
    ssize_t r = recv(l->fd, dst, n, MSG_DONTWAIT); /* straight into place, no staging copy */
    if (r > 0) *moved = (size_t)r;
    else if (r == 0) return tcp_error(l, "receive", 0);
    else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return tcp_error(l, "receive", errno);
    return MNT_OK;
  }
  const void *p;
  size_t k;
  MNT_CHECK(mnt_link_peek(l, &p, &k, n, 1));
  memcpy(dst, p, k);
  mnt_link_consume(l, k);
  *moved = k;
  return MNT_OK;
}

void mnt_link_close(mnt_link *l) {
  if (l->kind == MNT_LINK_TCP && l->fd >= 0) close(l->fd);
  free(l->stage_mem);
  memset(l, 0, sizeof *l);
  l->fd = -1;
}
