/* env.h — the environment variables mntrain reads: one table, one parser, one behaviour.
 * defines: mnt_env_check (every variable at once; main calls it before anything else),
 *          mnt_env_seconds, mnt_env_bytes, mnt_env_string, mnt_env_log_level (one variable each),
 *          mnt_env_print_help (the documented list, as `mntrain --help` shows it).
 * A variable that is set to a value outside its type or range is an error that names it
 * (MNT_EARG), never a silent fallback to the default; unset or empty means the default. */
#ifndef MNT_ENV_H
#define MNT_ENV_H

#include <stddef.h>
#include <stdio.h>

/* Parse every variable of the table; log each bad one. MNT_OK or MNT_EARG. */
int mnt_env_check(void);
/* Seconds (a positive decimal number): MNT_COMM_TIMEOUT, MNT_PROGRESS_INTERVAL, MNT_LOCK_STALE_S. */
int mnt_env_seconds(const char *name, double *out);
/* Bytes ("4096", "4M"): MNT_SHM_FIFO_BYTES, MNT_TCP_BUF. */
int mnt_env_bytes(const char *name, size_t *out);
/* The value, or NULL when unset or empty: MNT_COMM_IFACE, MNT_CUDA_MODULE, MNT_SIMD. */
const char *mnt_env_string(const char *name);
/* MNT_LOG_LEVEL as MNT_LOG_ERROR .. MNT_LOG_DEBUG; silent (the logger cannot log its own
 * configuration error: mnt_env_check reports it). */
int mnt_env_log_level(int *level);
void mnt_env_print_help(FILE *f);

#endif
