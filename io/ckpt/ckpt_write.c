/* ckpt_write.c — the collective checkpoint writer: its root and incoming directories, each rank's
 * share staged and written by a thread of its own with its record, and the commit (manifest,
 * rename, retention) by finish or, on a stop request, by commit_now; the file's layout is made once
 * by ckpt_layout.c; see ckpt.h. */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
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

#include "src/check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "io/ckpt/ckpt_writer.h"
#include "io/data/dataset.h"
#include "src/safefs.h"
#include "src/jsonio.h"
#include "src/log.h"
#include "src/trace.h"
#include "src/path.h"

static int fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    int st = MNT_SYSERR("%s: cannot sync the directory", dir);
    if (fd >= 0) close(fd);
    return st;
  }
  close(fd);
  return MNT_OK;
}

/* A step directory about to be written again: one with a manifest (a checkpoint of a branch of
 * the run that was abandoned: a resume from an older one) is renamed to STEP.superseded-N, kept
 * and ignored; one without (an unfinished write) is removed. */
static int set_aside_or_remove(const char *dir) {
  char man[MNT_PATH_MAX], to[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(man, dir, MNT_CKPT_MANIFEST));
  if (access(man, F_OK) != 0) return mnt_ckpt_remove_step_dir(dir);
  for (int k = 1; k < 1000; k++) {
    if (snprintf(to, sizeof to, "%s.superseded-%d", dir, k) >= (int)sizeof to) {
      errno = ENAMETOOLONG;
      break;
    }
    if (access(to, F_OK) == 0) continue;
    if (rename(dir, to) != 0) break;
    MNT_WARN("%s is of an abandoned branch of this run (resumed from an older checkpoint): kept as %s", dir, to);
    return MNT_OK;
  }
  return MNT_SYSERR("%s: cannot set it aside", dir);
}

/* every rank: the name of the next checkpoint's directory before its commit. Never a name used
 * before: a GlusterFS client on another node may still resolve an old name to the file that was
 * renamed away (its lookup cache), and would write into a committed checkpoint. */
static int incoming_name(mnt_ckpt_writer *wr) {
  char name[64];
  snprintf(name, sizeof name, "incoming-%016" PRIx64 "-%06" PRIu64, wr->token, wr->seq);
  return mnt_path_join(wr->incoming, wr->root, name);
}

/* rank 0: an empty INCOMING/state.h5, made ahead of the checkpoint that will be written into it, so
 * that starting one touches no metadata (a directory and a create take tens of ms on a busy
 * parallel filesystem, and would hold up training) */
static int prepare_incoming(mnt_ckpt_writer *wr) {
  char p[MNT_PATH_MAX];
  MNT_CHECK(mnt_path_join(p, wr->incoming, MNT_CKPT_FILE));
  MNT_CHECK(mnt_ckpt_remove_step_dir(wr->incoming));
  MNT_SYSCHECK(mkdir(wr->incoming, 0755), "%s: cannot create", wr->incoming);
  /* the directory is new (mkdir): nothing can be in it, and nothing is followed */
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 || close(fd) != 0) return MNT_SYSERR("%s: cannot create", p);
  return MNT_OK;
}

/* On Lustre (statfs magic 0x0BD00BD0), new files in the checkpoint directory are striped over
 * every OST in stripes of `stripe` bytes, through liblustreapi when it is installed (opened at run
 * time: nothing to build against); anywhere else, or without the library, nothing happens. */
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

/* rank 0, at create: the root made or checked (src/safefs.h) and striped on Lustre; step directories
 * newer than the resumed one (a branch this run leaves) set aside; earlier jobs' unfinished writes
 * removed */
static int prepare_root(mnt_ckpt_writer *wr, int64_t resumed_step) {
  MNT_CHECK(mnt_dir_secure(wr->root, "the checkpoint directory", 1, MNT_DIR_RUN));
  lustre_stripe(wr->root, wr->stripe);
  mnt_ckpt_stepdir *sd;
  int n, st = MNT_OK;
  if (resumed_step >= 0 && mnt_ckpt_list_steps(wr->root, &sd, &n) == MNT_OK) {
    for (int i = 0; i < n && st == MNT_OK; i++) {
      char dir[MNT_PATH_MAX];
      if (sd[i].step <= resumed_step) continue;
      st = mnt_path_join(dir, wr->root, sd[i].name);
      if (st == MNT_OK) st = set_aside_or_remove(dir);
    }
    free(sd);
  }
  DIR *d = st == MNT_OK ? opendir(wr->root) : NULL;
  struct dirent *e;
  while (d && st == MNT_OK && (e = readdir(d))) {
    char dir[MNT_PATH_MAX];
    if (strncmp(e->d_name, "incoming-", 9)) continue;
    st = mnt_path_join(dir, wr->root, e->d_name);
    if (st == MNT_OK) mnt_ckpt_remove_step_dir(dir);
  }
  if (d) closedir(d);
  return st;
}

static int writer_create(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t resumed_step, int prepare,
                         mnt_ckpt_writer **out);

int mnt_ckpt_writer_create(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t resumed_step,
                           mnt_ckpt_writer **out) {
  return writer_create(c, root, stripe, keep, resumed_step, 1, out);
}

int mnt_ckpt_writer_rejoin(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t last_step,
                           mnt_ckpt_writer **out) {
  return writer_create(c, root, stripe, keep, last_step, 0, out);
}

void mnt_ckpt_writer_fence(mnt_ckpt_writer *wr, int epoch, int (*fence)(void *ctx), void *ctx) {
  if (!wr) return;
  pthread_mutex_lock(&wr->mu);
  wr->epoch = epoch;
  wr->fence = fence;
  wr->fence_ctx = ctx;
  pthread_mutex_unlock(&wr->mu);
}

/* prepare: rank 0 readies the root (prepare_root); 0 after a shrink, when the root is in use */
static int writer_create(mnt_comm *c, const char *root, size_t stripe, int keep, int64_t resumed_step, int prepare,
                         mnt_ckpt_writer **out) {
  *out = NULL;
  mnt_ckpt_writer *wr = calloc(1, sizeof *wr);
  if (!wr) return MNT_ENOMEM;
  wr->c = c;
  pthread_mutex_init(&wr->mu, NULL);
  pthread_cond_init(&wr->idle, NULL);
  wr->stripe = stripe;
  wr->keep = keep < 1 ? 1 : keep;
  wr->last_step = resumed_step; /* a resumed run has that checkpoint: it is not written again */
  /* a token of this writer's own: rank 0's clock and pid, broadcast below */
  wr->token = mnt_mix((uint64_t)(mnt_now() * 1e9), (uint64_t)getpid() ^ ((uint64_t)time(NULL) << 20));
  int st = mnt_path_join(wr->root, NULL, root);
  if (st == MNT_OK && c->world->rank == 0 && prepare) st = prepare_root(wr, resumed_step);
  int cs = mnt_broadcast(c, &wr->token, sizeof wr->token, 0);
  if (cs != MNT_OK) st = cs;
  if (st == MNT_OK) st = incoming_name(wr);
  if (st == MNT_OK && c->world->rank == 0) st = prepare_incoming(wr);
  st = mnt_world_agree(c->world, st);
  struct statfs sf; /* after the agreement: rank 0 has created root */
  int fuse = statfs(root, &sf) == 0 && (unsigned long)sf.f_type == 0x65735546UL; /* FUSE_SUPER_MAGIC */
  wr->early_writeback = !fuse;
  wr->direct = !fuse; /* GlusterFS's FUSE client takes O_DIRECT only with direct-io-mode: buffered there */
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

/* ---- every rank: its share, written by a thread --------------------------------------------- */

/* early: every piece's writeback is started at once (sync_file_range): the disk works while the
 * next pieces are copied in, and the final fsync has less left to wait for. Not on FUSE
 * (GlusterFS): there writes go to the daemon as they are made, and it only cost time there. */
static int pwrite_all(int fd, const uint8_t *src, uint64_t off, uint64_t len, const char *path, int early) {
  for (uint64_t done = 0; done < len;) {
    size_t n = len - done > MNT_CKPT_PIECE ? MNT_CKPT_PIECE : (size_t)(len - done);
    ssize_t w = pwrite(fd, src + done, n, (off_t)(off + done));
    if (w > 0 && early) sync_file_range(fd, (off_t)(off + done), w, SYNC_FILE_RANGE_WRITE);
    if (w > 0) done += (uint64_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else if (w < 0) return MNT_SYSERR("%s: writing bytes %" PRIu64 "..%" PRIu64 " failed", path, off + done, off + len);
    else {
      MNT_ERR("%s: writing bytes %" PRIu64 "..%" PRIu64 " failed: short write", path, off + done, off + len);
      return MNT_ESYS;
    }
  }
  return MNT_OK;
}

/* where a file byte of the share is staged: the staging buffer mirrors the file from share.lo, so
 * that a run of the file and its bytes in the buffer start at the same offset modulo 4 KiB, which
 * O_DIRECT asks of both (the gaps between datasets are a few KiB of unused buffer) */
static uint8_t *staged(const mnt_ckpt_writer *wr, uint64_t file_off) { return wr->stage + (file_off - wr->share.lo); }

/* the share's hash: its pieces' bytes in file order (as a reader sees them packed), computed beside
 * the writes (the staged bytes do not change meanwhile) */
static void *hash_share(void *arg) {
  mnt_ckpt_writer *wr = arg;
  XXH3_state_t *h = XXH3_createState();
  if (!h || XXH3_64bits_reset(h) != XXH_OK) {
    wr->share.hash = 0; /* a hash no reader gets: this checkpoint reads as damaged, never as good */
    XXH3_freeState(h);
    return NULL;
  }
  for (int i = 0; i < wr->npieces; i++) XXH3_64bits_update(h, staged(wr, wr->mine[i].off), wr->mine[i].bytes);
  wr->share.hash = XXH3_64bits_digest(h);
  XXH3_freeState(h);
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

/* rank 0: the file's size and its HDF5 metadata */
static int write_metadata(mnt_ckpt_writer *wr, int fd) {
  if (ftruncate(fd, (off_t)wr->file_bytes) != 0)
    return MNT_SYSERR("%s: cannot size it to %" PRIu64 " bytes", wr->path, wr->file_bytes);
  for (int i = 0; i < wr->nmeta; i++)
    MNT_CHECK(pwrite_all(fd, wr->meta_bytes + wr->meta[i].packed, wr->meta[i].off, wr->meta[i].bytes, wr->path,
                         wr->early_writeback));
  return MNT_OK;
}

/* this rank's pieces: adjacent in the file, they are adjacent in the staging buffer too: runs of
 * them in one go. dfd >= 0 (O_DIRECT): a run's part that starts and ends on 4 KiB boundaries, in file
 * and buffer, goes from the staging buffer to the device without a copy into the page cache (that
 * copy held buffered writes to about a third of the disk's speed: measured 0.4-0.5 s for 205 MB
 * where dd conv=fsync took 0.12 s); the rest, and all of a run the device refuses (EINVAL),
 * buffered */
enum { DIRECT_ALIGN = 4096 };
static int write_pieces(mnt_ckpt_writer *wr, int fd, int dfd) {
  for (int i = 0; i < wr->npieces;) {
    uint64_t off = wr->mine[i].off, len = wr->mine[i].bytes;
    int j = i + 1;
    for (; j < wr->npieces && wr->mine[j].off == off + len; j++) len += wr->mine[j].bytes;
    const uint8_t *src = staged(wr, off);
    uint64_t direct = 0;
    if (dfd >= 0 && off % DIRECT_ALIGN == 0 && (uintptr_t)src % DIRECT_ALIGN == 0)
      direct = len - len % DIRECT_ALIGN;
    for (uint64_t done = 0; done < direct;) {
      size_t n = direct - done > MNT_CKPT_PIECE ? MNT_CKPT_PIECE : (size_t)(direct - done);
      ssize_t w = pwrite(dfd, src + done, n, (off_t)(off + done));
      if (w > 0 && (size_t)w % DIRECT_ALIGN == 0) done += (uint64_t)w;
      else if (w < 0 && errno == EINTR) continue;
      else if (w < 0 && errno == EINVAL && done == 0) { /* not for this file or device: buffered */
        direct = 0;
        break;
      } else if (w < 0) {
        return MNT_SYSERR("%s: writing bytes %" PRIu64 "..%" PRIu64 " failed", wr->path, off + done, off + direct);
      } else { /* short or unaligned: the rest buffered */
        if (w > 0) done += (uint64_t)w;
        direct = done;
        break;
      }
    }
    if (direct < len) MNT_CHECK(pwrite_all(fd, src + direct, off + direct, len - direct, wr->path, wr->early_writeback));
    i = j;
  }
  return MNT_OK;
}

static void *write_share(void *arg) {
  mnt_ckpt_writer *wr = arg;
  int st = MNT_OK;
  uint64_t t0 = mnt_trace_now(); /* on the timeline's checkpoint track: this rank's share on disk */
  pthread_t hthr;
  int hashing = pthread_create(&hthr, NULL, hash_share, wr) == 0;
  int fd = mnt_ckpt_open_retry(wr->path, O_WRONLY | O_NOFOLLOW); /* rank 0 created it before anyone got here */
  if (fd < 0) st = MNT_SYSERR("%s: cannot open for writing", wr->path);
  if (st == MNT_OK && wr->c->world->rank == 0) st = write_metadata(wr, fd);
  int dfd = st == MNT_OK && wr->direct ? open(wr->path, O_WRONLY | O_NOFOLLOW | O_DIRECT | O_CLOEXEC) : -1;
  if (st == MNT_OK) st = write_pieces(wr, fd, dfd);
  if (dfd >= 0 && close(dfd) != 0 && st == MNT_OK) st = MNT_SYSERR("%s: close failed", wr->path);
  if (hashing) pthread_join(hthr, NULL);
  else hash_share(wr);
  if (fd >= 0 && st == MNT_OK && fsync(fd) != 0) st = MNT_SYSERR("%s: fsync failed", wr->path);
  if (fd >= 0 && close(fd) != 0 && st == MNT_OK) st = MNT_SYSERR("%s: close failed", wr->path);
  wr->share.status = st;
  mnt_trace_span("checkpoint", "write share", t0, mnt_trace_now(), wr->step);
  write_record(wr);
  __atomic_store_n(&wr->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* ---- begin --------------------------------------------------------------------------------- */

/* the checkpoint's tensors: the caller's nin, and the training state as a JSON text of fixed size
 * (so that the layout holds) in wr->state_text, the dataset /train_state. NULL (logged) when the
 * state does not fit or memory runs out. */
static mnt_ckpt_tensor *with_state(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *tin, int nin, json_t *state) {
  mnt_ckpt_tensor *t = calloc((size_t)nin + 1, sizeof *t);
  char *txt = state ? json_dumps(state, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
  if (!t || !txt || strlen(txt) >= sizeof wr->state_text) {
    MNT_ERR("the training state cannot be encoded in the checkpoint's %d bytes for it", MNT_CKPT_STATE_BYTES);
    free(t);
    free(txt);
    return NULL;
  }
  memcpy(t, tin, (size_t)nin * sizeof *t);
  memset(wr->state_text, ' ', sizeof wr->state_text);
  memcpy(wr->state_text, txt, strlen(txt));
  t[nin] = (mnt_ckpt_tensor){.name = "/train_state", .data = wr->state_text, .n = sizeof wr->state_text,
                             .ndims = 1, .dims = {(int)sizeof wr->state_text}, .bytes_per = 1};
  free(txt);
  return t;
}

/* The paths of checkpoint `step`: the step directory it becomes, and its file and this rank's
 * share record in the incoming directory (made by the last commit). */
static int paths_of(mnt_ckpt_writer *wr, int64_t step) {
  char name[64];
  snprintf(name, sizeof name, "step-%08lld", (long long)step);
  pthread_mutex_lock(&wr->mu); /* dir: mnt_ckpt_commit_now reads it */
  int st = mnt_path_join(wr->dir, wr->root, name);
  pthread_mutex_unlock(&wr->mu);
  MNT_CHECK(st);
  MNT_CHECK(mnt_path_join(wr->path, wr->incoming, MNT_CKPT_FILE));
  snprintf(name, sizeof name, "share-%05d", wr->c->world->rank);
  return mnt_path_join(wr->rec_path, wr->incoming, name);
}

/* Collective, the writer's first checkpoint: once every rank can take part (lst), the file's layout,
 * made together, with the root attributes attrs, the format and version, and config. */
static int first_layout(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t, int nt, int lst, json_t *attrs,
                        json_t *config) {
  MNT_CHECK(mnt_ckpt_agree(wr, lst));
  json_t *a = json_deep_copy(attrs);
  json_object_set_new(a, "format", json_string(MNT_CKPT_FORMAT));
  json_object_set_new(a, "format_version", json_integer(MNT_CKPT_VERSION));
  json_object_set_new(a, "version", json_string(MNT_VERSION));
  json_object_set_new(a, "config", json_deep_copy(config));
  int st = mnt_ckpt_layout(wr, t, nt, a);
  json_decref(a);
  return st;
}

/* the copy of this rank's share of the tensors t into the staging buffer: the stall of an
 * asynchronous checkpoint; in 1 MiB blocks over the compute threads */
static void stage_share(mnt_ckpt_writer *wr, const mnt_ckpt_tensor *t) {
  const int64_t B = 1 << 20, nblk = (int64_t)((wr->share.bytes + B - 1) / B);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nblk; k++) {
    uint64_t lo = (uint64_t)k * B, hi = lo + B < wr->share.bytes ? lo + B : wr->share.bytes;
    int i = 0; /* the piece holding packed byte lo (pieces are few: a linear search is fine) */
    while (i + 1 < wr->npieces && wr->mine[i + 1].packed - wr->share.packed <= lo) i++;
    for (uint64_t at = lo; at < hi; i++) {
      const mnt_ckpt_extent *p = &wr->mine[i];
      uint64_t p0 = p->packed - wr->share.packed, in = at - p0, n = p->bytes - in < hi - at ? p->bytes - in : hi - at;
      memcpy(staged(wr, p->off + in), (const uint8_t *)t[p->t].data + (p->off - wr->offsets[p->t]) + in, n);
      at += n;
    }
  }
}

/* rank 0: what the manifest will say, apart from the shares (copies: the signal thread may write
 * it while the caller goes on with its state and config) */
static json_t *manifest_head(const mnt_ckpt_writer *wr, int64_t step, json_t *state, json_t *config) {
  return json_pack("{s:s, s:i, s:s, s:I, s:s, s:I, s:I, s:i, s:s, s:O, s:o, s:o}", "format", MNT_CKPT_FORMAT,
                   "format_version", MNT_CKPT_VERSION, "version", MNT_VERSION, "step", (json_int_t)step, "file",
                   MNT_CKPT_FILE, "file_bytes", (json_int_t)wr->file_bytes, "stripe", (json_int_t)wr->stripe,
                   "world_size", wr->c->world->size, "hash", "xxh3-64", "datasets", wr->datasets, "state",
                   json_deep_copy(state), "config", json_deep_copy(config));
}

/* the checkpoint in flight, as mnt_ckpt_commit_now sees it, and the thread that writes the share */
static void start_share(mnt_ckpt_writer *wr, int64_t step, json_t *man) {
  wr->share.hash = 0;
  wr->share.status = 0;
  __atomic_store_n(&wr->done, 0, __ATOMIC_RELEASE);
  pthread_mutex_lock(&wr->mu);
  json_t *old = wr->manifest;
  wr->manifest = man;
  wr->step = step;
  wr->rec_seq = wr->seq;
  wr->early = 0;
  wr->pending = 1;
  pthread_mutex_unlock(&wr->mu);
  json_decref(old);
  if (pthread_create(&wr->thr, NULL, write_share, wr) != 0) write_share(wr); /* no thread: here */
  else wr->have_thr = 1;
}

int mnt_ckpt_begin(mnt_ckpt_writer *wr, int64_t step, const mnt_ckpt_tensor *tin, int nin, json_t *state,
                   json_t *attrs, json_t *config, double *stall_s) {
  double t0 = mnt_now();
  MNT_CHECK(mnt_ckpt_finish(wr)); /* the next checkpoint waits for the previous one */
  /* a local failure here is agreed on below, before anyone writes */
  int nt = nin + 1, lst = MNT_OK;
  mnt_ckpt_tensor *t = with_state(wr, tin, nin, state);
  if (!t) {
    lst = MNT_ESYS;
  } else if (wr->offsets && nt != wr->nt) {
    MNT_ERR("internal: a checkpoint of %d tensors after one of %d", nt, wr->nt);
    lst = MNT_ESYS;
  }
  if (lst == MNT_OK) lst = paths_of(wr, step);
  int st = wr->offsets ? MNT_OK : first_layout(wr, t, nt, lst, attrs, config);
  if (st == MNT_OK) st = mnt_ckpt_agree(wr, lst); /* a rank that cannot take part says so before anyone writes */
  if (st == MNT_OK) stage_share(wr, t);
  free(t);
  if (st != MNT_OK) return st;
  start_share(wr, step, wr->c->world->rank == 0 ? manifest_head(wr, step, state, config) : NULL);
  if (stall_s) *stall_s = mnt_now() - t0;
  return MNT_OK;
}

/* ---- commit ----------------------------------------------------------------------------- */

/* rank 0: the manifest's "shares" (all: every rank's share_info) */
static int manifest_shares(mnt_ckpt_writer *wr, const share_info *all) {
  json_t *shares = wr->manifest ? json_array() : NULL;
  for (int r = 0; r < wr->c->world->size && shares; r++) {
    char h[17];
    snprintf(h, sizeof h, "%016" PRIx64, all[r].hash);
    json_array_append_new(shares, json_pack("{s:i, s:I, s:I, s:I, s:I, s:s}", "rank", r, "lo", (json_int_t)all[r].lo,
                                            "hi", (json_int_t)all[r].hi, "packed", (json_int_t)all[r].packed, "bytes",
                                            (json_int_t)all[r].bytes, "xxh3", h));
  }
  if (!shares || json_object_set_new(wr->manifest, "shares", shares) != 0) {
    MNT_ERR("checkpoint %s: out of memory for its manifest", wr->dir);
    return MNT_ENOMEM;
  }
  return MNT_OK;
}

/* rank 0, holding wr->mu, every share on disk (all: each rank's share_info): the commit. The
 * manifest (tmp, fsync, rename) into incoming, then incoming becomes the step directory, ROOT is
 * synced, old checkpoints are retained, and the next incoming directory is made (its name in
 * every rank's wr->incoming once finish has run there). The same bytes whichever thread calls it. */
static int commit_locked(mnt_ckpt_writer *wr, const share_info *all) {
  int st = MNT_OK;
  if (wr->fence && (st = wr->fence(wr->fence_ctx)) != MNT_OK) { /* said by the fence */
    MNT_ERR("checkpoint %s: not committed (this rank's group no longer holds the run)", wr->dir);
    return st; /* its bytes left as they are, and no next incoming directory: this group writes nothing more */
  }
  MNT_CHECK_GOTO(manifest_shares(wr, all), st, out);
  if (wr->epoch > 0 && json_object_set_new(wr->manifest, "membership_epoch", json_integer(wr->epoch)) != 0) {
    st = MNT_ENOMEM;
    goto out;
  }
  MNT_CHECK_GOTO(mnt_json_save_precise(wr->incoming, MNT_CKPT_MANIFEST, wr->manifest), st, out);
  MNT_CHECK_GOTO(fsync_dir(wr->incoming), st, out);
  MNT_CHECK_GOTO(set_aside_or_remove(wr->dir), st, out);
  MNT_SYSCHECK_GOTO(rename(wr->incoming, wr->dir), st, out, "rename %s -> %s", wr->incoming, wr->dir);
  MNT_CHECK_GOTO(fsync_dir(wr->root), st, out);
  mnt_ckpt_retain(wr->root, wr->keep, wr->step);
out:
  wr->seq++;
  int next = incoming_name(wr);
  if (next == MNT_OK) next = prepare_incoming(wr); /* the next checkpoint's file, before the others hear of this one */
  return st == MNT_OK ? next : st;
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
        mnt_ckpt_remove_step_dir(wr->incoming);
      }
    }
  if (st != MNT_OK) { /* the next one gets a fresh name too (rank 0's has one if commit_now ran) */
    if (!early) {
      wr->seq++;
      if (incoming_name(wr) == MNT_OK && w->rank == 0) prepare_incoming(wr); /* a failure here fails that one */
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
    int named = incoming_name(wr);
    if (st == MNT_OK) st = named;
  }
  if (st == MNT_OK && committed != MNT_OK) st = w->failed_together = committed;
  if (st == MNT_OK) wr->last_step = wr->step;
  return st;
}

/* what mnt_ckpt_commit_now saw of the checkpoint in flight, and the records it has read */
typedef struct early_commit {
  int64_t step;
  uint64_t seq;
  char incoming[MNT_PATH_MAX], dir[MNT_PATH_MAX];
  share_info *all;        /* each rank's record ... */
  unsigned char *have;    /* ... once read */
  int got, failed, gone;  /* records read; a rank whose share failed (-1: none); the checkpoint is not in flight */
} early_commit;

/* share-RRRRR of incoming, when it is whole and of this checkpoint: 1 (its share_info in out);
 * 0 when it is not there (yet) */
static int read_record(const early_commit *e, int rank, uint64_t token, share_info *out) {
  char p[MNT_PATH_MAX], name[32];
  snprintf(name, sizeof name, "share-%05d", rank);
  if (mnt_path_join(p, e->incoming, name) != MNT_OK) return 0;
  int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return 0;
  share_rec r;
  ssize_t n = pread(fd, &r, sizeof r, 0);
  close(fd);
  if (n != (ssize_t)sizeof r || memcmp(r.magic, REC_MAGIC, sizeof REC_MAGIC) != 0 ||
      r.check != XXH3_64bits(&r, offsetof(share_rec, check)) || r.token != token || r.seq != e->seq ||
      r.step != e->step || r.rank != rank)
    return 0;
  *out = r.s;
  return 1;
}

/* holding wr->mu: the checkpoint e saw is no longer in flight (finish took it, or destroy began) */
static int gone_locked(const mnt_ckpt_writer *wr, const early_commit *e) {
  return wr->closing || !wr->pending || wr->early || wr->seq != e->seq || wr->step != e->step;
}

/* the records, polled 1, 2, 4 ... 64 ms apart, then 64 ms, until every rank's is there, one says
 * its share failed, timeout_s after t0 has passed, or the checkpoint is gone (rechecked each time) */
static void poll_records(mnt_ckpt_writer *wr, early_commit *e, double t0, double timeout_s) {
  int size = wr->c->world->size;
  for (long ms = 1;;) {
    for (int r = 0; r < size && e->failed < 0; r++)
      if (!e->have[r] && read_record(e, r, wr->token, &e->all[r])) {
        e->have[r] = 1;
        e->got++;
        if (e->all[r].status != MNT_OK) e->failed = r;
      }
    if (e->got == size || e->failed >= 0 || mnt_now() - t0 >= timeout_s) return;
    pthread_mutex_lock(&wr->mu);
    e->gone = gone_locked(wr, e);
    pthread_mutex_unlock(&wr->mu);
    if (e->gone) return;
    struct timespec ts = {0, ms * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (ms < 64) ms *= 2;
  }
}

/* why the checkpoint in flight was not committed on the stop request */
static void say_not_committed(const early_commit *e, int size, double timeout_s) {
  if (e->gone) {
    MNT_INFO("checkpoint %s: committed at the step boundary meanwhile (or the writer closed)", e->dir);
  } else if (e->failed >= 0) {
    MNT_INFO("checkpoint %s: rank %d's share failed: not committed on the stop request", e->dir, e->failed);
  } else {
    int first = 0;
    while (first < size && e->have[first]) first++;
    MNT_WARN("checkpoint %s: %d of %d ranks' shares were not on disk %.1f s after the stop request (rank %d's "
             "first): not committed early", e->dir, size - e->got, size, timeout_s, first);
  }
}

/* the checkpoint in flight that e saw, committed once every record is there and good */
static int commit_early(mnt_ckpt_writer *wr, early_commit *e, double t0, double timeout_s, int *committed) {
  int size = wr->c->world->size, st = MNT_OK;
  e->all = calloc((size_t)size, sizeof *e->all);
  e->have = calloc((size_t)size, 1);
  if (!e->all || !e->have) {
    MNT_ERR("checkpoint %s: out of memory for a commit on a stop request", e->dir);
    st = MNT_ENOMEM;
    goto out;
  }
  poll_records(wr, e, t0, timeout_s);
  if (e->got == size && e->failed < 0) {
    pthread_mutex_lock(&wr->mu); /* still the same checkpoint, not committed by finish meanwhile? */
    e->gone = gone_locked(wr, e);
    if (!e->gone) {
      st = commit_locked(wr, e->all);
      wr->early = 1;
      wr->early_status = st;
      *committed = st == MNT_OK;
    }
    pthread_mutex_unlock(&wr->mu);
    if (*committed)
      MNT_INFO("checkpoint %s committed on a stop request, %.0f ms after it", e->dir, (mnt_now() - t0) * 1e3);
  }
  if (st == MNT_OK && !*committed) say_not_committed(e, size, timeout_s);
out:
  free(e->all);
  free(e->have);
  return st;
}

int mnt_ckpt_commit_now(mnt_ckpt_writer *wr, double timeout_s, int *committed) {
  *committed = 0;
  if (!wr || wr->c->world->rank != 0) return MNT_OK;
  double t0 = mnt_now();
  early_commit e = {.failed = -1};
  pthread_mutex_lock(&wr->mu);
  if (wr->closing) {
    pthread_mutex_unlock(&wr->mu);
    return MNT_OK;
  }
  wr->callers++;
  int inflight = wr->pending && !wr->early;
  e.step = wr->step;
  e.seq = wr->seq;
  memcpy(e.incoming, wr->incoming, sizeof e.incoming);
  memcpy(e.dir, wr->dir, sizeof e.dir);
  pthread_mutex_unlock(&wr->mu);
  int st = MNT_OK;
  if (inflight) st = commit_early(wr, &e, t0, timeout_s, committed);
  else MNT_DBG("a stop request: no checkpoint in flight to commit");
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
  if (wr->c->world->rank == 0 && wr->incoming[0]) mnt_ckpt_remove_step_dir(wr->incoming); /* the next one's empty file */
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
