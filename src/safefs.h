/* safefs.h — where mntrain writes, kept safe from the other users of a shared filesystem.
 * defines: mnt_dir_secure (a directory mntrain may write into), mnt_dir_usable (the same, asked quietly). The files written in it: src/tmpfile.h
 *          (created under a name nobody can guess, renamed into place; logs never through a link).
 *
 * The rules (io/rundir/README.md "Who may own a run directory"):
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

enum {
  MNT_DIR_RUN = 0,   /* owned by the user */
  MNT_DIR_FILES = 1, /* owned by the user or by root */
};

/* path is, or (create) becomes (mode 0755 minus the umask, parents too), a directory that `kind`
 * allows. `what` names it in errors ("--out", "--ckpt-dir"). MNT_EARG naming path, its owner and
 * mode when it breaks a rule, is not a directory, or cannot be created. */
int mnt_dir_secure(const char *path, const char *what, int create, int kind);
/* 1 when path is a directory that `kind` allows, 0 otherwise; nothing logged (a rank that only may
 * write there, where another rank has already accepted the directory) */
int mnt_dir_usable(const char *path, int kind);
#endif
