/* test_loader3.c — the loader on format 3 (images of their own sizes, io/data/loader.h), on two sets
 * written here from the same smooth pictures of many sizes, one raw and one JPEG (quality 90):
 * every sample once per epoch and the same global batches (ids and pixels) on 1, 2 and 4 ranks;
 * each raw-set image equal (within REF_TOL) to a float64 reference of torchvision's
 * RandomResizedCrop on the image's own width and height (the documented draws), cut out, resized,
 * flipped and normalised; the JPEG set's images against the raw set's at the same boxes (PSNR >=
 * MIN_PSNR); the GPU path's batches (out × out uint8 crops and whole-image boxes) against the
 * augmented ones within half a grey level; validation (Resize(out / 0.875) + CenterCrop(out)) against
 * its float64 reference and in the loader's train = 0 batches; a JPEG record whose checksum is
 * right but whose data ends early is MNT_EDATA naming the shard and the sample; --pad-crop is
 * refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "io/data/dataset.h"
#include "io/data/loader.h"
#include "io/convert/shard_write.h"
#include "src/log.h"

#include "tests/expect.h"

enum { N3 = 96, B3 = 8, OUT3 = 32, SHARDS3 = 3, DAMAGED = 41 };
#define REF_TOL 1e-4 /* as test_loader.c: a few float roundings of values <= 255, / (255 std) */
#define MIN_PSNR 35.0

/* ---- the sets ------------------------------------------------------------------------------- */
typedef struct src3 {
  int codec, damage;
  tjhandle tj;
  uint8_t *px, *buf;
  size_t len;
} src3;

static void dims3(int64_t i, int *w, int *h) {
  *w = 40 + (int)(i * 37 % 80);
  *h = 40 + (int)(i * 23 % 60);
}

/* a smooth picture: JPEG at quality 90 keeps it within ~40 dB */
static void picture3(int64_t i, int w, int h, uint8_t *p) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        double v = 128 + 80 * sin(x / (6.0 + i % 5) + 2 * c) * cos(y / (8.0 + i % 3) - c) + 0.3 * (x - y);
        p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
      }
}

static int get3(void *ctx, int64_t i, mnt_convert_record *r) {
  src3 *s = ctx;
  int w, h;
  dims3(i, &w, &h);
  free(s->px);
  s->px = malloc((size_t)w * h * 3);
  picture3(i, w, h, s->px);
  const uint8_t *data = s->px;
  size_t len = (size_t)w * h * 3;
  if (s->codec == MNT_CODEC_JPEG) {
    unsigned char *jpg = NULL;
    unsigned long jl = 0;
    if (tjCompress2(s->tj, s->px, w, 0, h, TJPF_RGB, &jpg, &jl, TJSAMP_420, 90, 0)) return MNT_ESYS;
    free(s->buf);
    s->buf = malloc(jl);
    memcpy(s->buf, jpg, jl);
    tjFree(jpg);
    data = s->buf;
    len = s->damage && i == DAMAGED ? jl * 2 / 3 : jl; /* its entropy data cut: a checksum of what is kept */
  }
  *r = (mnt_convert_record){.data = data, .len = len, .w = w, .h = h, .label = (int32_t)(i % 4),
                            .sum = {0.5 * w * h, 0.5 * w * h, 0.5 * w * h}, .sum2 = {0.3 * w * h, 0.3 * w * h, 0.3 * w * h}};
  return MNT_OK;
}

static void no_prefetch(void *ctx, const int64_t *ids, int n) { (void)ctx, (void)ids, (void)n; }

static int write3(const char *dir, int codec, int damage) {
  static char *names[4] = {"a", "b", "c", "d"};
  src3 s = {.codec = codec, .damage = damage, .tj = tjInitCompress()};
  mnt_convert_source so = {.n = N3, .size = 128, .channels = 3, .nclasses = 4, .class_names = names, .ctx = &s,
                           .version = MNT_FORMAT_RECORDS, .codec = codec, .quality = 90, .max_side = 256,
                           .get_record = get3, .prefetch = no_prefetch, .inputs = 7 + (uint64_t)damage,
                           .description = "test_loader3"};
  int st = mnt_convert_write(&so, dir, SHARDS3, 5, 0);
  free(s.px);
  free(s.buf);
  tjDestroy(s.tj);
  return st;
}

/* ---- the float64 references (independent of io/data/augment.c: its documented rules) -------------- */
static double ref_uni(uint64_t *s) {
  *s = mnt_mix(*s, 0x2545f4914f6cdd1dull);
  return (double)(*s >> 11) / 9007199254740992.0;
}
static double pyround(double v) { /* halves to even */
  double f = floor(v);
  return v - f > 0.5 || (v - f == 0.5 && fmod(f, 2) != 0) ? f + 1 : f;
}
/* torchvision's RandomResizedCrop.get_params on W×H, from the loader's stream of uniforms */
static void ref_box3(long long seed, int64_t epoch, int64_t id, int W, int H, double b[MNT_BOX_FLOATS]) {
  uint64_t s = mnt_mix(mnt_mix((uint64_t)seed, (uint64_t)epoch), (uint64_t)id);
  int found = 0;
  for (int t = 0; t < 10 && !found; t++) {
    double ta = (double)W * H * (0.08 + 0.92 * ref_uni(&s));
    double ar = exp(log(0.75) + (log(4.0 / 3.0) - log(0.75)) * ref_uni(&s));
    double w = pyround(sqrt(ta * ar)), h = pyround(sqrt(ta / ar));
    if (w > 0 && h > 0 && w <= W && h <= H) {
      b[0] = floor(ref_uni(&s) * (W - w + 1)), b[1] = floor(ref_uni(&s) * (H - h + 1)), b[2] = w, b[3] = h;
      found = 1;
    }
  }
  if (!found) {
    double r = (double)W / H, w = W, h = H;
    if (r < 0.75) h = pyround(W / 0.75);
    else if (r > 4.0 / 3.0) w = pyround(H * (4.0 / 3.0));
    b[0] = floor((W - w) / 2), b[1] = floor((H - h) / 2), b[2] = w, b[3] = h;
  }
  b[4] = ref_uni(&s) < 0.5;
}
/* torchvision's Resize(floor(out / 0.875)) + CenterCrop(out) as a box */
static void ref_val_box(int W, int H, int out, double b[MNT_BOX_FLOATS]) {
  int R = (int)floor(out / 0.875 + 1e-9), rw = W <= H ? R : (int)((double)R * W / H), rh = W <= H ? (int)((double)R * H / W) : R;
  double top = pyround((rh - out) / 2.0), left = pyround((rw - out) / 2.0);
  b[0] = left * W / rw, b[1] = top * H / rh, b[2] = (double)out * W / rw, b[3] = (double)out * H / rh, b[4] = 0;
}
/* the box resampled bilinearly (half-pixel centres), positions clamped to pixels lo..hi (the crop's
 * for a training box, the image's for validation), flipped, normalised; CHW */
static void ref_resample3(const uint8_t *src, int W, int H, const double *b, int crop, int out, const float *mean,
                          const float *std, double *dst) {
  double lo[2] = {0, 0}, hi[2] = {W - 1, H - 1};
  if (crop) lo[0] = b[0], lo[1] = b[1], hi[0] = b[0] + b[2] - 1, hi[1] = b[1] + b[3] - 1;
  for (int c = 0; c < 3; c++)
    for (int oy = 0; oy < out; oy++)
      for (int ox = 0; ox < out; ox++) {
        double fx = fmin(fmax(b[0] + (ox + 0.5) * b[2] / out - 0.5, lo[0]), hi[0]);
        double fy = fmin(fmax(b[1] + (oy + 0.5) * b[3] / out - 0.5, lo[1]), hi[1]);
        int x1 = (int)floor(fx), y1 = (int)floor(fy), x2 = x1 + 1 <= hi[0] ? x1 + 1 : x1, y2 = y1 + 1 <= hi[1] ? y1 + 1 : y1;
        double ax = fx - x1, ay = fy - y1;
#define P(x, y) ((double)src[((size_t)(y) * W + (x)) * 3 + c])
        double v = (1 - ay) * ((1 - ax) * P(x1, y1) + ax * P(x2, y1)) + ay * ((1 - ax) * P(x1, y2) + ax * P(x2, y2));
#undef P
        dst[((size_t)c * out + oy) * out + (b[4] != 0 ? out - 1 - ox : ox)] = (v / 255.0 - mean[c]) / std[c];
      }
}

/* ---- the checks ----------------------------------------------------------------------------- */
/* nb global batches from (epoch, cursor) on R ranks, concatenated in rank order */
static int batches3(mnt_dataset *d, int R, int train, int64_t epoch, int nb, float *img, int64_t *ids, int32_t *lab) {
  size_t per = 3 * OUT3 * OUT3;
  for (int r = 0; r < R; r++) {
    mnt_loader_cfg c = {.out_size = OUT3, .train = train, .global_batch = B3, .rank = r, .nranks = R, .seed = 9,
                        .threads = 1 + r % 3, .out_channels = 3};
    mnt_loader *l;
    if (mnt_loader_open(&l, d, &c, epoch, 0)) return 1;
    for (int k = 0; k < nb; k++) {
      const mnt_batch *b;
      if (mnt_loader_next(l, &b)) {
        mnt_loader_close(l);
        return 1;
      }
      for (int i = 0; i < b->n; i++) {
        size_t at = (size_t)k * B3 + (size_t)r * (B3 / R) + (size_t)i;
        ids[at] = b->ids[i];
        if (lab) lab[at] = b->labels[i];
        memcpy(img + at * per, b->images + (size_t)i * per, per * sizeof(float));
      }
    }
    mnt_loader_close(l);
  }
  return 0;
}

/* PSNR of two normalised images in grey levels (0..255) */
static double psnr3(const float *a, const float *b, size_t n, const float *std) {
  double se = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (a[i] - b[i]) * std[i / (n / 3)] * 255;
    se += d * d;
  }
  return se == 0 ? 999 : 10 * log10(255.0 * 255.0 * n / se);
}

/* every sample once per epoch; the same batches on 1, 2, 4 ranks */
static void check_order(mnt_dataset *d) {
  enum { NB = N3 / B3 };
  size_t per = 3 * OUT3 * OUT3;
  float *a = malloc(NB * B3 * per * sizeof(float)), *b = malloc(NB * B3 * per * sizeof(float));
  int64_t ia[NB * B3], ib[NB * B3];
  int seen[N3] = {0};
  EXPECT(batches3(d, 1, 1, 2, NB, a, ia, NULL) == 0, "a whole epoch on 1 rank");
  for (int i = 0; i < NB * B3; i++) seen[ia[i]]++;
  int once = 0;
  for (int i = 0; i < N3; i++) once += seen[i] == 1;
  EXPECT(once == N3, "%d of %d samples once in the epoch", once, N3);
  for (int R = 2; R <= 4; R += 2) {
    EXPECT(batches3(d, R, 1, 2, NB, b, ib, NULL) == 0, "an epoch on %d ranks", R);
    EXPECT(!memcmp(ia, ib, sizeof ia) && !memcmp(a, b, NB * B3 * per * sizeof(float)),
           "%s: %d ranks give other batches than 1 rank", d->dir, R);
  }
  free(a);
  free(b);
}

/* the raw set against the float64 reference (train: RandomResizedCrop; else validation) */
static void check_reference(mnt_dataset *d, int train) {
  size_t per = 3 * OUT3 * OUT3;
  float *img = malloc(2 * B3 * per * sizeof(float));
  double *want = malloc(per * sizeof(double));
  int64_t ids[2 * B3];
  int32_t lab[2 * B3];
  uint8_t *rec = NULL;
  size_t cap = 0, len;
  double worst = 0;
  int bad = 0, flips = 0;
  EXPECT(batches3(d, 2, train, 4, 2, img, ids, lab) == 0, "two batches");
  for (int i = 0; i < 2 * B3; i++) {
    int W, H;
    int32_t l;
    double box[MNT_BOX_FLOATS];
    if (mnt_dataset_dims(d, ids[i], &W, &H) || mnt_dataset_read_record(d, ids[i], &rec, &cap, &len, &l) ||
        len != (size_t)W * H * 3 || l != lab[i]) {
      EXPECT(0, "sample %lld: its record, size or label", (long long)ids[i]);
      continue;
    }
    if (train) ref_box3(9, 4, ids[i], W, H, box);
    else ref_val_box(W, H, OUT3, box);
    flips += box[4] != 0;
    ref_resample3(rec, W, H, box, train, OUT3, d->mean, d->std, want);
    double e = 0;
    for (size_t k = 0; k < per; k++) e = fmax(e, fabs(img[i * per + k] - want[k]));
    worst = fmax(worst, e);
    if (e > REF_TOL && bad++ < 3)
      fprintf(stderr, "  sample %lld (%dx%d): box %g %g %g %g flip %g: off the reference by %.3g\n", (long long)ids[i],
              W, H, box[0], box[1], box[2], box[3], box[4], e);
  }
  EXPECT(bad == 0, "%s: %d of %d images off the float64 reference by more than %g", train ? "training" : "validation",
         bad, 2 * B3, REF_TOL);
  EXPECT(!train || (flips > 0 && flips < 2 * B3), "training: %d of %d flipped", flips, 2 * B3);
  printf("  raw records, %s: %d images = the float64 reference of torchvision's %s within %.2g\n",
         train ? "training" : "validation", 2 * B3, train ? "RandomResizedCrop + flip" : "Resize + CenterCrop", worst);
  free(rec);
  free(img);
  free(want);
}

/* the JPEG set against the raw set: the same samples and boxes, pixels within JPEG's error */
static void check_jpeg(mnt_dataset *raw, mnt_dataset *jpg) {
  enum { NB = 4 };
  size_t per = 3 * OUT3 * OUT3;
  float *a = malloc(NB * B3 * per * sizeof(float)), *b = malloc(NB * B3 * per * sizeof(float));
  int64_t ia[NB * B3], ib[NB * B3];
  for (int train = 1; train >= 0; train--) {
    EXPECT(batches3(raw, 1, train, 1, NB, a, ia, NULL) == 0 && batches3(jpg, 1, train, 1, NB, b, ib, NULL) == 0,
           "batches of both sets");
    EXPECT(!memcmp(ia, ib, sizeof ia), "the two sets give other samples");
    double worst = 999, se = 0;
    for (int i = 0; i < NB * B3; i++) {
      double p = psnr3(a + i * per, b + i * per, per, raw->std);
      worst = fmin(worst, p);
      se += per * pow(10, -p / 10);
    }
    double pooled = 10 * log10(NB * B3 * per / se);
    EXPECT(worst >= MIN_PSNR, "%s: JPEG against raw: worst image %.1f dB < %.0f", train ? "training" : "validation",
           worst, MIN_PSNR);
    printf("  JPEG (Q90, 4:2:0) against raw records, %s, %d images at the same boxes: worst %.1f dB, pooled %.1f dB\n",
           train ? "training" : "validation", NB * B3, worst, pooled);
  }
  free(a);
  free(b);
}

/* the GPU path: out × out uint8 crops and whole-image boxes; the device's resampling of them is the
 * augmented batch within half a grey level (the uint8 rounding) */
static void check_raw_mode(mnt_dataset *d) {
  mnt_loader_cfg c = {.out_size = OUT3, .train = 1, .global_batch = B3, .rank = 0, .nranks = 1, .seed = 9,
                      .out_channels = 3};
  mnt_loader_cfg rc = c;
  rc.raw = 1;
  mnt_loader *l, *lr;
  const mnt_batch *a, *r;
  int side, ch;
  mnt_loader_raw_shape(d, OUT3, &side, &ch);
  EXPECT(side == OUT3 && ch == 3, "raw shape %d x %d", side, ch);
  if (mnt_loader_open(&l, d, &c, 0, B3) || mnt_loader_open(&lr, d, &rc, 0, B3)) {
    EXPECT(0, "loaders");
    return;
  }
  size_t per = 3 * OUT3 * OUT3;
  float got[3 * OUT3 * OUT3];
  double worst = 0, tol = 0.5 / (255 * fmin(d->std[0], fmin(d->std[1], d->std[2]))) + 1e-5;
  int flips = 0;
  if (mnt_loader_next(l, &a) == MNT_OK && mnt_loader_next(lr, &r) == MNT_OK) {
    EXPECT(!r->images && r->raw && r->size == OUT3 && r->channels == 3, "raw batch shape");
    for (int i = 0; i < r->n; i++) {
      const float *box = r->boxes + (size_t)i * MNT_BOX_FLOATS;
      EXPECT(box[0] == 0 && box[1] == 0 && box[2] == OUT3 && box[3] == OUT3 && r->ids[i] == a->ids[i],
             "raw box %d: (%g %g %g %g)", i, box[0], box[1], box[2], box[3]);
      flips += box[4] != 0;
      mnt_crop_resize(r->raw + (size_t)i * per, OUT3, 3, box, 0, OUT3, 3, d->mean, d->std, got);
      for (size_t k = 0; k < per; k++) worst = fmax(worst, fabs(got[k] - a->images[i * per + k]));
    }
  } else {
    EXPECT(0, "a batch of each");
  }
  EXPECT(worst <= tol, "the GPU path's images are off the CPU's by %.3g > %.3g", worst, tol);
  EXPECT(flips > 0 && flips < B3, "raw mode: %d of %d flipped", flips, B3);
  printf("  GPU path (uint8 %dx%d crops, the device flips and normalises): within %.3g of the CPU's (half a grey "
         "level: %.3g)\n", OUT3, OUT3, worst, tol);
  mnt_loader_close(l);
  mnt_loader_close(lr);
}

/* the records as stored, for a device that decodes (cfg.encoded): each sample's bytes are its record,
 * its width and height the image's, its box torchvision's in those pixels; the same samples in the same
 * order as the decoding loader's; refused on raw records and with raw images */
static void check_encoded_mode(mnt_dataset *jpg, mnt_dataset *raw) {
  mnt_loader_cfg c = {.out_size = OUT3,
                      .train = 1,
                      .global_batch = B3,
                      .rank = 0,
                      .nranks = 1,
                      .seed = 9,
                      .threads = 2,
                      .out_channels = 3};
  mnt_loader_cfg ec = c;
  ec.encoded = 1;
  mnt_loader *l, *le;
  tjhandle tj = tjInitDecompress();
  uint8_t *rec = NULL;
  size_t cap = 0, len;
  int bad_bytes = 0, bad_wh = 0, bad_lab = 0, bad_id = 0, flips = 0, n = 0;
  double worst = 0;
  for (int train = 1; train >= 0; train--) {
    c.train = ec.train = train;
    if (mnt_loader_open(&l, jpg, &c, 1, B3) || mnt_loader_open(&le, jpg, &ec, 1, B3)) {
      EXPECT(0, "loaders");
      return;
    }
    for (int k = 0; k < 3; k++) {
      const mnt_batch *a, *e;
      if (mnt_loader_next(l, &a) != MNT_OK || mnt_loader_next(le, &e) != MNT_OK) {
        EXPECT(0, "batch %d of each (%s)", k, mnt_last_error());
        break;
      }
      EXPECT(!e->images && !e->raw && e->enc && e->enc_off[0] == 0, "an encoded batch has records only");
      for (int i = 0; i < e->n; i++, n++) {
        int32_t lab;
        int W = 0, H = 0, sub, cs;
        bad_id += e->ids[i] != a->ids[i];
        if (mnt_dataset_read_record(jpg, e->ids[i], &rec, &cap, &len, &lab) != MNT_OK ||
            tjDecompressHeader3(tj, rec, (unsigned long)len, &W, &H, &sub, &cs) != 0) {
          EXPECT(0, "read record %lld and its JPEG header", (long long)e->ids[i]);
          continue;
        }
        bad_bytes += e->enc_off[i + 1] - e->enc_off[i] != len || memcmp(e->enc + e->enc_off[i], rec, len) != 0;
        bad_wh += e->wh[2 * i] != W || e->wh[2 * i + 1] != H; /* as the JPEG's own header says */
        bad_lab += e->labels[i] != lab || lab != a->labels[i];
        double want[MNT_BOX_FLOATS];
        if (train) ref_box3(9, e->epoch, e->ids[i], W, H, want);
        else ref_val_box(W, H, OUT3, want);
        for (int j = 0; j < MNT_BOX_FLOATS; j++) worst = fmax(worst, fabs(e->boxes[i * MNT_BOX_FLOATS + j] - want[j]));
        flips += train && e->boxes[i * MNT_BOX_FLOATS + 4] != 0;
      }
    }
    mnt_loader_close(l);
    mnt_loader_close(le);
  }
  free(rec);
  tjDestroy(tj);
  EXPECT(bad_id == 0 && bad_bytes == 0 && bad_wh == 0 && bad_lab == 0,
         "encoded: of %d samples %d other ids, %d other bytes, %d other sizes, %d other labels", n, bad_id, bad_bytes,
         bad_wh, bad_lab);
  EXPECT(worst < 1e-3, "encoded: a box off torchvision's by %g pixels", worst);
  EXPECT(flips > 0 && flips < 3 * B3, "encoded: %d of %d training boxes flipped", flips, 3 * B3);
  printf(
      "  encoded records (for a device that decodes): %d samples, bytes, sizes and labels as stored, boxes within "
      "%.2g px of torchvision's\n",
      n, worst);
  mnt_loader *x = NULL;
  mnt_loader_cfg both = ec;
  both.raw = 1;
  EXPECT(mnt_loader_open(&x, raw, &ec, 0, 0) == MNT_EARG, "encoded on raw records must be refused");
  EXPECT(mnt_loader_open(&x, jpg, &both, 0, 0) == MNT_EARG, "encoded with raw images must be refused");
  mnt_loader_close(x);
}

/* validation batches are mnt_loader_val_sample's images; a damaged JPEG is named */
static void check_val_and_damage(mnt_dataset *d, const char *damaged) {
  size_t per = 3 * OUT3 * OUT3;
  float *img = malloc(B3 * per * sizeof(float)), v[3 * OUT3 * OUT3];
  int64_t ids[B3];
  mnt_sample_ws *w = NULL;
  EXPECT(mnt_sample_ws_create(&w) == MNT_OK, "a workspace");
  EXPECT(batches3(d, 1, 0, 7, 1, img, ids, NULL) == 0, "a validation batch");
  int differ = 0;
  for (int i = 0; i < B3; i++) {
    int32_t lab;
    EXPECT(mnt_loader_val_sample_ws(d, ids[i], OUT3, 3, 0.875, w, v, &lab) == MNT_OK, "val sample");
    differ += memcmp(v, img + (size_t)i * per, sizeof v) != 0;
  }
  EXPECT(differ == 0, "%d validation batch images differ from mnt_loader_val_sample's", differ);
  mnt_dataset dd;
  if (mnt_dataset_open(damaged, &dd) == MNT_OK) {
    int nbad = 0, named = 0;
    for (int64_t g = 0; g < dd.total; g++) {
      int32_t lab;
      if (mnt_loader_val_sample_ws(&dd, g, OUT3, 3, 0.875, w, v, &lab) != MNT_EDATA) continue;
      nbad++;
      named += strstr(mnt_last_error(), "shard-0000") && strstr(mnt_last_error(), "sample") &&
               strstr(mnt_last_error(), "corrupt JPEG");
    }
    EXPECT(nbad == 1 && named == 1, "a cut JPEG record: %d samples fail, %d named (%s)", nbad, named, mnt_last_error());
    mnt_loader_cfg c = {.out_size = OUT3, .train = 1, .global_batch = (int)(dd.total / 2 * 2), .rank = 0, .nranks = 1,
                        .seed = 1, .threads = 2};
    mnt_loader *l;
    const mnt_batch *b;
    EXPECT(mnt_loader_open(&l, &dd, &c, 0, 0) == MNT_OK, "a loader on the damaged set");
    EXPECT(mnt_loader_next(l, &b) == MNT_EDATA, "the loader fails on the damaged record");
    printf("  a JPEG record cut short (its checksum right): %s\n", mnt_last_error());
    mnt_loader_close(l);
    c.pad_crop = 4;
    EXPECT(mnt_loader_open(&l, &dd, &c, 0, 0) == MNT_EARG, "--pad-crop on format 3 must be refused");
    mnt_dataset_close(&dd);
  } else {
    EXPECT(0, "open %s", damaged);
  }
  mnt_sample_ws_destroy(w);
  free(img);
}

int main(void) {
  char dir[] = "/tmp/mntrain-test-loader3-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  mnt_log_set_level(MNT_LOG_WARN);
  char raw[600], jpg[600], dmg[600];
  snprintf(raw, sizeof raw, "%s/raw", dir);
  snprintf(jpg, sizeof jpg, "%s/jpeg", dir);
  snprintf(dmg, sizeof dmg, "%s/damaged", dir);
  mnt_dataset dr, dj;
  if (write3(raw, MNT_CODEC_RAW, 0) || write3(jpg, MNT_CODEC_JPEG, 0) || write3(dmg, MNT_CODEC_JPEG, 1) ||
      mnt_dataset_open(raw, &dr) || mnt_dataset_open(jpg, &dj)) {
    fprintf(stderr, "test_loader3: could not write or open the sets in %s\n", dir);
    return 1;
  }
  EXPECT(dr.version == 3 && dj.version == 3 && dr.codec == MNT_CODEC_RAW && dj.codec == MNT_CODEC_JPEG &&
         dr.total == N3 && dj.total == N3, "two format 3 sets of %d", N3);
  check_order(&dj);
  check_reference(&dr, 1);
  check_reference(&dr, 0);
  check_jpeg(&dr, &dj);
  check_raw_mode(&dj);
  check_encoded_mode(&dj, &dr);
  check_val_and_damage(&dj, dmg);
  mnt_dataset_close(&dr);
  mnt_dataset_close(&dj);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("test_loader3: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
