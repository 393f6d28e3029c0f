/* shard_write.c — the shard writer every converter ends in (io/convert/imagenet.c, io/convert/idx.c, io/convert/synth.c); see
 * shard_write.h.
 * Samples are written in a seeded global random order: output position j holds source sample
 * perm[j]; shard k holds positions [k*n/N, (k+1)*n/N). A shard is written under a temporary
 * name and renamed when complete, so an interrupted run restarted with the same arguments skips
 * the shards it finished. Whether they are "the same arguments" is not guessed from file names:
 * every shard and the index carry the conversion's fingerprint (XXH3 of the format version, the
 * inputs, the image size, the classes, the shard count and the seed; format 3 adds the codec, the
 * quality and the cap on the longer side), and a file with another fingerprint stops the conversion
 * before anything is written: a directory never mixes formats or settings.
 * Format 3 shards (io/data/record.c) take records of any size; the index then says how they are coded
 * and how many bytes they take. */
#include "io/convert/shard_write.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <hdf5.h>
#include <xxhash.h>

#include "io/data/dataset.h"
#include "io/data/dataset_internal.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "src/safefs.h"
#include "src/progress.h"
#include "src/sysmem.h"

/* Each shard keeps the sums of its pixels (/255) and of their squares per channel, so that the
 * index's mean/std cover every shard, also when a resumed run wrote only some of them. */
/* what a finished shard holds: samples (the return; -1 if it is not a finished shard), pixel sums,
 * and for format 3 its pixel count and record bytes */
typedef struct shard_sums { double sum[3], sum2[3], pixels; int64_t bytes; } shard_sums;

static long long shard_done(const char *path, shard_sums *ss, int channels, int records) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  long long v = -1, px = -1, bytes = -1;
  if (f < 0) return -1;
  if (mnt_h5_attr_get_int(f, "samples", &v)) v = -1;
  if (mnt_h5_attr_f64s(f, "pixel_sum", ss->sum, channels, 0) || mnt_h5_attr_f64s(f, "pixel_sum2", ss->sum2, channels, 0)) v = -1;
  if (records && (mnt_h5_attr_get_int(f, "pixel_count", &px) || mnt_h5_attr_get_int(f, "record_bytes", &bytes)))
    v = -1;
  ss->pixels = (double)px;
  ss->bytes = bytes;
  H5Fclose(f);
  return v;
}

static void fingerprint(const mnt_convert_source *src, int nshards, long long seed, char out[17]) {
  XXH3_state_t *h = XXH3_createState();
  XXH3_64bits_reset(h);
  long long v[8] = {src->version == MNT_FORMAT_RECORDS ? MNT_FORMAT_RECORDS : MNT_FORMAT_SQUARE,
                    (long long)src->inputs, src->n, src->size, src->channels, src->nclasses, nshards, seed};
  XXH3_64bits_update(h, v, sizeof v);
  if (src->version == MNT_FORMAT_RECORDS) { /* format 2's fingerprints stay what they were */
    long long v3[3] = {src->codec, src->codec == MNT_CODEC_JPEG ? src->quality : 0, src->max_side};
    XXH3_64bits_update(h, v3, sizeof v3);
  }
  for (int c = 0; c < src->nclasses; c++) XXH3_64bits_update(h, src->class_names[c], strlen(src->class_names[c]) + 1);
  snprintf(out, 17, "%016llx", (unsigned long long)XXH3_64bits_digest(h));
  XXH3_freeState(h);
}

/* shard-KKKKK-of-NNNNN.h5 (and its .partial): N, or -1 when the name is something else */
static int shard_name_of(const char *name, int *partial) {
  int k, n, len = 0;
  if (sscanf(name, "shard-%5d-of-%5d.h5%n", &k, &n, &len) != 2 || len != 23) return -1;
  *partial = !strcmp(name + len, ".partial");
  return name[len] == '\0' || *partial ? n : -1;
}

/* OUT may hold only what this very conversion wrote before (a resumed run): shards and an index
 * with its fingerprint. Anything of another conversion is refused, or removed with force;
 * leftovers of an interrupted run (*.partial) are removed. *present_shards: finished shards kept. */
static int check_output(const char *out, const char *fp, int nshards, int force, int64_t *present_shards) {
  DIR *dir = opendir(out);
  if (!dir) {
    MNT_SYSERR("%s: cannot read the output directory", out);
    return MNT_EARG;
  }
  char why[160] = "", conflict[MNT_PATH_MAX + sizeof why + 4] = ""; /* "PATH (WHY)" */
  int nconflict = 0, nremoved = 0, present = 0;
  struct dirent *e;
  char **doomed = NULL;
  int ndoomed = 0, st = MNT_OK;
  while ((e = readdir(dir)) && st == MNT_OK) {
    char p[MNT_PATH_MAX], got[40] = "";
    enum { KEEP, STALE, CLASH } what = KEEP; /* STALE: an interrupted write, always removed */
    int partial = 0, n = shard_name_of(e->d_name, &partial), index = !strcmp(e->d_name, "index.json");
    int stale = !strcmp(e->d_name, "index.json.tmp") || !strncmp(e->d_name, ".index.json.", 12) || (n >= 0 && partial);
    if (!index && !stale && n < 0) continue; /* not ours: left alone */
    if ((st = mnt_path_join(p, out, e->d_name)) != MNT_OK) break;
    if (index) {
      json_t *o = json_load_file(p, 0, NULL);
      const char *f = o ? json_string_value(json_object_get(o, "fingerprint")) : NULL;
      snprintf(got, sizeof got, "%s", f ? f : "none");
      json_decref(o);
      what = strcmp(got, fp) ? CLASH : KEEP;
    } else if (stale) {
      what = STALE;
    } else if (n != nshards) {
      what = CLASH;
      snprintf(why, sizeof why, "a shard of a conversion into %d shards, this one writes %d", n, nshards);
    } else {
      int fr = mnt_shard_fingerprint(p, got, sizeof got);
      if (fr == -2) { /* out of file descriptors (logged): the shard may be fine, so it is not another's */
        st = MNT_ESYS;
        break;
      }
      if (fr != 0) snprintf(got, sizeof got, "unreadable");
      what = strcmp(got, fp) ? CLASH : KEEP;
      present += what == KEEP;
    }
    if (what == KEEP) continue;
    if (what == CLASH && got[0]) snprintf(why, sizeof why, "fingerprint %s, this conversion's is %s", got, fp);
    if (what == CLASH && !force) {
      if (!nconflict++) snprintf(conflict, sizeof conflict, "%s (%s)", p, why);
      continue;
    }
    char **nd = realloc(doomed, (size_t)(ndoomed + 1) * sizeof *doomed);
    if (!nd || !(nd[ndoomed] = strdup(p))) {
      st = MNT_ENOMEM;
      if (nd) doomed = nd;
      break;
    }
    doomed = nd;
    ndoomed++;
  }
  closedir(dir);
  if (st == MNT_OK && nconflict) {
    MNT_ERR("%s holds %d file%s of another conversion (other inputs or settings), e.g. %s: convert into another "
            "directory, or add --force to delete them and convert again",
            out, nconflict, nconflict > 1 ? "s" : "", conflict);
    st = MNT_EARG;
  }
  for (int i = 0; i < ndoomed; i++) {
    if (st == MNT_OK && unlink(doomed[i]) != 0) st = MNT_SYSERR("%s: cannot remove", doomed[i]);
    nremoved += st == MNT_OK;
    free(doomed[i]);
  }
  free(doomed);
  if (st == MNT_OK && force && nremoved) printf("convert: --force: removed %d files of an earlier conversion in %s\n", nremoved, out);
  *present_shards = present;
  return st;
}

/* one conversion in progress: what each shard's writer needs and what they add up */
typedef struct conv_run {
  const mnt_convert_source *src;
  const char *out, *fp;
  int nshards;
  long long seed;
  const int64_t *perm; /* the global order: sample perm[j] goes to position j */
  uint8_t *pix;        /* one sample's pixels */
  size_t px;
  mnt_progress prog;
  int64_t done_samples, bad_inputs;
  double sum[3], sum2[3]; /* pixel sums (in [0, 1]) for the mean and std, over every sample */
  double pixels;          /* format 3: pixels stored per channel, over every sample */
  int64_t bytes;          /* format 3: bytes of every record */
} conv_run;

/* bytes a sample takes, about: format 2 exactly its pixels; format 3 a 4:3 image at the resize (its
 * longer side capped), raw, or a tenth of that for JPEG (a photo at quality 90 takes 1/8 to 1/12) */
static double sample_bytes(const mnt_convert_source *src) {
  if (src->version != MNT_FORMAT_RECORDS) return (double)src->size * src->size * src->channels;
  double lng = src->size * 4.0 / 3, cap = src->max_side > 0 && src->max_side < lng ? src->max_side : lng;
  double raw = (double)src->size * cap * src->channels;
  return src->codec == MNT_CODEC_JPEG ? raw / 10 : raw;
}

/* enough room for what is still to be written (about: records, labels, source ids, checksums; format
 * 3 also one shard's records twice while its spool file is copied in) */
static int check_space(const conv_run *r, int64_t present) {
  double per = sample_bytes(r->src) + 32, left = (double)(r->nshards - present) / r->nshards;
  double need = per * (double)r->src->n * left + 65536.0 * r->nshards;
  if (r->src->version == MNT_FORMAT_RECORDS && present < r->nshards) need += per * (double)r->src->n / r->nshards;
  struct statvfs vfs;
  if (statvfs(r->out, &vfs) == 0 && (double)vfs.f_bavail * vfs.f_frsize < need) {
    char a[32], b[32];
    mnt_format_bytes(need, a, sizeof a);
    mnt_format_bytes((double)vfs.f_bavail * vfs.f_frsize, b, sizeof b);
    MNT_ERR("%s: %s free, but the shards need about %s: free some space or convert elsewhere", r->out, b, a);
    return MNT_EARG;
  }
  return MNT_OK;
}

/* a shard finished by an earlier run of this conversion (the fingerprint said so): its count and
 * pixel sums (format 3: pixel count and record bytes) are taken from it */
static int reuse_shard(conv_run *r, const char *path, int64_t *count) {
  shard_sums ss;
  memset(&ss, 0, sizeof ss);
  int records = r->src->version == MNT_FORMAT_RECORDS;
  long long cnt = shard_done(path, &ss, r->src->channels, records);
  if (cnt < 0) {
    MNT_ERR("%s exists but is not a finished shard; remove it and run again", path);
    return MNT_EDATA;
  }
  *count = cnt;
  for (int c = 0; c < r->src->channels; c++) r->sum[c] += ss.sum[c], r->sum2[c] += ss.sum2[c];
  r->pixels += records ? ss.pixels : (double)cnt * r->src->size * r->src->size;
  r->bytes += records ? ss.bytes : 0;
  return MNT_OK;
}

/* format 3's shard k: positions [a, b) of the order as records, written as TMP and renamed to PATH
 * when complete; nothing of it stays on failure */
static int write_records(conv_run *r, int k, const char *tmp, const char *path, int64_t a, int64_t b,
                         int64_t *count) {
  const mnt_convert_source *src = r->src;
  char where[48];
  snprintf(where, sizeof where, "shard %d/%d", k + 1, r->nshards);
  mnt_rec_settings set = {.channels = src->channels, .nclasses = src->nclasses, .shard = k, .nshards = r->nshards,
                          .codec = src->codec, .quality = src->quality, .resize = src->size,
                          .max_side = src->max_side, .seed = r->seed, .fingerprint = r->fp};
  mnt_rec_writer w;
  MNT_CHECK(mnt_rec_create(&w, tmp, b - a, &set));
  double ssum[3] = {0}, ssum2[3] = {0}, pixels = 0;
  int st = MNT_OK;
  for (int64_t j = a; j < b && st == MNT_OK; j++) {
    mnt_convert_record rec;
    if (src->prefetch && (j - a) % MNT_CONVERT_PREFETCH == 0)
      src->prefetch(src->ctx, r->perm + j, (int)(b - j < MNT_CONVERT_PREFETCH ? b - j : MNT_CONVERT_PREFETCH));
    st = src->get_record(src->ctx, r->perm[j], &rec);
    if (st == MNT_SKIP_SAMPLE) {
      st = MNT_OK;
      r->bad_inputs++;
      continue;
    }
    if (st != MNT_OK) break;
    if ((st = mnt_rec_append(&w, rec.data, rec.len, rec.h, rec.w, rec.label, r->perm[j])) != MNT_OK) break;
    for (int c = 0; c < src->channels; c++) ssum[c] += rec.sum[c], ssum2[c] += rec.sum2[c];
    pixels += (double)rec.w * rec.h;
    mnt_progress_update(&r->prog, ++r->done_samples, where);
  }
  *count = w.written;
  int64_t bytes = w.bytes;
  if (st != MNT_OK) {
    mnt_rec_abort(&w);
    return st;
  }
  MNT_CHECK(mnt_rec_close(&w, ssum, ssum2, pixels)); /* removes the file on failure */
  if (rename(tmp, path) != 0) {
    st = MNT_SYSERR("rename %s -> %s", tmp, path);
    unlink(tmp);
    return st;
  }
  for (int c = 0; c < src->channels; c++) r->sum[c] += ssum[c], r->sum2[c] += ssum2[c];
  r->pixels += pixels;
  r->bytes += bytes;
  return MNT_OK;
}

/* shard k: positions [a, b) of the order, written as PATH.partial and renamed when complete;
 * nothing of it stays on failure (a later run starts it again) */
static int write_shard(conv_run *r, int k, const char *path, int64_t a, int64_t b, int64_t *count) {
  const mnt_convert_source *src = r->src;
  char partial[64], tmp[MNT_PATH_MAX], where[48];
  mnt_shard_name(partial, sizeof partial, k, r->nshards);
  strcat(partial, ".partial");
  MNT_CHECK(mnt_path_join(tmp, r->out, partial));
  if (src->version == MNT_FORMAT_RECORDS) return write_records(r, k, tmp, path, a, b, count);
  snprintf(where, sizeof where, "shard %d/%d", k + 1, r->nshards);
  double ssum[3] = {0}, ssum2[3] = {0};
  mnt_shard_writer w;
  MNT_CHECK(mnt_shard_create(&w, tmp, b - a, src->size, src->channels, src->nclasses, k, r->nshards, r->seed, r->fp));
  int st = MNT_OK;
  w.allow_short = src->prefetch != NULL; /* converters that may skip unreadable inputs */
  for (int64_t j = a; j < b && st == MNT_OK; j++) {
    int32_t label;
    if (src->prefetch && (j - a) % MNT_CONVERT_PREFETCH == 0)
      src->prefetch(src->ctx, r->perm + j, (int)(b - j < MNT_CONVERT_PREFETCH ? b - j : MNT_CONVERT_PREFETCH));
    st = src->get(src->ctx, r->perm[j], r->pix, &label);
    if (st == MNT_SKIP_SAMPLE) {
      st = MNT_OK;
      r->bad_inputs++;
      continue;
    }
    if (st != MNT_OK) break;
    for (int c = 0; c < src->channels; c++) { /* statistics for mean/std, over every sample (exact) */
      uint64_t s1 = 0, s2 = 0;
      for (size_t p = (size_t)c; p < r->px; p += (size_t)src->channels)
        s1 += r->pix[p], s2 += (uint64_t)r->pix[p] * r->pix[p];
      ssum[c] += s1 / 255.0;
      ssum2[c] += s2 / (255.0 * 255.0);
    }
    if ((st = mnt_shard_append(&w, r->pix, label, r->perm[j])) != MNT_OK) break;
    mnt_progress_update(&r->prog, ++r->done_samples, where);
  }
  *count = w.written;
  if (st == MNT_OK && (mnt_h5_attr_f64s(w.file, "pixel_sum", ssum, src->channels, 1) ||
                       mnt_h5_attr_f64s(w.file, "pixel_sum2", ssum2, src->channels, 1))) {
    MNT_ERR("%s: cannot write the pixel statistics (disk full?)", tmp);
    st = MNT_ESYS;
  }
  if (st != MNT_OK) {
    mnt_shard_abort(&w);
    return st;
  }
  for (int c = 0; c < src->channels; c++) r->sum[c] += ssum[c], r->sum2[c] += ssum2[c];
  r->pixels += (double)w.written * src->size * src->size;
  st = mnt_shard_close(&w);
  if (st == MNT_OK && rename(tmp, path) != 0) st = MNT_SYSERR("rename %s -> %s", tmp, path);
  if (st != MNT_OK) unlink(tmp);
  return st;
}

/* index.json: the classes, the shards' counts, the mean and std of every channel */
static int write_index(const conv_run *r, const int64_t *counts, int skipped, double t0) {
  const mnt_convert_source *src = r->src;
  float mean[3], std[3];
  int64_t written = 0;
  for (int k = 0; k < r->nshards; k++) written += counts[k];
  if (written == 0) {
    MNT_ERR("%s: none of the %lld inputs could be read; no dataset was written", src->description, (long long)src->n);
    return MNT_EARG;
  }
  double m = r->pixels; /* format 2: written * size * size */
  for (int c = 0; c < src->channels; c++) {
    mean[c] = (float)(r->sum[c] / m);
    double var = r->sum2[c] / m - (r->sum[c] / m) * (r->sum[c] / m);
    std[c] = (float)sqrt(var > 1e-12 ? var : 1e-12);
  }
  mnt_index_info ix = {.nclasses = src->nclasses, .class_names = src->class_names, .size = src->size,
                       .channels = src->channels, .mean = mean, .std = std, .seed = r->seed, .nshards = r->nshards,
                       .shard_count = counts, .fingerprint = r->fp, .source = src->description,
                       .version = src->version == MNT_FORMAT_RECORDS ? MNT_FORMAT_RECORDS : MNT_FORMAT_SQUARE,
                       .codec = src->codec, .quality = src->quality, .resize = src->size, .max_side = src->max_side,
                       .record_bytes = r->bytes};
  int st = mnt_index_write(r->out, &ix);
  if (st == MNT_OK && ix.version == MNT_FORMAT_RECORDS) {
    char tot[32], per[32], q[24] = "", cap[32] = "not capped";
    if (src->max_side) snprintf(cap, sizeof cap, "at most %d", src->max_side);
    mnt_format_bytes((double)r->bytes, tot, sizeof tot);
    mnt_format_bytes((double)r->bytes / (double)written, per, sizeof per);
    if (src->codec == MNT_CODEC_JPEG) snprintf(q, sizeof q, " quality %d", src->quality);
    printf("convert: %lld samples in format 3 (%s%s, shorter side %d or less, longer side %s), %s of records "
           "(%s per image), %d classes, into %d shards in %s (%d already there), %lld unreadable inputs skipped, "
           "%lld other files ignored, %.1f s\n",
           (long long)written, mnt_codec_name(src->codec), q, src->size, cap, tot, per, src->nclasses, r->nshards, r->out, skipped,
           (long long)r->bad_inputs, (long long)src->ignored, mnt_now() - t0);
  } else if (st == MNT_OK) {
    printf("convert: %lld samples of %dx%dx%d, %d classes, into %d shards in %s (%d already there), "
           "%lld unreadable inputs skipped, %lld other files ignored, %.1f s\n",
           (long long)written, src->size, src->size, src->channels, src->nclasses, r->nshards, r->out, skipped,
           (long long)r->bad_inputs, (long long)src->ignored, mnt_now() - t0);
  }
  return st;
}

int mnt_convert_write(const mnt_convert_source *src, const char *out, int nshards, long long seed, int force) {
  if (src->n < 1) {
    MNT_ERR("%s: no samples to convert; an empty dataset is refused", src->description);
    return MNT_EARG;
  }
  if (nshards < 1 || nshards > 99999 || (int64_t)nshards > src->n) {
    MNT_ERR("--shards %d: need 1..%lld shards for %lld samples", nshards,
            (long long)(src->n < 99999 ? src->n : 99999), (long long)src->n);
    return MNT_EARG;
  }
  MNT_CHECK(mnt_dir_secure(out, "the output directory", 1, MNT_DIR_RUN)); /* the user's own: src/safefs.h */
  char fp[17];
  fingerprint(src, nshards, seed, fp);
  int64_t present = 0;
  MNT_CHECK(check_output(out, fp, nshards, force, &present));
  conv_run r = {.src = src, .out = out, .fp = fp, .nshards = nshards, .seed = seed,
                .px = (size_t)src->size * (size_t)src->size * (size_t)src->channels};
  MNT_CHECK(check_space(&r, present));
  int64_t *perm = malloc((size_t)src->n * sizeof *perm);
  int64_t *counts = calloc((size_t)nshards, sizeof *counts);
  r.pix = malloc(r.px);
  r.perm = perm;
  int st = MNT_OK, skipped = 0;
  if (!perm || !counts || !r.pix) {
    MNT_ERR("out of memory for the order of %lld samples", (long long)src->n);
    st = MNT_ENOMEM;
  }
  double t0 = mnt_now();
  if (st == MNT_OK) {
    mnt_permutation(perm, src->n, mnt_mix((uint64_t)seed, 0x5ca1ab1eull));
    mnt_progress_start(&r.prog, "convert", "images", src->n);
    for (int k = 0; k < nshards && st == MNT_OK; k++) {
      int64_t a = src->n * k / nshards, b = src->n * (k + 1) / nshards;
      char name[64], path[MNT_PATH_MAX];
      mnt_shard_name(name, sizeof name, k, nshards);
      if ((st = mnt_path_join(path, out, name)) != MNT_OK) break;
      counts[k] = b - a;
      if (access(path, R_OK) == 0) {
        skipped++;
        r.done_samples += b - a;
        st = reuse_shard(&r, path, &counts[k]);
      } else {
        st = write_shard(&r, k, path, a, b, &counts[k]);
      }
    }
    mnt_progress_end(&r.prog);
  }
  if (st == MNT_OK) st = write_index(&r, counts, skipped, t0);
  free(perm);
  free(counts);
  free(r.pix);
  return st;
}

