/* test_loader.c — the distributed loader on a synthetic dataset made here: every sample exactly
 * once per epoch over 1-4 ranks; the same global batches (ids and augmented pixels) on 1, 2 and 4
 * ranks; resuming from a saved position continues the same stream, across an epoch boundary;
 * the small-image augmentation (RandomCrop with padding) and the whole-image validation crop;
 * a truncated shard, an out-of-range label and a flipped pixel byte (the per-image checksum) are
 * errors that name the file and the sample; an empty dataset is refused at open; format 1 still
 * opens, a newer format does not. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "io/data/loader.h"
#include "src/log.h"

#include "tests/expect.h"

#include <hdf5.h>

enum { N = 1000, B = 12, S = 16, OUT = 12 };

/* global batch k of a run on R ranks, concatenated in rank order */
static void global_batches(mnt_dataset *d, int R, int64_t epoch, int64_t cursor, int nb, int train, float *img,
                           int64_t *ids) {
  size_t per_img = 3 * OUT * OUT;
  for (int r = 0; r < R; r++) {
    mnt_loader_cfg c = {.out_size = OUT, .train = train, .global_batch = B, .rank = r, .nranks = R, .seed = 5,
                        .threads = 1 + r % 3};
    mnt_loader *l;
    if (mnt_loader_open(&l, d, &c, epoch, cursor)) { failures++; return; }
    for (int k = 0; k < nb; k++) {
      const mnt_batch *b;
      if (mnt_loader_next(l, &b)) { failures++; break; }
      for (int i = 0; i < b->n; i++) {
        size_t slot = (size_t)k * B + (size_t)r * (B / R) + (size_t)i;
        ids[slot] = b->ids[i];
        memcpy(img + slot * per_img, b->images + (size_t)i * per_img, per_img * sizeof(float));
      }
    }
    mnt_loader_close(l);
  }
}

/* An independent float64 reference of the augmentation (not the loader's code, only its documented
 * rules, io/data/loader.h and io/data/loader.c): the box of sample id in epoch, drawn as torchvision's
 * RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3, 10 tries, else the whole image) or, with pad,
 * RandomCrop(S, padding=pad) (a shift of -pad..pad each way), then a flip with probability 1/2;
 * the draws are the loader's documented stream: uniform doubles from mnt_mix of (seed, epoch, id). */
static double ref_uni(uint64_t *s) {
  *s = mnt_mix(*s, 0x2545f4914f6cdd1dull);
  return (double)(*s >> 11) / 9007199254740992.0;
}
static void ref_box(long long seed, int64_t epoch, int64_t id, int side, int pad, double box[MNT_BOX_FLOATS]) {
  uint64_t s = mnt_mix(mnt_mix((uint64_t)seed, (uint64_t)epoch), (uint64_t)id);
  double x0 = 0, y0 = 0, w = side, h = side;
  if (pad > 0) {
    x0 = floor(ref_uni(&s) * (2 * pad + 1)) - pad;
    y0 = floor(ref_uni(&s) * (2 * pad + 1)) - pad;
  } else {
    for (int t = 0; t < 10; t++) {
      double target = (double)side * side * (0.08 + 0.92 * ref_uni(&s));
      double ratio = exp(log(0.75) + (log(4.0 / 3.0) - log(0.75)) * ref_uni(&s));
      double cw = round(sqrt(target * ratio)), ch = round(sqrt(target / ratio));
      if (cw < 1 || ch < 1 || cw > side || ch > side) continue;
      x0 = floor(ref_uni(&s) * (side - cw + 1)); /* torch.randint(0, side - cw + 1) */
      y0 = floor(ref_uni(&s) * (side - ch + 1));
      w = cw, h = ch;
      break;
    }
  }
  box[0] = x0, box[1] = y0, box[2] = w, box[3] = h, box[4] = ref_uni(&s) < 0.5;
}

/* the box resampled as documented: bilinear with half-pixel centres (torchvision / PyTorch
 * interpolate, align_corners=False, no antialias): output pixel o samples the source at
 * x0 + (o + 0.5) w / out - 0.5, clamped to [0, side-1] (the edge repeated), or with pad the pixel
 * value 0 where that point is more than half a pixel outside the image; flipped: output column
 * out-1-o; normalised (v / 255 - mean) / std. Everything in double. */
static double ref_pixel(const uint8_t *src, int side, int c, double fx, double fy) {
  fx = fx < 0 ? 0 : fx > side - 1 ? side - 1 : fx;
  fy = fy < 0 ? 0 : fy > side - 1 ? side - 1 : fy;
  int x1 = (int)floor(fx), y1 = (int)floor(fy);
  int x2 = x1 + 1 < side ? x1 + 1 : x1, y2 = y1 + 1 < side ? y1 + 1 : y1;
  double ax = fx - x1, ay = fy - y1;
#define P(x, y) ((double)src[((size_t)(y) * side + (x)) * 3 + c])
  return (1 - ay) * ((1 - ax) * P(x1, y1) + ax * P(x2, y1)) + ay * ((1 - ax) * P(x1, y2) + ax * P(x2, y2));
#undef P
}
static void ref_resample(const uint8_t *src, int side, const double box[MNT_BOX_FLOATS], int pad, int out,
                         const float *mean, const float *std, double *dst) {
  for (int c = 0; c < 3; c++)
    for (int oy = 0; oy < out; oy++)
      for (int ox = 0; ox < out; ox++) {
        double fx = box[0] + (ox + 0.5) * box[2] / out - 0.5, fy = box[1] + (oy + 0.5) * box[3] / out - 0.5;
        int outside = pad && (fx <= -0.5 || fx >= side - 0.5 || fy <= -0.5 || fy >= side - 0.5);
        double v = outside ? 0 : ref_pixel(src, side, c, fx, fy);
        int d = box[4] != 0 ? out - 1 - ox : ox;
        dst[((size_t)c * out + oy) * out + d] = (v / 255.0 - mean[c]) / std[c];
      }
}

/* raw mode (the GPU path): the stored pixels and each sample's box, which mnt_crop_resize turns
 * into exactly the augmented loader's images; its buffers come from the given allocator. Both are
 * also checked against the float64 reference above: each box exactly (whole pixels), each image
 * (the augmented loader's and mnt_crop_resize's of the raw box) within REF_TOL. The loader computes
 * in float from uint8 values: each of its ~8 roundings is at most 2^-24 relative of a value
 * <= 255, a few 1e-4 levels at most, times 1/(255 std) with std >= 0.1: < 1e-5 after normalising;
 * REF_TOL = 1e-4 is 10 times that, and still ~40 times below what one grey level (1/(255 std)
 * >= 4e-3 for std <= 1) moves a value: a box off by one pixel or another interpolation moves
 * the images by whole grey levels on these noisy stripes. */
#define REF_TOL 1e-4
static int allocs;
static int count_alloc(void *ctx, size_t bytes, void **p) {
  (void)ctx;
  allocs++;
  *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  return *p ? MNT_OK : MNT_ENOMEM;
}
static void count_free(void *ctx, void *p) {
  (void)ctx;
  allocs--;
  free(p);
}
static void raw_matches(mnt_dataset *d, int pad) {
  mnt_loader_cfg c = {.out_size = OUT, .train = 1, .global_batch = B, .rank = 1, .nranks = 2, .seed = 5, .threads = 2,
                      .pad_crop = pad};
  mnt_loader_cfg rc = c;
  rc.raw = 1;
  rc.host_alloc = count_alloc;
  rc.host_free = count_free;
  mnt_loader *l, *lr;
  if (mnt_loader_open(&l, d, &c, 2, B)) { failures++; return; }
  if (mnt_loader_open(&lr, d, &rc, 2, B)) { failures++; mnt_loader_close(l); return; }
  EXPECT(allocs > 0, "raw mode: the allocator hook was not used");
  size_t per = 3 * OUT * OUT, px = (size_t)S * S * 3;
  float got[3 * OUT * OUT];
  double want[3 * OUT * OUT], rbox[MNT_BOX_FLOATS];
  int bad = 0, badbox = 0, badref = 0, flips = 0, n = 0;
  double worst = 0;
  for (int k = 0; k < 3; k++) {
    const mnt_batch *a, *r;
    if (mnt_loader_next(l, &a) || mnt_loader_next(lr, &r)) { failures++; break; }
    EXPECT(!r->images && r->raw && r->boxes && r->size == S, "raw batch shape");
    for (int i = 0; i < a->n && r->raw; i++, n++) {
      EXPECT(a->ids[i] == r->ids[i] && a->labels[i] == r->labels[i], "raw mode: another sample");
      const float *box = r->boxes + (size_t)i * MNT_BOX_FLOATS;
      mnt_crop_resize(r->raw + i * px, S, 3, box, pad > 0, OUT, 3, d->mean, d->std, got);
      bad += memcmp(got, a->images + i * per, sizeof got) != 0;
      ref_box(c.seed, r->epoch, r->ids[i], S, pad, rbox);
      int same = 1;
      for (int j = 0; j < MNT_BOX_FLOATS; j++) same &= box[j] == rbox[j];
      if (!same && badbox++ < 3)
        fprintf(stderr, "  sample %lld: box (%g %g %g %g flip %g), the reference's (%g %g %g %g flip %g)\n",
                (long long)r->ids[i], box[0], box[1], box[2], box[3], box[4], rbox[0], rbox[1], rbox[2], rbox[3],
                rbox[4]);
      flips += rbox[4] != 0;
      ref_resample(r->raw + i * px, S, rbox, pad, OUT, d->mean, d->std, want);
      double e = 0;
      for (size_t j = 0; j < per; j++) {
        double e1 = fabs(got[j] - want[j]), e2 = fabs(a->images[i * per + j] - want[j]);
        e = fmax(e, fmax(e1, e2));
      }
      worst = fmax(worst, e);
      badref += e > REF_TOL;
    }
  }
  EXPECT(bad == 0, "raw mode (pad %d): %d images differ from the augmented loader's", pad, bad);
  EXPECT(badbox == 0, "pad %d: %d of %d boxes differ from the reference's", pad, badbox, n);
  EXPECT(badref == 0, "pad %d: %d of %d images differ from the float64 reference by more than %g (worst %.3g)", pad,
         badref, n, REF_TOL, worst);
  EXPECT(n >= 12 && flips > 0 && flips < n, "pad %d: %d samples, %d flipped: the check saw both cases", pad, n, flips);
  mnt_loader_close(l);
  mnt_loader_close(lr);
  EXPECT(allocs == 0, "raw mode: %d buffers not given back to the allocator", allocs);
  if (!bad && !badbox && !badref)
    printf("  raw batches + boxes = augmented batches = the float64 reference within %.2g (pad %d)\n", worst, pad);
}

int main(void) {
  char dir[] = "/tmp/mntrain-test-loader-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char ds[600];
  snprintf(ds, sizeof ds, "%s/synth", dir);
  if (mnt_convert_synth(ds, 10, N, S, 3, 9, 0)) return 1;
  mnt_dataset d;
  if (mnt_dataset_open(ds, &d)) return 1;
  EXPECT(d.total == N && d.nshards == 3 && d.channels == 3 && d.size == S, "dataset shape");

  /* exactly once per epoch, for 1..4 ranks; labels are the dataset's */
  int64_t per_epoch = N / B * B;
  for (int R = 1; R <= 4; R++) {
    int *seen = calloc(N, sizeof *seen);
    int64_t got = 0;
    for (int r = 0; r < R; r++) {
      mnt_loader_cfg c = {.out_size = OUT, .train = 1, .global_batch = B, .rank = r, .nranks = R, .seed = 5, .threads = 2};
      mnt_loader *l;
      if (mnt_loader_open(&l, &d, &c, 3, 0)) { failures++; continue; }
      EXPECT(mnt_loader_batches_per_epoch(l) == N / B, "batches per epoch");
      for (int64_t k = 0; k < N / B; k++) {
        const mnt_batch *b;
        if (mnt_loader_next(l, &b)) { failures++; break; }
        EXPECT(b->epoch == 3 && b->cursor == k * B, "batch %lld at (%lld, %lld)", (long long)k, (long long)b->epoch, (long long)b->cursor);
        for (int i = 0; i < b->n; i++) {
          seen[b->ids[i]]++;
          got++;
          uint8_t px[S * S * 3];
          int32_t lab;
          EXPECT(mnt_dataset_read(&d, b->ids[i], px, &lab) == MNT_OK && lab == b->labels[i], "label of sample %lld",
                 (long long)b->ids[i]);
        }
      }
      int64_t e, cur;
      mnt_loader_position(l, &e, &cur);
      EXPECT(e == 4 && cur == 0, "after a whole epoch the position is (4, 0), not (%lld, %lld)", (long long)e, (long long)cur);
      mnt_loader_close(l);
    }
    int dup = 0, missing = 0;
    for (int i = 0; i < N; i++) { dup += seen[i] > 1; missing += seen[i] == 0; }
    EXPECT(got == per_epoch && dup == 0 && missing == N - per_epoch,
           "%d ranks: %lld samples, %d twice, %d missing (drop-last allows %lld)", R, (long long)got, dup, missing,
           (long long)(N - per_epoch));
    free(seen);
  }

  /* the same global batches on 1, 2 and 4 ranks: ids and augmented pixels */
  int nb = 5;
  size_t per_img = 3 * OUT * OUT, tot = (size_t)nb * B;
  float *img1 = malloc(tot * per_img * sizeof(float)), *imgR = malloc(tot * per_img * sizeof(float));
  int64_t *ids1 = malloc(tot * sizeof(int64_t)), *idsR = malloc(tot * sizeof(int64_t));
  global_batches(&d, 1, 0, 24, nb, 1, img1, ids1);
  for (int R = 2; R <= 4; R += 2) {
    global_batches(&d, R, 0, 24, nb, 1, imgR, idsR);
    EXPECT(!memcmp(ids1, idsR, tot * sizeof(int64_t)), "%d ranks read other samples than 1 rank", R);
    EXPECT(!memcmp(img1, imgR, tot * per_img * sizeof(float)), "%d ranks augment differently from 1 rank", R);
  }
  /* resume: 5 batches from cursor 24 are batches 2..6 of a run from 0; across the epoch's end too */
  float *img0 = malloc((tot + 2 * B) * per_img * sizeof(float));
  int64_t *ids0 = malloc((tot + 2 * B) * sizeof(int64_t));
  global_batches(&d, 2, 0, 0, nb + 2, 1, img0, ids0);
  EXPECT(!memcmp(ids0 + 2 * B, ids1, tot * sizeof(int64_t)) && !memcmp(img0 + 2 * B * per_img, img1, tot * per_img * sizeof(float)),
         "resuming at cursor 24 does not continue the stream");
  global_batches(&d, 1, 0, per_epoch - 2 * B, 4, 1, img1, ids1);
  global_batches(&d, 4, 1, 0, 2, 1, imgR, idsR);
  EXPECT(!memcmp(ids1 + 2 * B, idsR, 2 * B * sizeof(int64_t)), "the stream does not continue into the next epoch");
  /* validation: no randomness: the loader's validation batches are mnt_loader_val_sample's pixels,
   * whatever the epoch and the rank count */
  global_batches(&d, 1, 0, 0, 1, 0, img1, ids1);
  global_batches(&d, 2, 3, 0, 1, 0, imgR, idsR);
  {
    int differ = 0;
    float *v = malloc(per_img * sizeof(float));
    for (int i = 0; i < B; i++) {
      int32_t lab;
      EXPECT(mnt_loader_val_sample(&d, ids1[i], OUT, 0, 0, v, &lab) == MNT_OK, "val sample %lld", (long long)ids1[i]);
      differ += memcmp(v, img1 + (size_t)i * per_img, per_img * sizeof(float)) != 0;
      EXPECT(mnt_loader_val_sample(&d, idsR[i], OUT, 0, 0, v, &lab) == MNT_OK, "val sample %lld", (long long)idsR[i]);
      differ += memcmp(v, imgR + (size_t)i * per_img, per_img * sizeof(float)) != 0;
    }
    EXPECT(differ == 0, "validation batches differ from the validation transform in %d images", differ);
    free(v);
  }
  /* raw mode (the GPU hook): the stored uint8 images of the same samples, in the same order */
  {
    mnt_loader_cfg rc = {.out_size = OUT, .train = 1, .global_batch = B, .rank = 1, .nranks = 2, .seed = 5, .raw = 1};
    mnt_loader_cfg fc = rc;
    fc.raw = 0;
    mnt_loader *rl, *fl;
    const mnt_batch *rb, *fb;
    if (mnt_loader_open(&rl, &d, &rc, 0, 24) == MNT_OK && mnt_loader_next(rl, &rb) == MNT_OK &&
        mnt_loader_open(&fl, &d, &fc, 0, 24) == MNT_OK && mnt_loader_next(fl, &fb) == MNT_OK) {
      uint8_t px[S * S * 3];
      int32_t lab;
      EXPECT(rb->images == NULL && rb->raw && rb->size == S && !memcmp(rb->ids, fb->ids, (size_t)rb->n * sizeof(int64_t)),
             "raw batch shape or order");
      mnt_loader_close(fl);
      mnt_dataset_read(&d, rb->ids[0], px, &lab);
      EXPECT(!memcmp(px, rb->raw, sizeof px) && lab == rb->labels[0], "raw pixels differ from the shard's");
      mnt_loader_close(rl);
    } else {
      failures++;
    }
  }
  /* RandomCrop(S, padding=P) + flip: each image is its source shifted by some (dx, dy) in
   * [-P, P]², zeros around, perhaps mirrored; and the shifts vary. val_crop 1 at S: the source. */
  {
    enum { P = 3 };
    mnt_loader_cfg pc = {.out_size = S, .train = 1, .global_batch = B, .rank = 0, .nranks = 1, .seed = 5, .pad_crop = P};
    mnt_loader *pl;
    const mnt_batch *pb;
    if (mnt_loader_open(&pl, &d, &pc, 0, 0) == MNT_OK && mnt_loader_next(pl, &pb) == MNT_OK) {
      int shifts[2 * P + 1][2 * P + 1] = {{0}}, kinds = 0;
      for (int i = 0; i < pb->n; i++) {
        uint8_t px[S * S * 3];
        int32_t lab;
        mnt_dataset_read(&d, pb->ids[i], px, &lab);
        const float *o = pb->images + (size_t)i * 3 * S * S;
        int found = 0;
        for (int dy = -P; dy <= P && !found; dy++)
          for (int dx = -P; dx <= P && !found; dx++)
            for (int fl = 0; fl < 2 && !found; fl++) {
              int same = 1;
              for (int c = 0; c < 3 && same; c++)
                for (int y = 0; y < S && same; y++)
                  for (int x = 0; x < S && same; x++) {
                    int sx = (fl ? S - 1 - x : x) + dx, sy = y + dy;
                    float v = sx >= 0 && sx < S && sy >= 0 && sy < S ? px[(sy * S + sx) * 3 + c] : 0;
                    same = fabsf(o[(c * S + y) * S + x] - (v / 255.0f - d.mean[c]) / d.std[c]) < 1e-4f;
                  }
              if (same) {
                found = 1;
                kinds += !shifts[dy + P][dx + P]++;
              }
            }
        EXPECT(found, "pad-crop image %d is no shift of sample %lld", i, (long long)pb->ids[i]);
      }
      EXPECT(kinds > 3, "pad-crop: %d distinct shifts in a batch of %d", kinds, pb->n);
      mnt_loader_close(pl);
    } else {
      failures++;
    }
    float v[3 * S * S];
    uint8_t px[S * S * 3];
    int32_t lab, vlab;
    EXPECT(mnt_loader_val_sample(&d, 7, S, 0, 1.0, v, &vlab) == MNT_OK && mnt_dataset_read(&d, 7, px, &lab) == MNT_OK &&
           vlab == lab, "val sample 7");
    int diff = 0;
    for (int c = 0; c < 3; c++)
      for (int q = 0; q < S * S; q++) diff += fabsf(v[c * S * S + q] - (px[q * 3 + c] / 255.0f - d.mean[c]) / d.std[c]) > 1e-4f;
    EXPECT(diff == 0, "--val-crop 1 at the stored size: %d pixels differ from the source", diff);
  }
  mnt_loader_cfg bad = {.out_size = OUT, .global_batch = 10, .rank = 0, .nranks = 4, .seed = 1};
  mnt_loader *l;
  EXPECT(mnt_loader_open(&l, &d, &bad, 0, 0) == MNT_EARG, "a global batch of 10 over 4 ranks must be refused");
  bad.global_batch = 12;
  EXPECT(mnt_loader_open(&l, &d, &bad, 0, 5) == MNT_EARG, "a cursor off a batch boundary must be refused");
  raw_matches(&d, 0);
  raw_matches(&d, 2);
  mnt_dataset_close(&d);

  /* a truncated shard: the error names it, at open */
  char shard[700], cmd[1500];
  snprintf(shard, sizeof shard, "%s/shard-00001-of-00003.h5", ds);
  snprintf(cmd, sizeof cmd, "truncate -s 2000 %s", shard);
  EXPECT(system(cmd) == 0, "truncate");
  EXPECT(mnt_dataset_open(ds, &d) == MNT_EDATA && strstr(mnt_last_error(), "shard-00001-of-00003.h5"),
         "a truncated shard must fail the open naming it (got: %s)", mnt_last_error());
  /* a missing shard */
  unlink(shard);
  EXPECT(mnt_dataset_open(ds, &d) == MNT_EDATA && strstr(mnt_last_error(), "missing shard"),
         "a missing shard must be named (got: %s)", mnt_last_error());

  /* a label out of range: named with its file and sample, by the reader and by the loader */
  char bd[600];
  snprintf(bd, sizeof bd, "%s/badlabel", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s", bd);
  EXPECT(system(cmd) == 0, "mkdir");
  mnt_shard_writer w;
  char sp[800];
  snprintf(sp, sizeof sp, "%s/shard-00000-of-00001.h5", bd);
  uint8_t px[S * S * 3] = {0};
  EXPECT(mnt_shard_create(&w, sp, 24, S, 3, 10, 0, 1, 1, "test") == MNT_OK, "create a shard");
  int appended = 0;
  for (int i = 0; i < 24; i++) appended += mnt_shard_append(&w, px, i == 17 ? 99 : i % 10, i) == MNT_OK;
  EXPECT(appended == 24 && mnt_shard_close(&w) == MNT_OK, "write a shard");
  char *names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.2f, 0.2f, 0.2f};
  int64_t cnt = 24;
  mnt_index_info ix = {.nclasses = 10, .class_names = names, .size = S, .channels = 3, .mean = mean, .std = sd,
                       .seed = 1, .nshards = 1, .shard_count = &cnt, .fingerprint = "test", .source = "test"};
  EXPECT(mnt_index_write(bd, &ix) == MNT_OK, "index");
  EXPECT(mnt_dataset_open(bd, &d) == MNT_OK, "open the bad-label set");
  int32_t lab;
  EXPECT(mnt_dataset_read(&d, 17, px, &lab) == MNT_EDATA && strstr(mnt_last_error(), "sample 17 has label 99"),
         "bad label not named: %s", mnt_last_error());
  mnt_loader_cfg c = {.out_size = OUT, .train = 1, .global_batch = 24, .rank = 0, .nranks = 1, .seed = 1};
  EXPECT(mnt_loader_open(&l, &d, &c, 0, 0) == MNT_OK, "open a loader on the bad-label set");
  if (l) {
    const mnt_batch *b;
    EXPECT(mnt_loader_next(l, &b) == MNT_EDATA, "the loader must fail on the bad label");
    mnt_loader_close(l);
  }
  mnt_dataset_close(&d);

  /* a flipped byte inside one image: its checksum no longer matches; the read of that sample (and
   * only of that one) fails naming the shard and the sample, and so does the loader */
  {
    char cs[600];
    snprintf(cs, sizeof cs, "%s/corrupt", dir);
    EXPECT(mnt_convert_synth(cs, 10, 48, S, 1, 3, 0) == MNT_OK, "a set to corrupt");
    char shard1[700];
    snprintf(shard1, sizeof shard1, "%s/shard-00000-of-00001.h5", cs);
    hid_t f = H5Fopen(shard1, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t im = f >= 0 ? H5Dopen2(f, "images", H5P_DEFAULT) : -1;
    hsize_t at[4] = {13, 0, 0, 0}, size = 0;
    haddr_t addr = 0;
    unsigned mask = 0;
    EXPECT(im >= 0 && H5Dget_chunk_info_by_coord(im, at, &mask, &addr, &size) >= 0 && size > 100,
           "the chunk of image 13");
    if (im >= 0) H5Dclose(im);
    if (f >= 0) H5Fclose(f);
    FILE *fp = fopen(shard1, "r+b");
    int c0 = -1;
    if (fp && fseek(fp, (long)addr + 40, SEEK_SET) == 0 && (c0 = fgetc(fp)) != EOF) {
      fseek(fp, (long)addr + 40, SEEK_SET);
      fputc(c0 ^ 0x10, fp);
    }
    EXPECT(fp && c0 >= 0, "flip a byte of %s", shard1);
    if (fp) fclose(fp);
    uint8_t p2[S * S * 3];
    int32_t lab2;
    EXPECT(mnt_dataset_open(cs, &d) == MNT_OK, "open the corrupted set (the index and shapes are fine)");
    int before = failures;
    int64_t bad_at = -1, nbad = 0;
    for (int64_t g = 0; g < d.total; g++)
      if (mnt_dataset_read(&d, g, p2, &lab2) != MNT_OK) bad_at = g, nbad++;
    EXPECT(nbad == 1 && bad_at == 13, "%lld samples fail to read (want exactly sample 13, got %lld)", (long long)nbad,
           (long long)bad_at);
    EXPECT(mnt_dataset_read(&d, 13, p2, &lab2) == MNT_EDATA && strstr(mnt_last_error(), "shard-00000-of-00001.h5") &&
               strstr(mnt_last_error(), "sample 13") && strstr(mnt_last_error(), "checksum"),
           "the error names the file, the sample and the checksum: %s", mnt_last_error());
    EXPECT(mnt_dataset_read(&d, 13, NULL, &lab2) == MNT_OK, "the label of sample 13 is intact");
    mnt_loader_cfg cc = {.out_size = OUT, .train = 1, .global_batch = 48, .rank = 0, .nranks = 1, .seed = 1};
    l = NULL;
    EXPECT(mnt_loader_open(&l, &d, &cc, 0, 0) == MNT_OK, "a loader on the corrupted set");
    if (l) {
      const mnt_batch *b;
      EXPECT(mnt_loader_next(l, &b) == MNT_EDATA, "the loader must fail on the corrupt image");
      mnt_loader_close(l);
    }
    mnt_dataset_close(&d);
    if (failures > before) fprintf(stderr, "(flipped byte at %llu + 40 of %s)\n", (unsigned long long)addr, shard1);

    /* the index's format version: 1 still opens (no checksums: a warning), 4 does not */
    char idx[700], cmd2[2000];
    snprintf(idx, sizeof idx, "%s/index.json", cs);
    snprintf(cmd2, sizeof cmd2, "sed -i 's/\"version\": 2/\"version\": 1/' %s", idx);
    EXPECT(system(cmd2) == 0 && mnt_dataset_open(cs, &d) == MNT_OK && d.version == 1, "format 1 opens");
    if (d.version == 1) mnt_dataset_close(&d);
    snprintf(cmd2, sizeof cmd2, "sed -i 's/\"version\": 1/\"version\": 4/' %s", idx);
    EXPECT(system(cmd2) == 0 && mnt_dataset_open(cs, &d) == MNT_EDATA && strstr(mnt_last_error(), "format version 4"),
           "format 4 is refused: %s", mnt_last_error());
    /* an index without samples is refused at open */
    char ed[600];
    snprintf(ed, sizeof ed, "%s/empty", dir);
    mkdir(ed, 0755);
    int64_t zero = 0;
    mnt_index_info ex = {.nclasses = 10, .class_names = names, .size = S, .channels = 3, .mean = mean, .std = sd,
                         .seed = 1, .nshards = 1, .shard_count = &zero, .fingerprint = "x", .source = "x"};
    EXPECT(mnt_index_write(ed, &ex) == MNT_OK, "an empty index");
    snprintf(shard1, sizeof shard1, "%s/shard-00000-of-00001.h5", ed);
    EXPECT(mnt_shard_create(&w, shard1, 0, S, 3, 10, 0, 1, 1, "x") == MNT_OK && mnt_shard_close(&w) == MNT_OK,
           "an empty shard");
    EXPECT(mnt_dataset_open(ed, &d) == MNT_EARG && strstr(mnt_last_error(), "no samples"),
           "an empty dataset must be refused at open: %s", mnt_last_error());
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(img0); free(ids0); free(img1); free(imgR); free(ids1); free(idsR);
  if (failures) {
    fprintf(stderr, "test_loader: %d failures\n", failures);
    return 1;
  }
  printf("test_loader: ok\n");
  return 0;
}
