/* ring.c — see ring.h. */
#include "src/comm/cpu/ring.h"

void mnt_ring_segments(size_t count, size_t esize, int n, size_t *off, size_t *len) {
  size_t unit = MNT_RING_ALIGN / esize; /* elements per aligned unit */
  if (unit == 0) unit = 1;
  size_t units = (count + unit - 1) / unit;
  size_t base = units / (size_t)n, extra = units % (size_t)n;
  size_t pos = 0;
  for (int k = 0; k < n; k++) {
    size_t u = base + ((size_t)k < extra ? 1 : 0);
    size_t l = u * unit;
    if (pos >= count) l = 0;
    else if (pos + l > count) l = count - pos;
    off[k] = pos;
    len[k] = l;
    pos += l;
  }
}

static int before(int x, int y, const int *node_of, const int *local_of) {
  if (node_of[x] != node_of[y]) return node_of[x] < node_of[y];
  if (local_of[x] != local_of[y]) return local_of[x] < local_of[y];
  return x < y;
}

void mnt_ring_order(int size, const int *node_of, const int *local_of, int *order) {
  for (int i = 0; i < size; i++) { /* insertion sort: stable, no global state, runs once */
    int r = i, j = i;
    while (j > 0 && before(r, order[j - 1], node_of, local_of)) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = r;
  }
}
