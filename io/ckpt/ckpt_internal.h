/* ckpt_internal.h — what the checkpoint's own files share (io/ckpt/ckpt_write.c, ckpt_layout.c,
 * ckpt_read.c, ckpt_retain.c); nothing else includes it. The public API is io/ckpt/ckpt.h.
 * defines: MNT_CKPT_PIECE, mnt_ckpt_extent, mnt_ckpt_cmp_extent, mnt_ckpt_pread_all,
 *          mnt_ckpt_open_retry, mnt_ckpt_read_one (ckpt_read.c);
 *          mnt_ckpt_stepdir, mnt_ckpt_list_steps, mnt_ckpt_load_manifest, mnt_ckpt_remove_step_dir,
 *          mnt_ckpt_retain (ckpt_retain.c). */
#ifndef MNT_CKPT_INTERNAL_H
#define MNT_CKPT_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/ckpt/ckpt.h"

#define MNT_CKPT_PIECE (8u << 20) /* bytes per pwrite / pread call */

/* one dataset's bytes in the file, and where they are in the packed image */
typedef struct mnt_ckpt_extent { uint64_t off, bytes, packed; int t; } mnt_ckpt_extent;

/* qsort order of extents: by offset in the file */
int mnt_ckpt_cmp_extent(const void *a, const void *b);
/* len bytes at off into dst, in MNT_CKPT_PIECE reads: 0, or -1 (errno set; 0 at the end of the file) */
int mnt_ckpt_pread_all(int fd, uint8_t *dst, uint64_t off, uint64_t len);
/* open (O_CLOEXEC, mode 0644), retrying briefly: on a network filesystem a directory another node
 * just created may not be visible at once (GlusterFS: ENOENT/ESTALE for a moment) */
int mnt_ckpt_open_retry(const char *path, int flags);
/* Read and check the checkpoint in dir (manifest m) into out: MNT_EDATA with why on a failed check
 * (nothing logged), MNT_ENOMEM, or the failure of a path too long (logged). */
int mnt_ckpt_read_one(const char *dir, json_t *m, int verify, mnt_ckpt *out, char *why, size_t wn);

/* a step-N directory of a checkpoint root (name: its entry in the root) */
typedef struct mnt_ckpt_stepdir {
  int64_t step;
  int link; /* a symbolic link: never followed (not a checkpoint; a removal unlinks the link) */
  char name[64];
} mnt_ckpt_stepdir;

/* the step-* directories of root, newest first (*out: malloc'ed, NULL when none). MNT_OK (none when
 * root does not exist), or MNT_ESYS with errno set when it cannot be listed (nothing logged). */
int mnt_ckpt_list_steps(const char *root, mnt_ckpt_stepdir **out, int *n);
/* the manifest of dir, if it parses as one of ours (NULL otherwise; why says what is wrong).
 * *present: dir has a MANIFEST.json at all (one that is there and fails is a damaged checkpoint:
 * the commit writes the manifest before the directory gets its step-N name, and a removal deletes
 * it first; none at all is an unfinished write). */
json_t *mnt_ckpt_load_manifest(const char *dir, int *present, char *why, size_t n);
/* Remove a checkpoint directory, its manifest first, following nothing (logged on failure). */
int mnt_ckpt_remove_step_dir(const char *dir);
/* rank 0, after a commit: keep the newest `keep` checkpoints of root up to step `upto`. */
void mnt_ckpt_retain(const char *root, int keep, int64_t upto);

#endif
