/* decode.c — one image file decoded, sized and stored, for `mntrain convert imagenet` (see decode.h):
 * decoding goes by content (JPEG with libjpeg-turbo, grey and CMYK too, large ones at 1/2, 1/4 or 1/8
 * scale by the DCT; PNG with libpng as PIL's convert("RGB") reads it; BMP/PPM/PGM with
 * libjpeg-turbo's loader); headers are read first and absurd or too costly images refused before
 * any memory is taken; shrinking is an area filter (bilinear when enlarging). */
#include "io/convert/decode.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "io/data/dataset.h"
#include "src/log.h"
#include "src/path.h"
#include "src/sysmem.h"

/* The largest image accepted: per side in the header, and in decoded pixels (for JPEG after DCT
 * scaling, so a 30000x20000 photo still converts): an ImageNet photo is a few megapixels; a header
 * claiming far more is a broken or hostile file (a 778-byte "JPEG bomb" can claim 65500x65500). */
#define MAX_SIDE 32768
#define MAX_PIXELS (64.0 * 1024 * 1024)

/* Format 3's JPEG chroma: 4:4:4. Measured on 192 photographs cropped to 500x375 (Debian's
 * backgrounds), stored at 256 px, quality 90, PSNR against the raw records: 4:2:0 mean 41.1 dB but
 * 34.5 dB on the worst image (33.4 dB on the worst of 768 random crops); 4:4:4 mean 43.6 dB, worst
 * 36.8 dB, for 27% more bytes (21.3 KiB per image instead of 16.8; raw 256 KiB). */
#define JPEG_SUBSAMP TJSAMP_444

/* ---- decoding ------------------------------------------------------------------------------ */
typedef struct image { uint8_t *rgb; int w, h, w0, h0; } image; /* w0 × h0: before DCT scaling */

static int too_big(long long w, long long h, char *why, size_t n) {
  if (w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE || (double)w * h > MAX_PIXELS) {
    snprintf(why, n, "its header says %lldx%lld pixels: refused (at most %d per side and %.0f megapixels)", w, h,
             MAX_SIDE, MAX_PIXELS / 1048576);
    return 1;
  }
  return 0;
}

/* decoding a w × h image takes `need` bytes (what: of what, when more than its pixels): more than
 * fi->max_bytes is refused before any of it is taken */
static int too_costly(const mnt_fit *fi, long long w, long long h, double need, const char *what, char *why, size_t n) {
  if (need <= (double)fi->max_bytes) return 0;
  char a[32], b[32];
  mnt_format_bytes(need, a, sizeof a);
  mnt_format_bytes((double)fi->max_bytes, b, sizeof b);
  snprintf(why, n, "its header says %lldx%lld pixels: decoding it takes %.12s%.64s, more than MNT_DECODE_MAX_BYTES "
           "(%.12s)", w, h, a, what, b);
  return 1;
}

/* format 3's stored size of a w × h image (see the top of the file) */
static void fit_dims(const mnt_fit *f, int w, int h, int *ow, int *oh) {
  int wide = w >= h, sh = wide ? h : w, lg = wide ? w : h;
  if (sh > f->S) {
    lg = (int)((double)f->S * lg / sh);
    sh = f->S;
  }
  if (f->L > 0 && lg > f->L) {
    sh = (int)((double)f->L * sh / lg);
    lg = f->L;
  }
  sh = sh < 1 ? 1 : sh;
  *ow = wide ? lg : sh;
  *oh = wide ? sh : lg;
}

/* the least size a w × h image must be decoded at: format 2 S × S (its shorter side >= S), format
 * 3 its stored size */
static void need_dims(const mnt_fit *f, int w, int h, int *nw, int *nh) {
  if (f->records) fit_dims(f, w, h, nw, nh);
  else *nw = *nh = f->S;
}

/* What libjpeg keeps of a JPEG beyond a few rows: when the image comes in more than one scan
 * (progressive, or sequential with its components in separate scans) every DCT coefficient of the
 * whole image, 64 of 2 bytes per 8×8 block of each component, whatever the DCT scale of the output
 * (jdcoefct.c: its whole-image buffer). A 1.7 kB progressive file may claim 32768x32768: 3 GiB at
 * 4:2:0. Read from the header (up to the first scan) by libjpeg itself; -1 when it refuses it. */
typedef struct jhead_err { struct jpeg_error_mgr pub; jmp_buf jb; } jhead_err;

static void jhead_error(j_common_ptr ci) { longjmp(((jhead_err *)(void *)ci->err)->jb, 1); }
static void jhead_message(j_common_ptr ci, int level) { (void)ci, (void)level; } /* the decode reports */

static int jpeg_coef_bytes(const unsigned char *buf, unsigned long len, double *bytes) {
  struct jpeg_decompress_struct ci;
  jhead_err e;
  memset(&ci, 0, sizeof ci);
  ci.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jhead_error;
  e.pub.emit_message = jhead_message;
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&ci);
    return -1;
  }
  jpeg_create_decompress(&ci);
  jpeg_mem_src(&ci, buf, len);
  jpeg_read_header(&ci, TRUE);
  double b = 0;
  if (ci.progressive_mode || ci.comps_in_scan < ci.num_components)
    for (int c = 0; c < ci.num_components; c++) {
      const jpeg_component_info *k = &ci.comp_info[c];
      double bw = ceil((double)k->width_in_blocks / k->h_samp_factor) * k->h_samp_factor;
      double bh = ceil((double)k->height_in_blocks / k->v_samp_factor) * k->v_samp_factor;
      b += bw * bh * DCTSIZE2 * sizeof(JCOEF);
    }
  jpeg_destroy_decompress(&ci);
  *bytes = b;
  return 0;
}

/* JPEG: the header first, then decoding at the smallest of 1/8, 1/4, 1/2, 1 that keeps both sides
 * at least need_dims (the DCT does the first reduction nearly for free); an image whose decoding
 * would take more than fi->max_bytes (its pixels at that scale and libjpeg's coefficients) is refused */
static int decode_jpeg(tjhandle tj, const unsigned char *buf, unsigned long len, const mnt_fit *f, image *im, char *why,
                       size_t n) {
  int w = 0, h = 0, sub = -1, cs = -1; /* a header of tables only "succeeds" without setting them */
  int r = tjDecompressHeader3(tj, buf, len, &w, &h, &sub, &cs);
  if (r != 0 || w < 1 || h < 1) {
    snprintf(why, n, "not a readable JPEG (%s)", r != 0 ? tjGetErrorStr2(tj) : "no image in its header");
    return -1;
  }
  if (w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE) return too_big(w, h, why, n), -1;
  int nf, best_w = w, best_h = h, nw, nh;
  need_dims(f, w, h, &nw, &nh);
  tjscalingfactor *sf = tjGetScalingFactors(&nf);
  for (int i = 0; sf && i < nf; i++) {
    if (sf[i].num != 1 || (sf[i].denom != 2 && sf[i].denom != 4 && sf[i].denom != 8)) continue;
    int sw = TJSCALED(w, sf[i]), sh = TJSCALED(h, sf[i]);
    if (sw >= nw && sh >= nh && sw < best_w) best_w = sw, best_h = sh;
  }
  if (too_big(best_w, best_h, why, n)) return -1;
  int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  int pf = cmyk ? TJPF_CMYK : TJPF_RGB, ps = cmyk ? 4 : 3;
  double coef;
  if (jpeg_coef_bytes(buf, len, &coef) != 0) {
    snprintf(why, n, "not a readable JPEG (libjpeg refuses its header)");
    return -1;
  }
  const char *what = coef > 0 ? " (progressive or multi-scan: all its DCT coefficients at once)" : "";
  if (too_costly(f, w, h, (double)best_w * best_h * ps + coef, what, why, n)) return -1;
  uint8_t *img = malloc((size_t)best_w * best_h * ps);
  if (!img) {
    snprintf(why, n, "out of memory for %dx%d pixels", best_w, best_h);
    return -1;
  }
  /* a warning about extraneous bytes leaves a whole image, as PIL reads it; missing data does not */
  if (tjDecompress2(tj, buf, len, img, best_w, 0, best_h, pf, TJFLAG_ACCURATEDCT) != 0 &&
      (tjGetErrorCode(tj) != TJERR_WARNING || !strstr(tjGetErrorStr2(tj), "extraneous bytes"))) {
    snprintf(why, n, "not a readable JPEG (%s)", tjGetErrorStr2(tj));
    free(img);
    return -1;
  }
  if (cmyk) /* Adobe's inverted CMYK, as PIL reads it: R = C*K/255 ... */
    for (size_t i = 0; i < (size_t)best_w * best_h; i++) {
      unsigned k = img[4 * i + 3];
      img[3 * i + 0] = (uint8_t)(img[4 * i + 0] * k / 255);
      img[3 * i + 1] = (uint8_t)(img[4 * i + 1] * k / 255);
      img[3 * i + 2] = (uint8_t)(img[4 * i + 2] * k / 255);
    }
  *im = (image){img, best_w, best_h, w, h};
  return 0;
}

/* PNG through libpng's own read API, as PIL's Image.open(f).convert("RGB") reads it: no gamma
 * (gAMA, sRGB, iCCP and cHRM are ignored: libpng's simplified API took a PNG without them as linear
 * light and stored 16-bit images ~47 grey levels brighter), 16-bit samples by their high byte, grey
 * of 1, 2 or 4 bits scaled to 8, palettes looked up, alpha and tRNS dropped. One exception, PIL's
 * too: a 16-bit grey PNG without alpha is PIL's mode I, whose convert("RGB") clips every level above
 * 255 to white; it is stored so, with a warning naming the file when a level was clipped. */
typedef struct png_in { const unsigned char *buf; size_t len, at; char *why; size_t n; } png_in;

static void png_on_error(png_structp png, png_const_charp msg) {
  png_in *in = png_get_error_ptr(png);
  snprintf(in->why, in->n, "not a readable PNG (%s)", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_on_read(png_structp png, png_bytep out, size_t len) {
  png_in *in = png_get_io_ptr(png);
  if (len > in->len - in->at) png_error(png, "the file ends early");
  memcpy(out, in->buf + in->at, len);
  in->at += len;
}

static int decode_png(const unsigned char *buf, size_t len, const char *path, const mnt_fit *fi, image *im, char *why,
                      size_t n) {
  png_in in = {buf, len, 0, why, n};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  uint8_t *volatile rgb = NULL;
  png_bytep *volatile rows = NULL;
  if (!info) {
    snprintf(why, n, "libpng could not start (out of memory)");
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return -1;
  }
  if (setjmp(png_jmpbuf(png))) { /* why is set */
    free(rgb);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return -1;
  }
  png_set_read_fn(png, &in, png_on_read);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  int depth = png_get_bit_depth(png, info), ct = png_get_color_type(png, info);
  int grey16 = depth == 16 && ct == PNG_COLOR_TYPE_GRAY;
  if (too_big(w, h, why, n) || too_costly(fi, w, h, (double)w * h * 3 + (double)h * sizeof *rows, "", why, n))
    png_longjmp(png, 1);
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (ct == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !grey16) png_set_strip_16(png); /* the high byte */
  if (!grey16 && !(ct & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)w * (grey16 ? 2 : 3)) png_error(png, "an unexpected sample layout");
  rgb = malloc((size_t)w * h * 3);
  rows = malloc((size_t)h * sizeof *rows);
  if (!rgb || !rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
  png_read_image(png, rows);
  size_t clipped = 0;
  for (png_uint_32 y = 0; grey16 && y < h; y++) /* 2 bytes a pixel to 3, in place from the end */
    for (png_uint_32 x = w; x-- > 0;) {
      unsigned v = (unsigned)rows[y][2 * x] << 8 | rows[y][2 * x + 1];
      clipped += v > 255;
      rows[y][3 * x] = rows[y][3 * x + 1] = rows[y][3 * x + 2] = (uint8_t)(v > 255 ? 255 : v);
    }
  if (clipped)
    MNT_WARN("%s: a 16-bit grey PNG: stored as PIL's convert(\"RGB\") reads it, %.1f%% of its pixels clipped to white "
             "(levels above 255 of 65535)", path, 100.0 * (double)clipped / ((double)w * h));
  free(rows);
  png_destroy_read_struct(&png, &info, NULL);
  *im = (image){rgb, (int)w, (int)h, (int)w, (int)h};
  return 0;
}

/* BMP, PPM, PGM: libjpeg-turbo's loader (it goes by the file name's extension) */
static int decode_netpbm_bmp(const char *path, image *im, char *why, size_t n) {
  int w = 0, h = 0, pf = TJPF_RGB;
  unsigned char *img = tjLoadImage(path, &w, 1, &h, &pf, 0);
  if (!img) {
    snprintf(why, n, "not a readable BMP/PPM/PGM (%s)", tjGetErrorStr2(NULL));
    return -1;
  }
  if (too_big(w, h, why, n)) {
    tjFree(img);
    return -1;
  }
  uint8_t *rgb = malloc((size_t)w * h * 3);
  if (rgb) memcpy(rgb, img, (size_t)w * h * 3);
  tjFree(img);
  if (!rgb) {
    snprintf(why, n, "out of memory for %dx%d pixels", w, h);
    return -1;
  }
  *im = (image){rgb, w, h, w, h};
  return 0;
}

static int ends_with(const char *s, const char *e) {
  size_t a = strlen(s), b = strlen(e);
  return a >= b && !strcasecmp(s + a - b, e);
}

/* a file that cannot be opened: why, a dangling link named as one */
static void open_failed(const char *path, int err, char *why, size_t n) {
  char to[MNT_PATH_MAX];
  ssize_t k = err == ENOENT ? readlink(path, to, sizeof to - 1) : -1;
  if (k >= 0) {
    to[k] = '\0';
    snprintf(why, n, "a dangling symbolic link (to %.120s)", to);
  } else {
    snprintf(why, n, "cannot open: %s", strerror(err));
  }
}

static int load(tjhandle tj, const char *path, const mnt_fit *fi, image *im, char *why, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    open_failed(path, errno, why, n);
    return -1;
  }
  if (ends_with(path, ".bmp") || ends_with(path, ".ppm") || ends_with(path, ".pgm")) {
    fclose(f);
    return decode_netpbm_bmp(path, im, why, n);
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = len > 0 ? malloc((size_t)len) : NULL;
  int ok = buf && fread(buf, 1, (size_t)len, f) == (size_t)len;
  fclose(f);
  int r = -1;
  if (!ok) snprintf(why, n, len > 0 ? "cannot read the file" : "empty file");
  else if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff) /* JPEG, whatever its name says */
    r = decode_jpeg(tj, buf, (unsigned long)len, fi, im, why, n);
  else if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8))
    r = decode_png(buf, (size_t)len, path, fi, im, why, n);
  else if (len >= 4 && (!memcmp(buf, "II*\0", 4) || !memcmp(buf, "MM\0*", 4)))
    snprintf(why, n, "TIFF is not supported: convert it to PNG or JPEG");
  else if (len >= 12 && !memcmp(buf, "RIFF", 4) && !memcmp(buf + 8, "WEBP", 4))
    snprintf(why, n, "WebP is not supported: convert it to PNG or JPEG");
  else
    snprintf(why, n, "not an image mntrain can read (JPEG, PNG, BMP, PPM, PGM)");
  free(buf);
  return r;
}

/* the area filter along one axis: output i of S covers source [o + i/s, o + (i+1)/s) of a side of
 * `dim` pixels; taps[i*k..] are (first source pixel, weights by coverage), wsum[i] their sum */
typedef struct taps { int *first, k; float *w, *wsum; } taps;

static int area_taps(taps *t, int S, double s, double o, int dim) {
  t->k = (int)ceil(1.0 / s) + 2;
  t->first = malloc((size_t)S * sizeof *t->first);
  t->w = calloc((size_t)S * (size_t)t->k, sizeof *t->w);
  t->wsum = malloc((size_t)S * sizeof *t->wsum);
  if (!t->first || !t->w || !t->wsum) return -1;
  for (int i = 0; i < S; i++) {
    double a = o + i / s, b = o + (i + 1) / s, sum = 0;
    int first = (int)floor(a);
    t->first[i] = first;
    for (int j = 0; j < t->k; j++) {
      int p = first + j;
      double wt = p < dim && p >= 0 ? fmin(b, p + 1) - fmax(a, p) : 0;
      wt = wt > 0 ? wt : 0;
      t->w[(size_t)i * t->k + j] = (float)wt;
      sum += wt;
    }
    t->wsum[i] = (float)(sum > 0 ? sum : 1);
  }
  return 0;
}

static void taps_free(taps *t) {
  free(t->first);
  free(t->w);
  free(t->wsum);
}

/* shrinking to ow × oh (source box from (ox, oy), scales sx, sy): the box average of the source under
 * each output pixel, partial pixels weighted by
 * coverage, computed separably (rows, then columns): the same sums as the 2-D box, about a tenth
 * of the work */
static int shrink(const uint8_t *img, int w, int h, int ow, int oh, double sx, double sy, double ox, double oy,
                  uint8_t *out) {
  taps tx = {0}, ty = {0};
  int y0 = (int)floor(oy), y1 = (int)ceil(oy + oh / sy);
  if (y0 < 0) y0 = 0;
  if (y1 > h) y1 = h;
  float *rows = malloc((size_t)(y1 - y0 > 0 ? y1 - y0 : 1) * ow * 3 * sizeof *rows);
  int st = rows && area_taps(&tx, ow, sx, ox, w) == 0 && area_taps(&ty, oh, sy, oy, h) == 0 ? 0 : -1;
  for (int yy = y0; yy < y1 && !st; yy++) { /* horizontal pass over the rows the box touches */
    const uint8_t *src = img + (size_t)yy * w * 3;
    float *dst = rows + (size_t)(yy - y0) * ow * 3;
    for (int x = 0; x < ow; x++) {
      float a0 = 0, a1 = 0, a2 = 0;
      const float *wt = tx.w + (size_t)x * tx.k;
      for (int j = 0; j < tx.k; j++) {
        if (wt[j] == 0) continue;
        const uint8_t *p = src + (size_t)(tx.first[x] + j) * 3;
        a0 += wt[j] * p[0], a1 += wt[j] * p[1], a2 += wt[j] * p[2];
      }
      dst[3 * x] = a0, dst[3 * x + 1] = a1, dst[3 * x + 2] = a2;
    }
  }
  for (int y = 0; y < oh && !st; y++) { /* vertical pass */
    const float *wt = ty.w + (size_t)y * ty.k;
    uint8_t *o = out + (size_t)y * ow * 3;
    for (int x = 0; x < 3 * ow; x++) {
      float acc = 0;
      for (int j = 0; j < ty.k; j++)
        if (wt[j] != 0) acc += wt[j] * rows[(size_t)(ty.first[y] + j - y0) * ow * 3 + x];
      float v = acc / (tx.wsum[x / 3] * ty.wsum[y]) + 0.5f;
      o[x] = (uint8_t)(v > 255 ? 255 : v);
    }
  }
  taps_free(&tx);
  taps_free(&ty);
  free(rows);
  return st;
}

/* decode, resize the shorter side to S, keep the centre S×S, RGB (format 2: f->S is S) */
int mnt_decode_square(tjhandle tj, const char *path, const mnt_fit *f, uint8_t *out, char *why, size_t n) {
  image im;
  int S = f->S;
  if (load(tj, path, f, &im, why, n) != 0) return -1;
  const uint8_t *img = im.rgb;
  int w = im.w, h = im.h;
  /* the shorter side becomes S: scale s; the centre S×S of the scaled image is the source box
   * [ox, ox + S/s) × [oy, oy + S/s) */
  double s = (double)S / (w < h ? w : h);
  double box = S / s, ox = (w - box) / 2, oy = (h - box) / 2;
  if (s < 1) {
    int st = shrink(img, w, h, S, S, s, s, ox, oy, out);
    free(im.rgb);
    if (st) snprintf(why, n, "out of memory resizing %dx%d pixels", w, h);
    return st;
  }
  for (int y = 0; y < S; y++) /* enlarging: bilinear at the pixel centre */
    for (int x = 0; x < S; x++) {
      double fx = ox + (x + 0.5) / s - 0.5, fy = oy + (y + 0.5) / s - 0.5;
      fx = fx < 0 ? 0 : fx > w - 1 ? w - 1 : fx;
      fy = fy < 0 ? 0 : fy > h - 1 ? h - 1 : fy;
      int x0 = (int)fx, y0 = (int)fy, x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
      double ax = fx - x0, ay = fy - y0;
      for (int c = 0; c < 3; c++) {
        double v = (1 - ay) * ((1 - ax) * img[((size_t)y0 * w + x0) * 3 + c] + ax * img[((size_t)y0 * w + x1) * 3 + c]) +
                   ay * ((1 - ax) * img[((size_t)y1 * w + x0) * 3 + c] + ax * img[((size_t)y1 * w + x1) * 3 + c]) + 0.5;
        out[((size_t)y * S + x) * 3 + c] = (uint8_t)(v > 255 ? 255 : v);
      }
    }
  free(im.rgb);
  return 0;
}

/* sums of the pixels / 255 and of their squares, per channel (for the index's mean and std) */
static void pixel_sums(const uint8_t *px, size_t n, double sum[3], double sum2[3]) {
  for (int c = 0; c < 3; c++) {
    uint64_t s1 = 0, s2 = 0;
    for (size_t p = (size_t)c; p < 3 * n; p += 3) s1 += px[p], s2 += (uint64_t)px[p] * px[p];
    sum[c] = s1 / 255.0;
    sum2[c] = s2 / (255.0 * 255.0);
  }
}

/* format 3: decode, size as fit_dims says (area filter; an image kept at its size is its decoded
 * pixels), then the record: those pixels, or their JPEG */
int mnt_decode_record(tjhandle tjd, tjhandle tjc, const char *path, const mnt_fit *f, mnt_rec_slot *r, char *why,
                         size_t n) {
  image im;
  if (load(tjd, path, f, &im, why, n) != 0) return -1;
  int ow, oh;
  fit_dims(f, im.w0, im.h0, &ow, &oh);
  uint8_t *px = im.rgb;
  if (ow != im.w || oh != im.h) { /* the DCT may have done part of it: what is left, from the decoded size */
    px = malloc((size_t)ow * oh * 3);
    if (!px || shrink(im.rgb, im.w, im.h, ow, oh, (double)ow / im.w, (double)oh / im.h, 0, 0, px)) {
      snprintf(why, n, "out of memory resizing %dx%d pixels", im.w, im.h);
      free(px);
      free(im.rgb);
      return -1;
    }
    free(im.rgb);
  }
  *r = (mnt_rec_slot){.data = px, .len = (size_t)ow * oh * 3, .w = ow, .h = oh};
  pixel_sums(px, (size_t)ow * oh, r->sum, r->sum2);
  if (f->codec == MNT_CODEC_RAW) return 0;
  unsigned long cap = tjBufSize(ow, oh, JPEG_SUBSAMP), len = cap;
  uint8_t *jpg = malloc(cap);
  if (!jpg || tjCompress2(tjc, px, ow, 0, oh, TJPF_RGB, &jpg, &len, JPEG_SUBSAMP, f->quality,
                          TJFLAG_NOREALLOC | TJFLAG_ACCURATEDCT) != 0) {
    snprintf(why, n, "JPEG coding of %dx%d pixels failed (%s)", ow, oh, jpg ? tjGetErrorStr2(tjc) : "out of memory");
    free(jpg);
    free(px);
    r->data = NULL;
    return -1;
  }
  free(px);
  r->data = jpg;
  r->len = len;
  return 0;
}
