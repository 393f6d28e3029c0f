/* test_jpegcrop.c — crop-aware JPEG decoding (io/data/jpegcrop.h) on JPEGs encoded here (odd sizes, grey,
 * 4:2:0, 4:2:2 and 4:4:4, quality 90): for boxes drawn as the loader draws them (training and
 * validation) and several output sizes, the region decoded at the chosen DCT scale and resampled
 * with the returned box against the whole image decoded at full scale (TurboJPEG, another entry
 * into the library) resampled with the original box: PSNR >= MIN_PSNR on every box, identical
 * pixels whenever the scale is 8/8; the scale is the smallest M/8 that keeps the box at least the
 * output size. Damaged records (truncated, a wrong header, flipped bytes, another size than the
 * index's) come back as MNT_EDATA or decode, never crash, and the decoder goes on decoding.
 *   test_jpegcrop            the test
 *   test_jpegcrop --bench    per-thread images/s at 224 px from ~500x375 photos stored at a 256 px
 *                            short side: crop-aware JPEG, whole-image JPEG, raw pixels (no test) */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <turbojpeg.h>

#include "io/data/augment.h"
#include "io/data/dataset.h" /* mnt_mix */
#include "io/data/jpegcrop.h"
#include "src/log.h"
#include "src/simd.h"

#include "tests/expect.h"

/* the crop-aware decode at 8/8 against the full decode, resampled at the same box (identical in fact) */
#define MIN_PSNR 35.0

static uint64_t rng_s = 1;
static double urand(void) {
  rng_s = mnt_mix(rng_s, 77);
  return (double)(rng_s >> 11) / 9007199254740992.0;
}

/* a picture-like W×H RGB image: smooth shading, soft-edged discs of other colours, a little noise */
static void picture(uint8_t *p, int W, int H, int seed) {
  rng_s = (uint64_t)seed * 7919u + 1;
  double cx[6], cy[6], rad[6], col[6][3];
  for (int k = 0; k < 6; k++) {
    cx[k] = urand() * W, cy[k] = urand() * H, rad[k] = (0.08 + 0.25 * urand()) * (W < H ? W : H);
    for (int c = 0; c < 3; c++) col[k][c] = 255 * urand();
  }
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) {
        double v = 110 + 50 * sin(6.28 * x / (0.7 * W) + c) + 40 * cos(6.28 * y / (0.45 * H) + 0.5 * c);
        for (int k = 0; k < 6; k++) {
          double d = hypot(x - cx[k], y - cy[k]) - rad[k], a = d < -1.5 ? 1 : d > 1.5 ? 0 : 0.5 - d / 3;
          v = (1 - a) * v + a * col[k][c];
        }
        v += 8 * (urand() - 0.5);
        p[((size_t)y * W + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
      }
}

typedef struct img {
  int W, H, grey, samp;
  unsigned char *jpg;
  unsigned long len;
  uint8_t *rgb; /* the whole image decoded at full scale (TurboJPEG) */
} img;

static int encode(img *m, const uint8_t *rgb, int quality) {
  tjhandle tj = tjInitCompress(), td = tjInitDecompress();
  int pf = m->grey ? TJPF_GRAY : TJPF_RGB, st = 1;
  uint8_t *src = (uint8_t *)rgb, *grey = NULL;
  if (m->grey) { /* the green channel as the grey image */
    grey = malloc((size_t)m->W * m->H);
    for (size_t i = 0; i < (size_t)m->W * m->H; i++) grey[i] = rgb[i * 3 + 1];
    src = grey;
  }
  m->jpg = NULL;
  m->rgb = malloc((size_t)m->W * m->H * 3);
  if (tj && td && m->rgb &&
      !tjCompress2(tj, src, m->W, 0, m->H, pf, &m->jpg, &m->len, m->grey ? TJSAMP_GRAY : m->samp, quality, 0) &&
      !tjDecompress2(td, m->jpg, m->len, m->rgb, m->W, 0, m->H, TJPF_RGB, 0))
    st = 0;
  free(grey);
  if (tj) tjDestroy(tj);
  if (td) tjDestroy(td);
  return st;
}

/* bilinear (half-pixel centres) of the piece (x0, y0, pw, ph) of a W×H RGB image into w×h */
static void resize_rgb(const uint8_t *s, int W, int H, double x0, double y0, double pw, double ph, uint8_t *d, int w,
                       int h) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      double fx = x0 + (x + 0.5) * pw / w - 0.5, fy = y0 + (y + 0.5) * ph / h - 0.5;
      fx = fx < 0 ? 0 : fx > W - 1 ? W - 1 : fx;
      fy = fy < 0 ? 0 : fy > H - 1 ? H - 1 : fy;
      int x1 = (int)fx, y1 = (int)fy, x2 = x1 + 1 < W ? x1 + 1 : x1, y2 = y1 + 1 < H ? y1 + 1 : y1;
      double ax = fx - x1, ay = fy - y1;
      for (int c = 0; c < 3; c++) {
#define P(xx, yy) (double)s[((size_t)(yy) * W + (xx)) * 3 + c]
        double v = (1 - ay) * ((1 - ax) * P(x1, y1) + ax * P(x2, y1)) + ay * ((1 - ax) * P(x1, y2) + ax * P(x2, y2));
#undef P
        d[((size_t)y * w + x) * 3 + c] = (uint8_t)(v + 0.5);
      }
    }
}

/* An ImageNet-like photograph from a picture file (a Debian wallpaper): decoded by TurboJPEG at the
 * smallest DCT scale that keeps it >= 2 srcW × 2 srcH, a random piece of srcW:srcH proportions
 * resized to srcW × srcH (the "original" photo, encoded into *src when src != NULL), then that with
 * its shorter side shrunk to `side`, as the converter stores it, into m (both quality 90, 4:2:0).
 * 1 when the file is missing or unreadable. */
static int photo(const char *path, int srcW, int srcH, int side, int seed, img *m, img *src) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = malloc((size_t)(n > 0 ? n : 1));
  int st = !buf || n <= 0 || fread(buf, 1, (size_t)n, f) != (size_t)n;
  fclose(f);
  tjhandle td = tjInitDecompress();
  int W = 0, H = 0, sub, cs, nsf, best = -1;
  tjscalingfactor *sf = tjGetScalingFactors(&nsf);
  st = st || !td || tjDecompressHeader3(td, buf, (unsigned long)n, &W, &H, &sub, &cs);
  for (int i = 0; !st && i < nsf; i++) { /* the smallest scaled size still >= 2 srcW x 2 srcH */
    int w = TJSCALED(W, sf[i]), h = TJSCALED(H, sf[i]);
    if (w >= 2 * srcW && h >= 2 * srcH && (best < 0 || w < TJSCALED(W, sf[best]))) best = i;
  }
  uint8_t *full = NULL, *orig = malloc((size_t)srcW * srcH * 3);
  if (!st && best >= 0) {
    W = TJSCALED(W, sf[best]), H = TJSCALED(H, sf[best]);
    full = malloc((size_t)W * H * 3);
    st = !full || !orig || tjDecompress2(td, buf, (unsigned long)n, full, W, 0, H, TJPF_RGB, 0);
  } else {
    st = 1;
  }
  if (!st) {
    rng_s = (uint64_t)seed * 31 + 5;
    double ph = H * (0.5 + 0.5 * urand()), pw = ph * srcW / srcH;
    if (pw > W) pw = W, ph = pw * srcH / srcW;
    resize_rgb(full, W, H, urand() * (W - pw), urand() * (H - ph), pw, ph, orig, srcW, srcH);
    m->W = srcW <= srcH ? side : (int)((double)side * srcW / srcH);
    m->H = srcW <= srcH ? (int)((double)side * srcH / srcW) : side;
    m->grey = 0, m->samp = TJSAMP_420;
    uint8_t *stored = malloc((size_t)m->W * m->H * 3);
    resize_rgb(orig, srcW, srcH, 0, 0, srcW, srcH, stored, m->W, m->H);
    st = !stored || encode(m, stored, 90);
    if (!st && src) {
      *src = (img){.W = srcW, .H = srcH, .samp = TJSAMP_420};
      st = encode(src, orig, 90);
    }
    free(stored);
  }
  free(buf);
  free(full);
  free(orig);
  if (td) tjDestroy(td);
  return st;
}

/* PSNR (dB) of a against b, values in [0, 1]; 999 when equal */
static double psnr(const float *a, const float *b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; i++) se += (double)(a[i] - b[i]) * (a[i] - b[i]);
  return se == 0 ? 999 : 10 * log10((double)n / se);
}

/* the smallest of 1/8, 2/8, 4/8, 8/8 keeping the box >= out both ways, computed here */
static int want_scale(const float *box, int out) {
  for (int m = 1; m < 8; m *= 2)
    if (box[2] * m / 8.0 >= out && box[3] * m / 8.0 >= out) return m;
  return 8;
}

static const float ZERO[3] = {0, 0, 0}, ONE[3] = {1, 1, 1};

/* the whole image decoded by TurboJPEG at M/8 (the same library's scaled IDCT, without cropping or
 * skipping): ceil(W M/8) × ceil(H M/8) */
static uint8_t *scaled_image(const img *m, int M, int *sw, int *sh) {
  tjhandle td = tjInitDecompress();
  *sw = (m->W * M + 7) / 8, *sh = (m->H * M + 7) / 8;
  uint8_t *p = malloc((size_t)*sw * *sh * 3);
  if (!td || !p || tjDecompress2(td, m->jpg, m->len, p, *sw, 0, *sh, TJPF_RGB, 0)) {
    free(p);
    p = NULL;
  }
  if (td) tjDestroy(td);
  return p;
}

/* PSNR of the region's pixels against the same pixels of ref (an rw × rh image), but for the two
 * pixels along each side of the region that is not a side of the image (the spare pixels of
 * jpegcrop.h: fancy upsampling sees no neighbour there); 999 when equal */
static double region_psnr(const mnt_jpeg_region *r, const uint8_t *ref, int rw, int rh) {
  double se = 0, n = 0;
  int x0 = r->x > 0 ? 2 : 0, x1 = r->x + r->w < rw ? r->w - 2 : r->w;
  int y0 = r->y > 0 ? 2 : 0, y1 = r->y + r->h < rh ? r->h - 2 : r->h;
  for (int y = y0; y < y1; y++)
    for (int x = 3 * x0; x < 3 * x1; x++, n++) {
      double d = (double)r->pix[(size_t)y * r->stride + x] - ref[((size_t)(r->y + y) * rw + r->x) * 3 + x];
      se += d * d;
    }
  return se == 0 ? 999 : 10 * log10(255.0 * 255.0 * n / se);
}

/* what the boxes gave at each DCT scale M: how many, and the PSNR against the full decode resampled
 * at the original box (worst, and pooled over all boxes of that scale) */
typedef struct stats {
  int n[9];
  double worst_point[9], se_point[9], vals_point[9];
} stats;

/* one box of one image (scaled: TurboJPEG's decodes at M/8, M = 1, 2, 4) */
static void check_box(mnt_jpegcrop *j, const img *m, uint8_t *const scaled[9], const float *box, int tb, int out,
                      float *a, float *b, stats *s) {
  mnt_jpeg_region r;
  if (mnt_jpegcrop_decode(j, m->jpg, m->len, m->W, m->H, box, out, 0, "test", 0, &r) != MNT_OK) {
    EXPECT(0, "%dx%d: decode of box (%g %g %g %g) to %d failed", m->W, m->H, box[0], box[1], box[2], box[3], out);
    return;
  }
  int M = r.scale, sw = (m->W * M + 7) / 8, sh = (m->H * M + 7) / 8, want = want_scale(box, out);
  EXPECT(M == want, "%dx%d box %gx%g to %d: scale %d/8, the smallest is %d/8", m->W, m->H, box[2], box[3], out, M, want);
  if (M != want || M < 1 || M > 8 || (M < 8 && !scaled[M])) return;
  EXPECT(r.x >= 0 && r.y >= 0 && r.x + r.w <= sw && r.y + r.h <= sh && r.stride == (size_t)r.w * 3,
         "%dx%d at %d/8: region %d,%d %dx%d outside the %dx%d scaled image", m->W, m->H, M, r.x, r.y, r.w, r.h, sw, sh);
  /* the region against the whole image decoded at its scale, then resampled with its box against that
   * image resampled with the original box scaled by M/8 */
  const uint8_t *ref = M == 8 ? m->rgb : scaled[M];
  double k = M / 8.0, pr = region_psnr(&r, ref, sw, sh);
  float sbox[MNT_BOX_FLOATS] = {(float)(box[0] * k), (float)(box[1] * k), (float)(box[2] * k), (float)(box[3] * k), box[4]};
  mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, 3, r.box, tb, out, 3, ZERO, ONE, a);
  mnt_crop_resize_wh(ref, sw, sh, (size_t)sw * 3, 3, sbox, tb, out, 3, ZERO, ONE, b);
  double pb = psnr(a, b, (size_t)3 * out * out);
  EXPECT(pr == 999 && pb >= 100, "%dx%d box (%g %g %g %g) to %d at %d/8: region PSNR %.1f (not the pixels of the whole "
         "image decoded at that scale) or resampled PSNR %.1f < 100", m->W, m->H, box[0], box[1], box[2], box[3], out,
         M, pr, pb);
  mnt_crop_resize_wh(m->rgb, m->W, m->H, (size_t)m->W * 3, 3, box, tb, out, 3, ZERO, ONE, b);
  double se = 0, pp;
  for (int i = 0; i < 3 * out * out; i++) se += (double)(a[i] - b[i]) * (a[i] - b[i]);
  pp = se == 0 ? 999 : 10 * log10(3.0 * out * out / se);
  if (M == 8) EXPECT(pp >= MIN_PSNR, "at 8/8: PSNR %.1f against the full decode", pp); /* (>= 100 above) */
  s->n[M]++;
  s->worst_point[M] = fmin(s->worst_point[M], pp);
  s->se_point[M] += se, s->vals_point[M] += 3.0 * out * out;
}

/* every image × boxes (one validation box, 40 training boxes) × output sizes */
static void check_image(mnt_jpegcrop *j, const img *m, stats *s) {
  static const int OUTS[] = {224, 160, 112, 64, 32, 7};
  float *a = malloc(sizeof(float) * 3 * 224 * 224), *b = malloc(sizeof(float) * 3 * 224 * 224);
  uint8_t *scaled[9] = {NULL};
  int sw, sh;
  for (int M = 1; M < 8; M *= 2) scaled[M] = scaled_image(m, M, &sw, &sh);
  mnt_aug_cfg ac = {.train = 1, .seed = 3};
  for (int oi = 0; a && b && oi < (int)(sizeof OUTS / sizeof OUTS[0]); oi++)
    for (int id = -1; id < 40; id++) {
      float box[MNT_BOX_FLOATS];
      if (id < 0) mnt_val_box(m->W, m->H, OUTS[oi], 0.875, box);
      else mnt_aug_box_wh(&ac, m->W, m->H, oi, id, box);
      check_box(j, m, scaled, box, id >= 0, OUTS[oi], a, b, s); /* training boxes: cut out first */
    }
  for (int M = 1; M < 8; M *= 2) free(scaled[M]);
  free(a);
  free(b);
}

static void print_stats(const char *what, const stats *s) {
  printf("  %s: the boxes by DCT scale, each the pixels of the whole image decoded at that scale; PSNR "
         "against the full-scale decode resampled at the box (worst, pooled; 999: identical):\n", what);
  for (int M = 8; M >= 1; M /= 2)
    if (s->n[M])
      printf("    %d/8: %4d boxes, %5.1f dB, %5.1f dB\n", M, s->n[M], s->worst_point[M],
             s->se_point[M] ? 10 * log10(s->vals_point[M] / s->se_point[M]) : 999.0);
}

/* damaged records: MNT_EDATA (or, for flipped entropy bytes, maybe a decode), never a crash or a
 * hang; the decoder decodes the good record the same afterwards */
static void check_damage(mnt_jpegcrop *j, const img *m) {
  float whole[MNT_BOX_FLOATS] = {0, 0, (float)m->W, (float)m->H, 0};
  int out = 16;
  mnt_jpeg_region r;
  float before[3 * 16 * 16];
  EXPECT(mnt_jpegcrop_decode(j, m->jpg, m->len, m->W, m->H, whole, out, 0, "good", 5, &r) == MNT_OK, "good record");
  mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, 3, r.box, 0, out, 3, ZERO, ONE, before);
  uint8_t *bad = malloc(m->len);
  memcpy(bad, m->jpg, m->len);
  EXPECT(mnt_jpegcrop_decode(j, bad, m->len / 2, m->W, m->H, whole, out, 0, "truncated", 1, &r) == MNT_EDATA,
         "a record cut in half decodes");
  EXPECT(mnt_jpegcrop_decode(j, bad, 0, m->W, m->H, whole, out, 0, "empty", 2, &r) == MNT_EDATA, "an empty record decodes");
  EXPECT(mnt_jpegcrop_decode(j, bad, m->len, m->W + 1, m->H, whole, out, 0, "other size", 3, &r) == MNT_EDATA,
         "a %dx%d record decodes as %dx%d", m->W, m->H, m->W + 1, m->H);
  bad[0] = 0;
  EXPECT(mnt_jpegcrop_decode(j, bad, m->len, m->W, m->H, whole, out, 0, "no SOI", 4, &r) == MNT_EDATA,
         "a record without its start marker decodes");
  int edata = 0, ok = 0, other = 0;
  for (int t = 0; t < 300; t++) { /* a few bytes flipped anywhere (headers, tables, entropy data) */
    memcpy(bad, m->jpg, m->len);
    rng_s = (uint64_t)t + 99;
    for (int k = 0; k < 1 + t % 4; k++) bad[(size_t)(urand() * m->len)] ^= (uint8_t)(1 + urand() * 255);
    int st = mnt_jpegcrop_decode(j, bad, m->len, m->W, m->H, whole, out, 0, "flipped", t, &r);
    edata += st == MNT_EDATA, ok += st == MNT_OK, other += st != MNT_OK && st != MNT_EDATA;
  }
  EXPECT(other == 0 && edata > 0, "flipped bytes: %d MNT_EDATA, %d decoded, %d other statuses", edata, ok, other);
  printf("  damaged %dx%d records: truncated, empty, other size, no SOI: MNT_EDATA; 300 with flipped bytes: %d "
         "MNT_EDATA, %d decoded (entropy data), 0 crashes\n", m->W, m->H, edata, ok);
  float after[3 * 16 * 16];
  EXPECT(mnt_jpegcrop_decode(j, m->jpg, m->len, m->W, m->H, whole, out, 0, "good", 5, &r) == MNT_OK, "good record");
  mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, 3, r.box, 0, out, 3, ZERO, ONE, after);
  EXPECT(!memcmp(before, after, sizeof before), "after damaged records the decoder decodes another image");
  free(bad);
}

/* ---- --bench ------------------------------------------------------------------------------- */
enum { NB = 48, BOUT = 224 };
typedef struct bset {
  img st[NB], src[NB]; /* stored (256 px short side) and original (~500x375) */
  float box[NB][MNT_BOX_FLOATS];
  float *dst;
} bset;

/* this thread's CPU seconds: per-thread rates on a machine others share */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* the mode's images per CPU second of one thread, for about `secs` of them */
static double bench_mode(bset *b, mnt_jpegcrop *j, tjhandle td, int mode, double secs) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  static uint8_t full[4096 * 4096 * 3];
  double t0 = cpu_now(), t;
  long n = 0;
  do {
    for (int i = 0; i < NB; i++, n++) {
      const img *m = &b->st[i];
      mnt_jpeg_region r;
      if (mode == 0) { /* raw: the stored pixels resampled */
        mnt_crop_resize_wh(m->rgb, m->W, m->H, (size_t)m->W * 3, 3, b->box[i], 1, BOUT, 3, mean, std, b->dst);
      } else if (mode <= 3) { /* crop-aware: the chosen scale, 8/8, or the smallest of all M/8 (M = 1..8) */
        int sc = mode == 1 ? 0 : mode == 2 ? 8 : 1;
        while (mode == 3 && sc < 8 && fmin(b->box[i][2], b->box[i][3]) * sc < 8.0 * BOUT) sc++;
        if (mnt_jpegcrop_decode(j, m->jpg, m->len, m->W, m->H, b->box[i], BOUT, sc, "bench", i, &r)) return -1;
        mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, 3, r.box, 1, BOUT, 3, mean, std, b->dst);
      } else { /* the whole image decoded (TurboJPEG), stored or original */
        const img *o = mode == 4 ? m : &b->src[i];
        float ob[MNT_BOX_FLOATS];
        memcpy(ob, b->box[i], sizeof ob);
        for (int k = 0; k < 4 && mode == 5; k++) ob[k] *= (float)o->W / m->W;
        if (tjDecompress2(td, o->jpg, o->len, full, o->W, 0, o->H, TJPF_RGB, 0)) return -1;
        mnt_crop_resize_wh(full, o->W, o->H, (size_t)o->W * 3, 3, ob, 1, BOUT, 3, mean, std, b->dst);
      }
    }
    t = cpu_now() - t0;
  } while (t < secs);
  return n / t;
}

static int bench(void) {
  static bset b;
  glob_t g;
  int have = glob("/usr/share/backgrounds/*.jpg", 0, NULL, &g) == 0 && g.gl_pathc > 0, np = 0;
  size_t bytes = 0, srcbytes = 0;
  mnt_aug_cfg ac = {.train = 1, .seed = 1};
  for (int i = 0; i < NB; i++) {
    int port = i % 4 == 3, W = port ? 375 : 500, H = port ? 500 : 375; /* 3 of 4 landscape */
    if (!have || photo(g.gl_pathv[i % g.gl_pathc], W, H, 256, i, &b.st[i], &b.src[i])) {
      uint8_t *rgb = malloc((size_t)W * H * 3), *st = malloc((size_t)W * H * 3);
      b.src[i] = (img){.W = W, .H = H, .samp = TJSAMP_420};
      b.st[i] = (img){.W = port ? 256 : 341, .H = port ? 341 : 256, .samp = TJSAMP_420};
      picture(rgb, W, H, i);
      resize_rgb(rgb, W, H, 0, 0, W, H, st, b.st[i].W, b.st[i].H);
      if (encode(&b.src[i], rgb, 90) || encode(&b.st[i], st, 90)) return 1;
      free(rgb);
      free(st);
    } else {
      np++;
    }
    bytes += b.st[i].len, srcbytes += b.src[i].len;
    mnt_aug_box_wh(&ac, b.st[i].W, b.st[i].H, 0, i, b.box[i]);
  }
  if (have) globfree(&g);
  b.dst = aligned_alloc(64, sizeof(float) * 3 * BOUT * BOUT);
  mnt_jpegcrop *j;
  tjhandle td = tjInitDecompress();
  if (!b.dst || !td || mnt_jpegcrop_create(&j)) return 1;
  printf("# %d images: %d photographs (/usr/share/backgrounds), %d synthetic; originals ~500x375 (%zu bytes "
         "each on average), stored at a 256 px short side, Q90 4:2:0 (%zu bytes); RandomResizedCrop boxes to %d px, "
         "float32 normalised; images per CPU second of one thread (simd %s)\n", NB, np, NB - np, srcbytes / NB, bytes / NB, BOUT,
         mnt_simd_variant());
  static const char *const NAMES[] = {"raw stored pixels", "jpeg crop-aware, 1/8 2/8 4/8 8/8 (the loader's)",
                                      "jpeg crop-aware, always 8/8", "jpeg crop-aware, any M/8, M = 1..8",
                                      "jpeg whole stored image (TurboJPEG)", "jpeg whole ~500x375 original (TurboJPEG)"};
  for (int mode = 0; mode < 6; mode++) {
    double r = bench_mode(&b, j, td, mode, 1.5);
    printf("%-50s %6.0f img/s per thread-CPU-second\n", NAMES[mode], r);
  }
  printf("# the whole ~500x375 original decoded at each DCT scale (no resampling)\n");
  for (int sc = 1; sc <= 8; sc++) {
    double t0 = cpu_now(), t;
    long n = 0;
    do {
      for (int i = 0; i < NB; i++, n++) {
        const img *o = &b.src[i];
        float whole[MNT_BOX_FLOATS] = {0, 0, (float)o->W, (float)o->H, 0};
        mnt_jpeg_region r;
        int out = (o->W < o->H ? o->W : o->H) * sc / 8; /* its samples span the whole image: all of it decoded */
        if (mnt_jpegcrop_decode(j, o->jpg, o->len, o->W, o->H, whole, out, sc, "bench", i, &r)) return 1;
      }
      t = cpu_now() - t0;
    } while (t < 1.0);
    printf("scale %d/8 %8.0f img/s\n", sc, n / t);
  }
  mnt_jpegcrop_destroy(j);
  tjDestroy(td);
  return 0;
}

static stats stats_new(void) {
  stats s;
  memset(&s, 0, sizeof s);
  for (int M = 0; M < 9; M++) s.worst_point[M] = 999;
  return s;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--bench")) return bench();
  mnt_log_set_level(MNT_LOG_WARN + (getenv("MNT_TEST_VERBOSE") != NULL)); /* the damaged records' errors: expected */
  static const struct { int W, H, grey, samp; } IMGS[] = {
      {341, 256, 0, TJSAMP_420}, {256, 341, 0, TJSAMP_444}, {257, 199, 0, TJSAMP_422},
      {500, 375, 0, TJSAMP_420}, {63, 97, 1, 0},            {333, 251, 1, 0}};
  mnt_jpegcrop *j;
  if (mnt_jpegcrop_create(&j)) return 1;
  stats synth = stats_new(), photos = stats_new();
  for (int i = 0; i < (int)(sizeof IMGS / sizeof IMGS[0]); i++) {
    img m = {.W = IMGS[i].W, .H = IMGS[i].H, .grey = IMGS[i].grey, .samp = IMGS[i].samp};
    uint8_t *rgb = malloc((size_t)m.W * m.H * 3);
    picture(rgb, m.W, m.H, i + 1);
    if (encode(&m, rgb, 90)) {
      EXPECT(0, "TurboJPEG could not encode or decode a %dx%d image: %s", m.W, m.H, tjGetErrorStr());
      continue;
    }
    printf("  synthetic picture %dx%d %s Q90: %lu bytes\n", m.W, m.H, m.grey ? "grey" : m.samp == TJSAMP_420 ? "4:2:0"
           : m.samp == TJSAMP_422 ? "4:2:2" : "4:4:4", m.len);
    check_image(j, &m, &synth);
    if (i == 0 || i == 4) check_damage(j, &m);
    free(rgb);
    free(m.rgb);
    tjFree(m.jpg);
  }
  print_stats("synthetic", &synth);
  glob_t g; /* photographs where a Debian package has put some (mate-backgrounds): ~500x375 pieces of them */
  if (glob("/usr/share/backgrounds/*.jpg", 0, NULL, &g) == 0) {
    int n = 0;
    for (size_t i = 0; i < g.gl_pathc && n < 6; i++) {
      img m;
      if (photo(g.gl_pathv[i], i % 2 ? 375 : 500, i % 2 ? 500 : 375, 256, (int)i, &m, NULL)) continue;
      check_image(j, &m, &photos);
      free(m.rgb);
      tjFree(m.jpg);
      n++;
    }
    globfree(&g);
    if (n) print_stats("photographs (/usr/share/backgrounds) at a 256 px short side", &photos);
  }
  mnt_jpegcrop_destroy(j);
  printf("%s: %d checks, %d failures\n", argv[0], checks, failures);
  return failures ? 1 : 0;
}
