/* ckpt_inspect.c — `mntrain inspect` of a checkpoint (a step directory or its state.h5) or a root
 * (every step directory's verdict, newest first, the newest good one in full), or of a model that
 * `train --export` wrote (io/ckpt/export.c: every tensor read, its type and values checked), and
 * telling those paths from a dataset's (mnt_ckpt_is_path); see ckpt.h. It reads through ckpt_read.c
 * and lists through ckpt_retain.c. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/check.h"
#include "io/ckpt/ckpt.h"
#include "io/ckpt/ckpt_internal.h"
#include "src/log.h"
#include "src/model/resnet.h"
#include "src/path.h"

/* what io/ckpt/export.c writes as the root attribute "format" */
#define EXPORT_FORMAT "mntrain-weights"

/* a string root attribute of f into out (""; 0 when absent or not a fixed-length string that fits) */
static int attr_str(hid_t f, const char *name, char *out, size_t n) {
  out[0] = '\0';
  hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
  hid_t t = a >= 0 ? H5Aget_type(a) : -1;
  int ok = 0;
  if (t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && H5Tget_size(t) < n) {
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5Tget_size(t));
    memset(out, 0, n);
    ok = H5Aread(a, mt, out) >= 0;
    H5Tclose(mt);
    if (!ok) out[0] = '\0';
  }
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return ok;
}

/* a numeric root attribute of f of k elements into v (doubles); 0 when absent or of another size */
static int attr_nums(hid_t f, const char *name, double *v, int k) {
  hid_t a = H5Aexists(f, name) > 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
  hid_t t = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
  H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  int ok = (c == H5T_INTEGER || c == H5T_FLOAT) && sp >= 0 && H5Sget_simple_extent_npoints(sp) == k &&
           H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return ok;
}

/* a regular file that may be a model train --export wrote: HDF5 with the root attribute format
 * "mntrain-weights", or HDF5's signature in a file that HDF5 cannot open outside any dataset's
 * directory (a damaged export, named as one rather than as a dataset without index.json) */
static int export_candidate(const char *path) {
  static const unsigned char SIG[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  unsigned char head[8];
  FILE *fp = fopen(path, "rb");
  size_t got = fp ? fread(head, 1, sizeof head, fp) : 0;
  if (fp) fclose(fp);
  if (got != sizeof head || memcmp(head, SIG, sizeof SIG)) return 0;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* mntrain names what is wrong itself */
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f >= 0) {
    char fmt[64];
    int is = attr_str(f, "format", fmt, sizeof fmt) && !strcmp(fmt, EXPORT_FORMAT);
    H5Fclose(f);
    return is;
  }
  char dir[MNT_PATH_MAX], idx[MNT_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  return mnt_path_join(idx, dir, "index.json") == MNT_OK && access(idx, F_OK) != 0;
}

int mnt_ckpt_is_path(const char *path) {
  char p[MNT_PATH_MAX];
  struct stat sb;
  if (stat(path, &sb) != 0) return 0;
  if (S_ISREG(sb.st_mode)) {
    const char *b = strrchr(path, '/');
    return !strcmp(b ? b + 1 : path, MNT_CKPT_FILE) || export_candidate(path);
  }
  if (mnt_path_join(p, path, MNT_CKPT_MANIFEST) != MNT_OK) return 0;
  if (access(p, F_OK) == 0) return 1;
  mnt_ckpt_stepdir *sd;
  int n;
  if (mnt_path_join(p, path, "index.json") != MNT_OK) return 0; /* a dataset is not a checkpoint root */
  if (access(p, F_OK) == 0 || mnt_ckpt_list_steps(path, &sd, &n) != MNT_OK) return 0;
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
  /* the split as the writer's ranks had it (after a shrink or an elastic resume the global batch is
   * kept and split anew: 64 over 3 ranks is 21 or 22 each), and --batch-per-rank of the run's start
   * when that differs */
  long long gb = (long long)json_integer_value(json_object_get(s, "global_batch")),
            bpr = (long long)json_integer_value(json_object_get(cfg, "batch_per_rank"));
  char split[128];
  int l = 0;
  if (world > 0 && gb % world) l = snprintf(split, sizeof split, "%lld or %lld per rank", gb / world, gb / world + 1);
  else l = snprintf(split, sizeof split, "%lld per rank", world > 0 ? gb / world : bpr);
  if (world > 0 && (gb % world || gb / world != bpr) && bpr > 0 && l > 0 && (size_t)l < sizeof split)
    snprintf(split + l, sizeof split - (size_t)l, ", %lld per rank at the start", bpr);
  printf(
      "  model: %s, %d px, global batch %lld (%s), bn groups of %lld, lr %.6g, seed %lld, %lld skipped "
      "steps\n",
      json_string_value(json_object_get(cfg, "arch")) ? json_string_value(json_object_get(cfg, "arch")) : "?",
      (int)json_integer_value(json_object_get(cfg, "size")), gb, split,
      (long long)json_integer_value(json_object_get(s, "bn_group")), json_number_value(json_object_get(s, "lr")),
      (long long)json_integer_value(json_object_get(cfg, "seed")),
      (long long)json_integer_value(json_object_get(s, "skipped_steps")));
  int nm = 0, nmo = 0, nsm = 0, nb = 0;
  for (size_t i = 0; i < json_array_size(ds); i++) {
    const char *nmv = json_string_value(json_object_get(json_array_get(ds, i), "name"));
    if (!nmv) continue;
    nm += !strncmp(nmv, "/model/", 7);
    nmo += !strncmp(nmv, "/optim/momentum/", 16);
    nsm += !strncmp(nmv, "/optim/", 7) && strncmp(nmv, "/optim/momentum/", 16); /* rmsprop-warmup's second moment */
    nb += !strncmp(nmv, "/bn/", 4);
  }
  char other[48] = "";
  if (nsm) snprintf(other, sizeof other, ", %d other optimizer state", nsm);
  printf("  %s: %.1f MB; %zu datasets (%d weights, %d momentum%s, %d BN statistics, the training state): %.1f MB of "
         "data; stripe %lld KiB\n",
         MNT_CKPT_FILE, (double)json_integer_value(json_object_get(m, "file_bytes")) / 1e6, json_array_size(ds), nm, nmo,
         other, nb, (double)c->image_bytes / 1e6, (long long)json_integer_value(json_object_get(m, "stripe")) / 1024);
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

/* one checkpoint, named: it must pass its checks */
static int inspect_one(const char *path) {
  mnt_ckpt c;
  int found;
  double t0 = mnt_now();
  int st = mnt_ckpt_open(path, 1, &c, &found);
  if (st == MNT_OK) print_one(&c, mnt_now() - t0);
  mnt_ckpt_close(&c);
  return st;
}

/* a root: every step directory's verdict, newest first, and the newest good one in full */
static int inspect_root(const char *path) {
  mnt_ckpt_stepdir *sd;
  int n, bad = 0, shown = 0;
  if (mnt_ckpt_list_steps(path, &sd, &n) != MNT_OK) return MNT_SYSERR("%s: cannot list", path);
  printf("checkpoints in %s (newest first):\n", path);
  for (int i = 0; i < n; i++) {
    char dir[MNT_PATH_MAX], why[1400];
    int present;
    json_t *m = NULL;
    if (mnt_path_join(dir, path, sd[i].name) != MNT_OK) { /* logged: a damaged one, as far as we can tell */
      present = 1;
      snprintf(why, sizeof why, "path too long");
    } else {
      m = mnt_ckpt_load_manifest(dir, &present, why, sizeof why);
    }
    if (sd[i].link) {
      printf("  %s: not a checkpoint: a symbolic link (not followed)\n", sd[i].name);
      json_decref(m);
      continue;
    }
    if (!m && !present) {
      printf("  %s: not a checkpoint: %s\n", sd[i].name, why);
      continue;
    }
    double t0 = mnt_now();
    mnt_ckpt c;
    memset(&c, 0, sizeof c);
    int r = m ? mnt_ckpt_read_one(dir, m, 1, &c, why, sizeof why) : MNT_EDATA;
    json_decref(m);
    if (r == MNT_OK) {
      printf("  %s: ok\n", sd[i].name);
      if (!shown++) print_one(&c, mnt_now() - t0);
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

/* the tensors of group g ("/model" or "/bn") of the export f: every one a float32 dataset, read whole
 * and finite; their count, elements and bytes added up. MNT_EDATA naming the file and the tensor. */
static int export_group(const char *path, hid_t f, const char *g, int *count, long long *elems, int *classes_seen,
                        long long classes) {
  hid_t grp = H5Lexists(f, g, H5P_DEFAULT) > 0 ? H5Gopen2(f, g, H5P_DEFAULT) : -1;
  H5G_info_t gi;
  if (grp < 0 || H5Gget_info(grp, &gi) < 0) {
    if (grp >= 0) H5Gclose(grp);
    MNT_ERR("%s: no group %s (an export holds /model and /bn): not a whole model train --export wrote", path, g);
    return MNT_EDATA;
  }
  int st = MNT_OK;
  float *buf = NULL;
  size_t cap = 0;
  for (hsize_t i = 0; i < gi.nlinks && st == MNT_OK; i++) {
    char name[256];
    ssize_t nl = H5Lget_name_by_idx(grp, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    if (nl < 0 || (size_t)nl >= sizeof name) {
      MNT_ERR("%s: %s: entry %llu has no name that can be read (damaged)", path, g, (unsigned long long)i);
      st = MNT_EDATA;
      break;
    }
    hid_t ds = H5Dopen2(grp, name, H5P_DEFAULT);
    hid_t t = ds >= 0 ? H5Dget_type(ds) : -1, sp = ds >= 0 ? H5Dget_space(ds) : -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    hsize_t dims[8] = {0};
    int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (nd > 0 && nd <= 8) H5Sget_simple_extent_dims(sp, dims, NULL);
    if (ds < 0 || t < 0 || n < 0) {
      MNT_ERR("%s: %s/%s is not a dataset that can be opened (damaged)", path, g, name);
      st = MNT_EDATA;
    } else if (H5Tget_class(t) != H5T_FLOAT || H5Tget_size(t) != 4) {
      MNT_ERR("%s: %s/%s is not float32 (train --export writes float32 tensors)", path, g, name);
      st = MNT_EDATA;
    } else if ((size_t)n > cap && !(buf = realloc(buf, (size_t)n * sizeof *buf + 1))) {
      st = MNT_ENOMEM;
    } else {
      if ((size_t)n > cap) cap = (size_t)n;
      if (n > 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        MNT_ERR("%s: reading %s/%s failed (damaged or cut short)", path, g, name);
        st = MNT_EDATA;
      }
      for (hssize_t k = 0; k < n && st == MNT_OK; k++)
        if (!isfinite(buf[k])) {
          MNT_ERR("%s: %s/%s holds NaN or Inf at element %lld: not weights train --init takes", path, g, name,
                  (long long)k);
          st = MNT_EDATA;
        }
      if (st == MNT_OK && !strcmp(g, "/model") && !strcmp(name, "fc.weight")) {
        *classes_seen = 1;
        if (nd != 2 || (classes > 0 && (long long)dims[0] != classes)) {
          MNT_ERR("%s: /model/fc.weight is %d-dimensional with %llu rows, the file's classes attribute says %lld", path,
                  nd, (unsigned long long)dims[0], classes);
          st = MNT_EDATA;
        }
      }
      (*count)++;
      *elems += (long long)n;
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (ds >= 0) H5Dclose(ds);
  }
  free(buf);
  H5Gclose(grp);
  return st;
}

/* a model train --export wrote (io/ckpt/export.c): what it is, every tensor verified */
static int inspect_export(const char *path) {
  struct stat sb;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t f = stat(path, &sb) == 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : -1;
  if (f < 0) {
    MNT_ERR(
        "%s: an HDF5 file that HDF5 cannot open (damaged or cut short: %lld bytes): not a model train --export "
        "wrote, a checkpoint or a dataset's shard that can be read",
        path, (long long)sb.st_size);
    return MNT_EDATA;
  }
  char fmt[64], arch[64], version[64];
  double classes = 0, size = 0, mean[3], stdv[3];
  attr_str(f, "format", fmt, sizeof fmt);
  int have_arch = attr_str(f, "arch", arch, sizeof arch) && arch[0];
  int have_version = attr_str(f, "version", version, sizeof version) && version[0];
  int have_classes = attr_nums(f, "classes", &classes, 1), have_size = attr_nums(f, "image_size", &size, 1);
  int have_norm = attr_nums(f, "mean", mean, 3) && attr_nums(f, "std", stdv, 3);
  int st = MNT_OK, nw = 0, nb = 0, fc = 0;
  long long ew = 0, eb = 0;
  if (strcmp(fmt, EXPORT_FORMAT)) {
    MNT_ERR("%s: its format is \"%s\", not \"" EXPORT_FORMAT "\": not a model train --export wrote", path, fmt);
    st = MNT_EDATA;
  }
  if (st == MNT_OK) st = export_group(path, f, "/model", &nw, &ew, &fc, have_classes ? (long long)classes : 0);
  if (st == MNT_OK) st = export_group(path, f, "/bn", &nb, &eb, &fc, 0);
  H5Fclose(f);
  if (st != MNT_OK) return st;
  if (nw == 0 || !fc) {
    MNT_ERR("%s: /model holds %s: not a whole model train --export wrote", path,
            nw ? "no fc.weight (the classifier)" : "no tensor");
    return MNT_EDATA;
  }
  printf("model %s: exported by mntrain train --export (torchvision's tensor names), written by mntrain %s\n", path,
         have_version ? version : "(version not recorded)");
  printf("  arch %s%s, %s%.0f classes, %s%.0f px images\n", have_arch ? arch : "(not recorded)",
         have_arch && !mnt_resnet_known(arch) ? " (not an architecture this mntrain builds)" : "",
         have_classes ? "" : "(not recorded) ", classes, have_size ? "" : "(not recorded) ", size);
  printf(
      "  %d tensors: %d weights (%lld parameters, %.2f M), %d BN statistics (%lld values); %.1f MB of float32 data "
      "in a file of %.1f MB, every value read and finite\n",
      nw + nb, nw, ew, (double)ew / 1e6, nb, eb, (double)(ew + eb) * 4 / 1e6, (double)sb.st_size / 1e6);
  if (have_norm)
    printf("  normalisation of its training set: mean %.4f %.4f %.4f, std %.4f %.4f %.4f\n", mean[0], mean[1], mean[2],
           stdv[0], stdv[1], stdv[2]);
  printf("  mntrain train --init %s starts a run from these weights", path);
  if (have_arch && have_classes) printf(" (--arch %s, a dataset of %.0f classes)", arch, classes);
  printf("\n");
  return MNT_OK;
}

int mnt_ckpt_inspect(const char *path) {
  char man[MNT_PATH_MAX];
  struct stat sb;
  int there = stat(path, &sb) == 0;
  if (there && S_ISREG(sb.st_mode)) {
    const char *b = strrchr(path, '/');
    if (strcmp(b ? b + 1 : path, MNT_CKPT_FILE) && export_candidate(path)) return inspect_export(path);
    return inspect_one(path); /* a state.h5 */
  }
  MNT_CHECK(mnt_path_join(man, path, MNT_CKPT_MANIFEST));
  if (there && access(man, F_OK) == 0) return inspect_one(path);
  return inspect_root(path);
}
