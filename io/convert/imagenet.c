/* imagenet.c — `mntrain convert imagenet`: image class folders (or a flat folder and a labels
 * file) to shards, read as torchvision's ImageFolder reads them: the classes are the sorted
 * folder names of SRC (UTF-8 only: index.json is JSON text); each class takes every file below its
 * folder (subfolders too, links followed, in sorted path order) whose name ends in one of
 * ImageFolder's extensions (any case); a class folder without such a file is an error. Other files
 * are reported and ignored. A link back to a folder above it (a loop) is named and not followed, so
 * every image is taken once; a dangling link with an image's name is an input that cannot be read.
 * Decoding goes by content: JPEG with libjpeg-turbo (grayscale and CMYK too; large images are
 * decoded at 1/2, 1/4 or 1/8 scale by the DCT, to the smallest size still >= the target), PNG with
 * libpng, BMP/PPM/PGM with libjpeg-turbo's loader; TIFF and WebP are refused by name. Headers are
 * read first: absurd dimensions, and JPEGs and PNGs whose decoding would take more memory than
 * MNT_DECODE_MAX_BYTES, are refused before any memory is taken. Every image is stored as RGB (grey,
 * CMYK, palette, alpha and 16-bit sources too, as PIL's convert("RGB"): no gamma).
 * Format 2 (--size S): the shorter side is resized to S with an area filter (bilinear when
 * enlarging) and the centre S×S kept, raw.
 * Format 3: the whole image at its aspect ratio, sized as torchvision's Resize(S, max_size=L) sizes
 * it (shorter side S, longer int(S * long / short); a longer side above L becomes L and the shorter
 * int(L * short / long)) except that nothing is enlarged: an image whose shorter side is S or less
 * keeps its size (unless its longer side exceeds L). Shrinking uses the area filter; an image kept
 * at its size is its decoded pixels. The record is those pixels (raw) or them coded as a JPEG by
 * libjpeg-turbo (the --quality given, chroma not subsampled: decode.c).
 * Decoding (and coding) runs on all cores (OpenMP) a chunk ahead of the writer; an unreadable file is
 * reported by path and reason and skipped. */
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/convert/convert.h"
#include "io/convert/decode.h"
#include "io/data/dataset.h"
#include "io/convert/shard_write.h"
#include "src/check.h"
#include "src/env.h"
#include "src/log.h"
#include "src/path.h"
#include "src/sysmem.h"

#define MAX_DEPTH 64 /* folder nesting followed below a class folder (a loop is caught sooner: walk) */

typedef struct jfile { char *path; int32_t label; } jfile;

typedef struct inet {
  jfile *files;
  int64_t n, cap;
  int size;
  mnt_fit fit;
  int64_t ignored;      /* files below SRC that are not images by ImageFolder's extensions */
  XXH3_state_t *h;      /* the inputs: names, sizes, times and labels of every file */
  /* the chunk decoded ahead: ids and results */
  int64_t *ids;
  uint8_t *pix;         /* format 2: the chunk's pixels */
  mnt_rec_slot *recs;       /* format 3: the chunk's records */
  char (*why)[200];     /* "" when decoded, else the reason */
  int nids;
} inet;

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const EXTS[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

static int is_image_name(const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; i < sizeof EXTS / sizeof EXTS[0]; i++) {
    size_t e = strlen(EXTS[i]);
    if (n >= e && !strcasecmp(name + n - e, EXTS[i])) return 1;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct strlist { char **v; int n, cap; } strlist;

static int push(strlist *l, const char *s) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    char **q = realloc(l->v, (size_t)nc * sizeof *q);
    if (!q) return -1;
    l->v = q;
    l->cap = nc;
  }
  return (l->v[l->n] = strdup(s)) ? (l->n++, 0) : -1;
}

static void strlist_free(strlist *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* dir/name into p; a path too long for p is reported and refused (-1) */
static int child_path(char *p, size_t n, const char *dir, const char *name) {
  if (snprintf(p, n, "%s/%s", dir, name) < (int)n) return 0;
  MNT_WARN("%s/%s: path too long; left out", dir, name);
  return -1;
}

static void add_file(inet *s, const char *path, int32_t label, const struct stat *sb) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->files = realloc(s->files, (size_t)s->cap * sizeof *s->files);
  }
  s->files[s->n].path = strdup(path);
  s->files[s->n].label = label;
  s->n++;
  long long meta[4] = {label, (long long)sb->st_size, (long long)sb->st_mtim.tv_sec, (long long)sb->st_mtim.tv_nsec};
  XXH3_64bits_update(s->h, path, strlen(path) + 1);
  XXH3_64bits_update(s->h, meta, sizeof meta);
}

/* One reading of a folder: its subfolders (full paths) and its other entries (names), each with what
 * stat says of it, every entry looked at once. Links are followed, as os.walk(followlinks=True); an
 * entry stat cannot follow (a dangling link, a link loop) is one of the other entries, with the errno
 * in err and lstat's answer in st: os.walk lists it among the files too. */
typedef struct entry { char *name; struct stat st; int err; } entry;
typedef struct entries { entry *v; int n, cap; } entries;
typedef struct folder {
  char *path;
  entries subs, files;
} folder;

static int push_entry(entries *l, const char *name, const struct stat *st, int err) {
  if (l->n == l->cap) {
    int nc = l->cap ? 2 * l->cap : 64;
    entry *q = realloc(l->v, (size_t)nc * sizeof *q);
    if (!q) return MNT_ENOMEM;
    l->v = q;
    l->cap = nc;
  }
  entry *e = &l->v[l->n];
  e->st = *st;
  e->err = err;
  if (!(e->name = strdup(name))) return MNT_ENOMEM;
  l->n++;
  return MNT_OK;
}

static void entries_free(entries *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i].name);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static void folder_free(folder *f) {
  free(f->path);
  entries_free(&f->subs);
  entries_free(&f->files);
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static int read_folder(const char *dir, folder *f, int quiet_missing) {
  memset(f, 0, sizeof *f);
  if (!(f->path = strdup(dir))) return MNT_ENOMEM;
  DIR *d = opendir(dir);
  if (!d) {
    if (!quiet_missing) MNT_WARN("%s: cannot read the folder (%s); its files are left out", dir, strerror(errno));
    return MNT_OK;
  }
  struct dirent *e;
  int st = MNT_OK;
  while ((e = readdir(d)) && st == MNT_OK) {
    char p[MNT_PATH_MAX];
    struct stat sb;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || child_path(p, sizeof p, dir, e->d_name)) continue;
    int err = stat(p, &sb) != 0 ? errno : 0;
    if (err && lstat(p, &sb) != 0) memset(&sb, 0, sizeof sb); /* gone since readdir: its reading will say so */
    if (!err && S_ISDIR(sb.st_mode)) st = push_entry(&f->subs, p, &sb, 0);
    else st = push_entry(&f->files, e->d_name, &sb, err);
  }
  closedir(d);
  return st;
}

typedef struct folders { folder *v; int n, cap; } folders;

/* the folders on the way from SRC down to the one being read (links followed): a folder that is one
 * of them again is a loop (`self -> .`, `up -> ..`), which is named and not followed, so that every
 * file is taken once; the same folder reached by two links that do not loop is taken twice, as
 * ImageFolder takes it */
typedef struct above { dev_t dev; ino_t ino; const char *path; } above;

/* every folder below dir (dir included; st: what stat says of it; it is level `level` below SRC,
 * up[0..level) the folders above it, up[] has room for MAX_DEPTH + 2), each read once */
static int walk(const char *dir, const struct stat *st, above *up, int level, folders *all) {
  for (int k = 0; k < level; k++)
    if (up[k].dev == st->st_dev && up[k].ino == st->st_ino) {
      MNT_WARN("%s: a link to %s, a folder above it (a folder loop); not followed", dir, up[k].path);
      return MNT_OK;
    }
  if (level > MAX_DEPTH + 1) {
    MNT_WARN("%s: more than %d folders deep; not followed further", dir, MAX_DEPTH);
    return MNT_OK;
  }
  if (all->n == all->cap) {
    int nc = all->cap ? 2 * all->cap : 16;
    folder *q = realloc(all->v, (size_t)nc * sizeof *q);
    if (!q) return MNT_ENOMEM;
    all->v = q;
    all->cap = nc;
  }
  folder *f = &all->v[all->n++];
  int rc = read_folder(dir, f, 0);
  entries subs = f->subs; /* f may move as all grows */
  up[level] = (above){st->st_dev, st->st_ino, f->path};
  for (int i = 0; i < subs.n && rc == MNT_OK; i++) rc = walk(subs.v[i].name, &subs.v[i].st, up, level + 1, all);
  return rc;
}

static int cmp_folder(const void *a, const void *b) {
  return strcmp(((const folder *)a)->path, ((const folder *)b)->path);
}

/* the image files of one class folder in ImageFolder's order: sorted(os.walk(...)), i.e. folders
 * sorted by path, and files sorted by name within each. An entry stat could not follow (a dangling
 * link) with an image's name is taken as an input, as ImageFolder takes it: its reading fails, and it
 * is named and counted among the skipped files. up[0]: SRC; cst: what stat says of the class folder */
static int class_files(inet *s, const char *cdir, const struct stat *cst, above *up, int32_t label) {
  folders all = {0};
  int st = walk(cdir, cst, up, 1, &all);
  if (st == MNT_OK && all.n > 1) qsort(all.v, (size_t)all.n, sizeof *all.v, cmp_folder);
  for (int i = 0; i < all.n && st == MNT_OK; i++) {
    folder *f = &all.v[i];
    if (f->files.n > 1) qsort(f->files.v, (size_t)f->files.n, sizeof *f->files.v, cmp_entry); /* v: NULL when empty */
    for (int k = 0; k < f->files.n && st == MNT_OK; k++) {
      const char *name = f->files.v[k].name;
      char p[MNT_PATH_MAX];
      if (child_path(p, sizeof p, f->path, name)) {
        s->ignored++;
        continue;
      }
      if (!is_image_name(name)) {
        if (f->files.v[k].err)
          MNT_WARN("%s: cannot be followed (%s) and not an image by its name; ignored", p, strerror(f->files.v[k].err));
        else
          MNT_WARN("%s: not an image by its name (ImageFolder's extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff "
                   ".webp); ignored", p);
        s->ignored++;
        continue;
      }
      add_file(s, p, label, &f->files.v[k].st);
    }
  }
  for (int i = 0; i < all.n; i++) folder_free(&all.v[i]);
  free(all.v);
  return st;
}

static void inet_prefetch(void *ctx, const int64_t *ids, int n) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  memcpy(s->ids, ids, (size_t)n * sizeof *ids);
  for (int i = 0; s->recs && i < s->nids; i++) {
    free(s->recs[i].data);
    s->recs[i].data = NULL;
  }
  s->nids = n;
#pragma omp parallel
  {
    tjhandle tj = tjInitDecompress(), tjc = s->fit.records ? tjInitCompress() : NULL;
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < n; i++) {
      const char *path = s->files[ids[i]].path;
      s->why[i][0] = '\0';
      if (!tj || (s->fit.records && !tjc)) snprintf(s->why[i], sizeof s->why[i], "libjpeg-turbo could not start");
      else if (s->fit.records) mnt_decode_record(tj, tjc, path, &s->fit, &s->recs[i], s->why[i], sizeof s->why[i]);
      else mnt_decode_square(tj, path, &s->fit, s->pix + (size_t)i * px, s->why[i], sizeof s->why[i]);
    }
    if (tj) tjDestroy(tj);
    if (tjc) tjDestroy(tjc);
  }
}

/* the slot of sample id in the chunk decoded ahead; -1 (logged) when it is not there */
static int slot_of(inet *s, int64_t id) {
  for (int i = 0; i < s->nids; i++)
    if (s->ids[i] == id) {
      if (!s->why[i][0]) return i;
      MNT_WARN("%s: %s; skipped", s->files[id].path, s->why[i]);
      return -2;
    }
  MNT_ERR("internal: sample %lld was not prefetched", (long long)id);
  return -1;
}

static int inet_get_record(void *ctx, int64_t id, mnt_convert_record *r) {
  inet *s = ctx;
  int i = slot_of(s, id);
  if (i < 0) return i == -2 ? MNT_SKIP_SAMPLE : MNT_ESYS;
  const mnt_rec_slot *q = &s->recs[i];
  *r = (mnt_convert_record){.data = q->data, .len = q->len, .w = q->w, .h = q->h, .label = s->files[id].label};
  memcpy(r->sum, q->sum, sizeof r->sum);
  memcpy(r->sum2, q->sum2, sizeof r->sum2);
  return MNT_OK;
}

static int inet_get(void *ctx, int64_t id, uint8_t *pixels, int32_t *label) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  int i = slot_of(s, id);
  if (i < 0) return i == -2 ? MNT_SKIP_SAMPLE : MNT_ESYS;
  memcpy(pixels, s->pix + (size_t)i * px, px);
  *label = s->files[id].label;
  return MNT_OK;
}

/* the length of the UTF-8 sequence at s as JSON text takes it (jansson: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 when s does not start one */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!n) return 0;
  unsigned cp = c & (0x3fu >> (n - 1));
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3fu);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* s into out (n bytes), every byte that is not part of a UTF-8 sequence written as \xHH; the number
 * of such bytes */
static int utf8_escape(const char *s, char *out, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t at = 0;
  int bad = 0;
  while (*p) {
    int k = utf8_len(p);
    char piece[8];
    if (k) memcpy(piece, p, (size_t)k), piece[k] = '\0';
    else snprintf(piece, sizeof piece, "\\x%02x", *p), bad++;
    p += k ? k : 1;
    size_t l = strlen(piece);
    if (at + l < n) memcpy(out + at, piece, l + 1), at += l;
  }
  if (n) out[at < n ? at : n - 1] = '\0';
  return bad;
}

/* Class names go into index.json as JSON text, which must be UTF-8: a name that is not is refused
 * (MNT_EARG) naming it hex-escaped, before anything is written. Escaping it instead would store a
 * name that is not the folder's (torchvision's ImageFolder calls it by its bytes) and could clash with
 * a folder literally called so; a rename (convmv -f latin1 -t utf8) fixes the source once. */
static int check_class_names(const char *where, const strlist *classes) {
  char list[700] = "";
  int nbad = 0;
  for (int c = 0; c < classes->n; c++) {
    char esc[300];
    if (!utf8_escape(classes->v[c], esc, sizeof esc)) continue;
    size_t l = strlen(list);
    if (nbad++ < 5) snprintf(list + l, sizeof list - l, "%s'%s'", l ? ", " : "", esc);
  }
  if (!nbad) return MNT_OK;
  MNT_ERR("%s: %d class name%s not UTF-8 (%s%s, bytes that are not UTF-8 shown as \\xHH): index.json keeps "
          "class names as JSON text, which is UTF-8; rename %s (e.g. convmv -f latin1 -t utf8 --notest)",
          where, nbad, nbad > 1 ? "s are" : " is", list, nbad > 5 ? ", ..." : "", nbad > 1 ? "them" : "it");
  return MNT_EARG;
}

/* classes = the sorted folder names of src; every class must hold at least one image */
static int scan_folders(inet *s, const char *src, strlist *classes) {
  folder top;
  struct stat sst;
  if (access(src, R_OK | X_OK) != 0 || stat(src, &sst) != 0) {
    MNT_SYSERR("%s", src);
    return MNT_EARG;
  }
  int st = read_folder(src, &top, 1);
  for (int i = 0; i < top.files.n && st == MNT_OK; i++) {
    MNT_WARN("%s/%s: a file beside the class folders; ignored", src, top.files.v[i].name);
    s->ignored++;
  }
  /* class names: the last part of each path, sorted (the paths share SRC/: the same order) */
  if (st == MNT_OK && top.subs.n > 1) qsort(top.subs.v, (size_t)top.subs.n, sizeof *top.subs.v, cmp_entry);
  for (int i = 0; i < top.subs.n && st == MNT_OK; i++)
    st = push(classes, strrchr(top.subs.v[i].name, '/') + 1) ? MNT_ENOMEM : MNT_OK;
  if (st == MNT_OK && classes->n == 0) {
    MNT_ERR("%s: no class folders (expected SRC/<class>/... images, as torchvision's ImageFolder)", src);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = check_class_names(src, classes);
  char empty[600] = "";
  int nempty = 0;
  above up[MAX_DEPTH + 2] = {{sst.st_dev, sst.st_ino, src}};
  for (int c = 0; c < classes->n && st == MNT_OK; c++) {
    char dir[MNT_PATH_MAX];
    MNT_CHECK_GOTO(mnt_path_join(dir, src, classes->v[c]), st, out);
    int64_t before = s->n;
    st = class_files(s, dir, &top.subs.v[c].st, up, c);
    if (st == MNT_OK && s->n == before) {
      size_t l = strlen(empty);
      if (nempty++ < 5) snprintf(empty + l, sizeof empty - l, "%s%s", l ? ", " : "", classes->v[c]);
    }
  }
  if (st == MNT_OK && nempty) {
    MNT_ERR("%s: %d class folder%s without any image (%s%s): torchvision's ImageFolder refuses that too; remove "
            "or fill them", src, nempty, nempty > 1 ? "s" : "", empty, nempty > 5 ? ", ..." : "");
    st = MNT_EARG;
  }
out:
  folder_free(&top);
  return st;
}

/* a flat folder and "FILE WNID" lines; classes are the sorted distinct wnids */
static int scan_flat(inet *s, const char *src, const char *val_labels, strlist *classes) {
  FILE *f = fopen(val_labels, "r");
  if (!f) {
    MNT_SYSERR("%s", val_labels);
    return MNT_EARG;
  }
  _Static_assert(MNT_PATH_MAX == 4096, "the width of name in the fscanf below");
  char name[MNT_PATH_MAX], wnid[256];
  strlist fn = {0}, wn = {0};
  int st = MNT_OK;
  while (st == MNT_OK && fscanf(f, "%4095s %255s", name, wnid) == 2)
    if (push(&fn, name) || push(&wn, wnid)) st = MNT_ENOMEM;
  fclose(f);
  for (int i = 0; i < wn.n && st == MNT_OK; i++) st = push(classes, wn.v[i]) ? MNT_ENOMEM : MNT_OK;
  if (st == MNT_OK) {
    if (classes->n > 1) qsort(classes->v, (size_t)classes->n, sizeof *classes->v, cmp_str);
    int k = 0;
    for (int i = 0; i < classes->n; i++) {
      if (k == 0 || strcmp(classes->v[k - 1], classes->v[i])) classes->v[k++] = classes->v[i];
      else free(classes->v[i]);
    }
    classes->n = k;
  }
  if (st == MNT_OK && classes->n == 0) {
    MNT_ERR("%s: no \"FILE WNID\" lines", val_labels);
    st = MNT_EARG;
  }
  if (st == MNT_OK) st = check_class_names(val_labels, classes);
  XXH3_64bits_update(s->h, "flat", 5);
  for (int i = 0; i < fn.n && st == MNT_OK; i++) {
    char **hit = bsearch(&wn.v[i], classes->v, (size_t)classes->n, sizeof *classes->v, cmp_str);
    char p[MNT_PATH_MAX];
    struct stat sb;
    if (child_path(p, sizeof p, src, fn.v[i])) {
      s->ignored++;
      continue;
    }
    if (stat(p, &sb) != 0) {
      MNT_WARN("%s (listed in %s): %s; skipped", p, val_labels, strerror(errno));
      s->ignored++;
      continue;
    }
    add_file(s, p, (int32_t)(hit - classes->v), &sb);
  }
  strlist_free(&fn);
  strlist_free(&wn);
  return st;
}

int mnt_convert_imagenet(const char *src, const char *out, int nshards, const mnt_imagenet_cfg *cfg,
                         const char *val_labels, long long seed, int force) {
  int records = cfg->size <= 0, size = records ? cfg->resize : cfg->size;
  if (size < 1 || (records && (cfg->max_side < 0 || (cfg->max_side > 0 && cfg->max_side < cfg->resize) ||
                               (cfg->codec == MNT_CODEC_JPEG && (cfg->quality < 1 || cfg->quality > 100))))) {
    MNT_ERR("convert imagenet: need a size, or a resize >= 1, a max side of 0 or >= the resize, a quality of 1..100");
    return MNT_EARG;
  }
  inet s = {.size = size, .h = XXH3_createState(),
            .fit = {.records = records, .S = size, .L = records ? cfg->max_side : 0, .codec = cfg->codec,
                    .quality = cfg->quality}};
  strlist classes = {0};
  int st = s.h ? MNT_OK : MNT_ENOMEM;
  if (st == MNT_OK) st = mnt_env_decode_max_bytes(&s.fit.max_bytes);
  if (st == MNT_OK) {
    XXH3_64bits_reset(s.h);
    /* decoder version: a change of decoding is a new input (.1: PNGs without gamma, as PIL reads them);
     * so is MNT_DECODE_MAX_BYTES, which decides what is skipped */
    const char *dv = records ? "imagenet 3.1" : "imagenet 2.1";
    XXH3_64bits_update(s.h, dv, strlen(dv) + 1);
    XXH3_64bits_update(s.h, &s.fit.max_bytes, sizeof s.fit.max_bytes);
    st = val_labels ? scan_flat(&s, src, val_labels, &classes) : scan_folders(&s, src, &classes);
  }
  if (st == MNT_OK && s.n == 0) {
    MNT_ERR("%s: no image files", src);
    st = MNT_EARG;
  }
  s.ids = malloc(MNT_CONVERT_PREFETCH * sizeof *s.ids);
  s.why = malloc(MNT_CONVERT_PREFETCH * sizeof *s.why);
  if (records) s.recs = calloc(MNT_CONVERT_PREFETCH, sizeof *s.recs);
  else s.pix = malloc((size_t)MNT_CONVERT_PREFETCH * size * size * 3);
  if (st == MNT_OK && (!s.ids || !s.why || (!s.pix && !s.recs))) st = MNT_ENOMEM;
  if (st == MNT_OK) {
    printf("convert imagenet: %lld image files in %d classes from %s (%lld other files ignored), %d threads\n",
           (long long)s.n, classes.n, src, (long long)s.ignored, omp_get_max_threads());
    char raw[4200], desc[4 * sizeof raw]; /* index.json's text is UTF-8: other bytes as \xHH */
    snprintf(raw, sizeof raw, "imagenet %s%s%s", src, val_labels ? " --labels " : "", val_labels ? val_labels : "");
    utf8_escape(raw, desc, sizeof desc);
    mnt_convert_source so = {.n = s.n, .size = size, .channels = 3, .nclasses = classes.n, .class_names = classes.v,
                             .ctx = &s, .get = inet_get, .prefetch = inet_prefetch, .inputs = XXH3_64bits_digest(s.h),
                             .description = desc, .ignored = s.ignored,
                             .version = records ? MNT_FORMAT_RECORDS : MNT_FORMAT_SQUARE, .codec = cfg->codec,
                             .quality = cfg->quality, .max_side = records ? cfg->max_side : 0,
                             .get_record = inet_get_record};
    st = mnt_convert_write(&so, out, nshards, seed, force);
  }
  for (int64_t i = 0; i < s.n; i++) free(s.files[i].path);
  for (int i = 0; s.recs && i < MNT_CONVERT_PREFETCH; i++) free(s.recs[i].data);
  strlist_free(&classes);
  XXH3_freeState(s.h);
  free(s.files);
  free(s.ids);
  free(s.why);
  free(s.pix);
  free(s.recs);
  return st;
}
