/* safefs.h — where mntrain writes, kept safe from the other users of a shared filesystem.
 * defines: mnt_dir_secure (a directory mntrain may write into), mnt_tmp_create / mnt_tmp_commit (a
 *          file created under a name nobody can guess, renamed into place), mnt_open_log (a log
 *          file opened without following a symbolic link).
 *
 * The rules (README "Who may own a run directory"):
 *  - a directory that holds a run or a dataset (train --out and --ckpt-dir, convert's output) is
 *    owned by the user mntrain runs as, and nobody else may write to it, unless its sticky bit is
 *    set; the directory of a single output file (--export, report's outputs) may also be root's
 *    (/tmp: nobody can replace a file there that is not theirs). One that breaks a rule is refused
 *    (MNT_EARG: exit 2), naming it, its owner and its mode: it is never "fixed" or used anyway;
 *  - a symbolic link as the directory's last component must be the user's or root's (another
 *    user's link would choose where the files go);
 *  - files are created O_CREAT|O_EXCL (never through a symbolic link, never an existing file) as
 *    DIR/.NAME.XXXXXX, written, fsynced and renamed over DIR/NAME (a rename replaces a symbolic
 *    link, it does not follow it).
 * With the directory safe, nobody but the user can put a file or a link in it between a check and
 * a use; the exclusive creation is the second wall. */
#ifndef MNT_SAFEFS_H
#define MNT_SAFEFS_H

#include <stddef.h>
#include <stdio.h>

enum {
  MNT_DIR_RUN = 0,   /* owned by the user */
  MNT_DIR_FILES = 1, /* owned by the user or by root */
};

/* path is, or (create) becomes (mode 0755 minus the umask, parents too), a directory that `kind`
 * allows. `what` names it in errors ("--out", "--ckpt-dir"). MNT_EARG naming path, its owner and
 * mode when it breaks a rule, is not a directory, or cannot be created. */
int mnt_dir_secure(const char *path, const char *what, int create, int kind);
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
