/* test_link.c — the shared-memory FIFO link in one process: data arrives in order through many
 * wraps, and an element split by the wrap (after an odd-length fp16 message) is read whole. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/log.h"
#include "src/comm/cpu/transport.h"

#include "tests/expect.h"

int main(void) {
  char name[64];
  snprintf(name, sizeof name, "/mntrain-test-link-%d", (int)getpid());
  mnt_shm shm;
  if (mnt_shm_open(&shm, name, 2, 0, 4096, 1) != MNT_OK) {
    fprintf(stderr, "SKIP: no shared memory here\n");
    return 77;
  }
  mnt_shm_unlink(&shm);
  mnt_link s = {.kind = MNT_LINK_SHM, .shm = &shm, .fifo = mnt_shm_fifo_of(&shm, 0), .peer_local = 1, .fd = -1};
  mnt_link r = s;
  r.peer_local = 0;
  /* 1) a byte stream through many wraps, in odd-sized pieces */
  unsigned char out[1000], in[1000];
  unsigned next_out = 0, next_in = 0;
  for (int round = 0; round < 200; round++) {
    size_t n = (size_t)(round * 37 % 997) + 1, moved;
    for (size_t i = 0; i < n; i++) out[i] = (unsigned char)(next_out + i);
    size_t sent = 0;
    while (sent < n) {
      EXPECT(mnt_link_send(&s, out + sent, n - sent, &moved) == MNT_OK, "mnt_link_send");
      sent += moved;
      size_t got;
      while (mnt_link_recv_into(&r, in, sizeof in, &got) == MNT_OK && got > 0) {
        for (size_t i = 0; i < got; i++)
          if (in[i] != (unsigned char)(next_in + i) && failures < 5) EXPECT(0, "byte %u", next_in + (unsigned)i);
        next_in += (unsigned)got;
      }
    }
    next_out += (unsigned)n;
  }
  EXPECT(next_in == next_out, "sent %u, received %u", next_out, next_in);
  /* 2) phase shifted by 2 bytes, then floats across the wrap: peek must give whole floats */
  size_t moved, got;
  const void *p;
  unsigned short h = 0x3c00;
  EXPECT(mnt_link_send(&s, &h, 2, &moved) == MNT_OK, "mnt_link_send");
  EXPECT(mnt_link_peek(&r, &p, &got, 2, 2) == MNT_OK, "mnt_link_peek");
  mnt_link_consume(&r, got);
  uint64_t head = atomic_load(&s.fifo->head);
  size_t to_end = 4096 - (size_t)(head & 4095);
  /* fill up to 2 bytes before the end with whole floats plus the 2-byte phase */
  unsigned char fill[4096];
  memset(fill, 0, sizeof fill);
  size_t pad = (to_end + 4096 - 2) % 4096; /* bytes so that the next float starts 2 before the end */
  EXPECT(mnt_link_send(&s, fill, pad, &moved) == MNT_OK, "mnt_link_send");
  EXPECT(mnt_link_peek(&r, &p, &got, pad, 1) == MNT_OK, "mnt_link_peek");
  mnt_link_consume(&r, got);
  EXPECT(moved == pad && got == pad, "padding %zu/%zu/%zu", pad, moved, got);
  float f[2] = {1.5f, -2.25f}, g[2];
  size_t sent = 0;
  while (sent < sizeof f) {
    EXPECT(mnt_link_send(&s, (char *)f + sent, sizeof f - sent, &moved) == MNT_OK, "mnt_link_send");
    sent += moved;
  }
  EXPECT(mnt_link_peek(&r, &p, &got, sizeof f, 4) == MNT_OK, "mnt_link_peek");
  EXPECT(got >= 4, "a float split by the wrap is not readable whole (%zu bytes)", got);
  if (got >= 4) {
    memcpy(g, p, got < sizeof g ? got : sizeof g);
    EXPECT(g[0] == 1.5f, "split float reads %g", (double)g[0]);
  }
  mnt_shm_close(&shm);
  if (failures) return 1;
  printf("test_link: ok\n");
  return 0;
}
