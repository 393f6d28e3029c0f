/* loader.c — see loader.h. Worker threads produce whole batches: batch k goes to slot k mod depth;
 * a worker takes the next k only while fewer than `depth` batches are unconsumed. HDF5 (built
 * thread-safe on Debian) serialises the reads; decoding-free uint8 shards make them cheap, and the
 * augmentation runs in parallel. */
#include "loader.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

typedef struct slot {
  mnt_batch b;
  int64_t k; /* which batch it holds; -1: none */
  int ready;
} slot;

struct mnt_loader {
  mnt_dataset *d;
  mnt_loader_cfg cfg;
  int per_rank, C;
  int64_t per_epoch;       /* samples used per epoch (drop-last) */
  int64_t epoch0, cursor0; /* position of batch 0 */
  int64_t next_k, consumed;
  slot *slots;
  pthread_t *thr;
  int nthr, stop, error;
  int handed_out; /* batch `consumed` is with the caller */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int64_t perm_epoch[2];
  int64_t *perm[2];
  int perm_users[2];
  double wait_s;
};

static void batch_pos(const mnt_loader *l, int64_t k, int64_t *e, int64_t *c) {
  int64_t per = l->per_epoch / l->cfg.global_batch; /* batches per epoch */
  int64_t first = l->cursor0 / l->cfg.global_batch + k;
  *e = l->epoch0 + first / per;
  *c = (first % per) * l->cfg.global_batch;
}

/* The permutation of epoch e, from a cache of two (the consumer's epoch and the next); a slot
 * in use by a worker is not replaced. Called with mu held; returns the slot or -1 (wait). */
static int perm_of(mnt_loader *l, int64_t e) {
  for (int i = 0; i < 2; i++)
    if (l->perm_epoch[i] == e) return i;
  int i = -1;
  for (int j = 0; j < 2; j++)
    if (!l->perm_users[j] && (i < 0 || l->perm_epoch[j] < l->perm_epoch[i])) i = j;
  if (i < 0) return -1;
  mnt_permutation(l->perm[i], l->d->total, mnt_mix((uint64_t)l->cfg.seed, (uint64_t)e + 0x10000ull));
  l->perm_epoch[i] = e;
  return i;
}

typedef struct rng { uint64_t s; } rng;
static double uni(rng *r) {
  r->s = mnt_mix(r->s, 0x2545f4914f6cdd1dull);
  return (double)(r->s >> 11) / 9007199254740992.0;
}

/* crop box (x0, y0, w, h) of the S×S source resampled bilinearly (half-pixel centres, as
 * torchvision without antialiasing) to out×out, optional flip, normalised, into CHW floats.
 * Samples outside the source repeat its edge, or with `pad` are pixel value 0 (torchvision's
 * RandomCrop(padding) fill). Column taps and weights are computed once per image; rows are streamed. */
#define MAX_OUT 4096
static void crop_resize(const uint8_t *src, int S, int C, double x0, double y0, double w, double h, int flip, int pad,
                        int out, int outC, const float *mean, const float *std, float *dst) {
  int xa[MAX_OUT], xb[MAX_OUT];
  float wx[MAX_OUT], inx[MAX_OUT];
  double sx = w / out, sy = h / out;
  for (int ox = 0; ox < out; ox++) {
    double fx = x0 + (ox + 0.5) * sx - 0.5;
    int d = flip ? out - 1 - ox : ox;
    inx[d] = !pad || (fx > -0.5 && fx < S - 0.5);
    if (fx < 0) fx = 0;
    if (fx > S - 1) fx = S - 1;
    int x1 = (int)fx;
    xa[d] = x1 * C;
    xb[d] = (x1 + 1 < S ? x1 + 1 : x1) * C;
    wx[d] = (float)(fx - x1);
  }
  float scale[3], bias[3];
  for (int c = 0; c < outC; c++) {
    int sc = C == 1 ? 0 : c;
    scale[c] = 1.0f / (255.0f * std[sc]);
    bias[c] = -mean[sc] / std[sc];
  }
  for (int oy = 0; oy < out; oy++) {
    double fy = y0 + (oy + 0.5) * sy - 0.5;
    float iny = !pad || (fy > -0.5 && fy < S - 0.5);
    if (fy < 0) fy = 0;
    if (fy > S - 1) fy = S - 1;
    int y1 = (int)fy, y2 = y1 + 1 < S ? y1 + 1 : y1;
    float wy = (float)(fy - y1);
    const uint8_t *r1 = src + (size_t)y1 * S * C, *r2 = src + (size_t)y2 * S * C;
    for (int c = 0; c < outC; c++) {
      int sc = C == 1 ? 0 : c;
      float *o = dst + ((size_t)c * out + oy) * out, k = scale[c], b = bias[c];
      for (int ox = 0; ox < out; ox++) {
        float a = r1[xa[ox] + sc] + wx[ox] * (float)(r1[xb[ox] + sc] - r1[xa[ox] + sc]);
        float e = r2[xa[ox] + sc] + wx[ox] * (float)(r2[xb[ox] + sc] - r2[xa[ox] + sc]);
        o[ox] = (a + wy * (e - a)) * (inx[ox] * iny) * k + b;
      }
    }
  }
}

/* the validation box: centred, `crop` × the side of an S×S image (0: 0.875), at (o, o) */
static void centre_box(int S, double crop, double *o, double *side) {
  *side = S * (crop > 0 ? crop : 0.875);
  *o = (S - *side) / 2;
}

/* the validation transform: the centre box resampled to out × out */
static void centre_crop(const mnt_dataset *d, const uint8_t *src, double crop, int out, int outC, float *dst) {
  double o, side;
  centre_box(d->size, crop, &o, &side);
  crop_resize(src, d->size, d->channels, o, o, side, side, 0, 0, out, outC, d->mean, d->std, dst);
}

void mnt_crop_resize(const uint8_t *src, int S, int C, const float box[MNT_BOX_FLOATS], int pad, int out, int outC,
                     const float *mean, const float *std, float *dst) {
  crop_resize(src, S, C, box[0], box[1], box[2], box[3], box[4] != 0, pad, out, outC, mean, std, dst);
}

/* the augmentation of sample id in epoch: its box (the same random draws on every rank) */
static void aug_box(const mnt_loader *l, int64_t epoch, int64_t id, float box[MNT_BOX_FLOATS]) {
  int S = l->d->size;
  if (!l->cfg.train) {
    double o, side;
    centre_box(S, l->cfg.val_crop, &o, &side);
    box[0] = box[1] = (float)o;
    box[2] = box[3] = (float)side;
    box[4] = 0;
    return;
  }
  rng r = {mnt_mix(mnt_mix((uint64_t)l->cfg.seed, (uint64_t)epoch), (uint64_t)id)};
  double area = (double)S * S, x0 = 0, y0 = 0, w = S, h = S;
  int found = l->cfg.pad_crop > 0;
  if (found) { /* torchvision's RandomCrop(S, padding=P): the image shifted by -P..P pixels, zeros around */
    int P = l->cfg.pad_crop;
    x0 = floor(uni(&r) * (2 * P + 1)) - P;
    y0 = floor(uni(&r) * (2 * P + 1)) - P;
  }
  for (int t = 0; t < 10 && !found; t++) { /* torchvision's RandomResizedCrop */
    double lo = l->cfg.min_scale > 0 ? l->cfg.min_scale : 0.08;
    double ta = area * (lo + (1.0 - lo) * uni(&r));
    double ar = exp(log(3.0 / 4.0) + (log(4.0 / 3.0) - log(3.0 / 4.0)) * uni(&r));
    double cw = round(sqrt(ta * ar)), ch = round(sqrt(ta / ar));
    if (cw > 0 && ch > 0 && cw <= S && ch <= S) {
      x0 = floor(uni(&r) * (S - cw + 1));
      y0 = floor(uni(&r) * (S - ch + 1));
      w = cw;
      h = ch;
      found = 1;
    }
  }
  int flip = uni(&r) < 0.5; /* the fallback is the whole (square) image, centred */
  box[0] = (float)x0, box[1] = (float)y0, box[2] = (float)w, box[3] = (float)h, box[4] = (float)flip;
}

static void augment(const mnt_loader *l, const uint8_t *src, int64_t epoch, int64_t id, float *dst) {
  float box[MNT_BOX_FLOATS];
  aug_box(l, epoch, id, box);
  mnt_crop_resize(src, l->d->size, l->d->channels, box, l->cfg.train && l->cfg.pad_crop > 0, l->cfg.out_size, l->C,
                  l->d->mean, l->d->std, dst);
}

static void *worker(void *arg) {
  mnt_loader *l = arg;
  size_t px = (size_t)l->d->size * l->d->size * l->d->channels;
  size_t img = (size_t)l->C * l->cfg.out_size * l->cfg.out_size;
  uint8_t *pix = malloc(px);
  pthread_mutex_lock(&l->mu);
  while (!l->stop && !l->error) {
    if (l->next_k >= l->consumed + l->cfg.depth) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    int64_t e, c;
    batch_pos(l, l->next_k, &e, &c);
    int pi = perm_of(l, e);
    if (pi < 0) { /* both cached permutations are being read: wait for one */
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    int64_t k = l->next_k++;
    const int64_t *perm = l->perm[pi];
    l->perm_users[pi]++;
    slot *s = &l->slots[k % l->cfg.depth];
    pthread_mutex_unlock(&l->mu);
    int st = pix ? MNT_OK : MNT_ENOMEM;
    s->b.epoch = e;
    s->b.cursor = c;
    for (int i = 0; i < l->per_rank && st == MNT_OK; i++) {
      int64_t id = perm[c + (int64_t)l->cfg.rank * l->per_rank + i];
      s->b.ids[i] = id;
      if (l->cfg.raw) {
        st = mnt_dataset_read(l->d, id, s->b.raw + (size_t)i * px, &s->b.labels[i]);
        aug_box(l, e, id, s->b.boxes + (size_t)i * MNT_BOX_FLOATS);
      }
      else if ((st = mnt_dataset_read(l->d, id, pix, &s->b.labels[i])) == MNT_OK)
        augment(l, pix, e, id, s->b.images + (size_t)i * img);
    }
    pthread_mutex_lock(&l->mu);
    l->perm_users[pi]--;
    if (st != MNT_OK) l->error = st;
    s->k = k;
    s->ready = 1;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  free(pix);
  return NULL;
}

int mnt_loader_open(mnt_loader **out, mnt_dataset *d, const mnt_loader_cfg *cfg, int64_t epoch, int64_t cursor) {
  *out = NULL;
  mnt_loader_cfg c = *cfg;
  if (c.threads <= 0) c.threads = 2;
  if (c.depth <= 0) c.depth = 2 * c.threads;
  if (c.nranks < 1 || c.rank < 0 || c.rank >= c.nranks || c.global_batch < c.nranks || c.global_batch % c.nranks) {
    MNT_ERR("global batch %d cannot be split evenly over %d ranks (rank %d)", c.global_batch, c.nranks, c.rank);
    return MNT_EARG;
  }
  if (c.out_size < 1 || c.out_size > MAX_OUT || (c.out_channels != 0 && c.out_channels != d->channels && !(d->channels == 1 && c.out_channels == 3))) {
    MNT_ERR("loader: bad output size %d or channels %d for a %d-channel dataset", c.out_size, c.out_channels, d->channels);
    return MNT_EARG;
  }
  if (d->total < c.global_batch) {
    MNT_ERR("%s: %lld samples, fewer than one global batch of %d", d->dir, (long long)d->total, c.global_batch);
    return MNT_EARG;
  }
  int64_t per_epoch = d->total / c.global_batch * c.global_batch;
  if (epoch < 0 || cursor < 0 || cursor % c.global_batch || cursor > per_epoch) {
    MNT_ERR("loader position (epoch %lld, cursor %lld) is not a global-batch boundary of this dataset", (long long)epoch,
            (long long)cursor);
    return MNT_EARG;
  }
  if (cursor == per_epoch) { /* a position at an epoch's end is the next epoch's start */
    epoch++;
    cursor = 0;
  }
  mnt_loader *l = calloc(1, sizeof *l);
  if (!l) return MNT_ENOMEM;
  l->d = d;
  l->cfg = c;
  l->per_rank = c.global_batch / c.nranks;
  l->C = c.out_channels ? c.out_channels : d->channels;
  l->per_epoch = per_epoch;
  l->epoch0 = epoch;
  l->cursor0 = cursor;
  l->perm_epoch[0] = l->perm_epoch[1] = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->perm[0] = malloc((size_t)d->total * sizeof(int64_t));
  l->perm[1] = malloc((size_t)d->total * sizeof(int64_t));
  l->slots = calloc((size_t)c.depth, sizeof *l->slots);
  l->thr = calloc((size_t)c.threads, sizeof *l->thr);
  int st = l->perm[0] && l->perm[1] && l->slots && l->thr ? MNT_OK : MNT_ENOMEM;
  size_t img = (size_t)l->C * c.out_size * c.out_size;
  for (int i = 0; i < c.depth && st == MNT_OK; i++) {
    mnt_batch *b = &l->slots[i].b;
    l->slots[i].k = -1;
    b->n = l->per_rank;
    b->channels = l->C;
    b->size = c.out_size;
    size_t px = (size_t)d->size * d->size * d->channels;
    if (c.raw) {
      size_t bytes = ((size_t)l->per_rank * px + 63) / 64 * 64;
      void *p = NULL;
      if (c.host_alloc ? c.host_alloc(c.alloc_ctx, bytes, &p) == MNT_OK : (p = aligned_alloc(64, bytes)) != NULL)
        b->raw = p;
      b->boxes = malloc((size_t)l->per_rank * MNT_BOX_FLOATS * sizeof(float));
      b->size = d->size;
      b->channels = d->channels;
    } else {
      b->images = aligned_alloc(64, ((size_t)l->per_rank * img * sizeof(float) + 63) / 64 * 64);
    }
    b->labels = malloc((size_t)l->per_rank * sizeof *b->labels);
    b->ids = malloc((size_t)l->per_rank * sizeof *b->ids);
    if (!(b->images || (b->raw && b->boxes)) || !b->labels || !b->ids) st = MNT_ENOMEM;
  }
  for (int i = 0; i < c.threads && st == MNT_OK; i++) {
    if (pthread_create(&l->thr[i], NULL, worker, l) != 0) st = MNT_ESYS;
    else l->nthr++;
  }
  if (st != MNT_OK) {
    MNT_ERR("loader: cannot allocate %d batches of %d images or start %d threads", c.depth, l->per_rank, c.threads);
    mnt_loader_close(l);
    return st;
  }
  *out = l;
  return MNT_OK;
}

int mnt_loader_next(mnt_loader *l, const mnt_batch **b) {
  pthread_mutex_lock(&l->mu);
  if (l->handed_out) { /* the batch returned last time goes back to the workers */
    l->slots[l->consumed % l->cfg.depth].ready = 0;
    l->consumed++;
    l->handed_out = 0;
    pthread_cond_broadcast(&l->cv);
  }
  int64_t k = l->consumed;
  slot *s = &l->slots[k % l->cfg.depth];
  double t0 = mnt_now();
  while (!(s->ready && s->k == k) && !l->error) pthread_cond_wait(&l->cv, &l->mu);
  l->wait_s += mnt_now() - t0;
  int st = l->error;
  if (!st) l->handed_out = 1;
  pthread_mutex_unlock(&l->mu);
  if (st) return st;
  *b = &s->b;
  return MNT_OK;
}

int mnt_loader_val_sample(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop, float *dst,
                          int32_t *label) {
  uint8_t *pix = malloc((size_t)d->size * d->size * d->channels);
  if (!pix) return MNT_ENOMEM;
  int st = mnt_dataset_read(d, g, pix, label);
  if (st == MNT_OK) centre_crop(d, pix, crop, out_size, out_channels ? out_channels : d->channels, dst);
  free(pix);
  return st;
}

void mnt_loader_position(const mnt_loader *l, int64_t *epoch, int64_t *cursor) {
  batch_pos(l, l->consumed + l->handed_out, epoch, cursor);
}

int64_t mnt_loader_batches_per_epoch(const mnt_loader *l) { return l->per_epoch / l->cfg.global_batch; }

double mnt_loader_wait_s(const mnt_loader *l) { return l->wait_s; }

void mnt_loader_close(mnt_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->nthr; i++) pthread_join(l->thr[i], NULL);
  for (int i = 0; l->slots && i < l->cfg.depth; i++) {
    free(l->slots[i].b.images);
    if (l->slots[i].b.raw && l->cfg.host_free) l->cfg.host_free(l->cfg.alloc_ctx, l->slots[i].b.raw);
    else free(l->slots[i].b.raw);
    free(l->slots[i].b.boxes);
    free(l->slots[i].b.labels);
    free(l->slots[i].b.ids);
  }
  free(l->slots);
  free(l->thr);
  free(l->perm[0]);
  free(l->perm[1]);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
