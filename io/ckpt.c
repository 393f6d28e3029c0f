/* ckpt.c — see ckpt.h. */
#include "io/ckpt.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/dataset.h"
#include "jsonio.h"
#include "check.h"
#include "log.h"
#include "io/safefs.h"

#define PIECE (8u << 20) /* bytes per pwrite / pread call */

/* one dataset's bytes in the file, and where they are in the packed image */
typedef struct extent { uint64_t off, bytes, packed; int t; } extent;

/* what every rank reports when its share is on disk */
typedef struct share_info { uint64_t lo, hi, packed, bytes, hash; int64_t status; } share_info;

/* INCOMING/share-RRRRR: a rank's share_info on disk, written by its thread once the share is
 * fsynced (or failed), so that rank 0 can commit without the communicator (mnt_ckpt_commit_now).
 * Fixed binary, native byte order (every rank of a job runs on the same kind of machine); whole
 * only when it has all its bytes and its checksum matches: anything else is not there yet. */
#define REC_MAGIC "mntshr1"
typedef struct share_rec {
  char magic[8];
  uint64_t token, seq;  /* the writer's token and the checkpoint's sequence number */
  int64_t step, rank;
  share_info s;
  uint64_t check;       /* XXH3-64 of the bytes before it */
} share_rec;

struct mnt_ckpt_writer {
  mnt_comm *c;
  char root[1024];
  size_t stripe;
  int keep;
  int64_t last_step;
  int early_writeback;    /* sync_file_range after each piece (not on FUSE) */
  /* the file's layout, the same for every checkpoint of this writer (made at the first begin) */
  int nt;                 /* tensors, the training-state dataset last */
  uint64_t *offsets;      /* of each dataset, by tensor */
  uint64_t file_bytes;
  extent *mine;           /* this rank's pieces, file order */
  int npieces;
  share_info share;       /* this rank's share (hash and status filled by the thread) */
  extent *meta;           /* rank 0: the metadata blocks of the skeleton (off, bytes, packed = into meta_bytes) */
  int nmeta;
  uint8_t *meta_bytes;
  json_t *datasets;       /* rank 0: the manifest's "datasets" */
  /* the checkpoint in flight */
  int pending;
  int64_t step;
  char dir[1100], path[1200]; /* the step directory it becomes; the file being written (in incoming) */
  char incoming[1100];        /* ROOT/incoming-TOKEN-SEQ: where the next checkpoint is written */
  uint64_t token, seq;        /* the writer's random token (rank 0's, broadcast) and commit count */
  pthread_t thr;
  int have_thr;
  int done;               /* the thread finished (atomic) */
  uint8_t *stage;
  size_t stage_cap;
  char state_text[MNT_CKPT_STATE_BYTES];
  json_t *manifest;       /* rank 0: the manifest being prepared */
  char rec_path[1200];    /* this rank's share record of the checkpoint in flight (INCOMING/share-RRRRR) */
  uint64_t rec_seq;       /* the checkpoint in flight's seq (the thread's copy) */
  /* Rank 0's commit against mnt_ckpt_commit_now (the signal thread): mu guards pending, step, dir,
   * manifest, incoming, seq and early, and the commit itself, so that exactly one of finish and
   * commit_now commits a checkpoint. The main thread writes those fields only under it. */
  pthread_mutex_t mu;
  pthread_cond_t idle;    /* signalled when callers drops to 0 */
  int callers;            /* commit_now calls in progress (destroy waits for them) */
  int closing;            /* destroy has begun: commit_now gives up */
  int early;              /* rank 0: the checkpoint in flight was committed by commit_now */
  int early_status;       /* ... with this status (finish reports it instead of committing) */
};

void mnt_ckpt_step_dir(char *out, size_t n, const char *root, int64_t step) {
  snprintf(out, n, "%s/step-%08lld", root, (long long)step);
}

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    MNT_ERR("%s: cannot sync the directory: %s", dir, strerror(errno));
    if (fd >= 0) close(fd);
    return MNT_ESYS;
  }
  close(fd);
  return MNT_OK;
}

/* Remove a checkpoint directory: its manifest first (from then on it is no checkpoint). Nothing is
 * followed: a symbolic link under a checkpoint's name is removed itself (not what it points to),
 * and the files are unlinked relative to the directory opened with O_NOFOLLOW. */
static int remove_step_dir(const char *dir) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) {
    if (errno == ENOENT) return MNT_OK;
    MNT_ERR("%s: cannot remove: %s", dir, strerror(errno));
    return MNT_ESYS;
  }
  if (!S_ISDIR(sb.st_mode)) {
    if (unlink(dir) != 0 && errno != ENOENT) {
      MNT_ERR("%s: cannot remove: %s", dir, strerror(errno));
      return MNT_ESYS;
    }
    return MNT_OK;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return MNT_OK;
    MNT_ERR("%s: cannot remove: %s", dir, strerror(errno));
    return MNT_ESYS;
  }
  if (unlinkat(dfd, MNT_CKPT_MANIFEST, 0) != 0 && errno != ENOENT) {
    MNT_ERR("%s/%s: cannot remove: %s", dir, MNT_CKPT_MANIFEST, strerror(errno));
    close(dfd);
    return MNT_ESYS;
  }
  DIR *d = fdopendir(dfd);
  if (!d) {
    MNT_ERR("%s: cannot list: %s", dir, strerror(errno));
    close(dfd);
    return MNT_ESYS;
  }
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
  closedir(d);
  if (rmdir(dir) != 0 && errno != ENOENT) {
    MNT_ERR("%s: cannot remove: %s", dir, strerror(errno));
    return MNT_ESYS;
  }
  return MNT_OK;
}

/* On Lustre (statfs magic 0x0BD00BD0), new files in the checkpoint directory are striped over
 * every OST in stripes of `stripe` bytes, through liblustreapi when it is installed (opened at run
 * time: nothing to build against); anywhere else, or without the library, nothing happens. */
static int step_of(const char *name, int64_t *step) {
  char *end;
  if (strncmp(name, "step-", 5) != 0) return 0;
  long long v = strtoll(name + 5, &end, 10);
  if (*end || end == name + 5 || v < 0) return 0;
  *step = v;
  return 1;
}

/* the manifest of dir, if it parses as one of ours (NULL otherwise; why says what is wrong).
 * *present: dir has a MANIFEST.json at all (one that is there and fails is a damaged checkpoint:
 * the commit writes the manifest before the directory gets its step-N name, and a removal deletes
 * it first; none at all is an unfinished write). */
static json_t *load_manifest(const char *dir, int *present, char *why, size_t n) {
  char p[1200];
  snprintf(p, sizeof p, "%s/%s", dir, MNT_CKPT_MANIFEST);
  struct stat sb;
  *present = lstat(p, &sb) == 0 || (errno != ENOENT && errno != ENOTDIR);
  if (!*present) {
    snprintf(why, n, "no %s (an unfinished write)", MNT_CKPT_MANIFEST);
    return NULL;
  }
  json_error_t e;
  json_t *m = json_load_file(p, 0, &e);
  if (!m) {
    snprintf(why, n, "%s does not parse: %s (line %d)", p, e.text, e.line);
    return NULL;
  }
  const char *fmt = json_string_value(json_object_get(m, "format"));
  if (!fmt || strcmp(fmt, MNT_CKPT_FORMAT) || !json_is_integer(json_object_get(m, "step")) ||
      !json_is_array(json_object_get(m, "datasets")) || !json_is_array(json_object_get(m, "shares"))) {
    snprintf(why, n, "%s is not an mntrain checkpoint manifest", p);
    json_decref(m);
    return NULL;
  }
  if (json_integer_value(json_object_get(m, "format_version")) > MNT_CKPT_VERSION) {
    snprintf(why, n, "%s: format version %lld is newer than this mntrain reads (%d)", p,
             (long long)json_integer_value(json_object_get(m, "format_version")), MNT_CKPT_VERSION);
    json_decref(m);
    return NULL;
  }
  return m;
}

typedef struct stepdir { int64_t step; char name[64]; } stepdir;
static int cmp_stepdir_desc(const void *a, const void *b) {
  const stepdir *x = a, *y = b;
  return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* step-* directories of root, newest first */
static int list_steps(const char *root, stepdir **out, int *n) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return errno == ENOENT ? MNT_OK : MNT_ESYS;
  int cap = 0;
  struct dirent *e;
  int64_t s;
  while ((e = readdir(d)))
    if (step_of(e->d_name, &s) && strlen(e->d_name) < 64) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 16;
        stepdir *p = realloc(*out, (size_t)cap * sizeof *p);
        if (!p) break;
        *out = p;
      }
      (*out)[*n].step = s;
      snprintf((*out)[*n].name, sizeof(*out)[*n].name, "%s", e->d_name);
      (*n)++;
    }
  closedir(d);
  if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_stepdir_desc);
  return MNT_OK;
}

/* A step directory about to be written again: one with a manifest (a checkpoint of a branch of
 * the run that was abandoned: a resume from an older one) is renamed to STEP.superseded-N, kept
 * and ignored; one without (an unfinished write) is removed. */
static int set_aside_or_remove(const char *dir) {
  char man[1200], to[1200];
  snprintf(man, sizeof man, "%s/%s", dir, MNT_CKPT_MANIFEST);
  if (access(man, F_OK) != 0) return remove_step_dir(dir);
  for (int k = 1; k < 1000; k++) {
    snprintf(to, sizeof to, "%s.superseded-%d", dir, k);
    if (access(to, F_OK) == 0) continue;
    if (rename(dir, to) != 0) break;
    MNT_WARN("%s is of an abandoned branch of this run (resumed from an older checkpoint): kept as %s", dir, to);
    return MNT_OK;
  }
  MNT_ERR("%s: cannot set it aside: %s", dir, strerror(errno));
  return MNT_ESYS;
}

/* every rank: the name of the next checkpoint's directory before its commit. Never a name used
 * before: a GlusterFS client on another node may still resolve an old name to the file that was
 * renamed away (its lookup cache), and would write into a committed checkpoint. */
static void incoming_name(mnt_ckpt_writer *wr) {
  snprintf(wr->incoming, sizeof wr->incoming, "%s/incoming-%016" PRIx64 "-%06" PRIu64, wr->root, wr->token, wr->seq);
}

/* rank 0: an empty INCOMING/state.h5, made ahead of the checkpoint that will be written into it, so
 * that starting one touches no metadata (a directory and a create take tens of ms on a busy
 * parallel filesystem, and would hold up training) */
static int prepare_incoming(mnt_ckpt_writer *wr) {
  char p[1200];
  snprintf(p, sizeof p, "%s/%s", wr->incoming, MNT_CKPT_FILE);
  int st = remove_step_dir(wr->incoming);
  if (st == MNT_OK && mkdir(wr->incoming, 0755) != 0) {
    MNT_ERR("%s: cannot create: %s", wr->incoming, strerror(errno));
    st = MNT_ESYS;
  }
  /* the directory is new (mkdir): nothing can be in it, and nothing is followed */
  int fd = st == MNT_OK ? open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
  if (st == MNT_OK && (fd < 0 || close(fd) != 0)) {
    MNT_ERR("%s: cannot create: %s", p, strerror(errno));
    st = MNT_ESYS;
  }
  return st;
}

static void lustre_stripe(const char *dir, size_t stripe) {
  struct statfs sf;
  if (statfs(dir, &sf) != 0 || (unsigned long)sf.f_type != 0x0BD00BD0UL) return;
  void *lib = dlopen("liblustreapi.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("liblustreapi.so", RTLD_NOW | RTLD_LOCAL);
  int (*set)(const char *, unsigned long long, int, int, int) = NULL;
  if (lib) *(void **)&set = dlsym(lib, "llapi_dir_set_default_lov_stripe");
  if (set && set(dir, stripe, -1, -1, 0) == 0)
    MNT_INFO("%s: Lustre: new files striped over every OST in %zu-byte stripes", dir, stripe);
  else
    MNT_INFO("%s is on Lustre but its striping was left as it is (liblustreapi %s)", dir, lib ? "refused" : "not found");
  if (lib) dlclose(lib);
}

int mnt_ckpt_writer_create(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t resumed_step,
                           mnt_ckpt_writer **out) {
  *out = NULL;
  mnt_ckpt_writer *wr = calloc(1, sizeof *wr);
  if (!wr) return MNT_ENOMEM;
  wr->c = c;
  pthread_mutex_init(&wr->mu, NULL);
  pthread_cond_init(&wr->idle, NULL);
  snprintf(wr->root, sizeof wr->root, "%s", root);
  wr->stripe = stripe;
  wr->keep = keep < 1 ? 1 : keep;
  wr->last_step = resumed_step; /* a resumed run has that checkpoint: it is not written again */
  /* a token of this writer's own: rank 0's clock and pid, broadcast below */
  wr->token = mnt_mix((uint64_t)(mnt_now() * 1e9), (uint64_t)getpid() ^ ((uint64_t)time(NULL) << 20));
  int st = MNT_OK;
  if (c->world->rank == 0) st = mnt_dir_secure(root, "the checkpoint directory", 1, MNT_DIR_RUN); /* io/safefs.h */
  if (st == MNT_OK && c->world->rank == 0) lustre_stripe(root, stripe);
  if (st == MNT_OK && c->world->rank == 0 && resumed_step >= 0) { /* newer ones: a branch this run leaves */
    stepdir *sd;
    int n;
    if (list_steps(root, &sd, &n) == MNT_OK) {
      for (int i = 0; i < n && st == MNT_OK; i++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/%s", root, sd[i].name);
        if (sd[i].step > resumed_step) st = set_aside_or_remove(dir);
      }
      free(sd);
    }
  }
  if (st == MNT_OK && c->world->rank == 0) { /* the unfinished writes of earlier jobs */
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      char dir[1200];
      snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
      if (!strncmp(e->d_name, "incoming-", 9)) remove_step_dir(dir);
    }
    if (d) closedir(d);
  }
  int cs = mnt_broadcast(c, &wr->token, sizeof wr->token, 0);
  if (cs != MNT_OK) st = cs;
  incoming_name(wr);
  if (st == MNT_OK && c->world->rank == 0) st = prepare_incoming(wr);
  st = mnt_world_agree(c->world, st);
  struct statfs sf; /* after the agreement: rank 0 has created root */
  wr->early_writeback = !(statfs(root, &sf) == 0 && (unsigned long)sf.f_type == 0x65735546UL); /* FUSE_SUPER_MAGIC */
  if (st) {
    pthread_cond_destroy(&wr->idle);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
    return st;
  }
  *out = wr;
  return MNT_OK;
}

int mnt_ckpt_pending(const mnt_ckpt_writer *wr) { return wr && wr->pending; }
int mnt_ckpt_local_done(mnt_ckpt_writer *wr) {
  return !wr || !wr->pending || __atomic_load_n(&wr->done, __ATOMIC_ACQUIRE);
}
int64_t mnt_ckpt_last_step(const mnt_ckpt_writer *wr) { return wr ? wr->last_step : -1; }

static int cmp_extent(const void *a, const void *b) {
  const extent *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static int pread_all(int fd, uint8_t *dst, uint64_t off, uint64_t len) {
  for (uint64_t done = 0; done < len;) {
    size_t n = len - done > PIECE ? PIECE : (size_t)(len - done);
    ssize_t r = pread(fd, dst + done, n, (off_t)(off + done));
    if (r > 0) done += (uint64_t)r;
    else if (r < 0 && errno == EINTR) continue;
    else return -1;
  }
  return 0;
}

/* ---- rank 0: the file's layout, once ----------------------------------------------------- */

/* a root attribute per member of obj: integers as int64, reals as double, arrays of numbers as
 * float64 vectors, strings as strings, anything else as its JSON text */
static int put_attrs(hid_t loc, json_t *obj) {
  const char *k;
  json_t *v;
  int bad = 0;
  json_object_foreach(obj, k, v) {
    hid_t sp = H5Screate(H5S_SCALAR), type = -1, a = -1;
    herr_t e = -1;
    size_t n = json_array_size(v), num = n > 0;
    for (size_t i = 0; i < n; i++) num = num && json_is_number(json_array_get(v, i));
    if (json_is_integer(v)) {
      long long x = json_integer_value(v);
      a = H5Acreate2(loc, k, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_LLONG, &x);
    } else if (json_is_real(v)) {
      double x = json_real_value(v);
      a = H5Acreate2(loc, k, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_DOUBLE, &x);
    } else if (num && n <= 64) {
      double x[64];
      hsize_t d = n;
      for (size_t i = 0; i < n; i++) x[i] = json_number_value(json_array_get(v, i));
      H5Sclose(sp);
      sp = H5Screate_simple(1, &d, NULL);
      a = H5Acreate2(loc, k, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0) e = H5Awrite(a, H5T_NATIVE_DOUBLE, x);
    } else {
      char *txt = json_is_string(v) ? strdup(json_string_value(v)) : json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
      type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, txt && txt[0] ? strlen(txt) : 1);
      a = H5Acreate2(loc, k, type, sp, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0 && txt) e = H5Awrite(a, type, txt[0] ? txt : " ");
      free(txt);
    }
    if (a >= 0) H5Aclose(a);
    if (type >= 0) H5Tclose(type);
    H5Sclose(sp);
    if (e < 0) bad = 1;
  }
  return bad ? MNT_ESYS : MNT_OK;
}

/* The skeleton of state.h5, built once as a scratch file on local memory (/dev/shm, else TMPDIR
 * or /tmp; sparse: only the metadata takes space): every dataset allocated early and unfilled,
 * objects of a stripe or more aligned to the stripe, metadata in blocks of its own. Its bytes are
 * the checkpoint file but for the data: the datasets' offsets, the size, and the metadata (the
 * non-zero bytes outside the datasets) that rank 0 writes with its share. */
static int build_layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, json_t *attrs) {
  int st = MNT_OK;
  char scratch[1100];
  const char *tmpdir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(scratch, sizeof scratch, "%s/mntrain-layout-XXXXXX", tmpdir);
  int sfd = mkstemp(scratch);
  if (sfd < 0) {
    MNT_ERR("%s: cannot create the checkpoint's scratch layout: %s", scratch, strerror(errno));
    return MNT_ESYS;
  }
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_alignment(fapl, wr->stripe, wr->stripe);
  H5Pset_meta_block_size(fapl, 1 << 20);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST); /* checksummed metadata */
  H5Pset_layout(dcpl, H5D_CONTIGUOUS);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t f = H5Fcreate(scratch, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (f < 0 || put_attrs(f, attrs) != MNT_OK) st = MNT_ESYS;
  for (int i = 0; i < nt && st == MNT_OK; i++) {
    hsize_t d[4];
    for (int k = 0; k < t[i].ndims; k++) d[k] = (hsize_t)t[i].dims[k];
    hid_t sp = H5Screate_simple(t[i].ndims, d, NULL);
    hid_t ds = H5Dcreate2(f, t[i].name, t[i].bytes_per ? H5T_STD_U8LE : H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
    haddr_t a = ds >= 0 ? H5Dget_offset(ds) : HADDR_UNDEF;
    if (ds >= 0) H5Dclose(ds);
    H5Sclose(sp);
    if (a == HADDR_UNDEF) st = MNT_ESYS;
    wr->offsets[i] = (uint64_t)a;
  }
  if (f >= 0 && H5Fclose(f) < 0) st = MNT_ESYS;
  H5Pclose(fapl);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  struct stat sb;
  ssize_t n = -1;
  if (st == MNT_OK && fstat(sfd, &sb) == 0 && (n = sb.st_size) > 0) wr->file_bytes = (uint64_t)n;
  else if (st == MNT_OK) st = MNT_ESYS;
  /* the metadata: the non-zero bytes outside every dataset (only those are read back), in pieces
   * of up to 4 KiB, merged */
  uint8_t blk[4096];
  extent *ext = st == MNT_OK ? calloc((size_t)nt + 1, sizeof *ext) : NULL;
  size_t cap = 0, used = 0;
  if (st == MNT_OK && !ext) st = MNT_ENOMEM;
  for (int i = 0; i < nt && st == MNT_OK; i++) ext[i] = (extent){.off = wr->offsets[i], .bytes = mnt_ckpt_tensor_bytes(&t[i])};
  if (st == MNT_OK) {
    ext[nt] = (extent){.off = (uint64_t)n}; /* the end of the file */
    qsort(ext, (size_t)nt + 1, sizeof *ext, cmp_extent);
  }
  uint64_t from = 0;
  for (int i = 0; i <= nt && st == MNT_OK; i++) {
    for (uint64_t off = from; off < ext[i].off && st == MNT_OK;) { /* the gap [from, ext[i].off) */
      uint64_t len = (off / 4096 + 1) * 4096 - off;
      if (off + len > ext[i].off) len = ext[i].off - off;
      if (pread_all(sfd, blk, off, len) != 0) {
        st = MNT_ESYS;
        break;
      }
      int nz = 0;
      for (uint64_t j = 0; j < len && !nz; j++) nz = blk[j] != 0;
      if (nz) {
        if (wr->nmeta && wr->meta[wr->nmeta - 1].off + wr->meta[wr->nmeta - 1].bytes == off) {
          wr->meta[wr->nmeta - 1].bytes += len;
        } else {
          if (wr->nmeta % 64 == 0) {
            extent *e = realloc(wr->meta, (size_t)(wr->nmeta + 64) * sizeof *e);
            if (!e) st = MNT_ENOMEM;
            else wr->meta = e;
          }
          if (st == MNT_OK) wr->meta[wr->nmeta++] = (extent){.off = off, .bytes = len, .packed = used};
        }
        if (st == MNT_OK && used + len > cap) {
          cap = 2 * (used + len);
          uint8_t *p = realloc(wr->meta_bytes, cap);
          if (!p) st = MNT_ENOMEM;
          else wr->meta_bytes = p;
        }
        if (st == MNT_OK) memcpy(wr->meta_bytes + used, blk, len);
        used += len;
      }
      off += len;
    }
    if (ext[i].off + ext[i].bytes > from) from = ext[i].off + ext[i].bytes;
  }
  free(ext);
  close(sfd);
  unlink(scratch);
  if (st != MNT_OK) MNT_ERR("the checkpoint's HDF5 layout cannot be built (%d tensors)", nt);
  return st;
}

/* Every rank's status, agreed over the communicator (a one-float allreduce, not a PMIx fence):
 * MNT_OK when all are, else this rank's failure (or MNT_ESYS for a rank that did not fail itself),
 * recorded as agreed so that it ends the job normally instead of aborting it. */
static int agree(mnt_ckpt_writer *wr, int st) {
  float bad = st != MNT_OK;
  int cs = mnt_allreduce(wr->c, &bad, 1, MNT_FP32, MNT_SUM);
  if (cs != MNT_OK) return cs;
  if (bad == 0) return MNT_OK;
  if (st == MNT_OK) {
    st = MNT_ESYS;
    MNT_DBG("checkpoint: another rank failed (its error says why)");
  }
  wr->c->world->failed_together = st;
  return st;
}

/* Collective, once per writer: rank 0 builds the layout and broadcasts it; every rank finds its
 * share: the stripes [lo, hi) of the data range, cut evenly, and the datasets' pieces in it. */
static int layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, json_t *attrs) {
  mnt_world *w = wr->c->world;
  wr->nt = nt;
  uint64_t *hdr = calloc((size_t)nt + 2, sizeof *hdr);
  wr->offsets = calloc((size_t)nt, sizeof *wr->offsets);
  extent *ext = calloc((size_t)nt, sizeof *ext);
  int st = agree(wr, hdr && wr->offsets && ext ? MNT_OK : MNT_ENOMEM);
  if (st != MNT_OK) {
    free(hdr);
    free(ext);
    return st;
  }
  if (w->rank == 0) { /* its status travels with the layout */
    hdr[0] = (uint64_t)build_layout(wr, t, nt, attrs);
    hdr[1] = wr->file_bytes;
    memcpy(hdr + 2, wr->offsets, (size_t)nt * sizeof *hdr);
  }
  st = mnt_broadcast(wr->c, hdr, ((size_t)nt + 2) * sizeof *hdr, 0);
  if (st == MNT_OK && hdr[0] != MNT_OK) st = w->failed_together = (int)hdr[0];
  if (st != MNT_OK) {
    free(hdr);
    free(ext);
    return st;
  }
  {
    wr->file_bytes = hdr[1];
    memcpy(wr->offsets, hdr + 2, (size_t)nt * sizeof *hdr);
    uint64_t packed = 0;
    for (int i = 0; i < nt; i++) ext[i] = (extent){.off = wr->offsets[i], .bytes = mnt_ckpt_tensor_bytes(&t[i]), .t = i};
    qsort(ext, (size_t)nt, sizeof *ext, cmp_extent);
    for (int i = 0; i < nt; i++) {
      ext[i].packed = packed;
      packed += ext[i].bytes;
    }
    uint64_t S = wr->stripe, base = ext[0].off / S * S, end = ext[nt - 1].off + ext[nt - 1].bytes;
    uint64_t nb = (end - base + S - 1) / S, R = (uint64_t)w->size, r = (uint64_t)w->rank;
    uint64_t lo = base + nb * r / R * S, hi = r + 1 == R ? end : base + nb * (r + 1) / R * S;
    wr->share = (share_info){.lo = lo, .hi = hi};
    wr->mine = calloc((size_t)nt, sizeof *wr->mine);
    if (!wr->mine) st = MNT_ENOMEM;
    for (int i = 0; i < nt && st == MNT_OK; i++) { /* a contiguous range of the packed image */
      extent e = ext[i];
      uint64_t a = e.off > lo ? e.off : lo, b = e.off + e.bytes < hi ? e.off + e.bytes : hi;
      if (a >= b) continue;
      if (wr->npieces == 0) wr->share.packed = e.packed + (a - e.off);
      wr->mine[wr->npieces++] = (extent){.off = a, .bytes = b - a, .packed = e.packed + (a - e.off), .t = e.t};
      wr->share.bytes += b - a;
    }
  }
  if (st == MNT_OK && w->rank == 0) { /* the manifest's list of datasets */
    wr->datasets = json_array();
    for (int i = 0; i < nt; i++) {
      json_t *shape = json_array();
      for (int k = 0; k < t[i].ndims; k++) json_array_append_new(shape, json_integer(t[i].dims[k]));
      json_array_append_new(wr->datasets,
                            json_pack("{s:s, s:s, s:I, s:I, s:o}", "name", t[i].name, "type",
                                      t[i].bytes_per ? "uint8" : "float32", "offset", (json_int_t)wr->offsets[i],
                                      "bytes", (json_int_t)mnt_ckpt_tensor_bytes(&t[i]), "shape", shape));
    }
  }
  free(hdr);
  free(ext);
  if (st == MNT_OK) {
    size_t need = (wr->share.bytes + 4095) / 4096 * 4096;
    if (need && !(wr->stage = aligned_alloc(4096, need))) st = MNT_ENOMEM;
    wr->stage_cap = need;
    if (st) MNT_ERR("out of memory for the checkpoint's staging buffer (%" PRIu64 " bytes)", wr->share.bytes);
  }
  return agree(wr, st);
}

/* ---- every rank: its share, written by a thread --------------------------------------------- */

/* open, retrying briefly: on a network filesystem a directory another node just created may not
 * be visible at once (GlusterFS: ENOENT/ESTALE for a moment) */
static int open_retry(const char *path, int flags) {
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

/* early: every piece's writeback is started at once (sync_file_range): the disk works while the
 * next pieces are copied in, and the final fsync has less left to wait for. Not on FUSE
 * (GlusterFS): there writes go to the daemon as they are made, and it only cost time there. */
static int pwrite_all(int fd, const uint8_t *src, uint64_t off, uint64_t len, const char *path, int early) {
  for (uint64_t done = 0; done < len;) {
    size_t n = len - done > PIECE ? PIECE : (size_t)(len - done);
    ssize_t w = pwrite(fd, src + done, n, (off_t)(off + done));
    if (w > 0 && early) sync_file_range(fd, (off_t)(off + done), w, SYNC_FILE_RANGE_WRITE);
    if (w > 0) done += (uint64_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else {
      MNT_ERR("%s: writing bytes %" PRIu64 "..%" PRIu64 " failed: %s", path, off + done, off + len,
              w < 0 ? strerror(errno) : "short write");
      return MNT_ESYS;
    }
  }
  return MNT_OK;
}

/* the share's hash, computed beside the writes (the staged bytes do not change meanwhile) */
static void *hash_share(void *arg) {
  mnt_ckpt_writer *wr = arg;
  wr->share.hash = XXH3_64bits(wr->stage, wr->share.bytes);
  return NULL;
}

/* this rank's share_info as INCOMING/share-RRRRR (exclusive, never through a link, fsynced): what
 * rank 0 commits from on a stop request. Not having it only means that no early commit can happen;
 * the share itself stands. */
static void write_record(mnt_ckpt_writer *wr) {
  share_rec r;
  memset(&r, 0, sizeof r);
  memcpy(r.magic, REC_MAGIC, sizeof REC_MAGIC);
  r.token = wr->token;
  r.seq = wr->rec_seq;
  r.step = wr->step;
  r.rank = wr->c->world->rank;
  r.s = wr->share;
  r.check = XXH3_64bits(&r, offsetof(share_rec, check));
  const char *why = NULL;
  int fd = open(wr->rec_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) why = "cannot create";
  else if (pwrite(fd, &r, sizeof r, 0) != (ssize_t)sizeof r) why = "cannot write";
  else if (fsync(fd) != 0) why = "cannot sync";
  int err = errno;
  if (fd >= 0 && close(fd) != 0 && !why) {
    why = "cannot close";
    err = errno;
  }
  if (why && wr->share.status == MNT_OK)
    MNT_WARN("%s: %s: %s (a stop request cannot commit this checkpoint early; it is committed as usual at the next "
             "step boundary)", wr->rec_path, why, strerror(err));
  else if (why)
    MNT_DBG("%s: %s: %s", wr->rec_path, why, strerror(err));
}

static void *write_share(void *arg) {
  mnt_ckpt_writer *wr = arg;
  share_info *s = &wr->share;
  int st = MNT_OK;
  pthread_t hthr;
  int hashing = pthread_create(&hthr, NULL, hash_share, wr) == 0;
  int fd = open_retry(wr->path, O_WRONLY | O_NOFOLLOW); /* rank 0 created it before anyone got here */
  if (fd < 0) {
    MNT_ERR("%s: cannot open for writing: %s", wr->path, strerror(errno));
    st = MNT_ESYS;
  }
  if (st == MNT_OK && wr->c->world->rank == 0) { /* the file's size and its HDF5 metadata */
    if (ftruncate(fd, (off_t)wr->file_bytes) != 0) {
      MNT_ERR("%s: cannot size it to %" PRIu64 " bytes: %s", wr->path, wr->file_bytes, strerror(errno));
      st = MNT_ESYS;
    }
    for (int i = 0; i < wr->nmeta && st == MNT_OK; i++)
      st = pwrite_all(fd, wr->meta_bytes + wr->meta[i].packed, wr->meta[i].off, wr->meta[i].bytes, wr->path,
                      wr->early_writeback);
  }
  /* pieces adjacent in the file are adjacent in the staging buffer: runs of them in one go */
  for (int i = 0; i < wr->npieces && st == MNT_OK;) {
    uint64_t off = wr->mine[i].off, len = wr->mine[i].bytes;
    int j = i + 1;
    for (; j < wr->npieces && wr->mine[j].off == off + len; j++) len += wr->mine[j].bytes;
    st = pwrite_all(fd, wr->stage + (wr->mine[i].packed - s->packed), off, len, wr->path, wr->early_writeback);
    i = j;
  }
  if (hashing) pthread_join(hthr, NULL);
  else hash_share(wr);
  if (fd >= 0 && st == MNT_OK && fsync(fd) != 0) {
    MNT_ERR("%s: fsync failed: %s", wr->path, strerror(errno));
    st = MNT_ESYS;
  }
  if (fd >= 0 && close(fd) != 0 && st == MNT_OK) {
    MNT_ERR("%s: close failed: %s", wr->path, strerror(errno));
    st = MNT_ESYS;
  }
  s->status = st;
  write_record(wr);
  __atomic_store_n(&wr->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

int mnt_ckpt_begin(mnt_ckpt_writer *wr, int64_t step, const mnt_ckpt_tensor *tin, int nin, json_t *state,
                   json_t *attrs, json_t *config, double *stall_s) {
  double t0 = mnt_now();
  mnt_world *w = wr->c->world;
  MNT_CHECK(mnt_ckpt_finish(wr)); /* the next checkpoint waits for the previous one */
  /* the tensors, and the training state as a JSON text of fixed size (so that the layout holds);
   * a local failure here is agreed on below, before anyone writes */
  int nt = nin + 1, lst = MNT_OK;
  mnt_ckpt_tensor *t = calloc((size_t)nt, sizeof *t);
  char *txt = state ? json_dumps(state, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
  if (!t || !txt || strlen(txt) >= sizeof wr->state_text) {
    MNT_ERR("the training state cannot be encoded in the checkpoint's %d bytes for it", MNT_CKPT_STATE_BYTES);
    lst = MNT_ESYS;
  } else {
    memcpy(t, tin, (size_t)nin * sizeof *t);
    memset(wr->state_text, ' ', sizeof wr->state_text);
    memcpy(wr->state_text, txt, strlen(txt));
    t[nin] = (mnt_ckpt_tensor){.name = "/train_state", .data = wr->state_text, .n = sizeof wr->state_text,
                               .ndims = 1, .dims = {(int)sizeof wr->state_text}, .bytes_per = 1};
  }
  free(txt);
  if (lst == MNT_OK && wr->offsets && nt != wr->nt) {
    MNT_ERR("internal: a checkpoint of %d tensors after one of %d", nt, wr->nt);
    lst = MNT_ESYS;
  }
  int st = MNT_OK;
  if (!wr->offsets) { /* the first one: the layout, made together */
    st = agree(wr, lst);
    if (st == MNT_OK) {
      json_t *a = json_deep_copy(attrs);
      json_object_set_new(a, "format", json_string(MNT_CKPT_FORMAT));
      json_object_set_new(a, "format_version", json_integer(MNT_CKPT_VERSION));
      json_object_set_new(a, "version", json_string(MNT_VERSION));
      json_object_set_new(a, "config", json_deep_copy(config));
      st = layout(wr, t, nt, a);
      json_decref(a);
    }
    if (st != MNT_OK) {
      free(t);
      return st;
    }
  }
  st = agree(wr, lst); /* a rank that cannot take part says so before anyone writes */
  /* the copy: the stall of an asynchronous checkpoint; in 1 MiB blocks over the compute threads */
  const int64_t B = 1 << 20, nblk = (int64_t)((wr->share.bytes + B - 1) / B);
  if (st == MNT_OK) {
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nblk; k++) {
      uint64_t lo = (uint64_t)k * B, hi = lo + B < wr->share.bytes ? lo + B : wr->share.bytes;
      int i = 0; /* the piece holding packed byte lo (pieces are few: a linear search is fine) */
      while (i + 1 < wr->npieces && wr->mine[i + 1].packed - wr->share.packed <= lo) i++;
      for (uint64_t at = lo; at < hi; i++) {
        const extent *p = &wr->mine[i];
        uint64_t p0 = p->packed - wr->share.packed, in = at - p0, n = p->bytes - in < hi - at ? p->bytes - in : hi - at;
        memcpy(wr->stage + at, (const uint8_t *)t[p->t].data + (p->off - wr->offsets[p->t]) + in, n);
        at += n;
      }
    }
  }
  free(t);
  if (st != MNT_OK) return st;
  /* rank 0: what the manifest will say, apart from the shares (copies: the signal thread may write
   * it while the caller goes on with its state and config) */
  json_t *man = w->rank == 0 ? json_pack("{s:s, s:i, s:s, s:I, s:s, s:I, s:I, s:i, s:s, s:O, s:o, s:o}", "format",
                                         MNT_CKPT_FORMAT, "format_version", MNT_CKPT_VERSION, "version", MNT_VERSION,
                                         "step", (json_int_t)step, "file", MNT_CKPT_FILE, "file_bytes",
                                         (json_int_t)wr->file_bytes, "stripe", (json_int_t)wr->stripe, "world_size",
                                         w->size, "hash", "xxh3-64", "datasets", wr->datasets, "state",
                                         json_deep_copy(state), "config", json_deep_copy(config))
                                  : NULL;
  wr->share.hash = 0;
  wr->share.status = 0;
  __atomic_store_n(&wr->done, 0, __ATOMIC_RELEASE);
  pthread_mutex_lock(&wr->mu); /* the checkpoint in flight, as mnt_ckpt_commit_now sees it */
  json_t *old = wr->manifest;
  wr->manifest = man;
  wr->step = step;
  mnt_ckpt_step_dir(wr->dir, sizeof wr->dir, wr->root, step);
  snprintf(wr->path, sizeof wr->path, "%s/%s", wr->incoming, MNT_CKPT_FILE); /* made by the last commit */
  snprintf(wr->rec_path, sizeof wr->rec_path, "%s/share-%05d", wr->incoming, w->rank);
  wr->rec_seq = wr->seq;
  wr->early = 0;
  wr->pending = 1;
  pthread_mutex_unlock(&wr->mu);
  json_decref(old);
  if (pthread_create(&wr->thr, NULL, write_share, wr) != 0) write_share(wr); /* no thread: here */
  else wr->have_thr = 1;
  if (stall_s) *stall_s = mnt_now() - t0;
  return MNT_OK;
}

/* ---- commit ----------------------------------------------------------------------------- */

int mnt_ckpt_remove_all(const char *root) {
  stepdir *sd;
  int n, st = list_steps(root, &sd, &n);
  for (int i = 0; i < n && st == MNT_OK; i++) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, sd[i].name);
    st = remove_step_dir(dir);
  }
  free(sd);
  return st;
}

int64_t mnt_ckpt_newest(const char *root) {
  stepdir *sd;
  int n;
  int64_t found = -1;
  if (list_steps(root, &sd, &n) != MNT_OK) return -1;
  for (int i = 0; i < n && found < 0; i++) {
    char dir[1200], why[600];
    int present;
    snprintf(dir, sizeof dir, "%s/%s", root, sd[i].name);
    json_t *m = load_manifest(dir, &present, why, sizeof why);
    if (present) found = sd[i].step; /* a damaged one is a checkpoint of an earlier run too */
    json_decref(m);
  }
  free(sd);
  return found;
}

/* rank 0, after a commit: keep the newest `keep` checkpoints up to `upto` (newer directories are
 * left alone: they are being written again); delete directories without a manifest, or with a
 * damaged one, older than the newest valid one (which is never deleted) */
static void retain(const char *root, int keep, int64_t upto) {
  stepdir *sd;
  int n, kept = 0;
  if (list_steps(root, &sd, &n) != MNT_OK) return;
  for (int i = 0; i < n; i++) {
    if (sd[i].step > upto) continue;
    char dir[1200], why[600];
    int present;
    snprintf(dir, sizeof dir, "%s/%s", root, sd[i].name);
    json_t *m = load_manifest(dir, &present, why, sizeof why);
    int valid = m != NULL;
    json_decref(m);
    if (valid && kept < keep) {
      kept++;
      continue;
    }
    if (kept == 0) continue; /* never the last valid one */
    if (remove_step_dir(dir) == MNT_OK) MNT_DBG("removed %s (--keep %d)", dir, keep);
  }
  free(sd);
}

/* rank 0, holding wr->mu, every share on disk (all: each rank's share_info): the commit. The
 * manifest (tmp, fsync, rename) into incoming, then incoming becomes the step directory, ROOT is
 * synced, old checkpoints are retained, and the next incoming directory is made (its name in
 * every rank's wr->incoming once finish has run there). The same bytes whichever thread calls it. */
static int commit_locked(mnt_ckpt_writer *wr, const share_info *all) {
  int size = wr->c->world->size;
  int committed = wr->manifest ? MNT_OK : MNT_ENOMEM;
  json_t *shares = json_array();
  for (int r = 0; r < size && shares; r++) {
    char h[17];
    snprintf(h, sizeof h, "%016" PRIx64, all[r].hash);
    json_array_append_new(shares, json_pack("{s:i, s:I, s:I, s:I, s:I, s:s}", "rank", r, "lo", (json_int_t)all[r].lo,
                                            "hi", (json_int_t)all[r].hi, "packed", (json_int_t)all[r].packed, "bytes",
                                            (json_int_t)all[r].bytes, "xxh3", h));
  }
  if (committed == MNT_OK && json_object_set_new(wr->manifest, "shares", shares) != 0) committed = MNT_ENOMEM;
  else if (committed != MNT_OK) json_decref(shares);
  if (committed != MNT_OK) MNT_ERR("checkpoint %s: out of memory for its manifest", wr->dir);
  if (committed == MNT_OK) committed = mnt_json_save_precise(wr->incoming, MNT_CKPT_MANIFEST, wr->manifest);
  if (committed == MNT_OK) committed = fsync_dir(wr->incoming);
  if (committed == MNT_OK) committed = set_aside_or_remove(wr->dir);
  if (committed == MNT_OK && rename(wr->incoming, wr->dir) != 0) {
    MNT_ERR("rename %s -> %s: %s", wr->incoming, wr->dir, strerror(errno));
    committed = MNT_ESYS;
  }
  if (committed == MNT_OK) committed = fsync_dir(wr->root);
  if (committed == MNT_OK) retain(wr->root, wr->keep, wr->step);
  wr->seq++;
  incoming_name(wr);
  int next = prepare_incoming(wr); /* the next checkpoint's file, before the others hear of this one */
  return committed == MNT_OK ? next : committed;
}

/* Agreement here rides the communicator, not PMIx fences: every rank's status comes with the
 * hashes, and rank 0's commit status is broadcast. A failure all ranks know of is recorded as
 * agreed (w->failed_together), so that it ends the job normally instead of aborting it.
 * On rank 0 the checkpoint may have been committed meanwhile by mnt_ckpt_commit_now (wr->early,
 * under wr->mu): then its status is what is broadcast, and the next incoming directory is made
 * already (rank 0's seq moved on with it; the other ranks' moves here, as after any commit). */
int mnt_ckpt_finish(mnt_ckpt_writer *wr) {
  if (!wr || !wr->pending) return MNT_OK;
  mnt_world *w = wr->c->world;
  if (wr->have_thr) pthread_join(wr->thr, NULL);
  wr->have_thr = 0;
  share_info *all = calloc((size_t)w->size, sizeof *all);
  int st = all ? mnt_allgather(wr->c, &wr->share, all, sizeof *all) : MNT_ENOMEM;
  pthread_mutex_lock(&wr->mu);
  int early = wr->early; /* rank 0 only; commit_now committed only when every share was on disk and good */
  wr->pending = 0;
  wr->early = 0;
  for (int r = 0; r < w->size && st == MNT_OK; r++)
    if (all[r].status != MNT_OK) { /* one rank's failure fails the checkpoint everywhere */
      st = w->failed_together = (int)all[r].status;
      if (w->rank == 0 && !early) {
        MNT_ERR("checkpoint %s failed on rank %d (its error is above): not committed, and its bytes removed; the "
                "previous checkpoints are kept", wr->dir, r);
        remove_step_dir(wr->incoming);
      }
    }
  if (st != MNT_OK) { /* the next one gets a fresh name too (rank 0's has one if commit_now ran) */
    if (!early) {
      wr->seq++;
      incoming_name(wr);
      if (w->rank == 0) prepare_incoming(wr); /* a failure here fails that one */
    }
    pthread_mutex_unlock(&wr->mu);
    free(all);
    return st;
  }
  int32_t committed = MNT_OK;
  if (w->rank == 0) committed = early ? wr->early_status : commit_locked(wr, all);
  pthread_mutex_unlock(&wr->mu);
  free(all);
  st = mnt_broadcast(wr->c, &committed, sizeof committed, 0);
  if (w->rank != 0) { /* the same next name everywhere */
    wr->seq++;
    incoming_name(wr);
  }
  if (st == MNT_OK && committed != MNT_OK) st = w->failed_together = committed;
  if (st == MNT_OK) wr->last_step = wr->step;
  return st;
}

/* share-RRRRR of incoming, when it is whole and of this checkpoint: 1 (its share_info in out);
 * 0 when it is not there (yet) */
static int read_record(const char *incoming, int rank, uint64_t token, uint64_t seq, int64_t step, share_info *out) {
  char p[1200];
  snprintf(p, sizeof p, "%s/share-%05d", incoming, rank);
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  share_rec r;
  ssize_t n = pread(fd, &r, sizeof r, 0);
  close(fd);
  if (n != (ssize_t)sizeof r || memcmp(r.magic, REC_MAGIC, sizeof REC_MAGIC) != 0 ||
      r.check != XXH3_64bits(&r, offsetof(share_rec, check)) || r.token != token || r.seq != seq || r.step != step ||
      r.rank != rank)
    return 0;
  *out = r.s;
  return 1;
}

int mnt_ckpt_commit_now(mnt_ckpt_writer *wr, double timeout_s, int *committed) {
  *committed = 0;
  if (!wr || wr->c->world->rank != 0) return MNT_OK;
  double t0 = mnt_now();
  int size = wr->c->world->size;
  pthread_mutex_lock(&wr->mu);
  if (wr->closing) {
    pthread_mutex_unlock(&wr->mu);
    return MNT_OK;
  }
  wr->callers++;
  int inflight = wr->pending && !wr->early;
  int64_t step = wr->step;
  uint64_t seq = wr->seq;
  char incoming[1100], dir[1100];
  snprintf(incoming, sizeof incoming, "%s", wr->incoming);
  snprintf(dir, sizeof dir, "%s", wr->dir);
  pthread_mutex_unlock(&wr->mu);
  int st = MNT_OK, got = 0, failed = -1, gone = 0;
  share_info *all = inflight ? calloc((size_t)size, sizeof *all) : NULL;
  unsigned char *have = inflight ? calloc((size_t)size, 1) : NULL;
  if (inflight && (!all || !have)) {
    MNT_ERR("checkpoint %s: out of memory for a commit on a stop request", dir);
    st = MNT_ENOMEM;
  }
  if (!inflight) MNT_DBG("a stop request: no checkpoint in flight to commit");
  /* the records, polled: 1, 2, 4 ... 64 ms apart, then 64 ms; the in-flight checkpoint rechecked
   * each time (finish may take it, or destroy begin) */
  for (long ms = 1; inflight && st == MNT_OK;) {
    for (int r = 0; r < size && failed < 0; r++)
      if (!have[r] && read_record(incoming, r, wr->token, seq, step, &all[r])) {
        have[r] = 1;
        got++;
        if (all[r].status != MNT_OK) failed = r;
      }
    if (got == size || failed >= 0 || mnt_now() - t0 >= timeout_s) break;
    pthread_mutex_lock(&wr->mu);
    gone = wr->closing || !wr->pending || wr->early || wr->seq != seq || wr->step != step;
    pthread_mutex_unlock(&wr->mu);
    if (gone) break;
    struct timespec ts = {0, ms * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (ms < 64) ms *= 2;
  }
  if (inflight && st == MNT_OK && got == size && failed < 0) {
    pthread_mutex_lock(&wr->mu); /* still the same checkpoint, not committed by finish meanwhile? */
    gone = wr->closing || !wr->pending || wr->early || wr->seq != seq || wr->step != step;
    if (!gone) {
      st = commit_locked(wr, all);
      wr->early = 1;
      wr->early_status = st;
      *committed = st == MNT_OK;
    }
    pthread_mutex_unlock(&wr->mu);
    if (*committed)
      MNT_INFO("checkpoint %s committed on a stop request, %.0f ms after it", dir, (mnt_now() - t0) * 1e3);
  }
  if (inflight && st == MNT_OK && !*committed) {
    if (gone)
      MNT_INFO("checkpoint %s: committed at the step boundary meanwhile (or the writer closed)", dir);
    else if (failed >= 0)
      MNT_INFO("checkpoint %s: rank %d's share failed: not committed on the stop request", dir, failed);
    else {
      int first = 0;
      while (first < size && have[first]) first++;
      MNT_WARN("checkpoint %s: %d of %d ranks' shares were not on disk %.1f s after the stop request (rank %d's "
               "first): not committed early", dir, size - got, size, timeout_s, first);
    }
  }
  free(all);
  free(have);
  pthread_mutex_lock(&wr->mu);
  if (--wr->callers == 0) pthread_cond_broadcast(&wr->idle);
  pthread_mutex_unlock(&wr->mu);
  return st;
}

void mnt_ckpt_writer_destroy(mnt_ckpt_writer *wr) {
  if (!wr) return;
  pthread_mutex_lock(&wr->mu); /* a commit_now in progress ends first (it gives up when it sees closing) */
  wr->closing = 1;
  while (wr->callers > 0) pthread_cond_wait(&wr->idle, &wr->mu);
  pthread_mutex_unlock(&wr->mu);
  if (wr->have_thr) pthread_join(wr->thr, NULL);
  if (wr->c->world->rank == 0 && wr->incoming[0]) remove_step_dir(wr->incoming); /* the next one's empty file */
  json_decref(wr->manifest);
  json_decref(wr->datasets);
  free(wr->stage);
  free(wr->offsets);
  free(wr->mine);
  free(wr->meta);
  free(wr->meta_bytes);
  pthread_cond_destroy(&wr->idle);
  pthread_mutex_destroy(&wr->mu);
  free(wr);
}

/* ---- reading ------------------------------------------------------------------------------ */


/* every share's XXH3-64 against the manifest's (img: the datasets in file order, ext sorted by
 * offset); MNT_EDATA naming the rank whose share fails and the first dataset in it */
static int verify_shares(const char *dir, const char *path, json_t *m, const extent *ext, const uint8_t *img,
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

/* Read and check the checkpoint in dir (manifest m). MNT_EDATA with why on a failed check. */
static int read_one(const char *dir, json_t *m, int verify, mnt_ckpt *out, char *why, size_t wn) {
  char path[1200];
  snprintf(path, sizeof path, "%s/%s", dir, MNT_CKPT_FILE);
  json_t *ds = json_object_get(m, "datasets");
  size_t nd = json_array_size(ds);
  extent *ext = calloc(nd ? nd : 1, sizeof *ext);
  if (!ext) return MNT_ENOMEM;
  uint64_t total = 0;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(ds, i);
    ext[i] = (extent){.off = (uint64_t)json_integer_value(json_object_get(d, "offset")),
                      .bytes = (uint64_t)json_integer_value(json_object_get(d, "bytes")), .t = (int)i};
  }
  qsort(ext, nd, sizeof *ext, cmp_extent);
  for (size_t i = 0; i < nd; i++) {
    ext[i].packed = total;
    total += ext[i].bytes;
  }
  int st = MNT_OK;
  struct stat sb;
  json_int_t want = json_integer_value(json_object_get(m, "file_bytes"));
  if (stat(path, &sb) != 0) {
    snprintf(why, wn, "%s: %s", path, strerror(errno));
    st = MNT_EDATA;
  } else if (sb.st_size != want) {
    snprintf(why, wn, "%s has %lld bytes, its manifest says %lld (truncated or replaced)", path, (long long)sb.st_size,
             (long long)want);
    st = MNT_EDATA;
  }
  /* the HDF5 side: the file opens (its metadata is checksummed) and the datasets are where the
   * manifest says */
  if (st == MNT_OK) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
      snprintf(why, wn, "%s: HDF5 cannot open it (damaged metadata)", path);
      st = MNT_EDATA;
    }
    for (size_t i = 0; i < nd && st == MNT_OK; i++) {
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
    if (f >= 0) H5Fclose(f);
  }
  uint8_t *img = NULL;
  if (st == MNT_OK && !(img = malloc(total ? total : 1))) st = MNT_ENOMEM;
  int fd = st == MNT_OK ? open_retry(path, O_RDONLY) : -1;
  if (st == MNT_OK && fd < 0) {
    snprintf(why, wn, "%s: cannot open: %s", path, strerror(errno));
    st = MNT_EDATA;
  }
  for (size_t i = 0; i < nd && st == MNT_OK;) { /* runs of adjacent datasets in one read each */
    uint64_t off = ext[i].off, len = ext[i].bytes;
    size_t j = i + 1;
    for (; j < nd && ext[j].off == off + len; j++) len += ext[j].bytes;
    if (pread_all(fd, img + ext[i].packed, off, len) != 0) {
      snprintf(why, wn, "%s: reading bytes %" PRIu64 "..%" PRIu64 " failed: %s", path, off, off + len,
               errno ? strerror(errno) : "end of file");
      st = MNT_EDATA;
    }
    i = j;
  }
  if (fd >= 0) close(fd);
  if (verify && st == MNT_OK) st = verify_shares(dir, path, m, ext, img, total, why, wn);
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

int mnt_ckpt_open(const char *path, int verify, mnt_ckpt *out, int *found) {
  memset(out, 0, sizeof *out);
  *found = 0;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    MNT_ERR("%s: %s", path, strerror(errno));
    return errno == ENOENT ? MNT_EARG : MNT_ESYS;
  }
  char dir[1100], man[1200], why[1400];
  snprintf(dir, sizeof dir, "%s", path);
  if (S_ISREG(sb.st_mode)) { /* .../state.h5: its directory */
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  snprintf(man, sizeof man, "%s/%s", dir, MNT_CKPT_MANIFEST);
  if (S_ISREG(sb.st_mode) || access(man, F_OK) == 0) { /* one named checkpoint: it must be good */
    int present;
    json_t *m = load_manifest(dir, &present, why, sizeof why);
    int st = m ? read_one(dir, m, verify, out, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (st == MNT_EDATA) MNT_ERR("checkpoint %s: %s", dir, why);
    *found = st == MNT_OK;
    return st;
  }
  /* a root: the newest good one */
  stepdir *sd;
  int n, st = list_steps(dir, &sd, &n);
  if (st != MNT_OK) {
    MNT_ERR("%s: cannot list: %s", dir, strerror(errno));
    return st;
  }
  const char *prev_bad = NULL;
  char bad_dir[1200] = "";
  for (int i = 0; i < n && !*found; i++) {
    char sdir[1200];
    snprintf(sdir, sizeof sdir, "%s/%s", dir, sd[i].name);
    int present;
    json_t *m = load_manifest(sdir, &present, why, sizeof why);
    if (!m && !present) {
      MNT_INFO("%s: %s: not a checkpoint, skipped", sdir, why);
      continue;
    }
    /* a manifest that is there and fails (does not parse, is not a manifest, a newer format) is
     * a damaged checkpoint, like a share that fails its checksum */
    st = m ? read_one(sdir, m, verify, out, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (st == MNT_OK) {
      *found = 1;
      if (prev_bad) MNT_WARN("falling back to %s (step %lld) because %s failed its checks", sdir, (long long)out->step,
                             bad_dir);
    } else if (st == MNT_EDATA) {
      MNT_WARN("checkpoint %s is damaged: %s", sdir, why);
      if (!prev_bad) snprintf(bad_dir, sizeof bad_dir, "%s", sdir); /* the newest damaged one */
      prev_bad = bad_dir;
      st = MNT_OK;
    } else {
      break;
    }
  }
  free(sd);
  if (st == MNT_OK && !*found && prev_bad) { /* damaged checkpoints and no good one: not a fresh start */
    MNT_ERR("%s: no checkpoint passes its checks (the newest damaged one: %s)", dir, bad_dir);
    st = MNT_EDATA;
  }
  return st;
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

/* ---- inspect ------------------------------------------------------------------------------ */

int mnt_ckpt_is_path(const char *path) {
  char p[1200];
  struct stat sb;
  if (stat(path, &sb) != 0) return 0;
  if (S_ISREG(sb.st_mode)) {
    const char *b = strrchr(path, '/');
    return !strcmp(b ? b + 1 : path, MNT_CKPT_FILE);
  }
  snprintf(p, sizeof p, "%s/%s", path, MNT_CKPT_MANIFEST);
  if (access(p, F_OK) == 0) return 1;
  stepdir *sd;
  int n;
  snprintf(p, sizeof p, "%s/index.json", path); /* a dataset is not a checkpoint root */
  if (access(p, F_OK) == 0 || list_steps(path, &sd, &n) != MNT_OK) return 0;
  free(sd);
  return n > 0;
}

static void print_one(const mnt_ckpt *c, double read_s) {
  json_t *m = c->manifest, *s = json_object_get(m, "state"), *cfg = json_object_get(m, "config");
  json_t *ds = json_object_get(m, "datasets"), *shares = json_object_get(m, "shares");
  int world = (int)json_integer_value(json_object_get(m, "world_size"));
  printf("checkpoint %s: step %lld of %lld (epoch %lld, cursor %lld), written by %d rank%s, mntrain %s\n", c->dir,
         (long long)c->step, (long long)json_integer_value(json_object_get(cfg, "steps")),
         (long long)json_integer_value(json_object_get(s, "epoch")),
         (long long)json_integer_value(json_object_get(s, "cursor")), world, world == 1 ? "" : "s",
         json_string_value(json_object_get(m, "version")) ? json_string_value(json_object_get(m, "version")) : "?");
  printf("  model: %s, %d px, global batch %lld (%lld per rank), bn groups of %lld, lr %.6g, seed %lld, %lld skipped "
         "steps\n",
         json_string_value(json_object_get(cfg, "arch")) ? json_string_value(json_object_get(cfg, "arch")) : "?",
         (int)json_integer_value(json_object_get(cfg, "size")),
         (long long)json_integer_value(json_object_get(s, "global_batch")),
         (long long)json_integer_value(json_object_get(cfg, "batch_per_rank")),
         (long long)json_integer_value(json_object_get(s, "bn_group")), json_number_value(json_object_get(s, "lr")),
         (long long)json_integer_value(json_object_get(cfg, "seed")),
         (long long)json_integer_value(json_object_get(s, "skipped_steps")));
  int nm = 0, nmo = 0, nb = 0;
  for (size_t i = 0; i < json_array_size(ds); i++) {
    const char *nmv = json_string_value(json_object_get(json_array_get(ds, i), "name"));
    if (!nmv) continue;
    nm += !strncmp(nmv, "/model/", 7);
    nmo += !strncmp(nmv, "/optim/momentum/", 16);
    nb += !strncmp(nmv, "/bn/", 4);
  }
  printf("  %s: %.1f MB; %zu datasets (%d weights, %d momentum, %d BN statistics, the training state): %.1f MB of "
         "data; stripe %lld KiB\n",
         MNT_CKPT_FILE, (double)json_integer_value(json_object_get(m, "file_bytes")) / 1e6, json_array_size(ds), nm, nmo,
         nb, (double)c->image_bytes / 1e6, (long long)json_integer_value(json_object_get(m, "stripe")) / 1024);
  printf("  shares:");
  for (size_t r = 0; r < json_array_size(shares); r++)
    printf(" rank %zu %.1f MB%s", r, (double)json_integer_value(json_object_get(json_array_get(shares, r), "bytes")) / 1e6,
           r + 1 < json_array_size(shares) ? "," : "\n");
  if (c->verified)
    printf("  checksums: ok (xxh3-64 of every share; read in %.2f s, %.0f MB/s)\n", read_s,
           read_s > 0 ? (double)c->image_bytes / 1e6 / read_s : 0.0);
  char *txt = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
  printf("  config: %s\n", txt ? txt : "?");
  free(txt);
}

int mnt_ckpt_inspect(const char *path) {
  char man[1200];
  struct stat sb;
  snprintf(man, sizeof man, "%s/%s", path, MNT_CKPT_MANIFEST);
  int single = stat(path, &sb) == 0 && (S_ISREG(sb.st_mode) || access(man, F_OK) == 0);
  mnt_ckpt c;
  int found, st = MNT_OK, bad = 0;
  if (single) {
    double t0 = mnt_now();
    st = mnt_ckpt_open(path, 1, &c, &found);
    if (st == MNT_OK) print_one(&c, mnt_now() - t0);
    mnt_ckpt_close(&c);
    return st;
  }
  stepdir *sd;
  int n;
  if ((st = list_steps(path, &sd, &n)) != MNT_OK) {
    MNT_ERR("%s: cannot list: %s", path, strerror(errno));
    return st;
  }
  printf("checkpoints in %s (newest first):\n", path);
  int shown = 0;
  for (int i = 0; i < n; i++) {
    char dir[1200], why[1400];
    snprintf(dir, sizeof dir, "%s/%s", path, sd[i].name);
    int present;
    json_t *m = load_manifest(dir, &present, why, sizeof why);
    if (!m && !present) {
      printf("  %s: not a checkpoint: %s\n", sd[i].name, why);
      continue;
    }
    double t0 = mnt_now();
    memset(&c, 0, sizeof c);
    int r = m ? read_one(dir, m, 1, &c, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (r == MNT_OK) {
      printf("  %s: ok\n", sd[i].name);
      if (!shown++) {
        double dt = mnt_now() - t0;
        print_one(&c, dt);
      }
    } else {
      printf("  %s: DAMAGED: %s\n", sd[i].name, why);
      bad++;
    }
    mnt_ckpt_close(&c);
  }
  free(sd);
  if (bad) MNT_ERR("%s: %d damaged checkpoint%s (resume skips them)", path, bad, bad == 1 ? "" : "s");
  return bad ? MNT_EDATA : MNT_OK;
}
