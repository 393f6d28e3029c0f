/* imagenet.c — `mntrain convert imagenet`: image class folders (or a flat folder and a labels
 * file) to shards, read as torchvision's ImageFolder reads them: the classes are the sorted
 * folder names of SRC (UTF-8 only: index.json is JSON text); each class takes every file below its
 * folder (subfolders too, links followed, in sorted path order) whose name ends in one of
 * ImageFolder's extensions (any case); a class folder without such a file is an error. Other files
 * are reported and ignored. A link back to a folder above it (a loop) is named and not followed, so
 * every image is taken once; a dangling link with an image's name is an input that cannot be read.
 * Decoding goes by content: JPEG with libjpeg-turbo (grayscale and CMYK too; large images are
 * decoded at 1/2, 1/4 or 1/8 scale by the DCT, to the smallest size still >= the target), PNG with
 * libpng, BMP/PPM/PGM with libjpeg-turbo's loader; TIFF and WebP are refused by name. Headers are
 * read first: absurd dimensions, and JPEGs and PNGs whose decoding would take more memory than
 * MNT_DECODE_MAX_BYTES, are refused before any memory is taken. Every image is stored as RGB (grey,
 * CMYK, palette, alpha and 16-bit sources too, as PIL's convert("RGB"): no gamma).
 * Format 2 (--size S): the shorter side is resized to S with an area filter (bilinear when
 * enlarging) and the centre S×S kept, raw.
 * Format 3: the whole image at its aspect ratio, sized as torchvision's Resize(S, max_size=L) sizes
 * it (shorter side S, longer int(S * long / short); a longer side above L becomes L and the shorter
 * int(L * short / long)) except that nothing is enlarged: an image whose shorter side is S or less
 * keeps its size (unless its longer side exceeds L). Shrinking uses the area filter; an image kept
 * at its size is its decoded pixels. The record is those pixels (raw) or them coded as a JPEG by
 * libjpeg-turbo (the --quality given, chroma not subsampled: JPEG_SUBSAMP).
 * Decoding (and coding) runs on all cores (OpenMP) a chunk ahead of the writer; an unreadable file is
 * reported by path and reason and skipped. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <xxhash.h>

#include <jpeglib.h>

#include "io/convert.h"
#include "io/dataset.h"
#include "io/shard_write.h"
#include "check.h"
#include "env.h"
#include "log.h"
#include "path.h"
#include "sysmem.h"

/* The largest image accepted: per side in the header, and in decoded pixels (for JPEG after DCT
 * scaling, so a 30000x20000 photo still converts): an ImageNet photo is a few megapixels; a header
 * claiming far more is a broken or hostile file (a 778-byte "JPEG bomb" can claim 65500x65500). */
#define MAX_SIDE 32768
#define MAX_PIXELS (64.0 * 1024 * 1024)
#define MAX_DEPTH 64 /* folder nesting followed below a class folder (a loop is caught sooner: walk) */

/* Format 3's JPEG chroma: 4:4:4. Measured on 192 photographs cropped to 500x375 (Debian's
 * backgrounds), stored at 256 px, quality 90, PSNR against the raw records: 4:2:0 mean 41.1 dB but
 * 34.5 dB on the worst image (33.4 dB on the worst of 768 random crops); 4:4:4 mean 43.6 dB, worst
 * 36.8 dB, for 27% more bytes (21.3 KiB per image instead of 16.8; raw 256 KiB). */
#define JPEG_SUBSAMP TJSAMP_444

typedef struct jfile { char *path; int32_t label; } jfile;

/* what an image becomes: format 2 (records 0) the centre S×S; format 3 its whole at shorter side S
 * (never enlarged), longer side at most L (0: no cap), coded as codec at quality; and the memory its
 * decoding may take (MNT_DECODE_MAX_BYTES) */
typedef struct fit { int records, S, L, codec, quality; size_t max_bytes; } fit;

/* a format 3 image ready for the writer: its record and what mnt_convert_record says of it */
typedef struct rec_slot { uint8_t *data; size_t len; int w, h; double sum[3], sum2[3]; } rec_slot;

typedef struct inet {
  jfile *files;
  int64_t n, cap;
  int size;
  fit fit;
  int64_t ignored;      /* files below SRC that are not images by ImageFolder's extensions */
  XXH3_state_t *h;      /* the inputs: names, sizes, times and labels of every file */
  /* the chunk decoded ahead: ids and results */
  int64_t *ids;
  uint8_t *pix;         /* format 2: the chunk's pixels */
  rec_slot *recs;       /* format 3: the chunk's records */
  char (*why)[200];     /* "" when decoded, else the reason */
  int nids;
} inet;

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const EXTS[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

static int is_image_name(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof EXTS / sizeof EXTS[0]; i++) {
    size_t e = strlen(EXTS[i]);
    if (n >= e && !strcasecmp(name + n - e, EXTS[i])) return 1;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct strlist { char **v; int n, cap; } strlist;

static int push(strlist *l, const char *s) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    char **q = realloc(l->v, (size_t)nc * sizeof *q);
    if (!q) return -1;
    l->v = q;
    l->cap = nc;
  }
  return (l->v[l->n] = strdup(s)) ? (l->n++, 0) : -1;
}

static void strlist_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* dir/name into p; a path too long for p is reported and refused (-1) */
static int child_path(char *p, size_t n, const char *dir, const char *name) {
  if (snprintf(p, n, "%s/%s", dir, name) < (int)n) return 0;
  MNT_WARN("%s/%s: path too long; left out", dir, name);
  return -1;
}

static void add_file(inet *s, const char *path, int32_t label, const struct stat *sb) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->files = realloc(s->files, (size_t)s->cap * sizeof *s->files);
  }
  s->files[s->n].path = strdup(path);
  s->files[s->n].label = label;
  s->n++;
  long long meta[4] = {label, (long long)sb->st_size, (long long)sb->st_mtim.tv_sec, (long long)sb->st_mtim.tv_nsec};
  XXH3_64bits_update(s->h, path, strlen(path) + 1);
  XXH3_64bits_update(s->h, meta, sizeof meta);
}

/* One reading of a folder: its subfolders (full paths) and its other entries (names), each with what
 * stat says of it, every entry looked at once. Links are followed, as os.walk(followlinks=True); an
 * entry stat cannot follow (a dangling link, a link loop) is one of the other entries, with the errno
 * in err and lstat's answer in st: os.walk lists it among the files too. */
typedef struct entry { char *name; struct stat st; int err; } entry;
typedef struct entries { entry *v; int n, cap; } entries;
typedef struct folder {
  char *path;
  entries subs, files;
} folder;

static int push_entry(entries *l, const char *name, const struct stat *st, int err) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    entry *q = realloc(l->v, (size_t)nc * sizeof *q);
    if (!q) return MNT_ENOMEM;
    l->v = q;
    l->cap = nc;
  }
  entry *e = &l->v[l->n];
  e->st = *st;
  e->err = err;
  if (!(e->name = strdup(name))) return MNT_ENOMEM;
  l->n++;
  return MNT_OK;
}

static void entries_free(entries *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i].name);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static void folder_free(folder *f) {
  free(f->path);
  entries_free(&f->subs);
  entries_free(&f->files);
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int read_folder(const char *dir, folder *f, int quiet_missing) {
  memset(f, 0, sizeof *f);
  if (!(f->path = strdup(dir))) return MNT_ENOMEM;
  DIR *d = opendir(dir);
  if (!d) {
    if (!quiet_missing) MNT_WARN("%s: cannot read the folder (%s); its files are left out", dir, strerror(errno));
    return MNT_OK;
  }
  struct dirent *e;
  int st = MNT_OK;
  while ((e = readdir(d)) && st == MNT_OK) {
    char p[MNT_PATH_MAX];
    struct stat sb;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || child_path(p, sizeof p, dir, e->d_name)) continue;
    int err = stat(p, &sb) != 0 ? errno : 0;
    if (err && lstat(p, &sb) != 0) memset(&sb, 0, sizeof sb); /* gone since readdir: its reading will say so */
    if (!err && S_ISDIR(sb.st_mode)) st = push_entry(&f->subs, p, &sb, 0);
    else st = push_entry(&f->files, e->d_name, &sb, err);
  }
  closedir(d);
  return st;
}

typedef struct folders { folder *v; int n, cap; } folders;

/* the folders on the way from SRC down to the one being read (links followed): a folder that is one
 * of them again is a loop (`self -> .`, `up -> ..`), which is named and not followed, so that every
 * file is taken once; the same folder reached by two links that do not loop is taken twice, as
 * ImageFolder takes it */
typedef struct above { dev_t dev; ino_t ino; const char *path; } above;

/* every folder below dir (dir included; st: what stat says of it; it is level `level` below SRC,
 * up[0..level) the folders above it, up[] has room for MAX_DEPTH + 2), each read once */
static int walk(const char *dir, const struct stat *st, above *up, int level, folders *all) {
  for (int k = 0; k < level; k++)
    if (up[k].dev == st->st_dev && up[k].ino == st->st_ino) {
      MNT_WARN("%s: a link to %s, a folder above it (a folder loop); not followed", dir, up[k].path);
      return MNT_OK;
    }
  if (level > MAX_DEPTH + 1) {
    MNT_WARN("%s: more than %d folders deep; not followed further", dir, MAX_DEPTH);
    return MNT_OK;
  }
  if (all->n == all->cap) {
    int nc = all->cap ? 2 * all->cap : 16;
    folder *q = realloc(all->v, (size_t)nc * sizeof *q);
    if (!q) return MNT_ENOMEM;
    all->v = q;
    all->cap = nc;
  }
  folder *f = &all->v[all->n++];
  int rc = read_folder(dir, f, 0);
  entries subs = f->subs; /* f may move as all grows */
  up[level] = (above){st->st_dev, st->st_ino, f->path};
  for (int i = 0; i < subs.n && rc == MNT_OK; i++) rc = walk(subs.v[i].name, &subs.v[i].st, up, level + 1, all);
  return rc;
}

static int cmp_folder(const void *a, const void *b) {
  return strcmp(((const folder *)a)->path, ((const folder *)b)->path);
}

/* the image files of one class folder in ImageFolder's order: sorted(os.walk(...)), i.e. folders
 * sorted by path, and files sorted by name within each. An entry stat could not follow (a dangling
 * link) with an image's name is taken as an input, as ImageFolder takes it: its reading fails, and it
 * is named and counted among the skipped files. up[0]: SRC; cst: what stat says of the class folder */
static int class_files(inet *s, const char *cdir, const struct stat *cst, above *up, int32_t label) {
  folders all = {0};
  int st = walk(cdir, cst, up, 1, &all);
  if (st == MNT_OK && all.n > 1) qsort(all.v, (size_t)all.n, sizeof *all.v, cmp_folder);
  for (int i = 0; i < all.n && st == MNT_OK; i++) {
    folder *f = &all.v[i];
    if (f->files.n > 1) qsort(f->files.v, (size_t)f->files.n, sizeof *f->files.v, cmp_entry); /* v: NULL when empty */
    for (int k = 0; k < f->files.n && st == MNT_OK; k++) {
      const char *name = f->files.v[k].name;
      char p[MNT_PATH_MAX];
      if (child_path(p, sizeof p, f->path, name)) {
        s->ignored++;
        continue;
      }
      if (!is_image_name(name)) {
        if (f->files.v[k].err)
          MNT_WARN("%s: cannot be followed (%s) and not an image by its name; ignored", p, strerror(f->files.v[k].err));
        else
          MNT_WARN("%s: not an image by its name (ImageFolder's extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                   ".webp); ignored", p);
        s->ignored++;
        continue;
      }
      add_file(s, p, label, &f->files.v[k].st);
    }
  }
  for (int i = 0; i < all.n; i++) folder_free(&all.v[i]);
  free(all.v);
  return st;
}

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
static int too_costly(const fit *fi, long long w, long long h, double need, const char *what, char *why, size_t n) {
  if (need <= (double)fi->max_bytes) return 0;
  char a[32], b[32];
  mnt_format_bytes(need, a, sizeof a);
  mnt_format_bytes((double)fi->max_bytes, b, sizeof b);
  snprintf(why, n, "its header says %lldx%lld pixels: decoding it takes %.12s%.64s, more than MNT_DECODE_MAX_BYTES "
           "(%.12s)", w, h, a, what, b);
  return 1;
}

/* format 3's stored size of a w × h image (see the top of the file) */
static void fit_dims(const fit *f, int w, int h, int *ow, int *oh) {
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
static void need_dims(const fit *f, int w, int h, int *nw, int *nh) {
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
static int decode_jpeg(tjhandle tj, const unsigned char *buf, unsigned long len, const fit *f, image *im, char *why,
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

static int decode_png(const unsigned char *buf, size_t len, const char *path, const fit *fi, image *im, char *why,
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

static int load(tjhandle tj, const char *path, const fit *fi, image *im, char *why, size_t n) {
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
static int decode(tjhandle tj, const char *path, const fit *f, uint8_t *out, char *why, size_t n) {
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
static int decode_record(tjhandle tjd, tjhandle tjc, const char *path, const fit *f, rec_slot *r, char *why,
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
  *r = (rec_slot){.data = px, .len = (size_t)ow * oh * 3, .w = ow, .h = oh};
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

static void inet_prefetch(void *ctx, const int64_t *ids, int n) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  memcpy(s->ids, ids, (size_t)n * sizeof *ids);
  for (int i = 0; s->recs && i < s->nids; i++) {
    free(s->recs[i].data);
    s->recs[i].data = NULL;
  }
  s->nids = n;
#pragma omp parallel
  {
    tjhandle tj = tjInitDecompress(), tjc = s->fit.records ? tjInitCompress() : NULL;
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < n; i++) {
      const char *path = s->files[ids[i]].path;
      s->why[i][0] = '\0';
      if (!tj || (s->fit.records && !tjc)) snprintf(s->why[i], sizeof s->why[i], "libjpeg-turbo could not start");
      else if (s->fit.records) decode_record(tj, tjc, path, &s->fit, &s->recs[i], s->why[i], sizeof s->why[i]);
      else decode(tj, path, &s->fit, s->pix + (size_t)i * px, s->why[i], sizeof s->why[i]);
    }
    if (tj) tjDestroy(tj);
    if (tjc) tjDestroy(tjc);
  }
}

/* the slot of sample id in the chunk decoded ahead; -1 (logged) when it is not there */
static int slot_of(inet *s, int64_t id) {
  for (int i = 0; i < s->nids; i++)
    if (s->ids[i] == id) {
      if (!s->why[i][0]) return i;
      MNT_WARN("%s: %s; skipped", s->files[id].path, s->why[i]);
      return -2;
    }
  MNT_ERR("internal: sample %lld was not prefetched", (long long)id);
  return -1;
}

static int inet_get_record(void *ctx, int64_t id, mnt_convert_record *r) {
  inet *s = ctx;
  int i = slot_of(s, id);
  if (i < 0) return i == -2 ? MNT_SKIP_SAMPLE : MNT_ESYS;
  const rec_slot *q = &s->recs[i];
  *r = (mnt_convert_record){.data = q->data, .len = q->len, .w = q->w, .h = q->h, .label = s->files[id].label};
  memcpy(r->sum, q->sum, sizeof r->sum);
  memcpy(r->sum2, q->sum2, sizeof r->sum2);
  return MNT_OK;
}

static int inet_get(void *ctx, int64_t id, uint8_t *pixels, int32_t *label) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  int i = slot_of(s, id);
  if (i < 0) return i == -2 ? MNT_SKIP_SAMPLE : MNT_ESYS;
  memcpy(pixels, s->pix + (size_t)i * px, px);
  *label = s->files[id].label;
  return MNT_OK;
}

/* the length of the UTF-8 sequence at s as JSON text takes it (jansson: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 when s does not start one */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!n) return 0;
  unsigned cp = c & (0x3fu >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* s into out (n bytes), every byte that is not part of a UTF-8 sequence written as \xHH; the number
 * of such bytes */
static int utf8_escape(const char *s, char *out, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t at = 0;
  int bad = 0;
  while (*p) {
    int k = utf8_len(p);
    char piece[8];
    if (k) memcpy(piece, p, (size_t)k), piece[k] = '\0';
    else snprintf(piece, sizeof piece, "\\x%02x", *p), bad++;
    p += k ? k : 1;
    size_t l = strlen(piece);
    if (at + l < n) memcpy(out + at, piece, l + 1), at += l;
  }
  if (n) out[at < n ? at : n - 1] = '\0';
  return bad;
}

/* Class names go into index.json as JSON text, which must be UTF-8: a name that is not is refused
 * (MNT_EARG) naming it hex-escaped, before anything is written. Escaping it instead would store a
 * name that is not the folder's (torchvision's ImageFolder calls it by its bytes) and could clash with
 * a folder literally called so; a rename (convmv -f latin1 -t utf8) fixes the source once. */
static int check_class_names(const char *where, const strlist *classes) {
  char list[700] = "";
  int nbad = 0;
  for (int c = 0; c < classes->n; c++) {
    char esc[300];
    if (!utf8_escape(classes->v[c], esc, sizeof esc)) continue;
    size_t l = strlen(list);
    if (nbad++ < 5) snprintf(list + l, sizeof list - l, "%s'%s'", l ? ", " : "", esc);
  }
  if (!nbad) return MNT_OK;
  MNT_ERR("%s: %d class name%s not UTF-8 (%s%s, bytes that are not UTF-8 shown as \\xHH): index.json keeps "
          "class names as JSON text, which is UTF-8; rename %s (e.g. convmv -f latin1 -t utf8 --notest)",
          where, nbad, nbad > 1 ? "s are" : " is", list, nbad > 5 ? ", ..." : "", nbad > 1 ? "them" : "it");
  return MNT_EARG;
}

/* classes = the sorted folder names of src; every class must hold at least one image */
static int scan_folders(inet *s, const char *src, strlist *classes) {
  folder top;
  struct stat sst;
  if (access(src, R_OK | X_OK) != 0 || stat(src, &sst) != 0) {
    MNT_SYSERR("%s", src);
    return MNT_EARG;
  }
  int st = read_folder(src, &top, 1);
  for (int i = 0; i < top.files.n && st == MNT_OK; i++) {
    MNT_WARN("%s/%s: a file beside the class folders; ignored", src, top.files.v[i].name);
    s->ignored++;
  }
  /* class names: the last part of each path, sorted (the paths share SRC/: the same order) */
  if (st == MNT_OK && top.subs.n > 1) qsort(top.subs.v, (size_t)top.subs.n, sizeof *top.subs.v, cmp_entry);
  for (int i = 0; i < top.subs.n && st == MNT_OK; i++)
    st = push(classes, strrchr(top.subs.v[i].name, '/') + 1) ? MNT_ENOMEM : MNT_OK;
  if (st == MNT_OK && classes->n == 0) {
    MNT_ERR("%s: no class folders (expected SRC/<class>/... images, as torchvision's ImageFolder)", src);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = check_class_names(src, classes);
  char empty[600] = "";
  int nempty = 0;
  above up[MAX_DEPTH + 2] = {{sst.st_dev, sst.st_ino, src}};
  for (int c = 0; c < classes->n && st == MNT_OK; c++) {
    char dir[MNT_PATH_MAX];
    MNT_CHECK_GOTO(mnt_path_join(dir, src, classes->v[c]), st, out);
    int64_t before = s->n;
    st = class_files(s, dir, &top.subs.v[c].st, up, c);
    if (st == MNT_OK && s->n == before) {
      size_t l = strlen(empty);
      if (nempty++ < 5) snprintf(empty + l, sizeof empty - l, "%s%s", l ? ", " : "", classes->v[c]);
    }
  }
  if (st == MNT_OK && nempty) {
    MNT_ERR("%s: %d class folder%s without any image (%s%s): torchvision's ImageFolder refuses that too; remove "
            "or fill them", src, nempty, nempty > 1 ? "s" : "", empty, nempty > 5 ? ", ..." : "");
    st = MNT_EARG;
  }
out:
  folder_free(&top);
  return st;
}

/* a flat folder and "FILE WNID" lines; classes are the sorted distinct wnids */
static int scan_flat(inet *s, const char *src, const char *val_labels, strlist *classes) {
  FILE *f = fopen(val_labels, "r");
  if (!f) {
    MNT_SYSERR("%s", val_labels);
    return MNT_EARG;
  }
  _Static_assert(MNT_PATH_MAX == 4096, "the width of name in the fscanf below");
  char name[MNT_PATH_MAX], wnid[256];
  strlist fn = {0}, wn = {0};
  int st = MNT_OK;
  while (st == MNT_OK && fscanf(f, "%4095s %255s", name, wnid) == 2)
    if (push(&fn, name) || push(&wn, wnid)) st = MNT_ENOMEM;
  fclose(f);
  for (int i = 0; i < wn.n && st == MNT_OK; i++) st = push(classes, wn.v[i]) ? MNT_ENOMEM : MNT_OK;
  if (st == MNT_OK) {
    if (classes->n > 1) qsort(classes->v, (size_t)classes->n, sizeof *classes->v, cmp_str);
    int k = 0;
    for (int i = 0; i < classes->n; i++) {
      if (k == 0 || strcmp(classes->v[k - 1], classes->v[i])) classes->v[k++] = classes->v[i];
      else free(classes->v[i]);
    }
    classes->n = k;
  }
  if (st == MNT_OK && classes->n == 0) {
    MNT_ERR("%s: no \"FILE WNID\" lines", val_labels);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = check_class_names(val_labels, classes);
  XXH3_64bits_update(s->h, "flat", 5);
  for (int i = 0; i < fn.n && st == MNT_OK; i++) {
    char **hit = bsearch(&wn.v[i], classes->v, (size_t)classes->n, sizeof *classes->v, cmp_str);
    char p[MNT_PATH_MAX];
    struct stat sb;
    if (child_path(p, sizeof p, src, fn.v[i])) {
      s->ignored++;
      continue;
    }
    if (stat(p, &sb) != 0) {
      MNT_WARN("%s (listed in %s): %s; skipped", p, val_labels, strerror(errno));
      s->ignored++;
      continue;
    }
    add_file(s, p, (int32_t)(hit - classes->v), &sb);
  }
  strlist_free(&fn);
  strlist_free(&wn);
  return st;
}

int mnt_convert_imagenet(const char *src, const char *out, int nshards, const mnt_imagenet_cfg *cfg,
                         const char *val_labels, long long seed, int force) {
  int records = cfg->size <= 0, size = records ? cfg->resize : cfg->size;
  if (size < 1 || (records && (cfg->max_side < 0 || (cfg->max_side > 0 && cfg->max_side < cfg->resize) ||
                               (cfg->codec == MNT_CODEC_JPEG && (cfg->quality < 1 || cfg->quality > 100))))) {
    MNT_ERR("convert imagenet: need a size, or a resize >= 1, a max side of 0 or >= the resize, a quality of 1..100");
    return MNT_EARG;
  }
  inet s = {.size = size, .h = XXH3_createState(),
            .fit = {.records = records, .S = size, .L = records ? cfg->max_side : 0, .codec = cfg->codec,
                    .quality = cfg->quality}};
  strlist classes = {0};
  int st = s.h ? MNT_OK : MNT_ENOMEM;
  if (st == MNT_OK) st = mnt_env_decode_max_bytes(&s.fit.max_bytes);
  if (st == MNT_OK) {
    XXH3_64bits_reset(s.h);
    /* decoder version: a change of decoding is a new input (.1: PNGs without gamma, as PIL reads them);
     * so is MNT_DECODE_MAX_BYTES, which decides what is skipped */
    const char *dv = records ? "imagenet 3.1" : "imagenet 2.1";
    XXH3_64bits_update(s.h, dv, strlen(dv) + 1);
    XXH3_64bits_update(s.h, &s.fit.max_bytes, sizeof s.fit.max_bytes);
    st = val_labels ? scan_flat(&s, src, val_labels, &classes) : scan_folders(&s, src, &classes);
  }
  if (st == MNT_OK && s.n == 0) {
    MNT_ERR("%s: no image files", src);
    st = MNT_EARG;
  }
  s.ids = malloc(MNT_CONVERT_PREFETCH * sizeof *s.ids);
  s.why = malloc(MNT_CONVERT_PREFETCH * sizeof *s.why);
  if (records) s.recs = calloc(MNT_CONVERT_PREFETCH, sizeof *s.recs);
  else s.pix = malloc((size_t)MNT_CONVERT_PREFETCH * size * size * 3);
  if (st == MNT_OK && (!s.ids || !s.why || (!s.pix && !s.recs))) st = MNT_ENOMEM;
  if (st == MNT_OK) {
    printf("convert imagenet: %lld image files in %d classes from %s (%lld other files ignored), %d threads\n",
           (long long)s.n, classes.n, src, (long long)s.ignored, omp_get_max_threads());
    char raw[4200], desc[4 * sizeof raw]; /* index.json's text is UTF-8: other bytes as \xHH */
    snprintf(raw, sizeof raw, "imagenet %s%s%s", src, val_labels ? " --labels " : "", val_labels ? val_labels : "");
    utf8_escape(raw, desc, sizeof desc);
    mnt_convert_source so = {.n = s.n, .size = size, .channels = 3, .nclasses = classes.n, .class_names = classes.v,
                             .ctx = &s, .get = inet_get, .prefetch = inet_prefetch, .inputs = XXH3_64bits_digest(s.h),
                             .description = desc, .ignored = s.ignored,
                             .version = records ? MNT_FORMAT_RECORDS : MNT_FORMAT_SQUARE, .codec = cfg->codec,
                             .quality = cfg->quality, .max_side = records ? cfg->max_side : 0,
                             .get_record = inet_get_record};
    st = mnt_convert_write(&so, out, nshards, seed, force);
  }
  for (int64_t i = 0; i < s.n; i++) free(s.files[i].path);
  for (int i = 0; s.recs && i < MNT_CONVERT_PREFETCH; i++) free(s.recs[i].data);
  strlist_free(&classes);
  XXH3_freeState(s.h);
  free(s.files);
  free(s.ids);
  free(s.why);
  free(s.pix);
  free(s.recs);
  return st;
}
