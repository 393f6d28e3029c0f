/* ckpt_read.c — finding, verifying and reading a checkpoint into memory (a resuming job's rank 0,
 * `mntrain inspect`): its manifest, the file's size and HDF5 layout, every share's hash, and the
 * datasets read once as one packed image; see ckpt.h. */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "src/check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "src/log.h"
#include "src/path.h"
#include "src/simd.h"

int mnt_ckpt_cmp_extent(const void *a, const void *b) {
  const mnt_ckpt_extent *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

int mnt_ckpt_pread_all(int fd, uint8_t *dst, uint64_t off, uint64_t len) {
  for (uint64_t done = 0; done < len;) {
    size_t n = len - done > MNT_CKPT_PIECE ? MNT_CKPT_PIECE : (size_t)(len - done);
    ssize_t r = pread(fd, dst + done, n, (off_t)(off + done));
    if (r > 0) done += (uint64_t)r;
    else if (r < 0 && errno == EINTR) continue;
    else return -1;
  }
  return 0;
}

int mnt_ckpt_open_retry(const char *path, int flags) {
  for (int i = 0;; i++) {
    int fd = open(path, flags | O_CLOEXEC, 0644);
    /* GlusterFS: two clients creating one file at once can get EEXIST without O_EXCL */
    if (fd < 0 && errno == EEXIST && (flags & O_CREAT)) fd = open(path, (flags & ~O_CREAT) | O_CLOEXEC);
    if (fd >= 0 || (errno != ENOENT && errno != ESTALE) || i >= 110) return fd;
    long ms = i < 7 ? 1L << i : 100; /* 1, 2, 4 ... 64 ms, then 100 ms: about 10 s in all */
    if (i == 0) MNT_DBG("%s: %s, retrying", path, strerror(errno));
    struct timespec ts = {0, ms * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* every share's XXH3-64 against the manifest's (img: the datasets in file order, ext sorted by
 * offset); MNT_EDATA naming the rank whose share fails and the first dataset in it */
static int verify_shares(const char *dir, const char *path, json_t *m, const mnt_ckpt_extent *ext, const uint8_t *img,
                         uint64_t total, char *why, size_t wn) {
  json_t *ds = json_object_get(m, "datasets"), *shares = json_object_get(m, "shares");
  size_t nd = json_array_size(ds);
  int st = MNT_OK;
  for (size_t r = 0; st == MNT_OK && r < json_array_size(shares); r++) {
    json_t *s = json_array_get(shares, r);
    uint64_t p = (uint64_t)json_integer_value(json_object_get(s, "packed")),
             n = (uint64_t)json_integer_value(json_object_get(s, "bytes"));
    const char *hex = json_string_value(json_object_get(s, "xxh3"));
    if (p + n > total || !hex) {
      snprintf(why, wn, "%s/%s: share %zu is out of range", dir, MNT_CKPT_MANIFEST, r);
      st = MNT_EDATA;
      break;
    }
    char h[17];
    snprintf(h, sizeof h, "%016" PRIx64, (uint64_t)XXH3_64bits(img + p, n));
    if (strcmp(h, hex) != 0) {
      uint64_t lo = (uint64_t)json_integer_value(json_object_get(s, "lo")),
               hi = (uint64_t)json_integer_value(json_object_get(s, "hi"));
      const char *first = "?";
      for (size_t i = 0; i < nd; i++)
        if (ext[i].off + ext[i].bytes > lo) {
          first = json_string_value(json_object_get(json_array_get(ds, (size_t)ext[i].t), "name"));
          break;
        }
      snprintf(why, wn, "%s: the share written by rank %zu (bytes %" PRIu64 "..%" PRIu64 ", from %s) fails its "
               "checksum (xxh3 %s, manifest %s)", path, r, lo, hi, first ? first : "?", h, hex);
      st = MNT_EDATA;
    }
  }
  return st;
}

/* the manifest's datasets ds (nd of them) sorted by offset, each with its place in the packed
 * image (the datasets in file order); *total: the image's bytes. NULL: out of memory. */
static mnt_ckpt_extent *file_extents(json_t *ds, size_t nd, uint64_t *total) {
  mnt_ckpt_extent *ext = calloc(nd ? nd : 1, sizeof *ext);
  if (!ext) return NULL;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(ds, i);
    ext[i] = (mnt_ckpt_extent){.off = (uint64_t)json_integer_value(json_object_get(d, "offset")),
                               .bytes = (uint64_t)json_integer_value(json_object_get(d, "bytes")), .t = (int)i};
  }
  qsort(ext, nd, sizeof *ext, mnt_ckpt_cmp_extent);
  *total = 0;
  for (size_t i = 0; i < nd; i++) {
    ext[i].packed = *total;
    *total += ext[i].bytes;
  }
  return ext;
}

/* ---- the manifest's numbers, checked before anything is allocated or read by them ------------ */

/* *v: member key of o, an integer in [lo, hi]; 0 (why says which) otherwise */
static int int_in(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *v, const char *what,
                  char *why, size_t wn) {
  json_t *x = json_object_get(o, key);
  if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
    snprintf(why, wn, "%s: \"%s\" is %s (an integer in %lld..%lld)", what, key, x ? "out of range" : "missing",
             (long long)lo, (long long)hi);
    return 0;
  }
  *v = json_integer_value(x);
  return 1;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_hex16(const char *h) {
  if (!h || strlen(h) != 16) return 0;
  for (int i = 0; i < 16; i++)
    if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return 0;
  return 1;
}

/* one dataset of the manifest (index i): a name, a type, a place inside the file, a shape that
 * holds its bytes */
static int check_dataset(json_t *d, size_t i, json_int_t file_bytes, const char *man, char *why, size_t wn) {
  char what[MNT_PATH_MAX + 300];
  snprintf(what, sizeof what, "%s: dataset %zu", man, i);
  const char *name = json_string_value(json_object_get(d, "name")), *type = json_string_value(json_object_get(d, "type"));
  json_int_t off, bytes;
  if (!json_is_object(d) || !name || name[0] != '/' || strlen(name) >= sizeof(((mnt_ckpt_tensor *)0)->name)) {
    snprintf(why, wn, "%s has no valid \"name\"", what);
    return 0;
  }
  snprintf(what, sizeof what, "%s: dataset %.200s", man, name);
  int per = type && !strcmp(type, "float32") ? 4 : type && !strcmp(type, "uint8") ? 1 : 0;
  if (!per) {
    snprintf(why, wn, "%s: \"type\" is not float32 or uint8", what);
    return 0;
  }
  if (!int_in(d, "offset", 0, file_bytes, &off, what, why, wn) ||
      !int_in(d, "bytes", 0, file_bytes - off, &bytes, what, why, wn))
    return 0;
  json_t *shape = json_object_get(d, "shape");
  size_t nk = json_array_size(shape);
  uint64_t n = 1;
  for (size_t k = 0; k < nk && n <= (uint64_t)bytes; k++) {
    json_t *x = json_array_get(shape, k);
    json_int_t e = json_integer_value(x);
    n = json_is_integer(x) && e >= 1 && e <= (json_int_t)bytes ? n * (uint64_t)e : UINT64_MAX;
  }
  if (nk < 1 || nk > 4 || n > (uint64_t)bytes || n * (uint64_t)per != (uint64_t)bytes) {
    snprintf(why, wn, "%s: its \"shape\" does not hold its %lld bytes", what, (long long)bytes);
    return 0;
  }
  return 1;
}

/* The manifest m of dir holds together, before any of its numbers is used to allocate or to read:
 * the datasets lie inside file_bytes without overlapping, names unique, /train_state among them;
 * one share per rank of world_size, each with an XXH3-64, their file ranges adjacent and their
 * bytes tiling the packed image exactly (so that no byte escapes the hash check); a "state"
 * object. MNT_EDATA with why otherwise (a manifest edited or damaged is a damaged checkpoint). */
static int check_manifest(const char *dir, json_t *m, char *why, size_t wn) {
  char man[MNT_PATH_MAX + 32];
  snprintf(man, sizeof man, "%s/%s", dir, MNT_CKPT_MANIFEST);
  json_t *ds = json_object_get(m, "datasets"), *shares = json_object_get(m, "shares");
  json_int_t file_bytes, world;
  size_t nd = json_array_size(ds);
  if (!int_in(m, "file_bytes", 0, INT64_MAX / 2, &file_bytes, man, why, wn) ||
      !int_in(m, "world_size", 1, 1 << 24, &world, man, why, wn))
    return MNT_EDATA;
  if (!json_is_object(json_object_get(m, "state"))) {
    snprintf(why, wn, "%s: \"state\" is not an object", man);
    return MNT_EDATA;
  }
  if (nd < 1 || nd > (1u << 20)) {
    snprintf(why, wn, "%s: %zu datasets", man, nd);
    return MNT_EDATA;
  }
  int have_state = 0;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(ds, i);
    if (!check_dataset(d, i, file_bytes, man, why, wn)) return MNT_EDATA;
    const char *name = json_string_value(json_object_get(d, "name"));
    if (!strcmp(name, "/train_state"))
      have_state = !strcmp(json_string_value(json_object_get(d, "type")), "uint8") &&
                   json_integer_value(json_object_get(d, "bytes")) == MNT_CKPT_STATE_BYTES;
  }
  if (!have_state) {
    snprintf(why, wn, "%s: no dataset /train_state of %d bytes", man, MNT_CKPT_STATE_BYTES);
    return MNT_EDATA;
  }
  uint64_t total = 0;
  mnt_ckpt_extent *ext = file_extents(ds, nd, &total);
  if (!ext) {
    snprintf(why, wn, "%s: out of memory", man);
    return MNT_ENOMEM;
  }
  int st = MNT_OK;
  for (size_t i = 0; i + 1 < nd && st == MNT_OK; i++) {
    const char *a = json_string_value(json_object_get(json_array_get(ds, (size_t)ext[i].t), "name")),
               *b = json_string_value(json_object_get(json_array_get(ds, (size_t)ext[i + 1].t), "name"));
    if (ext[i].off + ext[i].bytes > ext[i + 1].off) {
      snprintf(why, wn, "%s: datasets %.200s and %.200s overlap", man, a, b);
      st = MNT_EDATA;
    }
  }
  /* names unique: sorted copies of the pointers */
  const char **names = st == MNT_OK ? malloc(nd * sizeof *names) : NULL;
  if (st == MNT_OK && !names) st = MNT_ENOMEM;
  for (size_t i = 0; st == MNT_OK && i < nd; i++) names[i] = json_string_value(json_object_get(json_array_get(ds, i), "name"));
  if (st == MNT_OK) qsort(names, nd, sizeof *names, cmp_name);
  for (size_t i = 0; st == MNT_OK && i + 1 < nd; i++)
    if (!strcmp(names[i], names[i + 1])) {
      snprintf(why, wn, "%s: dataset %.200s is named twice", man, names[i]);
      st = MNT_EDATA;
    }
  free(names);
  if (st == MNT_OK && json_array_size(shares) != (size_t)world) {
    snprintf(why, wn, "%s: %zu shares for %lld ranks", man, json_array_size(shares), (long long)world);
    st = MNT_EDATA;
  }
  uint64_t running = 0, prev_hi = 0;
  for (size_t r = 0; st == MNT_OK && r < (size_t)world; r++) {
    json_t *s = json_array_get(shares, r);
    char what[MNT_PATH_MAX + 300];
    snprintf(what, sizeof what, "%s: share %zu", man, r);
    json_int_t rank, lo, hi, packed, bytes;
    if (!int_in(s, "rank", (json_int_t)r, (json_int_t)r, &rank, what, why, wn) ||
        !int_in(s, "lo", r ? (json_int_t)prev_hi : 0, r ? (json_int_t)prev_hi : file_bytes, &lo, what, why, wn) ||
        !int_in(s, "hi", lo, file_bytes, &hi, what, why, wn) ||
        !int_in(s, "packed", 0, (json_int_t)total, &packed, what, why, wn) ||
        !int_in(s, "bytes", 0, (json_int_t)total, &bytes, what, why, wn)) {
      st = MNT_EDATA;
      break;
    }
    if (!is_hex16(json_string_value(json_object_get(s, "xxh3")))) {
      snprintf(why, wn, "%s has no valid \"xxh3\"", what);
      st = MNT_EDATA;
      break;
    }
    uint64_t in = 0; /* the datasets' bytes inside [lo, hi) */
    for (size_t i = 0; i < nd; i++) {
      uint64_t a = ext[i].off > (uint64_t)lo ? ext[i].off : (uint64_t)lo,
               b = ext[i].off + ext[i].bytes < (uint64_t)hi ? ext[i].off + ext[i].bytes : (uint64_t)hi;
      if (a < b) in += b - a;
    }
    if ((uint64_t)bytes != in || (bytes && (uint64_t)packed != running)) {
      snprintf(why, wn, "%s: bytes %lld..%lld of the file hold %" PRIu64 " bytes of data, it says %lld at %lld",
               what, (long long)lo, (long long)hi, in, (long long)bytes, (long long)packed);
      st = MNT_EDATA;
    }
    running += (uint64_t)bytes;
    prev_hi = (uint64_t)hi;
  }
  if (st == MNT_OK && running != total) {
    snprintf(why, wn, "%s: the shares cover %" PRIu64 " of the %" PRIu64 " bytes of data", man, running, total);
    st = MNT_EDATA;
  }
  free(ext);
  return st;
}

/* the root attribute "config" of the open file f (the run's configuration as JSON text, written
 * with the layout) is the manifest's "config": 1, or 0 */
static int same_config(hid_t f, json_t *m) {
  hid_t a = H5Aexists(f, "config") > 0 ? H5Aopen(f, "config", H5P_DEFAULT) : -1;
  hid_t t = a >= 0 ? H5Aget_type(a) : -1;
  size_t n = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0 ? H5Tget_size(t) : 0;
  char *txt = n > 0 && n < (16u << 20) ? malloc(n + 1) : NULL;
  int same = 0;
  if (txt && H5Aread(a, t, txt) >= 0) {
    txt[n] = 0;
    json_t *c = json_loads(txt, JSON_REJECT_DUPLICATES, NULL);
    same = c && json_equal(c, json_object_get(m, "config"));
    json_decref(c);
  }
  free(txt);
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return same;
}

/* path (the checkpoint's state.h5) has the size its manifest m says, HDF5 opens it (its metadata
 * is checksummed), its configuration is the manifest's, and the datasets are where the manifest
 * says; MNT_EDATA with why otherwise */
static int check_file(const char *path, json_t *m, char *why, size_t wn) {
  json_t *ds = json_object_get(m, "datasets");
  struct stat sb;
  json_int_t want = json_integer_value(json_object_get(m, "file_bytes"));
  if (lstat(path, &sb) != 0) {
    snprintf(why, wn, "%s: %s", path, strerror(errno));
    return MNT_EDATA;
  }
  if (!S_ISREG(sb.st_mode)) { /* a link planted in its place is not followed */
    snprintf(why, wn, "%s is not a regular file (%s)", path, S_ISLNK(sb.st_mode) ? "a symbolic link" : "another kind");
    return MNT_EDATA;
  }
  if (sb.st_size != want) {
    snprintf(why, wn, "%s has %lld bytes, its manifest says %lld (truncated or replaced)", path, (long long)sb.st_size,
             (long long)want);
    return MNT_EDATA;
  }
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    snprintf(why, wn, "%s: HDF5 cannot open it (damaged metadata)", path);
    return MNT_EDATA;
  }
  int st = MNT_OK;
  if (!same_config(f, m)) {
    snprintf(why, wn, "%s: the manifest's \"config\" is not the file's (root attribute config)", path);
    st = MNT_EDATA;
  }
  for (size_t i = 0; i < json_array_size(ds) && st == MNT_OK; i++) {
    json_t *d = json_array_get(ds, i);
    const char *name = json_string_value(json_object_get(d, "name"));
    hid_t h = name ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    haddr_t a = h >= 0 ? H5Dget_offset(h) : HADDR_UNDEF;
    if (h >= 0) H5Dclose(h);
    if (a == HADDR_UNDEF || (uint64_t)a != (uint64_t)json_integer_value(json_object_get(d, "offset"))) {
      snprintf(why, wn, "%s: dataset %s is not where the manifest says", path, name ? name : "?");
      st = MNT_EDATA;
    }
  }
  H5Fclose(f);
  return st;
}

/* The datasets' bytes (ext: nd of them, sorted) into img; MNT_EDATA with why when the file cannot be
 * read. With O_DIRECT (where the filesystem takes it) a thread reads the runs of adjacent datasets in
 * 8 MiB aligned blocks into a ring of bounce buffers while this one copies them into place, so the
 * disk and the copy overlap: a cold buffered read spent its time allocating and filling page-cache
 * pages the resume never reads again (measured: 450-510 MB/s buffered against 2.5 GB/s for dd's
 * cold read of the same disk). Elsewhere (FUSE) buffered reads of whole runs. */
enum { DIRECT_ALIGN = 4096, RING = 4, READERS = 2 };

typedef struct block { uint64_t a0; size_t n; ssize_t got; int err; } block;

typedef struct reader {
  int dfd;
  const mnt_ckpt_extent *ext;
  size_t nd;
  uint8_t *buf[RING];
  block blk[RING];
  int seq[RING];     /* the block slot k % RING holds once read (-1: none yet) */
  int consumed, stop; /* blocks copied into place (monotonic), under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} reader;

typedef struct reader_arg { reader *rd; int t; } reader_arg;

/* the aligned blocks of every run, in order: what the thread reads and the copier expects */
typedef struct blocks_iter { size_t i, j; uint64_t off, len, done; } blocks_iter;

static int next_block(const reader *rd, blocks_iter *it, block *b) {
  while (it->done >= it->len) {
    if (it->j >= rd->nd) return 0;
    it->i = it->j;
    it->off = rd->ext[it->i].off, it->len = rd->ext[it->i].bytes, it->done = 0;
    for (it->j = it->i + 1; it->j < rd->nd && rd->ext[it->j].off == it->off + it->len; it->j++)
      it->len += rd->ext[it->j].bytes;
  }
  uint64_t at = it->off + it->done, a0 = at / DIRECT_ALIGN * DIRECT_ALIGN, want = it->off + it->len - a0;
  b->a0 = a0;
  b->n = want > MNT_CKPT_PIECE ? MNT_CKPT_PIECE : (size_t)((want + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN);
  it->done += a0 + b->n - at < it->len - it->done ? a0 + b->n - at : it->len - it->done;
  return 1;
}

/* reader thread t of READERS: blocks t, t + READERS, ... (two reads in flight keep the disk busy
 * where one at a time left it idle between requests) */
static void *read_blocks(void *arg) {
  reader *rd = ((reader_arg *)arg)->rd;
  int t = ((reader_arg *)arg)->t;
  blocks_iter it = {0, 0, 0, 0, 0};
  block b;
  for (int k = 0; next_block(rd, &it, &b); k++) {
    if (k % READERS != t) continue;
    pthread_mutex_lock(&rd->mu);
    while (k >= rd->consumed + RING && !rd->stop) pthread_cond_wait(&rd->cv, &rd->mu);
    int stop = rd->stop;
    pthread_mutex_unlock(&rd->mu);
    if (stop) break;
    ssize_t r;
    do r = pread(rd->dfd, rd->buf[k % RING], b.n, (off_t)b.a0);
    while (r < 0 && errno == EINTR);
    b.got = r;
    b.err = r < 0 ? errno : 0;
    pthread_mutex_lock(&rd->mu);
    rd->blk[k % RING] = b;
    rd->seq[k % RING] = k;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    if (r < 0) break;
  }
  return NULL;
}

/* O_DIRECT: 1 when every byte is in place, 0 when O_DIRECT cannot be used for this file (nothing
 * read: buffered from the start), -1 on a read error (why says it) */
static int read_direct(const char *path, const mnt_ckpt_extent *ext, size_t nd, uint8_t *img, char *why, size_t wn) {
  reader rd = {.dfd = open(path, O_RDONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC), .ext = ext, .nd = nd};
  if (rd.dfd < 0) return 0;
  int ok = 1, have = 0;
  for (int k = 0; k < RING && ok; k++) {
    rd.seq[k] = -1;
    ok = (rd.buf[k] = aligned_alloc(DIRECT_ALIGN, MNT_CKPT_PIECE)) != NULL;
  }
  pthread_t th[READERS];
  reader_arg ra[READERS];
  pthread_mutex_init(&rd.mu, NULL);
  pthread_cond_init(&rd.cv, NULL);
  int res = 0;
  for (int t = 0; ok && t < READERS; t++) {
    ra[t] = (reader_arg){&rd, t};
    if (pthread_create(&th[t], NULL, read_blocks, &ra[t]) == 0) have++;
    else ok = 0;
  }
  if (!ok && have) { /* a thread could not start: stop the others, buffered */
    pthread_mutex_lock(&rd.mu);
    rd.stop = 1;
    pthread_cond_broadcast(&rd.cv);
    pthread_mutex_unlock(&rd.mu);
  }
  if (ok) {
    res = 1;
    blocks_iter it = {0, 0, 0, 0, 0};
    block want;
    for (int k = 0; res == 1 && next_block(&rd, &it, &want); k++) {
      pthread_mutex_lock(&rd.mu);
      while (rd.seq[k % RING] != k) pthread_cond_wait(&rd.cv, &rd.mu);
      block b = rd.blk[k % RING];
      pthread_mutex_unlock(&rd.mu);
      /* the run this block belongs to: bytes [max(a0, run start), min(a0 + n, run end)) */
      uint64_t run0 = it.off, lo = b.a0 > run0 ? b.a0 : run0, hi = b.a0 + b.n < it.off + it.len ? b.a0 + b.n : it.off + it.len;
      if (b.got < 0 && b.err == EINVAL && k == 0) {
        res = 0; /* not for this file or device: buffered */
      } else if (b.got < 0 || (uint64_t)b.got < hi - b.a0) {
        snprintf(why, wn, "%s: reading bytes %" PRIu64 "..%" PRIu64 " failed: %s", path, lo, hi,
                 b.got < 0 ? strerror(b.err) : "end of file");
        res = -1;
      } else {
        /* the packed position of file byte lo: its dataset's packed offset plus the way into it */
        size_t d = it.i;
        while (d + 1 < it.j && ext[d + 1].off <= lo) d++;
        uint64_t packed = ext[d].packed + (lo - ext[d].off);
        memcpy(img + packed, rd.buf[k % RING] + (lo - b.a0), hi - lo);
      }
      pthread_mutex_lock(&rd.mu);
      rd.consumed++;
      if (res != 1) rd.stop = 1;
      pthread_cond_broadcast(&rd.cv);
      pthread_mutex_unlock(&rd.mu);
    }
  }
  for (int t = 0; t < have; t++) pthread_join(th[t], NULL);
  pthread_cond_destroy(&rd.cv);
  pthread_mutex_destroy(&rd.mu);
  for (int k = 0; k < RING; k++) free(rd.buf[k]);
  close(rd.dfd);
  return res;
}

static int read_image(const char *path, const mnt_ckpt_extent *ext, size_t nd, uint8_t *img, char *why, size_t wn) {
  int d = read_direct(path, ext, nd, img, why, wn);
  if (d == 1) return MNT_OK;
  if (d < 0) return MNT_EDATA;
  int fd = mnt_ckpt_open_retry(path, O_RDONLY | O_NOFOLLOW);
  if (fd < 0) {
    snprintf(why, wn, "%s: cannot open: %s", path, strerror(errno));
    return MNT_EDATA;
  }
  int st = MNT_OK;
  for (size_t i = 0; i < nd && st == MNT_OK;) {
    uint64_t off = ext[i].off, len = ext[i].bytes;
    size_t j = i + 1;
    for (; j < nd && ext[j].off == off + len; j++) len += ext[j].bytes;
    if (mnt_ckpt_pread_all(fd, img + ext[i].packed, off, len) != 0) {
      snprintf(why, wn, "%s: reading bytes %" PRIu64 "..%" PRIu64 " failed: %s", path, off, off + len,
               errno ? strerror(errno) : "end of file");
      st = MNT_EDATA;
    }
    i = j;
  }
  close(fd);
  return st;
}

/* before HDF5 opens the file: the bytes between the datasets (the superblock, object headers and
 * B-trees HDF5 reads one small piece at a time, 2,200 reads for a ResNet-50 state) read ahead by
 * the kernel in the background (posix_fadvise WILLNEED) */
static void prefetch_metadata(const char *path, const mnt_ckpt_extent *ext, size_t nd, uint64_t file_bytes) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  uint64_t at = 0;
  for (size_t i = 0; i <= nd; i++) {
    uint64_t next = i < nd ? ext[i].off : file_bytes;
    if (next > at) (void)posix_fadvise(fd, (off_t)at, (off_t)(next - at), POSIX_FADV_WILLNEED);
    if (i < nd && ext[i].off + ext[i].bytes > at) at = ext[i].off + ext[i].bytes;
  }
  close(fd);
}

/* the image, in 2 MiB pages where the kernel gives them (transparent huge pages on request): 4 KiB
 * pages cost a fault and a zeroing each on first touch, 50,000 of them for a ResNet-50 state */
static uint8_t *image_alloc(uint64_t total) {
  enum { HUGE = 2 << 20 };
  size_t n = total ? (size_t)(total + HUGE - 1) / HUGE * HUGE : HUGE;
  uint8_t *p = aligned_alloc(HUGE, n);
  if (p) (void)madvise(p, n, MADV_HUGEPAGE); /* a hint: 4 KiB pages otherwise */
  return p;
}

/* a step directory's name (step-N) and its manifest's "step" agree */
static int check_step_name(const char *dir, json_t *m, char *why, size_t wn) {
  const char *b = strrchr(dir, '/');
  b = b ? b + 1 : dir;
  char *end;
  if (strncmp(b, "step-", 5) != 0) return MNT_OK; /* a checkpoint named by the user: its name says nothing */
  long long n = strtoll(b + 5, &end, 10);
  if (*end || end == b + 5) return MNT_OK;
  if (n != (long long)json_integer_value(json_object_get(m, "step"))) {
    snprintf(why, wn, "%s/%s says step %lld, its directory step %lld", dir, MNT_CKPT_MANIFEST,
             (long long)json_integer_value(json_object_get(m, "step")), n);
    return MNT_EDATA;
  }
  return MNT_OK;
}

/* the manifest's "state" is what the file's /train_state holds (the JSON text the writer put in both,
 * the file's copy under the shares' hashes): the state a resume starts from is the state written
 * with the weights */
static int check_state(const char *path, json_t *m, const mnt_ckpt_extent *ext, size_t nd, const uint8_t *img,
                       char *why, size_t wn) {
  json_t *ds = json_object_get(m, "datasets");
  const mnt_ckpt_extent *e = NULL;
  for (size_t i = 0; i < nd && !e; i++)
    if (!strcmp(json_string_value(json_object_get(json_array_get(ds, (size_t)ext[i].t), "name")), "/train_state"))
      e = &ext[i];
  json_error_t err;
  json_t *f = e ? json_loadb((const char *)img + e->packed, e->bytes, JSON_REJECT_DUPLICATES, &err) : NULL;
  int parsed = f != NULL, same = parsed && json_equal(f, json_object_get(m, "state"));
  json_decref(f);
  if (!same) {
    snprintf(why, wn, "%s: the manifest's \"state\" is not the state in the file (/train_state%s%s)", path,
             parsed || !e ? "" : ": ", parsed || !e ? "" : err.text);
    return MNT_EDATA;
  }
  return MNT_OK;
}

/* every float32 dataset finite: a checkpoint of a run that had diverged (written before mntrain checked
 * the whole state, or by hand) is a damaged one, never resumed from or reported as ok */
static int check_finite(const char *path, json_t *m, const mnt_ckpt_extent *ext, size_t nd, const uint8_t *img,
                        char *why, size_t wn) {
  json_t *ds = json_object_get(m, "datasets");
  size_t bad = 0;
  const char *first = NULL;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(ds, (size_t)ext[i].t);
    if (strcmp(json_string_value(json_object_get(d, "type")), "float32") || ext[i].bytes % sizeof(float)) continue;
    float x;
    int nf = 0;
    if ((uintptr_t)(img + ext[i].packed) % sizeof(float) == 0) {
      nf = mnt_vec_nonfinite((const float *)(const void *)(img + ext[i].packed), ext[i].bytes / sizeof(float));
    } else {
      for (uint64_t k = 0; k < ext[i].bytes && !nf; k += sizeof x) {
        memcpy(&x, img + ext[i].packed + k, sizeof x);
        nf = !isfinite(x);
      }
    }
    if (nf && !bad++) first = json_string_value(json_object_get(d, "name"));
  }
  if (!bad) return MNT_OK;
  snprintf(why, wn, "%s: %s%s holds NaN or Inf (the run had diverged): not a state to resume or use", path, first,
           bad > 1 ? " and more tensors" : "");
  return MNT_EDATA;
}

int mnt_ckpt_read_one(const char *dir, json_t *m, int verify, mnt_ckpt *out, char *why, size_t wn) {
  char path[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(path, dir, MNT_CKPT_FILE));
  int st = check_manifest(dir, m, why, wn);
  if (st == MNT_OK) st = check_step_name(dir, m, why, wn);
  if (st != MNT_OK) return st;
  json_t *ds = json_object_get(m, "datasets");
  size_t nd = json_array_size(ds);
  uint64_t total = 0;
  mnt_ckpt_extent *ext = file_extents(ds, nd, &total);
  if (!ext) return MNT_ENOMEM;
  uint8_t *img = NULL;
  prefetch_metadata(path, ext, nd, (uint64_t)json_integer_value(json_object_get(m, "file_bytes")));
  st = check_file(path, m, why, wn);
  if (st == MNT_OK && !(img = image_alloc(total))) st = MNT_ENOMEM;
  if (st == MNT_OK) st = read_image(path, ext, nd, img, why, wn);
  if (st == MNT_OK && verify) st = verify_shares(dir, path, m, ext, img, total, why, wn);
  if (st == MNT_OK) st = check_state(path, m, ext, nd, img, why, wn);
  if (st == MNT_OK) st = check_finite(path, m, ext, nd, img, why, wn);
  free(ext);
  if (st != MNT_OK) {
    free(img);
    return st;
  }
  snprintf(out->dir, sizeof out->dir, "%s", dir);
  out->step = json_integer_value(json_object_get(m, "step"));
  out->manifest = json_incref(m);
  out->image = img;
  out->image_bytes = total;
  out->verified = verify;
  return MNT_OK;
}

/* the checker of a caller (NULL: none) */
typedef struct acceptor { mnt_ckpt_accept_fn fn; void *arg; } acceptor;

/* mnt_ckpt_read_one, then what the caller checks: a checkpoint it refuses is a damaged one */
static int read_accepted(const char *dir, json_t *m, int verify, const acceptor *acc, mnt_ckpt *out, char *why,
                         size_t wn) {
  int st = mnt_ckpt_read_one(dir, m, verify, out, why, wn);
  if (st == MNT_OK && acc->fn && (st = acc->fn(out, acc->arg, why, wn)) != MNT_OK) mnt_ckpt_close(out);
  return st;
}

/* one named checkpoint (dir holds its manifest): it must be good */
static int open_named(const char *dir, int verify, const acceptor *acc, mnt_ckpt *out, int *found) {
  char why[1400];
  int present;
  json_t *m = mnt_ckpt_load_manifest(dir, &present, why, sizeof why);
  int st = m ? read_accepted(dir, m, verify, acc, out, why, sizeof why) : MNT_EDATA;
  json_decref(m);
  if (st == MNT_EDATA) MNT_ERR("checkpoint %s: %s", dir, why);
  *found = st == MNT_OK;
  return st;
}

/* a root: the newest good checkpoint; a damaged one is said and the previous one tried */
static int open_newest(const char *dir, int verify, const acceptor *acc, mnt_ckpt *out, int *found) {
  mnt_ckpt_stepdir *sd;
  int n;
  if (mnt_ckpt_list_steps(dir, &sd, &n) != MNT_OK) return MNT_SYSERR("%s: cannot list", dir);
  char bad_dir[MNT_PATH_MAX] = "", why[1400]; /* the newest damaged one */
  int st = MNT_OK;
  for (int i = 0; i < n && !*found; i++) {
    char sdir[MNT_PATH_MAX];
    int present;
    MNT_CHECK_GOTO(mnt_path_join(sdir, dir, sd[i].name), st, out);
    if (sd[i].link) {
      MNT_WARN("%s: a symbolic link, not followed: not a checkpoint", sdir);
      continue;
    }
    json_t *m = mnt_ckpt_load_manifest(sdir, &present, why, sizeof why);
    if (!m && !present) {
      MNT_INFO("%s: %s: not a checkpoint, skipped", sdir, why);
      continue;
    }
    /* a manifest that is there and fails (does not parse, is not a manifest, a newer format) is
     * a damaged checkpoint, like a share that fails its checksum */
    st = m ? read_accepted(sdir, m, verify, acc, out, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (st == MNT_OK) {
      *found = 1;
      if (bad_dir[0])
        MNT_WARN("falling back to %s (step %lld) because %s failed its checks", sdir, (long long)out->step, bad_dir);
    } else if (st == MNT_EDATA) {
      MNT_WARN("checkpoint %s is damaged: %s", sdir, why);
      if (!bad_dir[0]) snprintf(bad_dir, sizeof bad_dir, "%s", sdir);
      st = MNT_OK;
    } else {
      break;
    }
  }
  if (st == MNT_OK && !*found && bad_dir[0]) { /* damaged checkpoints and no good one: not a fresh start */
    MNT_ERR("%s: no checkpoint passes its checks (the newest damaged one: %s)", dir, bad_dir);
    st = MNT_EDATA;
  }
out:
  free(sd);
  return st;
}

int mnt_ckpt_open_checked(const char *path, int verify, mnt_ckpt_accept_fn accept, void *arg, mnt_ckpt *out,
                          int *found) {
  acceptor acc = {accept, arg};
  memset(out, 0, sizeof *out);
  *found = 0;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int st = MNT_SYSERR("%s", path);
    return errno == ENOENT ? MNT_EARG : st;
  }
  char dir[MNT_PATH_MAX], man[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(dir, NULL, path));
  if (S_ISREG(sb.st_mode)) { /* .../state.h5: its directory */
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  MNT_CHECK(mnt_path_join(man, dir, MNT_CKPT_MANIFEST));
  if (S_ISREG(sb.st_mode) || access(man, F_OK) == 0) return open_named(dir, verify, &acc, out, found);
  return open_newest(dir, verify, &acc, out, found);
}

int mnt_ckpt_open(const char *path, int verify, mnt_ckpt *out, int *found) {
  return mnt_ckpt_open_checked(path, verify, NULL, NULL, out, found);
}

int mnt_ckpt_get(const mnt_ckpt *c, const char *name, float *dst, size_t n, int ndims, const int *dims) {
  json_t *ds = json_object_get(c->manifest, "datasets");
  size_t nd = json_array_size(ds);
  /* packed positions follow the file order of the datasets */
  uint64_t packed = 0, off = 0;
  json_t *hit = NULL;
  for (size_t i = 0; i < nd && !hit; i++) {
    json_t *d = json_array_get(ds, i);
    const char *nm = json_string_value(json_object_get(d, "name"));
    if (nm && !strcmp(nm, name)) {
      hit = d;
      off = (uint64_t)json_integer_value(json_object_get(d, "offset"));
    }
  }
  if (!hit) {
    MNT_ERR("checkpoint %s has no dataset %s", c->dir, name);
    return MNT_EDATA;
  }
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(ds, i);
    if ((uint64_t)json_integer_value(json_object_get(d, "offset")) < off)
      packed += (uint64_t)json_integer_value(json_object_get(d, "bytes"));
  }
  json_t *shape = json_object_get(hit, "shape");
  int same = (int)json_array_size(shape) == ndims;
  for (int k = 0; k < ndims && same; k++) same = json_integer_value(json_array_get(shape, (size_t)k)) == dims[k];
  uint64_t bytes = (uint64_t)json_integer_value(json_object_get(hit, "bytes"));
  if (!same || bytes != n * sizeof(float) || packed + bytes > c->image_bytes) {
    char *have = json_dumps(shape, JSON_COMPACT);
    MNT_ERR("checkpoint %s: %s has shape %s, the model's has %d dims of %d x %d ...", c->dir, name, have ? have : "?",
            ndims, dims[0], ndims > 1 ? dims[1] : 1);
    free(have);
    return MNT_EDATA;
  }
  memcpy(dst, c->image + packed, bytes);
  return MNT_OK;
}

void mnt_ckpt_close(mnt_ckpt *c) {
  if (!c) return;
  json_decref(c->manifest);
  free(c->image);
  memset(c, 0, sizeof *c);
}
