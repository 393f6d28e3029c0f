/* test_shard_damage.c — a damaged shard's metadata never crashes, hangs or changes what is read.
 * A small format 2 shard (80 squares: a two-level chunk index) and a small format 3 shard (raw
 * records) are written; then every byte of each shard's metadata (every byte that is not inside a
 * chunk or the records: superblock, object headers, attributes, heaps, chunk indexes) is damaged in
 * turn, in several ways (all bits flipped, the low bit flipped, the 8-byte little-endian word 1
 * written there, four 0xff bytes written there), and the set is opened and every sample read in a
 * child process under a deadline. Each damaged read must either give back exactly what the undamaged
 * shard gives (pixels or record, size, label) or fail with MNT_EDATA and an error that names the shard; a
 * crash, a hang, another status, an error without the shard's name or a sample that reads back
 * different is a failure, reported with the byte and the damage.
 * Bytes in runs of 16 or more zeros (unused parts of index nodes, mostly) are damaged at every 8th byte
 * only, in one way each, to keep the test near a minute (about 25,000 damaged reads); `all` damages
 * every metadata byte in every way (about 108,000 reads, 4 minutes).
 *   test_shard_damage [all | f2|f3 OFFSET KIND]   all: every byte, every way; f2|f3 OFFSET KIND: one
 *                                                 case, its log on stderr, the sets kept */
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/expect.h"
#include "io/convert/convert.h"
#include "io/data/dataset.h"
#include "io/convert/shard_write.h"
#include "src/log.h"

enum { N2 = 80, SIZE2 = 4, N3 = 24, DEADLINE_S = 20 };
enum { SAME = 0, REFUSED = 20, OTHER = 21, DIFFERENT = 22 }; /* a child's exit codes */
enum { KINDS = 4 };
static const char *kind_name[KINDS] = {"bits flipped", "low bit flipped", "LE word 1 written", "ff ff ff ff written"};

typedef struct set {
  char dir[600], shard[700];
  const char *shard_name, *tag; /* tag: f2 or f3 */
  int64_t n;
  uint8_t **rec;   /* what was written: each sample's stored bytes, length, label, width, height */
  size_t *len;
  int32_t *label;
  int *w, *h;
  uint8_t *meta;   /* 1: a metadata byte of the shard file (not inside a chunk or the records) */
  uint8_t *orig;   /* the shard file as written */
  uint8_t *long_zero; /* 1: a metadata byte in a run of 16 or more zero bytes */
  size_t size;
} set;

/* ---- the two sets -------------------------------------------------------------------------- */

typedef struct rsrc { uint8_t buf[9 * 9 * 3]; } rsrc;

static void rec_dims(int64_t i, int *w, int *h) {
  *w = 3 + (int)(i * 5 % 7);
  *h = 3 + (int)(i * 3 % 7);
}

static int get_record(void *ctx, int64_t i, mnt_convert_record *r) {
  rsrc *s = ctx;
  int w, h;
  rec_dims(i, &w, &h);
  size_t n = (size_t)w * h * 3;
  for (size_t p = 0; p < n; p++) s->buf[p] = (uint8_t)(i * 37 + p * 11);
  *r = (mnt_convert_record){.data = s->buf, .len = n, .w = w, .h = h, .label = (int32_t)(i % 4),
                            .sum = {1, 1, 1}, .sum2 = {1, 1, 1}};
  return MNT_OK;
}

static void no_prefetch(void *ctx, const int64_t *ids, int n) { (void)ctx, (void)ids, (void)n; }

static int write_f3(const char *dir) {
  static char *names[4] = {"a", "b", "c", "d"};
  rsrc s;
  mnt_convert_source so = {.n = N3, .size = 16, .channels = 3, .nclasses = 4, .class_names = names, .ctx = &s,
                           .version = MNT_FORMAT_RECORDS, .codec = MNT_CODEC_RAW, .get_record = get_record,
                           .prefetch = no_prefetch, .inputs = 7, .description = "test_shard_damage"};
  return mnt_convert_write(&so, dir, 1, 5, 0);
}

/* every sample as the reader gives it from the undamaged shard, into s (what a damaged read must give
 * back, if anything); 0 or -1 */
static int read_back(set *s) {
  mnt_dataset d;
  if (mnt_dataset_open(s->dir, &d) != MNT_OK) return -1;
  s->n = d.total;
  s->rec = calloc((size_t)s->n, sizeof *s->rec);
  s->len = calloc((size_t)s->n, sizeof *s->len);
  s->label = calloc((size_t)s->n, sizeof *s->label);
  s->w = calloc((size_t)s->n, sizeof *s->w);
  s->h = calloc((size_t)s->n, sizeof *s->h);
  int bad = 0;
  for (int64_t g = 0; g < s->n; g++) {
    size_t cap = 0;
    bad |= mnt_dataset_read_record(&d, g, &s->rec[g], &cap, &s->len[g], &s->label[g]) != MNT_OK ||
           mnt_dataset_dims(&d, g, &s->w[g], &s->h[g]) != MNT_OK;
  }
  mnt_dataset_close(&d);
  return bad ? -1 : 0;
}

/* the byte ranges of the shard's data (chunks, the contiguous records) cleared in s->meta */
static int find_metadata(set *s) {
  struct stat sb;
  if (stat(s->shard, &sb) != 0) return -1;
  s->size = (size_t)sb.st_size;
  s->meta = malloc(s->size);
  s->orig = malloc(s->size);
  memset(s->meta, 1, s->size);
  int fd = open(s->shard, O_RDONLY);
  if (fd < 0 || pread(fd, s->orig, s->size, 0) != (ssize_t)s->size) return -1;
  close(fd);
  static const char *names[] = {"images", "labels", "source_index", "offsets", "shapes", "checksums", "records"};
  hid_t f = H5Fopen(s->shard, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    if (H5Lexists(f, names[k], H5P_DEFAULT) <= 0) continue;
    hid_t ds = H5Dopen2(f, names[k], H5P_DEFAULT), pl = H5Dget_create_plist(ds);
    if (H5Pget_layout(pl) == H5D_CHUNKED) {
      hsize_t nc = 0, off[4];
      hid_t sp = H5Dget_space(ds);
      H5Dget_num_chunks(ds, sp, &nc);
      for (hsize_t c = 0; c < nc; c++) {
        unsigned mask;
        haddr_t at;
        hsize_t bytes;
        if (H5Dget_chunk_info(ds, sp, c, off, &mask, &at, &bytes) >= 0 && at + bytes <= s->size)
          memset(s->meta + at, 0, bytes);
      }
      H5Sclose(sp);
    } else {
      haddr_t at = H5Dget_offset(ds);
      hsize_t bytes = H5Dget_storage_size(ds);
      if (at != HADDR_UNDEF && at + bytes <= s->size) memset(s->meta + at, 0, bytes);
    }
    H5Pclose(pl);
    H5Dclose(ds);
  }
  H5Fclose(f);
  s->long_zero = calloc(s->size, 1);
  for (size_t at = 0, end; at < s->size; at = end + 1) {
    for (end = at; end < s->size && s->meta[end] && !s->orig[end];) end++;
    if (end - at >= 16) memset(s->long_zero + at, 1, end - at);
  }
  return 0;
}

/* ---- one damaged read ------------------------------------------------------------------------ */

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
  char m[400];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  if (n > 0 && write(fd, m, (size_t)(n < (int)sizeof m ? n : (int)sizeof m - 1)) < 0) return;
}

/* a failed status st: REFUSED when it is MNT_EDATA naming the shard, else OTHER (said on fd) */
static int refused(const set *s, int st, int fd) {
  const char *e = mnt_last_error();
  say(fd, "%s: %s", mnt_status_str(st), e);
  return st == MNT_EDATA && strstr(e, s->shard_name) ? REFUSED : OTHER;
}

/* the child: the set opened, every sample read and compared; an exit code above, a line on fd */
static int damaged_read(const set *s, int fd) {
  mnt_dataset d;
  int st = mnt_dataset_open(s->dir, &d);
  if (st != MNT_OK) return refused(s, st, fd);
  int r = SAME;
  uint8_t *buf = NULL;
  size_t cap = 0, len;
  for (int64_t g = 0; g < s->n && r == SAME; g++) {
    int32_t label;
    int w = 0, h = 0;
    if ((st = mnt_dataset_read_record(&d, g, &buf, &cap, &len, &label)) != MNT_OK) {
      r = refused(s, st, fd);
    } else if (mnt_dataset_dims(&d, g, &w, &h) != MNT_OK || len != s->len[g] || memcmp(buf, s->rec[g], len) ||
               label != s->label[g] || w != s->w[g] || h != s->h[g]) {
      say(fd, "sample %lld read back different (%zu bytes, label %d, %dx%d; written: %zu, %d, %dx%d)", (long long)g,
          len, label, w, h, s->len[g], s->label[g], s->w[g], s->h[g]);
      r = DIFFERENT;
    }
  }
  free(buf);
  mnt_dataset_close(&d);
  return r;
}

/* damage kind k at byte at of the shard file (fd): the bytes written into b, their count returned
 * (0: this damage leaves the byte as it was) */
static size_t damage(const set *s, size_t at, int k, uint8_t *b) {
  size_t n = k >= 2 ? (k == 2 ? 8 : 4) : 1;
  if (at + n > s->size) n = s->size - at;
  memcpy(b, s->orig + at, n);
  if (k == 0) b[0] ^= 0xff;
  else if (k == 1) b[0] ^= 0x01;
  else if (k == 2) memset(b, 0, n), b[0] = 1;
  else memset(b, 0xff, n);
  if (k == 2 && b[0] == (s->orig[at] ^ 0x01) && !memcmp(b + 1, s->orig + at + 1, n - 1)) return 0; /* kind 1's */
  return memcmp(b, s->orig + at, n) ? n : 0;
}

/* whether damage kind k is tried at byte at: every kind at every metadata byte, but in a run of 16 or
 * more zero bytes (the unused part of an index node, a heap's free space, zero fields side by side)
 * one kind at every 8th byte, the kinds taking turns; all: every kind at every metadata byte */
static int tried(const set *s, size_t at, int k, int all) {
  if (!s->meta[at]) return 0;
  if (all || !s->long_zero[at]) return 1;
  return at % 8 == 3 && (int)(at / 8 % KINDS) == k;
}

typedef struct tally { long runs, same, refused, bad, crashed, hung, different, wrong; } tally;

/* one case: damage, a child that reads, the file restored; the outcome counted (and a failure told) */
static void one_case(const set *s, size_t at, int k, tally *t, int verbose) {
  uint8_t b[8];
  size_t n = damage(s, at, k, b);
  if (!n) return;
  int fd = open(s->shard, O_WRONLY);
  if (fd < 0 || pwrite(fd, b, n, (off_t)at) != (ssize_t)n) {
    EXPECT(0, "%s: cannot damage byte %zu", s->shard, at);
    if (fd >= 0) close(fd);
    return;
  }
  int p[2];
  if (pipe(p) != 0) return;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (!verbose) {
      int dn = open("/dev/null", O_WRONLY);
      if (dn >= 0) dup2(dn, 2);
    }
    alarm(DEADLINE_S);
    _exit(damaged_read(s, p[1]));
  }
  close(p[1]);
  char msg[400] = "";
  ssize_t got = 0, r;
  while (got < (ssize_t)sizeof msg - 1 && (r = read(p[0], msg + got, sizeof msg - 1 - (size_t)got)) > 0) got += r;
  msg[got > 0 ? got : 0] = '\0';
  close(p[0]);
  int ws = 0;
  waitpid(pid, &ws, 0);
  if (pwrite(fd, s->orig + at, n, (off_t)at) != (ssize_t)n) EXPECT(0, "%s: cannot restore byte %zu", s->shard, at);
  close(fd);
  t->runs++;
  int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  const char *how = code == SAME ? "read back the same" : code == REFUSED ? "refused, naming the shard"
                    : code == DIFFERENT ? "read back different" : code == OTHER ? "a wrong error" : "crashed";
  if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM) how = "hung (no answer in time)";
  else if (WIFSIGNALED(ws)) how = strsignal(WTERMSIG(ws));
  long *count = code == SAME ? &t->same : code == REFUSED ? &t->refused : code == DIFFERENT ? &t->different
                : code == OTHER ? &t->wrong : WIFSIGNALED(ws) && WTERMSIG(ws) == SIGALRM ? &t->hung : &t->crashed;
  ++*count;
  t->bad += code != SAME && code != REFUSED;
  if (verbose || (code != SAME && code != REFUSED && t->bad <= 200))
    fprintf(stderr, "%s%s shard, byte %zu (0x%zx), %s: %s (exit %d; alone: test_shard_damage %s %zu %d) %s\n",
            code == SAME || code == REFUSED ? "" : "FAIL ", s->tag, at, at, kind_name[k], how, code, s->tag, at, k,
            msg);
}

static void free_set(set *s) {
  for (int64_t g = 0; g < s->n && s->rec; g++) free(s->rec[g]);
  free(s->rec), free(s->len), free(s->label), free(s->w), free(s->h), free(s->meta), free(s->orig), free(s->long_zero);
}

static int make_sets(const char *root, set *s2, set *s3) {
  snprintf(s2->dir, sizeof s2->dir, "%s/f2", root);
  snprintf(s3->dir, sizeof s3->dir, "%s/f3", root);
  s2->tag = "f2";
  s3->tag = "f3";
  if (mnt_convert_synth(s2->dir, 4, N2, SIZE2, 1, 3, 0) != MNT_OK || write_f3(s3->dir) != MNT_OK) return -1;
  for (set *s = s2; s; s = s == s2 ? s3 : NULL) {
    s->shard_name = "shard-00000-of-00001.h5";
    snprintf(s->shard, sizeof s->shard, "%s/%s", s->dir, s->shard_name);
    if (read_back(s) || find_metadata(s)) return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  mnt_h5_init();
  char root[] = "/tmp/mntrain-test-shard-damage-XXXXXX";
  if (!mkdtemp(root)) return 1;
  set s2 = {0}, s3 = {0};
  EXPECT(make_sets(root, &s2, &s3) == 0, "write and read back the two sets in %s", root);
  int all = argc == 2 && !strcmp(argv[1], "all");
  if (!failures && argc == 4) {
    tally t = {0};
    one_case(strcmp(argv[1], "f3") ? &s2 : &s3, (size_t)strtoull(argv[2], NULL, 0), atoi(argv[3]) % KINDS, &t, 1);
    failures += (int)t.bad;
  } else if (!failures) {
    for (set *s = &s2; s; s = s == &s2 ? &s3 : NULL) {
      tally t = {0};
      size_t nmeta = 0;
      double t0 = mnt_now();
      for (size_t at = 0; at < s->size; at++) {
        nmeta += s->meta[at];
        for (int k = 0; k < KINDS; k++)
          if (tried(s, at, k, all)) one_case(s, at, k, &t, 0);
      }
      printf("format %d shard (%lld samples, %zu bytes, %zu of them metadata): %ld damaged reads in %.1f s: %ld "
             "the same, %ld refused naming the shard; %ld failed: %ld read back different, %ld crashed, %ld hung, %ld "
             "a wrong error\n", s == &s2 ? 2 : 3, (long long)s->n, s->size, nmeta, t.runs, mnt_now() - t0, t.same,
             t.refused, t.bad, t.different, t.crashed, t.hung, t.wrong);
      checks++;
      if (t.bad) failures++;
    }
  }
  free_set(&s2);
  free_set(&s3);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf %s", root);
  if (argc == 4) fprintf(stderr, "the sets (undamaged) are kept in %s\n", root);
  else if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  printf("test_shard_damage: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
