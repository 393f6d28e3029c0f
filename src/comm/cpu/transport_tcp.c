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

#include "src/check.h"
#include "src/log.h"
#include "src/sysmem.h"
#include "src/comm/cpu/transport.h"

static const char HELLO_MAGIC[8] = {'M', 'N', 'T', 'R', 'A', 'I', 'N', '1'};
enum { ANSWER_OK = 'Y', ANSWER_REFUSED = 'N' };

static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void mnt_tcp_tune(int fd, size_t buf_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buf_bytes > 0) { /* by default the kernel's autotuning is left alone */
    int b = buf_bytes > (1u << 30) ? 1 << 30 : (int)buf_bytes;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
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
static int pick_address(const char *want, uint32_t *ip) {
  struct ifaddrs *ifs = NULL, *i;
  if (getifaddrs(&ifs) != 0) return MNT_SYSERR("getifaddrs failed");
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

int mnt_tcp_listen(const char *iface, int *fd, mnt_tcp_addr *addr) {
  uint32_t ip = 0;
  MNT_CHECK(pick_address(iface, &ip));
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return MNT_FD_SYSERR("socket", "a listening socket");
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = ip};
  socklen_t len = sizeof sa;
  if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s, 128) != 0 ||
      getsockname(s, (struct sockaddr *)&sa, &len) != 0 || set_nonblock(s) != 0) {
    int err = errno;
    char ips[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, ips, sizeof ips);
    errno = err;
    int st = MNT_SYSERR("listening on %s failed", ips);
    close(s);
    return st;
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

int mnt_tcp_xfer(int fd, void *buf, size_t n, int writing, double deadline) {
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
  char why[360];
  int st = mnt_tcp_dial(to, h, sizeof *h, deadline, fd, why, sizeof why);
  if (st != MNT_OK) {
    char as[64];
    mnt_tcp_addr_str(to, as, sizeof as);
    MNT_ERR("connect to rank %d at %s: %s", peer_rank, as, why);
  }
  return st;
}

int mnt_tcp_finish_connect(int fd, double deadline, int peer_rank) {
  char answer = 0;
  int st = mnt_tcp_xfer(fd, &answer, 1, 0, deadline);
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

int mnt_tcp_dial(const mnt_tcp_addr *to, const void *msg, size_t n, double deadline, int *fd, char *why,
                 size_t why_n) {
  char dummy[8];
  if (!why) why = dummy, why_n = sizeof dummy;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 && mnt_fd_exhausted(errno)) {
    char adv[300];
    mnt_fd_advice(errno, adv, sizeof adv);
    snprintf(why, why_n, "out of file descriptors opening a socket: %s", adv);
    return MNT_ESYS;
  }
  if (s < 0 || set_nonblock(s) != 0) {
    snprintf(why, why_n, "socket failed: %s", strerror(errno));
    if (s >= 0) close(s);
    return MNT_ESYS;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = to->port, .sin_addr.s_addr = to->ip};
  int st = MNT_OK, err = 0;
  socklen_t el = sizeof err;
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS) {
    snprintf(why, why_n, "%s", strerror(errno));
    st = MNT_EPEER;
  } else if ((st = wait_fd(s, POLLOUT, deadline)) != MNT_OK) {
    snprintf(why, why_n, "no answer before the deadline");
  } else if (getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
    snprintf(why, why_n, "%s", strerror(err ? err : errno));
    st = MNT_EPEER;
  } else if ((st = mnt_tcp_xfer(s, (void *)msg, n, 1, deadline)) != MNT_OK) {
    snprintf(why, why_n, "sending the first message failed");
  }
  if (st != MNT_OK) {
    close(s);
    return st;
  }
  *fd = s;
  return MNT_OK;
}

/* ---- the inbox -------------------------------------------------------------------------------- */
typedef struct pending {
  int fd;
  size_t got;
  double deadline;
  char from[48];
  uint8_t buf[128];
} pending;

/* Warnings about strangers (connections refused or dropped) are limited, so that a port scan or
 * another job's stray connections cannot bury the log: the first WARN_FULL are logged in full (who,
 * why); the rest are counted by reason and summed up at most once per WARN_EVERY_S, and when the
 * inbox closes. */
enum { WARN_FULL = 3, WARN_REASONS = 4 };
#define WARN_EVERY_S 30.0
typedef struct quiet {
  long shown, held; /* logged in full; counted since the last summary */
  double since;     /* when the first of those counted came */
  char last[48];    /* where the latest counted one came from */
  struct {
    char why[72];
    long n;
  } r[WARN_REASONS];
  long other; /* counted ones whose reason found no room in r */
} quiet;

struct mnt_tcp_inbox {
  int lfd;
  size_t msg_bytes;
  double per_conn_s;
  pending p[MNT_INBOX_MAX];
  int n;
  quiet q;
  int out_of_fds; /* accept found no descriptor: logged once */
};

int mnt_tcp_inbox_open(mnt_tcp_inbox **ib, int lfd, size_t msg_bytes, double per_conn_s) {
  if (msg_bytes > sizeof((pending *)0)->buf) return MNT_EARG;
  *ib = calloc(1, sizeof **ib);
  if (!*ib) return MNT_ENOMEM;
  **ib = (mnt_tcp_inbox){.lfd = lfd, .msg_bytes = msg_bytes, .per_conn_s = per_conn_s};
  return MNT_OK;
}

/* the summary of what was counted: when WARN_EVERY_S have passed since the first of it, or now */
static void quiet_flush(mnt_tcp_inbox *ib, int now_anyway) {
  quiet *q = &ib->q;
  double now = mnt_now();
  if (!q->held || (!now_anyway && now - q->since < WARN_EVERY_S)) return;
  char reasons[300] = "";
  size_t l = 0;
  for (int i = 0; i < WARN_REASONS && q->r[i].n && l < sizeof reasons; i++) {
    int k = snprintf(reasons + l, sizeof reasons - l, "%s%ld %s", i ? "; " : "", q->r[i].n, q->r[i].why);
    l = k < 0 ? sizeof reasons : l + (size_t)k;
  }
  if (q->other && l < sizeof reasons) snprintf(reasons + l, sizeof reasons - l, "; %ld for other reasons", q->other);
  MNT_WARN("... and %ld more connection%s refused or dropped in the last %.0f s (%s); the latest from %s", q->held,
           q->held > 1 ? "s" : "", now - q->since, reasons, q->last);
  memset(q->r, 0, sizeof q->r);
  q->held = q->other = 0;
}

/* verb: "refused" or "dropped" */
static void warn_stranger(mnt_tcp_inbox *ib, const char *verb, const char *from, const char *why) {
  quiet *q = &ib->q;
  if (q->shown < WARN_FULL) {
    q->shown++;
    MNT_WARN("%s a connection from %s: %s%s", verb, from, why,
             q->shown == WARN_FULL ? " (more such connections are counted, not logged one by one)" : "");
    return;
  }
  if (!q->held++) q->since = mnt_now();
  snprintf(q->last, sizeof q->last, "%s", from);
  char r[72];
  snprintf(r, sizeof r, "%s: %s", verb, why);
  int i = 0;
  while (i < WARN_REASONS && q->r[i].n && strcmp(q->r[i].why, r) != 0) i++;
  if (i == WARN_REASONS) {
    q->other++;
  } else {
    if (!q->r[i].n) snprintf(q->r[i].why, sizeof q->r[i].why, "%s", r);
    q->r[i].n++;
  }
  quiet_flush(ib, 0);
}

static void drop(mnt_tcp_inbox *ib, int i, const char *why) {
  if (why) warn_stranger(ib, "dropped", ib->p[i].from, why);
  close(ib->p[i].fd);
  ib->p[i] = ib->p[--ib->n];
}

int mnt_tcp_inbox_next(mnt_tcp_inbox *ib, double until, int wake_fd, int *fd, void *msg, char *from,
                       size_t from_n) {
  for (;;) {
    double now = mnt_now();
    for (int i = 0; i < ib->n; i++) /* a message complete (read below, or with its connection) */
      if (ib->p[i].got == ib->msg_bytes) {
        pending *q = &ib->p[i];
        *fd = q->fd;
        memcpy(msg, q->buf, ib->msg_bytes);
        if (from) snprintf(from, from_n, "%s", q->from);
        *q = ib->p[--ib->n];
        return MNT_OK;
      }
    for (int i = ib->n - 1; i >= 0; i--)
      if (now > ib->p[i].deadline) drop(ib, i, "no complete message in time");
    quiet_flush(ib, 0);
    if (now >= until) return MNT_ETIMEOUT;
    struct pollfd fds[MNT_INBOX_MAX + 2];
    int nf = 0;
    double next = until;
    fds[nf++] = (struct pollfd){.fd = ib->lfd, .events = POLLIN};
    if (wake_fd >= 0) fds[nf++] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    int first = nf;
    for (int i = 0; i < ib->n; i++) {
      fds[nf++] = (struct pollfd){.fd = ib->p[i].fd, .events = POLLIN};
      if (ib->p[i].deadline < next) next = ib->p[i].deadline;
    }
    int ms = (int)((next - now) * 1000) + 1;
    int r = poll(fds, (nfds_t)nf, ms > 1000 ? 1000 : ms);
    if (r < 0 && errno != EINTR) return MNT_SYSERR("poll failed");
    if (r <= 0) continue;
    if (wake_fd >= 0 && fds[1].revents) return MNT_ETIMEOUT;
    /* messages first (their slots free up), from the back so that drop() keeps indices valid;
     * complete ones are returned at the top of the loop */
    for (int k = nf - 1; k >= first; k--) {
      int i = k - first;
      if (!fds[k].revents) continue;
      pending *q = &ib->p[i];
      ssize_t got = recv(q->fd, q->buf + q->got, ib->msg_bytes - q->got, MSG_DONTWAIT);
      if (got > 0) q->got += (size_t)got;
      else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        drop(ib, i, got == 0 ? "closed before its message was complete" : strerror(errno));
      }
    }
    if (fds[0].revents) { /* new connections: each gets its own deadline */
      for (;;) {
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        int s = accept4(ib->lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s < 0 && (errno == EINTR || errno == ECONNABORTED)) continue;
        if (s < 0 && mnt_fd_exhausted(errno)) {
          /* the connection stays queued and the listener readable: waiting would spin, so the
           * caller hears it (once in the log) */
          if (!ib->out_of_fds) {
            ib->out_of_fds = 1;
            char why[300];
            mnt_fd_advice(errno, why, sizeof why);
            MNT_ERR("out of file descriptors accepting a connection: %s", why);
          }
          return MNT_ESYS;
        }
        if (s < 0) break;
        char ip[INET_ADDRSTRLEN], who[48];
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        snprintf(who, sizeof who, "%s:%u", ip, (unsigned)ntohs(sa.sin_port));
        if (ib->n == MNT_INBOX_MAX) { /* full: the oldest that has sent the least goes, not the newcomer
                                      * (a flood of silent connections must not lock a peer out) */
          int v = 0;
          for (int i = 1; i < ib->n; i++)
            if (ib->p[i].got < ib->p[v].got || (ib->p[i].got == ib->p[v].got && ib->p[i].deadline < ib->p[v].deadline))
              v = i;
          char why[96];
          snprintf(why, sizeof why, "%s while %d others waited (the oldest goes)",
                   ib->p[v].got ? "an incomplete message" : "silent", MNT_INBOX_MAX);
          drop(ib, v, why);
        }
        pending *q = &ib->p[ib->n++];
        *q = (pending){.fd = s, .deadline = mnt_now() + ib->per_conn_s};
        snprintf(q->from, sizeof q->from, "%s", who);
        /* what came with the connection, read now: a peer's message outranks the silent ones when
         * the inbox is full, even within one batch of connections */
        ssize_t got = recv(s, q->buf, ib->msg_bytes, MSG_DONTWAIT);
        if (got > 0) q->got = (size_t)got;
      }
    }
  }
}

void mnt_tcp_inbox_close(mnt_tcp_inbox *ib) {
  if (!ib) return;
  quiet_flush(ib, 1);
  for (int i = 0; i < ib->n; i++) close(ib->p[i].fd);
  free(ib);
}

int mnt_tcp_accept_auth(mnt_tcp_inbox *ib, const uint8_t *secret, uint32_t comm_id, double deadline,
                        int *fd_out, int *from_rank, int *tag) {
  for (;;) {
    mnt_tcp_hello h;
    char from[48];
    int s;
    MNT_CHECK(mnt_tcp_inbox_next(ib, deadline, -1, &s, &h, from, sizeof from));
    int good = memcmp(h.magic, HELLO_MAGIC, sizeof h.magic) == 0 &&
               memcmp(h.secret, secret, MNT_SECRET_BYTES) == 0 && h.comm_id == comm_id;
    char answer = good ? ANSWER_OK : ANSWER_REFUSED;
    double t = mnt_now() + 1.0; /* one byte into an empty socket buffer: immediate */
    int st = mnt_tcp_xfer(s, &answer, 1, 1, t < deadline ? t : deadline);
    if (!good || st != MNT_OK) {
      warn_stranger(ib, "refused", from, good ? "it went away before our answer" : "it does not carry this job's secret");
      close(s);
      continue;
    }
    *fd_out = s;
    *from_rank = h.from_rank;
    *tag = h.tag;
    return MNT_OK;
  }
}

int mnt_tcp_hello_ok(const mnt_tcp_hello *h, const uint8_t *secret) {
  return memcmp(h->magic, HELLO_MAGIC, sizeof h->magic) == 0 && memcmp(h->secret, secret, MNT_SECRET_BYTES) == 0;
}

int mnt_tcp_answer(int fd, int ok, double deadline) {
  char answer = ok ? ANSWER_OK : ANSWER_REFUSED;
  return mnt_tcp_xfer(fd, &answer, 1, 1, deadline);
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
