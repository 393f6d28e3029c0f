/* convert.h — the converters behind `mntrain convert` (its command line is src/cmd/convert.c):
 * io/convert/imagenet.c, io/convert/idx.c, io/convert/synth.c, each ending in the shard writer
 * io/convert/shard_write.h (`mntrain inspect` of a dataset: io/data/dataset.h's mnt_inspect).
 * defines: mnt_convert_imagenet and mnt_imagenet_cfg (image class folders, as torchvision's
 *          ImageFolder, or a flat folder + labels), mnt_convert_idx (MNIST / Fashion-MNIST IDX files, gzip or plain),
 *          mnt_convert_synth (a learnable synthetic set at any size) (the commands are
 *          src/cmd/cmd.h's mnt_convert_main / mnt_inspect_main).
 * force: an output directory holding another conversion's files is emptied of them instead of
 * refused. All return an mnt_status. */
#ifndef MNT_CONVERT_H
#define MNT_CONVERT_H

#include <stdint.h>

int mnt_convert_idx(const char *images, const char *labels, const char *out, int nshards, long long seed, int force);
int mnt_convert_synth(const char *out, int classes, int64_t n, int size, int nshards, long long seed, int force);
/* how `convert imagenet` stores images: size > 0: format 2, the centre size × size square, raw;
 * size 0: format 3, the shorter side scaled to resize (never enlarged), the longer side capped at
 * max_side (0: no cap), as torchvision's Resize(resize, max_size=max_side) computes the sizes,
 * coded as codec (MNT_CODEC_RAW, or MNT_CODEC_JPEG at quality 1..100); always 3 channels (RGB) */
typedef struct mnt_imagenet_cfg { int size, resize, max_side, codec, quality; } mnt_imagenet_cfg;
/* SRC/<class>/... images, or (val_labels != NULL) a flat SRC and "FILE WNID" lines */
int mnt_convert_imagenet(const char *src, const char *out, int nshards, const mnt_imagenet_cfg *cfg,
                         const char *val_labels, long long seed, int force);

#endif
