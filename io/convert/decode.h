/* decode.h — one image file as `mntrain convert imagenet` stores it (io/convert/decode.c; only the
 * converter includes it).
 * defines: mnt_fit (what an image becomes), mnt_rec_slot (a format 3 record ready for the writer),
 *          mnt_decode_square (format 2), mnt_decode_record (format 3). Both return 0, or -1 with
 *          why (n bytes) saying what was wrong with the file (it is then skipped, named). */
#ifndef MNT_DECODE_H
#define MNT_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include <turbojpeg.h>

/* what an image becomes: format 2 (records 0) the centre S×S; format 3 its whole at shorter side S
 * (never enlarged), longer side at most L (0: no cap), coded as codec at quality; and the memory its
 * decoding may take (MNT_DECODE_MAX_BYTES) */
typedef struct mnt_fit { int records, S, L, codec, quality; size_t max_bytes; } mnt_fit;

/* a format 3 image ready for the writer: its record and what mnt_convert_record says of it */
typedef struct mnt_rec_slot { uint8_t *data; size_t len; int w, h; double sum[3], sum2[3]; } mnt_rec_slot;

/* format 2: decode, resize the shorter side to f->S, keep the centre S×S, RGB, into out (S*S*3) */
int mnt_decode_square(tjhandle tj, const char *path, const mnt_fit *f, uint8_t *out, char *why, size_t n);
/* format 3: decode, size as torchvision's Resize(S, max_size=L) without enlarging, then the record
 * (the pixels, or their JPEG at f->quality, 4:4:4) into *r, with its pixel sums */
int mnt_decode_record(tjhandle tjd, tjhandle tjc, const char *path, const mnt_fit *f, mnt_rec_slot *r, char *why,
                      size_t n);

#endif
