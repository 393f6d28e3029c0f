/* sysmem.h — how much memory this process may use, and refusing runs that cannot fit.
 * defines: mnt_mem_limit (the tightest of: the memory cgroup's limit, MemAvailable, Slurm's
 *          SLURM_MEM_PER_NODE / SLURM_MEM_PER_CPU, RLIMIT_AS; shared limits divided among the
 *          ranks of the node), mnt_mem_check (refuse with the estimate and the limit),
 *          mnt_format_bytes. */
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

#endif
