/* jpegcrop.c — see jpegcrop.h. libjpeg reports errors through error_exit, which must not return:
 * ours longjmps back into the decode that called libjpeg (setjmp there), which resets the decoder
 * with jpeg_abort_decompress and returns MNT_EDATA. Warnings (corrupt entropy data, a truncated
 * stream: libjpeg would go on with made-up pixels) take the same way. */
#include "io/data/jpegcrop.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "src/check.h"
#include "src/log.h"

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
} err_mgr;

struct mnt_jpegcrop {
  struct jpeg_decompress_struct ci;
  err_mgr err;
  uint8_t *buf;
  size_t cap;
};

static void on_error(j_common_ptr ci) {
  err_mgr *e = (err_mgr *)(void *)ci->err;
  e->pub.format_message(ci, e->msg);
  longjmp(e->jb, 1);
}

/* level -1: a warning (corrupt data libjpeg would decode around): an error here; trace levels: ignored */
static void on_message(j_common_ptr ci, int level) {
  if (level < 0) on_error(ci);
}

static void on_output(j_common_ptr ci) { (void)ci; } /* libjpeg prints nothing */

int mnt_jpegcrop_create(mnt_jpegcrop **out) {
  *out = NULL;
  mnt_jpegcrop *j = calloc(1, sizeof *j);
  if (!j) return MNT_SYSERR("jpegcrop: a decoder");
  j->ci.err = jpeg_std_error(&j->err.pub);
  j->err.pub.error_exit = on_error;
  j->err.pub.emit_message = on_message;
  j->err.pub.output_message = on_output;
  if (setjmp(j->err.jb)) { /* libjpeg's own allocation failed */
    MNT_ERR("jpegcrop: cannot create a libjpeg decoder: %s", j->err.msg);
    free(j);
    return MNT_ENOMEM;
  }
  jpeg_create_decompress(&j->ci);
  *out = j;
  return MNT_OK;
}

void mnt_jpegcrop_destroy(mnt_jpegcrop *j) {
  if (!j) return;
  jpeg_destroy_decompress(&j->ci);
  free(j->buf);
  free(j);
}

int mnt_jpeg_scale_for(const float box[MNT_BOX_FLOATS], int out) {
  double side = fmin(box[2], box[3]);
  for (int m = 1; m < 8; m *= 2)
    if (side * m >= 8.0 * out) return m;
  return 8;
}

/* the pixels p0..p1 (inclusive) along one axis of an n-pixel image that resampling the span
 * [b0, b0 + bw) to `out` samples reads (bilinear, half-pixel centres), `spare` more each way */
static void span(double b0, double bw, int out, int n, int spare, int *p0, int *p1) {
  double s = bw / out, lo = b0 + 0.5 * s - 0.5, hi = b0 + (out - 0.5) * s - 0.5;
  double a = floor(lo) - spare, b = floor(hi) + 1 + spare;
  *p0 = a < 0 ? 0 : a > n - 1 ? n - 1 : (int)a;
  *p1 = b < *p0 ? *p0 : b > n - 1 ? n - 1 : (int)b;
}

/* rows y .. y + h - 1 of the started decompression into buf (rows `stride` apart): skip to y,
 * read h rows (libjpeg errors longjmp out of here) */
static int read_rows(struct jpeg_decompress_struct *ci, uint8_t *buf, size_t stride, int y, int h) {
  if (y > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)y) != (JDIMENSION)y) return MNT_EDATA;
  JSAMPROW rows[16];
  while ((int)ci->output_scanline < y + h) {
    int at = (int)ci->output_scanline - y, n = y + h - (int)ci->output_scanline;
    n = n > 16 ? 16 : n;
    for (int i = 0; i < n; i++) rows[i] = buf + (size_t)(at + i) * stride;
    if (jpeg_read_scanlines(ci, rows, (JDIMENSION)n) == 0) return MNT_EDATA; /* no data: cannot happen in memory */
  }
  return MNT_OK;
}

int mnt_jpegcrop_decode(mnt_jpegcrop *j, const uint8_t *data, size_t len, int W, int H, const float box[MNT_BOX_FLOATS],
                        int out, int scale, const char *what, int64_t index, mnt_jpeg_region *r) {
  struct jpeg_decompress_struct *ci = &j->ci;
  if (out < 1 || !(box[2] > 0) || !(box[3] > 0) || scale < 0 || scale > 8) {
    MNT_ERR("jpegcrop: %s: sample %lld: box %gx%g to %d pixels", what, (long long)index, (double)box[2],
            (double)box[3], out);
    return MNT_EARG;
  }
  int st = MNT_OK;
  if (setjmp(j->err.jb)) {
    jpeg_abort_decompress(ci);
    MNT_ERR("%s: sample %lld: corrupt JPEG record: %s", what, (long long)index, j->err.msg);
    return MNT_EDATA;
  }
  jpeg_mem_src(ci, data, (unsigned long)len);
  jpeg_read_header(ci, TRUE);
  if ((int)ci->image_width != W || (int)ci->image_height != H) {
    snprintf(j->err.msg, sizeof j->err.msg, "a %ux%u image where the index says %dx%d", ci->image_width,
             ci->image_height, W, H);
    longjmp(j->err.jb, 1);
  }
  int m = scale ? scale : mnt_jpeg_scale_for(box, out);
  ci->scale_num = (unsigned)m;
  ci->scale_denom = 8;
  ci->out_color_space = JCS_RGB;
  ci->dct_method = JDCT_ISLOW;
  jpeg_start_decompress(ci);
  double k = m / 8.0, bx = box[0] * k, by = box[1] * k, bw = box[2] * k, bh = box[3] * k;
  int x0, x1, y0, y1;
  span(bx, bw, out, (int)ci->output_width, 2, &x0, &x1);
  span(by, bh, out, (int)ci->output_height, 2, &y0, &y1);
  JDIMENSION cx = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0 + 1);
  if (cw < ci->output_width) jpeg_crop_scanline(ci, &cx, &cw); /* cx down, cw up to iMCU boundaries */
  size_t stride = (size_t)ci->output_width * 3, need = stride * (size_t)(y1 - y0 + 1);
  if (need > j->cap) {
    uint8_t *p = realloc(j->buf, need);
    if (!p) {
      jpeg_abort_decompress(ci);
      return MNT_SYSERR("jpegcrop: %s: sample %lld: %zu bytes for a region", what, (long long)index, need);
    }
    j->buf = p;
    j->cap = need;
  }
  if ((st = read_rows(ci, j->buf, stride, y0, y1 - y0 + 1)) != MNT_OK) {
    snprintf(j->err.msg, sizeof j->err.msg, "rows %d..%d cannot be read", y0, y1);
    longjmp(j->err.jb, 1);
  }
  *r = (mnt_jpeg_region){.pix = j->buf, .w = (int)ci->output_width, .h = y1 - y0 + 1, .stride = stride, .scale = m,
                         .x = (int)cx, .y = y0};
  r->box[0] = (float)(bx - (double)cx), r->box[1] = (float)(by - y0), r->box[2] = (float)bw, r->box[3] = (float)bh;
  r->box[4] = box[4];
  jpeg_abort_decompress(ci); /* the rest of the image is not needed: the decoder is ready for the next */
  return MNT_OK;
}
