/* watchdog.h — who holds a collective up (internal to the CPU communicator).
 * defines: mnt_watchdog, mnt_watchdog_start / stop, mnt_watchdog_waiting, mnt_watchdog_blame.
 * Every rank answers its peers, from a thread of its own, what its communicator waits for: which
 * rank, for how long, in which collective. A rank that has waited long asks its way along the
 * chain of waits to the rank that stopped making progress: the first one that does not answer
 * (stopped, hung in the kernel, or gone) or that answers but is not waiting in the collective
 * (busy elsewhere). In a ring every rank waits for a neighbour, so without this the rank that gives
 * up first names its neighbour, not the rank that stopped. Requests carry the job secret. */
#ifndef MNT_WATCHDOG_H
#define MNT_WATCHDOG_H

#include <stddef.h>
#include <stdint.h>

#include "src/comm/cpu/transport.h"
#include "src/world.h"

typedef struct mnt_watchdog mnt_watchdog;

/* listen (on iface's address) and describe it in *addr; the thread starts with mnt_watchdog_run */
int mnt_watchdog_start(mnt_watchdog **out, mnt_world *w, const char *iface, const uint8_t *secret, uint32_t comm_id,
                       mnt_tcp_addr *addr);
/* answer requests from now on; addr_of(ctx, r, &a) gives rank r's watchdog address when this rank
 * has to ask it (looked up then, not held for every rank) */
int mnt_watchdog_run(mnt_watchdog *wd, int (*addr_of)(void *ctx, int rank, mnt_tcp_addr *addr), void *ctx);
/* messages that are not the watchdog's own questions go to on_msg(ctx of mnt_watchdog_run, hello, fd):
 * it returns 1 when it took the connection (fd is then its own), 0 to have it closed */
void mnt_watchdog_on_msg(mnt_watchdog *wd, int (*on_msg)(void *ctx, const mnt_tcp_hello *h, int fd));
/* this rank now waits for rank peer, without progress since `since` (mnt_now), in `what`;
 * peer -1: it is not waiting */
void mnt_watchdog_waiting(mnt_watchdog *wd, int peer, double since, const char *what);
/* follow the chain of waits from peer; out: a sentence that names the rank holding everyone up
 * (first) and the chain. Returns that rank, or -1 when the chain is a cycle or cannot be followed. */
int mnt_watchdog_blame(mnt_watchdog *wd, int peer, double probe_s, char *out, size_t n);
void mnt_watchdog_stop(mnt_watchdog *wd);

#endif
