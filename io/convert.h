/* convert.h — `mntrain convert` and `mntrain inspect`.
 * defines: mnt_convert_imagenet (JPEG class folders or a flat folder + labels),
 *          mnt_convert_idx (MNIST / Fashion-MNIST IDX files, gzip or plain),
 *          mnt_convert_synth (a learnable synthetic set at any size), mnt_inspect,
 *          mnt_convert_main / mnt_inspect_main (the subcommands; return exit codes). */
#ifndef MNT_CONVERT_H
#define MNT_CONVERT_H

#include <stdint.h>

int mnt_convert_idx(const char *images, const char *labels, const char *out, int nshards, long long seed);
int mnt_convert_synth(const char *out, int classes, int64_t n, int size, int nshards, long long seed);
/* SRC/<wnid>/ of JPEGs, or (val_labels != NULL) a flat SRC of JPEGs and "FILE WNID" lines */
int mnt_convert_imagenet(const char *src, const char *out, int nshards, int size, const char *val_labels,
                         long long seed);
int mnt_inspect(const char *path, int verify);
int mnt_convert_main(int argc, char **argv);
int mnt_inspect_main(int argc, char **argv);

#endif
