/* loader.c — see loader.h. Worker threads produce whole batches: batch k goes to slot k mod depth;
 * a worker takes the next k only while fewer than `depth` batches are unconsumed. Format 2: HDF5
 * (built thread-safe on Debian) serialises the reads; decoding-free uint8 shards make them cheap,
 * and the augmentation (io/data/augment.c: the boxes and the resampler) runs in parallel. Format 3:
 * each record is one pread (no lock, io/data/record.c), decoded (io/data/jpegcrop.c: only the box's part of
 * a JPEG) and resampled in the worker, with the worker's own buffers (sample_ws: no allocation per
 * sample once they have grown). The loader only schedules: which samples, which thread, which slot. */
#include "io/data/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/data/augment.h"
#include "io/data/jpegcrop.h"
#include "src/check.h"
#include "src/log.h"
#include "src/trace.h"

typedef struct slot {
  mnt_batch b;
  int64_t k; /* which batch it holds; -1: none */
  int ready;
} slot;

struct mnt_loader {
  mnt_dataset *d;
  mnt_loader_cfg cfg;
  int per_rank, C;
  int64_t first;           /* this rank's first position within a global batch */
  int64_t per_epoch;       /* samples used per epoch (drop-last) */
  int64_t epoch0, cursor0; /* position of batch 0 */
  int64_t next_k, consumed;
  slot *slots;
  pthread_t *thr;
  int nthr, stop, error;
  int handed_out; /* batch `consumed` is with the caller */
  pthread_mutex_t mu;
  pthread_mutex_t io_mu; /* one worker at a time in HDF5 (see read_sample) */
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

/* the augmentation settings of this loader's samples (io/data/augment.h) */
static mnt_aug_cfg aug_cfg(const mnt_loader *l) {
  return (mnt_aug_cfg){.train = l->cfg.train, .seed = l->cfg.seed, .S = l->d->size, .min_scale = l->cfg.min_scale,
                       .pad_crop = l->cfg.pad_crop, .val_crop = l->cfg.val_crop};
}

static void augment(const mnt_loader *l, const uint8_t *src, int64_t epoch, int64_t id, float *dst) {
  float box[MNT_BOX_FLOATS];
  mnt_aug_cfg a = aug_cfg(l);
  mnt_aug_box(&a, epoch, id, box);
  mnt_crop_resize(src, l->d->size, l->d->channels, box, l->cfg.train && l->cfg.pad_crop > 0, l->cfg.out_size, l->C,
                  l->d->mean, l->d->std, dst);
}

/* ---- format 3: records of their own sizes ----------------------------------------------------- */
struct mnt_sample_ws {
  uint8_t *rec;      /* the record read */
  size_t cap;
  mnt_jpegcrop *jpeg; /* its decoder and the region it decodes into */
};

int mnt_sample_ws_create(mnt_sample_ws **out) {
  *out = NULL;
  mnt_sample_ws *w = calloc(1, sizeof *w);
  if (!w) return MNT_SYSERR("loader: a sample workspace");
  int st = mnt_jpegcrop_create(&w->jpeg);
  if (st != MNT_OK) {
    free(w);
    return st;
  }
  *out = w;
  return MNT_OK;
}

void mnt_sample_ws_destroy(mnt_sample_ws *w) {
  if (!w) return;
  mnt_jpegcrop_destroy(w->jpeg);
  free(w->rec);
  free(w);
}

/* sample g of a format 3 dataset as stored: its record read into w->rec (one pread, no lock; *len
 * bytes), its width and height, its box in those pixels (train: drawn for epoch; else the validation
 * box, a->val_crop: its fraction) */
static int f3_record(mnt_dataset *d, mnt_sample_ws *w, int64_t g, const mnt_aug_cfg *a, int64_t epoch, int out, int *W,
                     int *H, size_t *len, float box[MNT_BOX_FLOATS], int32_t *label) {
  MNT_CHECK(mnt_dataset_dims(d, g, W, H));
  MNT_CHECK(mnt_dataset_read_record(d, g, &w->rec, &w->cap, len, label));
  if (a->train) mnt_aug_box_wh(a, *W, *H, epoch, g, box);
  else mnt_val_box(*W, *H, out, a->val_crop, box);
  return MNT_OK;
}

/* the same, a JPEG decoded where the box reads: the source region in *r, the box in its pixels */
static int f3_region(mnt_dataset *d, mnt_sample_ws *w, int64_t g, const mnt_aug_cfg *a, int64_t epoch, int out,
                     mnt_jpeg_region *r, int32_t *label) {
  int W, H;
  size_t len;
  float box[MNT_BOX_FLOATS];
  MNT_CHECK(f3_record(d, w, g, a, epoch, out, &W, &H, &len, box, label));
  int k = mnt_dataset_shard_of(d, g); /* for messages; g was read above, so it is in the dataset */
  if (d->codec == MNT_CODEC_JPEG)
    return mnt_jpegcrop_decode(w->jpeg, w->rec, len, W, H, box, out, 0, d->shard_path[k], g - d->shard_start[k], r);
  if (len != (size_t)W * H * d->channels) {
    MNT_ERR("%s: sample %lld: a raw record of %zu bytes for %dx%dx%d pixels", d->shard_path[k],
            (long long)(g - d->shard_start[k]), len, W, H, d->channels);
    return MNT_EDATA;
  }
  *r = (mnt_jpeg_region){.pix = w->rec, .w = W, .h = H, .stride = (size_t)W * d->channels, .scale = 8};
  memcpy(r->box, box, sizeof box);
  return MNT_OK;
}

/* room for `need` bytes of records in batch b (cfg.encoded), the first `keep` kept: grown by half
 * again each time, from the loader's allocator (page-locked on a GPU) */
static int enc_reserve(mnt_loader *l, mnt_batch *b, size_t need, size_t keep) {
  if (need <= b->enc_cap) return MNT_OK;
  size_t cap = b->enc_cap + b->enc_cap / 2;
  if (cap < need) cap = need;
  cap = (cap + 4095) / 4096 * 4096;
  void *p = NULL;
  const mnt_loader_cfg *c = &l->cfg;
  if (c->host_alloc ? c->host_alloc(c->alloc_ctx, cap, &p) != MNT_OK : (p = aligned_alloc(64, cap)) == NULL) {
    MNT_ERR("loader: %zu bytes for a batch of %d JPEG records", cap, b->n);
    return MNT_ENOMEM;
  }
  if (keep) memcpy(p, b->enc, keep);
  if (b->enc && c->host_free) c->host_free(c->alloc_ctx, b->enc);
  else free(b->enc);
  b->enc = p;
  b->enc_cap = cap;
  return MNT_OK;
}

/* one format 3 JPEG sample into slot i of batch b as stored (cfg.encoded): its record, verified
 * as every read is, its width and height, and its box in those pixels */
static int f3_encoded(mnt_loader *l, mnt_sample_ws *w, int64_t epoch, int64_t id, mnt_batch *b, int i) {
  int W, H;
  size_t len;
  mnt_aug_cfg a = aug_cfg(l);
  MNT_CHECK(f3_record(l->d, w, id, &a, epoch, l->cfg.out_size, &W, &H, &len, b->boxes + (size_t)i * MNT_BOX_FLOATS,
                      &b->labels[i]));
  if (i == 0) b->enc_off[0] = 0;
  size_t at = b->enc_off[i];
  MNT_CHECK(enc_reserve(l, b, at + len, at));
  memcpy(b->enc + at, w->rec, len);
  b->enc_off[i + 1] = at + len;
  b->wh[2 * i] = W, b->wh[2 * i + 1] = H;
  return MNT_OK;
}

/* one format 3 sample into slot i of batch b: augmented floats, or (cfg.raw) the box resampled to
 * out × out uint8 RGB, unflipped, with the box (0, 0, out, out, flip) for the device */
static int f3_sample(mnt_loader *l, mnt_sample_ws *w, int64_t epoch, int64_t id, mnt_batch *b, int i) {
  mnt_jpeg_region r;
  mnt_aug_cfg a = aug_cfg(l);
  int out = l->cfg.out_size, C = l->d->channels;
  if (l->cfg.encoded) return f3_encoded(l, w, epoch, id, b, i);
  MNT_CHECK(f3_region(l->d, w, id, &a, epoch, out, &r, &b->labels[i]));
  if (l->d->codec == MNT_CODEC_JPEG) C = 3;
  if (!l->cfg.raw) {
    mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, C, r.box, a.train, out, l->C, l->d->mean, l->d->std,
                       b->images + (size_t)i * l->C * out * out);
    return MNT_OK;
  }
  float flip = r.box[4], *box = b->boxes + (size_t)i * MNT_BOX_FLOATS;
  r.box[4] = 0;
  mnt_crop_resize_u8(r.pix, r.w, r.h, r.stride, C, r.box, a.train, out, b->channels,
                     b->raw + (size_t)i * b->channels * out * out);
  box[0] = box[1] = 0, box[2] = box[3] = (float)out, box[4] = flip;
  return MNT_OK;
}

/* HDF5's thread-safe build lets one thread in at a time behind a global lock that sleeps at once
 * when taken; with small images the workers meet there all the time, each meeting a futex sleep
 * and wake-up (Fashion-MNIST, 2 workers: 146,000 context switches for 96,000 images, 18% slower
 * than with the slower resampler before). An adaptive mutex of ours in front (it spins briefly
 * before it sleeps) takes them in turn without most of those switches (86,000; 30% faster).
 * mnt_dataset_read is HDF5 only; work it may do outside HDF5 (decoding) belongs outside this lock. */
static int read_sample(mnt_loader *l, int64_t id, uint8_t *pix, int32_t *label) {
  pthread_mutex_lock(&l->io_mu);
  int st = mnt_dataset_read(l->d, id, pix, label);
  pthread_mutex_unlock(&l->io_mu);
  return st;
}

/* the samples of batch slot s (its global batch at epoch e, cursor c, in the permutation perm) */
static int fill_batch(mnt_loader *l, mnt_sample_ws *w, slot *s, const int64_t *perm, int64_t e, int64_t c) {
  size_t px = (size_t)l->d->size * l->d->size * l->d->channels;
  size_t img = (size_t)l->C * l->cfg.out_size * l->cfg.out_size;
  int st = MNT_OK, f3 = l->d->version >= MNT_FORMAT_RECORDS;
  s->b.epoch = e;
  s->b.cursor = c;
  for (int i = 0; i < l->per_rank && st == MNT_OK; i++) {
    int64_t id = perm[c + l->first + i];
    s->b.ids[i] = id;
    if (f3) {
      st = f3_sample(l, w, e, id, &s->b, i);
    } else if (l->cfg.raw) {
      st = read_sample(l, id, s->b.raw + (size_t)i * px, &s->b.labels[i]);
      mnt_aug_cfg a = aug_cfg(l);
      mnt_aug_box(&a, e, id, s->b.boxes + (size_t)i * MNT_BOX_FLOATS);
    } else if ((st = read_sample(l, id, w->rec, &s->b.labels[i])) == MNT_OK) {
      augment(l, w->rec, e, id, s->b.images + (size_t)i * img);
    }
  }
  return st;
}

static _Atomic int g_workers; /* for the timeline's thread names: "loader 1", "loader 2", ... */

static void *worker(void *arg) {
  mnt_loader *l = arg;
  char name[32];
  snprintf(name, sizeof name, "loader %d", atomic_fetch_add(&g_workers, 1) + 1);
  mnt_trace_thread(name);
  size_t px = (size_t)l->d->size * l->d->size * l->d->channels;
  mnt_sample_ws *w = NULL;
  int st0 = mnt_sample_ws_create(&w);
  if (st0 == MNT_OK && l->d->version < MNT_FORMAT_RECORDS && !(w->rec = malloc(px))) st0 = MNT_ENOMEM;
  pthread_mutex_lock(&l->mu);
  while (!l->stop && !l->error) {
    if (l->next_k >= l->consumed + l->cfg.depth) {
      mnt_trace_push("idle", 0); /* on the timeline: every slot full */
      pthread_cond_wait(&l->cv, &l->mu);
      mnt_trace_pop();
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
    mnt_trace_push("batch", k);
    int st = st0 != MNT_OK ? st0 : fill_batch(l, w, s, perm, e, c);
    mnt_trace_pop();
    pthread_mutex_lock(&l->mu);
    l->perm_users[pi]--;
    if (st != MNT_OK) l->error = st;
    s->k = k;
    s->ready = 1;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  mnt_sample_ws_destroy(w);
  return NULL;
}

/* the raw batch's images (cfg.raw): format 1/2 the stored S×S×C squares, format 3 out×out RGB */
void mnt_loader_raw_shape(const mnt_dataset *d, int out_size, int *side, int *channels) {
  int f3 = d->version >= MNT_FORMAT_RECORDS;
  *side = f3 ? out_size : d->size;
  *channels = f3 && d->codec == MNT_CODEC_JPEG ? 3 : d->channels;
}

void mnt_loader_split(int global_batch, int nranks, int rank, int64_t *first, int *n) {
  int64_t a = (int64_t)rank * global_batch / nranks, b = (int64_t)(rank + 1) * global_batch / nranks;
  *first = a;
  *n = (int)(b - a);
}

/* what mnt_loader_open refuses (MNT_EARG, logged) */
static int check_cfg(const mnt_dataset *d, const mnt_loader_cfg *c) {
  if (c->nranks < 1 || c->rank < 0 || c->rank >= c->nranks || c->global_batch < c->nranks ||
      (c->global_batch % c->nranks && !c->uneven)) {
    MNT_ERR("global batch %d cannot be split evenly over %d ranks (rank %d)", c->global_batch, c->nranks, c->rank);
    return MNT_EARG;
  }
  int dc = d->version >= MNT_FORMAT_RECORDS && d->codec == MNT_CODEC_JPEG ? 3 : d->channels;
  if (c->out_size < 1 || c->out_size > MNT_AUG_MAX_OUT ||
      (c->out_channels != 0 && c->out_channels != dc && !(dc == 1 && c->out_channels == 3))) {
    MNT_ERR("loader: bad output size %d or channels %d for a %d-channel dataset", c->out_size, c->out_channels, dc);
    return MNT_EARG;
  }
  if (d->version >= MNT_FORMAT_RECORDS && c->train && c->pad_crop > 0) {
    MNT_ERR("%s: images of their own sizes (format 3): the padded-crop augmentation (--pad-crop) is for small square "
            "images (format 2)", d->dir);
    return MNT_EARG;
  }
  if (!c->train && !(c->val_crop >= 0 && c->val_crop <= 1)) {
    MNT_ERR("loader: the validation crop %g is not a fraction of the image in (0, 1]", c->val_crop);
    return MNT_EARG;
  }
  if (c->encoded && (d->version < MNT_FORMAT_RECORDS || d->codec != MNT_CODEC_JPEG || c->raw)) {
    MNT_ERR(
        "%s: the loader hands out JPEG records as stored only for format 3 JPEG shards, and not with raw "
        "images (this dataset: format %d, %s)",
        d->dir, d->version,
        d->version >= MNT_FORMAT_RECORDS && d->codec == MNT_CODEC_JPEG ? "JPEG" : "not JPEG records");
    return MNT_EARG;
  }
  if (d->total < c->global_batch) {
    MNT_ERR("%s: %lld samples, fewer than one global batch of %d", d->dir, (long long)d->total, c->global_batch);
    return MNT_EARG;
  }
  return MNT_OK;
}

int mnt_loader_open(mnt_loader **out, mnt_dataset *d, const mnt_loader_cfg *cfg, int64_t epoch, int64_t cursor) {
  *out = NULL;
  mnt_loader_cfg c = *cfg;
  if (c.threads <= 0) c.threads = 2;
  if (c.depth <= 0) c.depth = 2 * c.threads;
  MNT_CHECK(check_cfg(d, &c));
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
  mnt_loader_split(c.global_batch, c.nranks, c.rank, &l->first, &l->per_rank);
  int side, rawC;
  mnt_loader_raw_shape(d, c.out_size, &side, &rawC);
  l->C = c.out_channels ? c.out_channels : rawC;
  l->per_epoch = per_epoch;
  l->epoch0 = epoch;
  l->cursor0 = cursor;
  l->perm_epoch[0] = l->perm_epoch[1] = -1;
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(&l->io_mu, &ma);
  pthread_mutexattr_destroy(&ma);
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
    size_t px = (size_t)side * side * rawC;
    if (c.encoded) {
      b->boxes = malloc((size_t)l->per_rank * MNT_BOX_FLOATS * sizeof(float));
      b->enc_off = malloc(((size_t)l->per_rank + 1) * sizeof *b->enc_off);
      b->wh = malloc((size_t)l->per_rank * 2 * sizeof *b->wh);
      if (b->boxes && b->enc_off && b->wh) st = enc_reserve(l, b, (size_t)l->per_rank * 32768, 0);
    } else if (c.raw) {
      size_t bytes = ((size_t)l->per_rank * px + 63) / 64 * 64;
      void *p = NULL;
      if (c.host_alloc ? c.host_alloc(c.alloc_ctx, bytes, &p) == MNT_OK : (p = aligned_alloc(64, bytes)) != NULL)
        b->raw = p;
      b->boxes = malloc((size_t)l->per_rank * MNT_BOX_FLOATS * sizeof(float));
      b->size = side;
      b->channels = rawC;
    } else {
      b->images = aligned_alloc(64, ((size_t)l->per_rank * img * sizeof(float) + 63) / 64 * 64);
    }
    b->labels = malloc((size_t)l->per_rank * sizeof *b->labels);
    b->ids = malloc((size_t)l->per_rank * sizeof *b->ids);
    if (!(b->images || (b->raw && b->boxes) || (b->enc && b->boxes && b->enc_off && b->wh)) || !b->labels || !b->ids)
      st = st != MNT_OK ? st : MNT_ENOMEM;
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
  MNT_CHECK(st);
  *b = &s->b;
  return MNT_OK;
}

int mnt_loader_val_sample_ws(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop,
                             mnt_sample_ws *w, float *dst, int32_t *label) {
  int f3 = d->version >= MNT_FORMAT_RECORDS, C = f3 && d->codec == MNT_CODEC_JPEG ? 3 : d->channels;
  int outC = out_channels ? out_channels : C;
  if (out_size < 1 || out_size > MNT_AUG_MAX_OUT || outC > MNT_AUG_MAX_C || !(crop >= 0 && crop <= 1)) {
    MNT_ERR("loader: bad validation size %d, channels %d or crop %g", out_size, outC, crop);
    return MNT_EARG;
  }
  mnt_sample_ws *tmp = NULL;
  if (!w) MNT_CHECK(mnt_sample_ws_create(&tmp));
  mnt_sample_ws *ws = w ? w : tmp;
  int st = MNT_OK;
  if (f3) {
    mnt_aug_cfg a = {.train = 0, .val_crop = crop};
    mnt_jpeg_region r;
    MNT_CHECK_GOTO(f3_region(d, ws, g, &a, 0, out_size, &r, label), st, out);
    mnt_crop_resize_wh(r.pix, r.w, r.h, r.stride, C, r.box, 0, out_size, outC, d->mean, d->std, dst);
  } else {
    size_t len;
    MNT_CHECK_GOTO(mnt_dataset_read_record(d, g, &ws->rec, &ws->cap, &len, label), st, out);
    mnt_centre_crop(ws->rec, d->size, d->channels, crop, out_size, outC, d->mean, d->std, dst);
  }
out:
  mnt_sample_ws_destroy(tmp);
  return st;
}

int mnt_loader_val_sample(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop, float *dst,
                          int32_t *label) {
  return mnt_loader_val_sample_ws(d, g, out_size, out_channels, crop, NULL, dst, label);
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
    if (l->slots[i].b.enc && l->cfg.host_free) l->cfg.host_free(l->cfg.alloc_ctx, l->slots[i].b.enc);
    else free(l->slots[i].b.enc);
    free(l->slots[i].b.enc_off);
    free(l->slots[i].b.wh);
    free(l->slots[i].b.boxes);
    free(l->slots[i].b.labels);
    free(l->slots[i].b.ids);
  }
  free(l->slots);
  free(l->thr);
  free(l->perm[0]);
  free(l->perm[1]);
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->io_mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
