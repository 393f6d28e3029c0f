/* ring.h — ring arithmetic shared by the CPU collectives (pure functions, unit-tested).
 * defines: mnt_ring_segments (split a buffer into n cache-line aligned, near-equal segments),
 *          mnt_ring_send_seg / mnt_ring_recv_seg (which segment a ring position moves at a step),
 *          mnt_ring_order (ring order of ranks: by node, then local rank). */
#ifndef MNT_RING_H
#define MNT_RING_H

#include <stddef.h>

#define MNT_RING_ALIGN 64 /* segment boundaries fall on multiples of this many bytes */

/* Split count elements of esize bytes into n segments: off[k], len[k] in elements. Segments are
 * contiguous, in order, cover [0,count) exactly, start on MNT_RING_ALIGN-byte boundaries where
 * possible and differ in length by less than two alignment units (trailing ones may be empty). */
void mnt_ring_segments(size_t count, size_t esize, int n, size_t *off, size_t *len);

/* The pipelined ring: at step k position p sends segment (p + shift - k) mod n and receives
 * segment (p + shift - k - 1) mod n. Allreduce is reduce-scatter (steps 0..n-2, reducing) followed
 * by allgather (steps n-1..2n-3, copying) with shift 0; afterwards position p owned segment
 * (p + 1) mod n after the reduce-scatter half. */
static inline int mnt_ring_send_seg(int p, int shift, int k, int n) {
  int s = (p + shift - k) % n;
  return s < 0 ? s + n : s;
}
static inline int mnt_ring_recv_seg(int p, int shift, int k, int n) {
  return mnt_ring_send_seg(p, shift, k + 1, n);
}

/* order[i] = rank at ring position i, sorted by (node_of[rank], local_of[rank]) so that ranks of a
 * node are neighbours and only one link per node boundary crosses the network. */
void mnt_ring_order(int size, const int *node_of, const int *local_of, int *order);

#endif
