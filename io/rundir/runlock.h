/* runlock.h — one run per directory: DIR/mntrain.lock.
 * defines: mnt_runlock_take, mnt_runlock_take_epoch, mnt_runlock_held, mnt_runlock_set_epoch,
 * mnt_runlock_release, mnt_runlock_abandon.
 *
 * The lock is a file created with O_CREAT|O_EXCL, which is atomic on every filesystem runs use
 * (local disks, NFS v3 and v4, GlusterFS, Lustre), unlike flock/fcntl locks (per client on some
 * NFS and FUSE setups, dropped with the holder's node on others). It holds, as JSON, who holds it:
 * Slurm job id, step id and restart count, host, pid, user, start time, a random token and the
 * membership epoch (shrinks its job step has applied); its modification time is the
 * holder's heartbeat, refreshed by a thread every MNT_LOCK_STALE_S / 10 seconds (at most 30).
 * A lock found in place is the holder's unless it is provably gone:
 *  - the same Slurm job step as ours (job id, step id, restart count): rank 0 of an earlier
 *    membership (a lower epoch) is gone; the same or a later epoch holds it (a group that went on);
 *  - the same Slurm job id as ours: the holder itself (a requeued job keeps its id);
 *  - its Slurm job has ended, or Slurm no longer knows it (scontrol show job, when scontrol is
 *    there and answers within 10 s): gone; a job Slurm says is pending, running, suspended or
 *    completing: held, whatever its heartbeat;
 *  - without an answer from Slurm: a holder on this host whose pid is gone is gone; otherwise a
 *    heartbeat older than MNT_LOCK_STALE_S (default 300 s) is gone.
 * A gone holder's lock is taken over with a warning that says why; a held one is refused
 * (MNT_EARG: exit 2) naming the holder. The takeover renames the old lock aside and checks its
 * token, so that two jobs taking over one stale lock at once cannot both win. */
#ifndef MNT_RUNLOCK_H
#define MNT_RUNLOCK_H

#define MNT_RUNLOCK_FILE "mntrain.lock"

typedef struct mnt_runlock mnt_runlock;

/* Take DIR/mntrain.lock for this process (jobid: the Slurm job id, "" outside Slurm); what names
 * the directory in messages ("--out"). */
int mnt_runlock_take(const char *dir, const char *what, const char *jobid, mnt_runlock **out);
/* The same, by rank 0 of membership epoch `epoch` of this job step (--on-rank-loss shrink: the new
 * rank 0 after rank 0 was lost, with quorum): a lock of this same job step (Slurm job, step id and
 * restart count) is taken over only from an earlier epoch; one of the same or a later epoch is a
 * group that went on without this one: refused (MNT_EARG). */
int mnt_runlock_take_epoch(const char *dir, const char *what, const char *jobid, int epoch, mnt_runlock **out);
/* MNT_OK while the lock file is still this process's (its token); MNT_EFENCED, said, when another
 * took it over: what this rank was about to commit must not be written. */
int mnt_runlock_held(const mnt_runlock *l);
/* Record membership epoch `epoch` in the lock (rank 0 kept it through a shrink). */
int mnt_runlock_set_epoch(mnt_runlock *l, int epoch);
/* Stop the heartbeat and remove the lock (only if it is still ours). NULL: nothing. */
void mnt_runlock_release(mnt_runlock *l);
/* Stop the heartbeat and forget the lock, leaving its file as it is (a fenced rank touches
 * nothing: the group that went on takes it over). NULL: nothing. */
void mnt_runlock_abandon(mnt_runlock *l);

#endif
