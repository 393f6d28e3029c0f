/* tmpfile.h — files written whole and put in place at once, and logs opened without following a link:
 * what every file mntrain writes goes through (JSON, --export, the report's CSV and SVG, checkpoint
 * manifests, a resumed run's metrics.jsonl). The directory they go into is made safe first
 * (src/safefs.h: only the user can write in it).
 * defines: mnt_tmp_create / mnt_tmp_commit (a file descriptor), mnt_tmp_fopen / mnt_tmp_fcommit (the
 *          same as a stdio stream), mnt_open_log. */
#ifndef MNT_TMPFILE_H
#define MNT_TMPFILE_H

#include <stddef.h>
#include <stdio.h>

/* A new file beside path, DIR/.BASE.XXXXXX, created exclusively with mode 0644 minus the umask;
 * its name in tmp. Returns the descriptor (O_CLOEXEC), or -1 with the error logged. */
int mnt_tmp_create(const char *path, char *tmp, size_t n);
/* rename tmp over path (tmp is removed when that fails); MNT_ESYS naming both on failure */
int mnt_tmp_commit(const char *tmp, const char *path);
/* The same as a stdio stream: mnt_tmp_fopen gives a FILE on a new DIR/.BASE.XXXXXX (its name in
 * tmp; NULL logged); mnt_tmp_fcommit flushes, fsyncs and closes it, then renames tmp over path when
 * every write succeeded (tmp removed otherwise; MNT_ESYS logged). Every file mntrain writes whole
 * (JSON, --export, the report's CSV and SVG, a resumed run's metrics.jsonl) goes through
 * mnt_tmp_create or mnt_tmp_fopen, then mnt_tmp_commit: on disk before it is in place. */
FILE *mnt_tmp_fopen(const char *path, char *tmp, size_t n);
int mnt_tmp_fcommit(FILE *f, const char *tmp, const char *path);
/* A log file (metrics.jsonl, a sample log): created or truncated (append = 0) or appended to,
 * never through a symbolic link (O_NOFOLLOW). NULL with errno set when it cannot be opened. */
FILE *mnt_open_log(const char *path, int append);

#endif
