/* test_ring.c — ring arithmetic: segment tables, the step schedule (simulated over n virtual
 * ranks, it must yield the allreduce), and the ring order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/comm/cpu/ring.h"

#include "tests/expect.h"

static void segments(void) {
  size_t counts[] = {0, 1, 2, 7, 15, 16, 17, 63, 64, 1000, 1048579, 16777216};
  size_t esizes[] = {2, 4};
  for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
    for (int ei = 0; ei < 2; ei++)
      for (int n = 1; n <= 9; n++) {
        size_t off[9], len[9], count = counts[ci], es = esizes[ei];
        mnt_ring_segments(count, es, n, off, len);
        size_t pos = 0, maxl = 0, minl = (size_t)-1;
        for (int k = 0; k < n; k++) {
          EXPECT(off[k] == pos, "count %zu n %d seg %d starts at %zu, want %zu", count, n, k, off[k], pos);
          if (len[k] && k + 1 < n && len[k + 1])
            EXPECT((off[k] * es) % MNT_RING_ALIGN == 0, "count %zu n %d seg %d not aligned", count, n, k);
          pos += len[k];
          if (len[k] > maxl) maxl = len[k];
          if (len[k] < minl) minl = len[k];
        }
        EXPECT(pos == count, "count %zu n %d: segments cover %zu", count, n, pos);
        if (count >= (size_t)n * MNT_RING_ALIGN)
          EXPECT(maxl - minl < 2 * (MNT_RING_ALIGN / es), "count %zu n %d: unbalanced %zu..%zu", count, n, minl, maxl);
      }
}

/* Run the schedule of the CPU communicator's engine (engine.c) over n virtual ranks, step by step: send segment
 * (p + shift - k), receive (p + shift - k - 1), reduce for k < n-1, copy after. */
static void schedule(void) {
  for (int n = 1; n <= 7; n++) {
    size_t count = 1000 + (size_t)n * 37;
    float *buf = malloc(sizeof(float) * count * (size_t)n), *msg = malloc(sizeof(float) * count * (size_t)n);
    size_t off[7], len[7];
    mnt_ring_segments(count, 4, n, off, len);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) buf[(size_t)p * count + i] = (float)((p + 1) * 1000 + (int)(i % 97));
    for (int k = 0; k < 2 * (n - 1); k++) {
      /* all positions send at once */
      for (int p = 0; p < n; p++) {
        int s = mnt_ring_send_seg(p, 0, k, n);
        memcpy(msg + (size_t)((p + 1) % n) * count, buf + (size_t)p * count + off[s], len[s] * sizeof(float));
      }
      for (int p = 0; p < n; p++) {
        int r = mnt_ring_recv_seg(p, 0, k, n);
        int from = (p - 1 + n) % n;
        EXPECT(mnt_ring_send_seg(from, 0, k, n) == r, "n %d step %d: pos %d receives %d but %d sends %d", n, k,
               p, r, from, mnt_ring_send_seg(from, 0, k, n));
        float *dst = buf + (size_t)p * count + off[r], *src = msg + (size_t)p * count;
        for (size_t i = 0; i < len[r]; i++) dst[i] = k < n - 1 ? dst[i] + src[i] : src[i];
      }
    }
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int q = 0; q < n; q++) want += (float)((q + 1) * 1000 + (int)(i % 97));
        if (buf[(size_t)p * count + i] != want) {
          EXPECT(0, "n %d: rank %d element %zu = %g, want %g", n, p, i, (double)buf[(size_t)p * count + i], (double)want);
          break;
        }
      }
    /* after the reduce-scatter half alone, position p owns segment (p + 1) mod n, which the
     * allgather with shift 1 sends first */
    for (int p = 0; p < n; p++)
      EXPECT(mnt_ring_send_seg(p, 1, 0, n) == (p + 1) % n, "n %d pos %d: allgather starts elsewhere", n, p);
    free(buf);
    free(msg);
  }
}

static void order(void) {
  /* cyclic placement: ranks 0,2,4 on node 0 and 1,3,5 on node 1 */
  int node_of[6] = {0, 1, 0, 1, 0, 1}, local_of[6] = {0, 0, 1, 1, 2, 2}, ord[6];
  mnt_ring_order(6, node_of, local_of, ord);
  int want[6] = {0, 2, 4, 1, 3, 5};
  EXPECT(memcmp(ord, want, sizeof want) == 0, "ring order %d %d %d %d %d %d", ord[0], ord[1], ord[2], ord[3], ord[4], ord[5]);
}

int main(void) {
  segments();
  schedule();
  order();
  if (failures) {
    fprintf(stderr, "test_ring: %d failures\n", failures);
    return 1;
  }
  printf("test_ring: ok\n");
  return 0;
}
