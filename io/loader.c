/* loader.c — see loader.h. Worker threads produce whole batches: batch k goes to slot k mod depth;
 * a worker takes the next k only while fewer than `depth` batches are unconsumed. HDF5 (built
 * thread-safe on Debian) serialises the reads; decoding-free uint8 shards make them cheap, and the
 * augmentation (io/augment.c: the boxes and the resampler) runs in parallel. The loader only
 * schedules: which samples, which thread, which slot. */
#include "io/loader.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/augment.h"
#include "check.h"
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

/* the augmentation settings of this loader's samples (io/augment.h) */
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
        st = read_sample(l, id, s->b.raw + (size_t)i * px, &s->b.labels[i]);
        mnt_aug_cfg a = aug_cfg(l);
        mnt_aug_box(&a, e, id, s->b.boxes + (size_t)i * MNT_BOX_FLOATS);
      }
      else if ((st = read_sample(l, id, pix, &s->b.labels[i])) == MNT_OK)
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
  if (c.out_size < 1 || c.out_size > MNT_AUG_MAX_OUT || (c.out_channels != 0 && c.out_channels != d->channels && !(d->channels == 1 && c.out_channels == 3))) {
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
  MNT_CHECK(st);
  *b = &s->b;
  return MNT_OK;
}

int mnt_loader_val_sample(mnt_dataset *d, int64_t g, int out_size, int out_channels, double crop, float *dst,
                          int32_t *label) {
  int outC = out_channels ? out_channels : d->channels;
  if (out_size < 1 || out_size > MNT_AUG_MAX_OUT || outC > MNT_AUG_MAX_C) {
    MNT_ERR("loader: bad validation size %d or channels %d", out_size, outC);
    return MNT_EARG;
  }
  uint8_t *pix = malloc((size_t)d->size * d->size * d->channels);
  if (!pix) return MNT_ENOMEM;
  int st = mnt_dataset_read(d, g, pix, label);
  if (st == MNT_OK) mnt_centre_crop(pix, d->size, d->channels, crop, out_size, outC, d->mean, d->std, dst);
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
  pthread_mutex_destroy(&l->io_mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}
