/* test_record.c — format 3's reading API (io/data/dataset.h) on sets written here through
 * mnt_convert_write from a source of records of many sizes (raw and JPEG-coded, some inputs skipped):
 * every record read back (mnt_dataset_read_record, mnt_dataset_read_run) equals what was written,
 * in the seeded global order, with its size (mnt_dataset_dims) and label, also from 4 threads at
 * once; runs stop at the end of a shard; mnt_dataset_read refuses pixels of format 3 and gives
 * labels; a flipped byte in one record is MNT_EDATA naming the shard and the sample, and a run
 * delivers the good records before it; a format 2 set reads through the same calls; a format 2
 * shard among format 3 shards is refused at open. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "tests/expect.h"
#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "io/convert/shard_write.h"
#include "src/log.h"

enum { N = 300, SEED = 11, SHARDS = 3 };

typedef struct src { int codec; uint8_t *buf; size_t len; tjhandle tj; } src;

static int skipped(int64_t i) { return i % 37 == 5; }
static void dims_of(int64_t i, int *w, int *h) {
  *w = 8 + (int)(i * 7 % 61);
  *h = 8 + (int)(i * 13 % 47);
}
static uint8_t pixel(int64_t i, size_t p) { return (uint8_t)(i * 31 + p * (p % 7 + 1)); }

/* sample i's record as the source gives it: raw pixels, or their JPEG */
static int make(src *s, int64_t i, int *w, int *h) {
  dims_of(i, w, h);
  size_t n = (size_t)*w * *h * 3;
  uint8_t *px = malloc(n);
  for (size_t p = 0; p < n; p++) px[p] = pixel(i, p);
  if (s->codec == MNT_CODEC_RAW) {
    free(s->buf);
    s->buf = px;
    s->len = n;
    return 0;
  }
  unsigned char *jpg = NULL;
  unsigned long len = 0;
  int r = tjCompress2(s->tj, px, *w, 0, *h, TJPF_RGB, &jpg, &len, TJSAMP_420, 90, 0);
  free(px);
  free(s->buf);
  s->buf = malloc(len);
  memcpy(s->buf, jpg, len);
  s->len = len;
  tjFree(jpg);
  return r;
}

static int get_record(void *ctx, int64_t i, mnt_convert_record *r) {
  src *s = ctx;
  if (skipped(i)) return MNT_SKIP_SAMPLE;
  int w, h;
  if (make(s, i, &w, &h)) return MNT_ESYS;
  *r = (mnt_convert_record){.data = s->buf, .len = s->len, .w = w, .h = h, .label = (int32_t)(i % 5),
                            .sum = {1, 1, 1}, .sum2 = {1, 1, 1}};
  return MNT_OK;
}

static void no_prefetch(void *ctx, const int64_t *ids, int n) { (void)ctx, (void)ids, (void)n; }

static int write_set(const char *dir, int codec) {
  static char *names[5] = {"a", "b", "c", "d", "e"};
  src s = {.codec = codec, .tj = tjInitCompress()};
  mnt_convert_source so = {.n = N, .size = 64, .channels = 3, .nclasses = 5, .class_names = names, .ctx = &s,
                           .version = MNT_FORMAT_RECORDS, .codec = codec, .quality = 90, .max_side = 128,
                           .get_record = get_record, .prefetch = no_prefetch, .inputs = 42,
                           .description = "test_record"};
  int st = mnt_convert_write(&so, dir, SHARDS, SEED, 0);
  free(s.buf);
  tjDestroy(s.tj);
  return st;
}

/* the source ids in the global order, skipped ones left out (as the writer does) */
static int64_t order(int64_t *ids) {
  int64_t *perm = malloc(N * sizeof *perm), n = 0;
  mnt_permutation(perm, N, mnt_mix(SEED, 0x5ca1ab1eull));
  for (int k = 0; k < SHARDS; k++)
    for (int64_t j = (int64_t)N * k / SHARDS; j < (int64_t)N * (k + 1) / SHARDS; j++)
      if (!skipped(perm[j])) ids[n++] = perm[j];
  free(perm);
  return n;
}

typedef struct reader { mnt_dataset *d; const int64_t *ids; int codec, bad, first; } reader;

static void *read_all(void *arg) {
  reader *r = arg;
  src s = {.codec = r->codec, .tj = tjInitCompress()};
  uint8_t *buf = NULL;
  size_t cap = 0, len;
  for (int64_t k = 0; k < r->d->total; k++) {
    int64_t g = (k * 7 + r->first * 53) % r->d->total; /* each thread its own order */
    int32_t label;
    int w, h, ww, wh;
    make(&s, r->ids[g], &w, &h);
    if (mnt_dataset_read_record(r->d, g, &buf, &cap, &len, &label) != MNT_OK || len != s.len ||
        memcmp(buf, s.buf, len) || label != r->ids[g] % 5 || mnt_dataset_dims(r->d, g, &ww, &wh) || ww != w ||
        wh != h)
      r->bad++;
  }
  free(buf);
  free(s.buf);
  tjDestroy(s.tj);
  return NULL;
}

static void check_set(const char *dir, int codec) {
  int64_t *ids = malloc(N * sizeof *ids), n = order(ids);
  mnt_dataset d;
  EXPECT(mnt_dataset_open(dir, &d) == MNT_OK, "open %s", dir);
  if (d.total == 0) return;
  EXPECT(d.total == n && d.version == 3 && d.codec == codec && d.resize == 64 && d.size == 64 && d.max_side == 128,
         "%s: %lld samples (want %lld), version %d, codec %d, resize %d, max side %d", dir, (long long)d.total,
         (long long)n, d.version, d.codec, d.resize, d.max_side);
  reader r[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    r[i] = (reader){.d = &d, .ids = ids, .codec = codec, .first = i};
    pthread_create(&t[i], NULL, read_all, &r[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    EXPECT(r[i].bad == 0, "%s: thread %d: %d records differ from what was written", dir, i, r[i].bad);
  }
  /* a run from 3 before the end of shard 0 stops there; its records are the single reads' */
  uint8_t *run = NULL, *one = NULL;
  size_t rcap = 0, ocap = 0, off[9], len;
  int32_t labels[8], label;
  int64_t g = d.shard_count[0] - 3, m = 8;
  EXPECT(mnt_dataset_read_run(&d, g, &m, &run, &rcap, off, labels) == MNT_OK && m == 3, "a run: %lld", (long long)m);
  for (int64_t j = 0; j < m; j++) {
    mnt_dataset_read_record(&d, g + j, &one, &ocap, &len, &label);
    EXPECT(len == off[j + 1] - off[j] && !memcmp(one, run + off[j], len) && label == labels[j], "run record %lld",
           (long long)j);
  }
  EXPECT(mnt_dataset_read(&d, 0, one, &label) == MNT_EARG, "mnt_dataset_read with pixels on format 3");
  EXPECT(mnt_dataset_read(&d, 1, NULL, &label) == MNT_OK && label == ids[1] % 5, "mnt_dataset_read, labels only");
  /* one flipped byte in sample 2 of shard 1 */
  int64_t gb = d.shard_start[1] + 2, at = d.rec_base[1] + d.rec_off[gb + 1] + 1;
  int fd = open(d.shard_path[1], O_RDWR);
  uint8_t b;
  EXPECT(fd >= 0 && pread(fd, &b, 1, at) == 1, "read a byte");
  b ^= 0x10;
  EXPECT(pwrite(fd, &b, 1, at) == 1, "write a byte");
  close(fd);
  EXPECT(mnt_dataset_read_record(&d, gb, &one, &ocap, &len, &label) == MNT_EDATA &&
         strstr(mnt_last_error(), "shard-00001-of-00003.h5: sample 2 ") && strstr(mnt_last_error(), "checksum"),
         "a flipped byte: %s", mnt_last_error());
  m = 5;
  EXPECT(mnt_dataset_read_run(&d, gb - 2, &m, &run, &rcap, off, labels) == MNT_EDATA && m == 2,
         "a run over the bad record: %lld good before it", (long long)m);
  free(run);
  free(one);
  mnt_dataset_close(&d);
  free(ids);
}

/* format 2 through the same calls, and a format 2 shard among format 3 ones */
static void check_square(const char *dir, const char *f3) {
  EXPECT(mnt_convert_synth(dir, 5, 30, 12, SHARDS, 3, 0) == MNT_OK, "synth");
  mnt_dataset d;
  EXPECT(mnt_dataset_open(dir, &d) == MNT_OK, "open %s", dir);
  uint8_t *buf = NULL, px[12 * 12 * 3];
  size_t cap = 0, len;
  int32_t l1, l2;
  int w, h;
  EXPECT(mnt_dataset_read_record(&d, 7, &buf, &cap, &len, &l1) == MNT_OK && mnt_dataset_read(&d, 7, px, &l2) == 0 &&
         len == sizeof px && !memcmp(buf, px, len) && l1 == l2 && d.codec == MNT_CODEC_RAW,
         "format 2 through mnt_dataset_read_record");
  EXPECT(mnt_dataset_dims(&d, 7, &w, &h) == MNT_OK && w == 12 && h == 12, "format 2 dims");
  free(buf);
  mnt_dataset_close(&d);
  char a[700], b[700];
  snprintf(a, sizeof a, "%s/shard-00001-of-00003.h5", dir);
  snprintf(b, sizeof b, "%s/shard-00001-of-00003.h5", f3);
  EXPECT(rename(a, b) == 0, "move a shard");
  EXPECT(mnt_dataset_open(f3, &d) == MNT_EDATA && strstr(mnt_last_error(), "shard-00001-of-00003.h5") &&
         strstr(mnt_last_error(), "another conversion"), "a format 2 shard among format 3: %s", mnt_last_error());
}

int main(void) {
  char dir[] = "/tmp/mntrain-test-record-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char raw[600], jpg[600], sq[600];
  snprintf(raw, sizeof raw, "%s/raw", dir);
  snprintf(jpg, sizeof jpg, "%s/jpeg", dir);
  snprintf(sq, sizeof sq, "%s/square", dir);
  EXPECT(write_set(raw, MNT_CODEC_RAW) == MNT_OK, "write raw records");
  EXPECT(write_set(jpg, MNT_CODEC_JPEG) == MNT_OK, "write JPEG records");
  check_set(raw, MNT_CODEC_RAW);
  check_set(jpg, MNT_CODEC_JPEG);
  check_square(sq, jpg);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("test_record: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
