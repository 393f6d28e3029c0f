/* sysmem.h — how much memory and how many open files this process may use, and refusing runs
 * that cannot fit.
 * defines: mnt_mem_limit (the tightest of: the memory cgroup's limit, MemAvailable, Slurm's
 *          SLURM_MEM_PER_NODE / SLURM_MEM_PER_CPU, RLIMIT_AS; shared limits divided among the
 *          ranks of the node), mnt_mem_check (refuse with the estimate and the limit),
 *          mnt_format_bytes;
 *          file descriptors: mnt_fd_raise_limit (soft RLIMIT_NOFILE up to the hard one, at start),
 *          mnt_fd_exhausted (EMFILE/ENFILE), mnt_fd_probe (was that why opening a path failed?),
 *          mnt_fd_advice (the limit and what to do, for an error), MNT_FD_SYSERR (a failed call
 *          that makes a descriptor, logged), mnt_fd_check (refuse up front what cannot fit). Every
 *          such error starts "out of file descriptors". */
#ifndef MNT_SYSMEM_H
#define MNT_SYSMEM_H

#include <stddef.h>

/* Bytes this rank may use when `sharing` ranks share the node (>= 1), and what sets it
 * ("MemAvailable 23.1 GiB / 4 ranks"). Sources that do not exist here are skipped. */
void mnt_mem_limit(int sharing, size_t *bytes, char *why, size_t why_n);
/* MNT_OK when need fits the limit; otherwise MNT_EARG and an error that says what needs how much
 * (what: "resnet50, 224 px, batch 4096 per rank") against which limit. */
int mnt_mem_check(size_t need, const char *what, int sharing);
/* resident bytes of this process now (/proc/self/statm; 0 when unknown): what the libraries it
 * was linked with occupy before any work (about 24 MiB with oneDNN; 150 MiB more in a build
 * with the CUDA backend, whose cuBLAS brings large static data) */
size_t mnt_rss_bytes(void);
/* 1536 -> "1.5 KiB", binary units */
void mnt_format_bytes(double v, char *out, size_t n);

/* Raise the soft limit on open files to the hard one (at most MNT_FD_RAISE_MAX), as Go's runtime
 * does at start: a dataset keeps every shard open, and a soft limit of 1024 under a hard one of
 * 4096 or more is common. A hard limit (ulimit -Hn) is left alone: that is the administrator's. */
#define MNT_FD_RAISE_MAX 65536
void mnt_fd_raise_limit(void);
/* err is EMFILE (this process's limit) or ENFILE (the system's table) */
int mnt_fd_exhausted(int err);
/* After opening path failed somewhere out of sight (HDF5, jansson): EMFILE or ENFILE when opening
 * it (NULL: "/") fails now for want of a descriptor, else 0 (the failure was something else). */
int mnt_fd_probe(const char *path);
/* What to tell the user after err (EMFILE/ENFILE): the limit, how many are open, how to raise it
 * ("this process may open 20 files (ulimit -n 20; the hard limit ulimit -Hn is 20 too) and all
 * are in use: raise both ..."). Log it as MNT_ERR("out of file descriptors opening %s: %s", ...). */
void mnt_fd_advice(int err, char *out, size_t n);
/* after opening path failed out of sight: 1 (logged, "out of file descriptors opening PATH: <advice>HINT")
 * when it was for want of a descriptor, else 0 (nothing logged) */
int mnt_fd_short(const char *path, const char *hint);
/* After a call that makes a descriptor failed (errno set): "out of file descriptors opening
 * OPENING: <advice>" for EMFILE/ENFILE (MNT_ESYS), else check.h's MNT_SYSERR "CALL failed: <why>";
 * logged at the caller's file:line, errno kept, the status returned. */
#define MNT_FD_SYSERR(call, opening) mnt_fd_syserr_at(__FILE__, __LINE__, call, opening)
int mnt_fd_syserr_at(const char *file, int line, const char *call, const char *opening);
/* MNT_OK when `need` more descriptors fit under the soft limit beside those open now (or when
 * that cannot be told); otherwise MNT_EARG and an error "out of file descriptors <what>: ..." with
 * the numbers; hint (may be NULL) is a further way out ("convert the data into fewer shards"). */
int mnt_fd_check(int need, const char *what, const char *hint);

#endif
