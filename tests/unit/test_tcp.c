/* test_tcp.c — set-up connections on loopback, in one process: a listener that five silent
 * strangers, a half hello and a garbage message connect to first still takes the real peer's hello
 * at once (each connection has its own deadline, served together: before, each silent one cost
 * 10 s, one after another); a hello without the job secret is refused, one with it accepted. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "transport.h"

#include "check.h"

static int stranger(const mnt_tcp_addr *a, const void *say, size_t n) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = a->port, .sin_addr.s_addr = a->ip};
  if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
    if (s >= 0) close(s);
    return -1;
  }
  if (n && send(s, say, n, 0) != (ssize_t)n) {
    close(s);
    return -1;
  }
  return s;
}

int main(void) {
  int lfd;
  mnt_tcp_addr a;
  if (mnt_tcp_listen("lo", &lfd, &a) != MNT_OK) {
    fprintf(stderr, "SKIP: cannot listen on loopback here\n");
    return 77;
  }
  uint8_t secret[MNT_SECRET_BYTES], wrong[MNT_SECRET_BYTES];
  for (int i = 0; i < MNT_SECRET_BYTES; i++) secret[i] = (uint8_t)(i * 37 + 1), wrong[i] = secret[i];
  wrong[3] ^= 4;
  int silent[5], junk_fd, half_fd;
  for (int i = 0; i < 5; i++) EXPECT((silent[i] = stranger(&a, NULL, 0)) >= 0, "silent stranger %d", i);
  mnt_tcp_hello h;
  mnt_tcp_hello_init(&h, secret, 9, 3, 1);
  EXPECT((half_fd = stranger(&a, &h, sizeof h / 2)) >= 0, "a half hello");
  char junk[sizeof(mnt_tcp_hello)];
  memset(junk, 'x', sizeof junk);
  EXPECT((junk_fd = stranger(&a, junk, sizeof junk)) >= 0, "a garbage hello");
  double deadline = mnt_now() + 30;
  int bad_fd = -1, good_fd = -1;
  mnt_tcp_hello_init(&h, wrong, 9, 3, 1);
  EXPECT(mnt_tcp_start_connect(&a, &h, &bad_fd, deadline, 0) == MNT_OK, "connect without the secret");
  mnt_tcp_hello_init(&h, secret, 9, 3, 1);
  EXPECT(mnt_tcp_start_connect(&a, &h, &good_fd, deadline, 0) == MNT_OK, "connect with the secret");

  mnt_tcp_inbox *ib = NULL;
  EXPECT(mnt_tcp_inbox_open(&ib, lfd, sizeof(mnt_tcp_hello), 10.0) == MNT_OK, "inbox");
  double t0 = mnt_now();
  int fd = -1, from = -1, tag = -1;
  int st = ib ? mnt_tcp_accept_auth(ib, secret, 9, deadline, &fd, &from, &tag) : MNT_ESYS;
  double took = mnt_now() - t0;
  EXPECT(st == MNT_OK && from == 3 && tag == 1, "the real peer was not accepted (status %d, rank %d, tag %d)", st, from,
         tag);
  EXPECT(took < 2.0, "seven strangers delayed the real peer by %.1f s", took);
  EXPECT(mnt_tcp_finish_connect(good_fd, deadline, 0) == MNT_OK, "the real peer hears yes");
  /* nothing else carries the secret: the next accept answers the rest and times out at its
   * deadline, not later */
  t0 = mnt_now();
  int fd2, from2, tag2;
  st = ib ? mnt_tcp_accept_auth(ib, secret, 9, mnt_now() + 0.5, &fd2, &from2, &tag2) : MNT_ESYS;
  took = mnt_now() - t0;
  EXPECT(st == MNT_ETIMEOUT && took < 1.5, "an accept with only strangers left: status %d after %.1f s", st, took);
  EXPECT(mnt_tcp_finish_connect(bad_fd, mnt_now() + 2, 0) == MNT_EAUTH, "the peer without the secret hears no");
  if (fd >= 0) close(fd);
  for (int i = 0; i < 5; i++)
    if (silent[i] >= 0) close(silent[i]);
  close(junk_fd);
  close(half_fd);
  close(good_fd);
  close(bad_fd);
  mnt_tcp_inbox_close(ib);
  close(lfd);
  if (failures) {
    fprintf(stderr, "test_tcp: %d failures\n", failures);
    return 1;
  }
  printf("test_tcp: ok (%d checks)\n", checks);
  return 0;
}
