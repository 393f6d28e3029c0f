/* transport_tcp.c — TCP between nodes: listeners on the job's own address, non-blocking
 * connects with a hello that carries the job secret, authenticated accepts; see transport.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "transport.h"

static const char HELLO_MAGIC[8] = {'M', 'N', 'T', 'R', 'A', 'I', 'N', '1'};
enum { ANSWER_OK = 'Y', ANSWER_REFUSED = 'N' };

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void mnt_tcp_tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *e = getenv("MNT_TCP_BUF");
  if (e) { /* bytes; by default the kernel's autotuning is left alone */
    int b = atoi(e);
    if (b > 0) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
    }
  }
}

void mnt_tcp_addr_str(const mnt_tcp_addr *a, char *out, size_t n) {
  char ip[INET_ADDRSTRLEN];
  struct in_addr in = {.s_addr = a->ip};
  inet_ntop(AF_INET, &in, ip, sizeof ip);
  snprintf(out, n, "%s:%u", ip, (unsigned)ntohs(a->port));
}

/* This node's address: MNT_COMM_IFACE (an interface name or prefix, e.g. "ib" or "eth0"),
 * else the first IPv4 interface that is up and not loopback, else 127.0.0.1. */
static int pick_address(uint32_t *ip) {
  const char *want = getenv("MNT_COMM_IFACE");
  struct ifaddrs *ifs = NULL, *i;
  if (getifaddrs(&ifs) != 0) {
    MNT_ERR("getifaddrs failed: %s", strerror(errno));
    return MNT_ESYS;
  }
  int found = 0;
  for (i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    int lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (want ? strncmp(i->ifa_name, want, strlen(want)) != 0 : lo) continue;
    *ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
    found = 1;
  }
  freeifaddrs(ifs);
  if (!found) {
    if (want) {
      MNT_ERR("MNT_COMM_IFACE=%s: no IPv4 interface of that name is up on this node", want);
      return MNT_EARG;
    }
    *ip = htonl(INADDR_LOOPBACK);
  }
  return MNT_OK;
}

int mnt_tcp_listen(int *fd, mnt_tcp_addr *addr) {
  uint32_t ip;
  MNT_CHECK(pick_address(&ip));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    MNT_ERR("socket failed: %s", strerror(errno));
    return MNT_ESYS;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = ip};
  socklen_t len = sizeof sa;
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s, 128) != 0 ||
      getsockname(s, (struct sockaddr *)&sa, &len) != 0 || set_nonblock(s) != 0) {
    char ips[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, ips, sizeof ips);
    MNT_ERR("listening on %s failed: %s", ips, strerror(errno));
    close(s);
    return MNT_ESYS;
  }
  addr->ip = sa.sin_addr.s_addr;
  addr->port = sa.sin_port;
  addr->pad = 0;
  *fd = s;
  return MNT_OK;
}

/* Wait until fd is ready for events or the deadline passes. */
static int wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - mnt_now();
    if (left <= 0) return MNT_ETIMEOUT;
    struct pollfd p = {.fd = fd, .events = events};
    int ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
    int r = poll(&p, 1, ms);
    if (r > 0) return MNT_OK;
    if (r < 0 && errno != EINTR) return MNT_ESYS;
  }
}

/* Write or read exactly n bytes of a small message before the deadline. */
static int xfer_all(int fd, void *buf, size_t n, int writing, double deadline) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = writing ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                        : recv(fd, (char *)buf + done, n - done, 0);
    if (r > 0) {
      done += (size_t)r;
      continue;
    }
    if (r == 0) return MNT_EPEER;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return MNT_EPEER;
    MNT_CHECK(wait_fd(fd, writing ? POLLOUT : POLLIN, deadline));
  }
  return MNT_OK;
}

int mnt_tcp_start_connect(const mnt_tcp_addr *to, const mnt_tcp_hello *h, int *fd, double deadline,
                          int peer_rank) {
  char as[64];
  mnt_tcp_addr_str(to, as, sizeof as);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || set_nonblock(s) != 0) {
    MNT_ERR("socket failed: %s", strerror(errno));
    if (s >= 0) close(s);
    return MNT_ESYS;
  }
  mnt_tcp_tune(s);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = to->port, .sin_addr.s_addr = to->ip};
  int st = MNT_OK;
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
    MNT_ERR("connect to rank %d at %s failed: %s", peer_rank, as, strerror(errno));
    st = MNT_EPEER;
    goto done;
  }
  if ((st = wait_fd(s, POLLOUT, deadline)) != MNT_OK) {
    MNT_ERR("connect to rank %d at %s: no answer before the deadline", peer_rank, as);
    goto done;
  }
  int err = 0;
  socklen_t el = sizeof err;
  getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err) {
    MNT_ERR("connect to rank %d at %s failed: %s", peer_rank, as, strerror(err));
    st = MNT_EPEER;
    goto done;
  }
  if ((st = xfer_all(s, (void *)h, sizeof *h, 1, deadline)) != MNT_OK) {
    MNT_ERR("sending hello to rank %d at %s failed", peer_rank, as);
    goto done;
  }
  *fd = s;
  return MNT_OK;
done:
  close(s);
  return st;
}

int mnt_tcp_finish_connect(int fd, double deadline, int peer_rank) {
  char answer = 0;
  int st = xfer_all(fd, &answer, 1, 0, deadline);
  if (st != MNT_OK) {
    MNT_ERR("rank %d did not answer our hello (%s)", peer_rank, mnt_status_str(st));
    return st == MNT_ETIMEOUT ? st : MNT_EPEER;
  }
  if (answer != ANSWER_OK) {
    MNT_ERR("rank %d refused our connection (job secret mismatch)", peer_rank);
    return MNT_EAUTH;
  }
  return MNT_OK;
}

int mnt_tcp_accept_auth(int lfd, const uint8_t *secret, uint32_t comm_id, double deadline,
                        int *fd_out, int *from_rank, int *tag) {
  struct sockaddr_in sa;
  socklen_t len = sizeof sa;
  int s;
  for (;;) {
    s = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (s >= 0) break;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      MNT_ERR("accept failed: %s", strerror(errno));
      return MNT_ESYS;
    }
    int st = wait_fd(lfd, POLLIN, deadline);
    if (st != MNT_OK) return st;
  }
  char from[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &sa.sin_addr, from, sizeof from);
  mnt_tcp_hello h;
  /* A peer gets a few seconds to say hello, so a silent connection cannot stall set-up. */
  double hello_deadline = mnt_now() + 10.0 < deadline ? mnt_now() + 10.0 : deadline;
  int st = xfer_all(s, &h, sizeof h, 0, hello_deadline);
  int good = st == MNT_OK && memcmp(h.magic, HELLO_MAGIC, sizeof h.magic) == 0 &&
             memcmp(h.secret, secret, MNT_SECRET_BYTES) == 0 && h.comm_id == comm_id;
  char answer = good ? ANSWER_OK : ANSWER_REFUSED;
  if (st == MNT_OK) xfer_all(s, &answer, 1, 1, hello_deadline);
  if (!good) {
    MNT_WARN("refused a connection from %s:%u: %s", from, (unsigned)ntohs(sa.sin_port),
             st != MNT_OK ? "no complete hello" : "it does not carry this job's secret");
    close(s);
    return MNT_EAUTH;
  }
  mnt_tcp_tune(s);
  *fd_out = s;
  *from_rank = h.from_rank;
  *tag = h.tag;
  return MNT_OK;
}

void mnt_tcp_hello_init(mnt_tcp_hello *h, const uint8_t *secret, uint32_t comm_id, int from_rank,
                        int tag) {
  memset(h, 0, sizeof *h);
  memcpy(h->magic, HELLO_MAGIC, sizeof h->magic);
  memcpy(h->secret, secret, MNT_SECRET_BYTES);
  h->comm_id = comm_id;
  h->from_rank = from_rank;
  h->tag = tag;
}
