/* imagenet.c — `mntrain convert imagenet`: JPEG class folders (or a flat folder and a labels
 * file) to shards. Decoding with libjpeg-turbo (grayscale and CMYK too), the shorter side resized
 * to S with an area filter (bilinear when enlarging), the centre S×S kept. Decoding runs on all
 * cores (OpenMP) a chunk ahead of the writer; an unreadable file is reported by path and skipped. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "convert.h"
#include "convert_internal.h"
#include "log.h"

typedef struct jfile { char *path; int32_t label; } jfile;

typedef struct inet {
  jfile *files;
  int64_t n, cap;
  int size;
  /* the chunk decoded ahead: ids and results */
  int64_t *ids;
  uint8_t *pix;
  int *ok;
  int nids;
} inet;

static int has_jpeg_ext(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".jpg"));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* sorted names of the entries of dir (dirs or JPEG files) */
static char **list_dir(const char *dir, int want_dirs, int *n) {
  DIR *d = opendir(dir);
  *n = 0;
  if (!d) return NULL;
  int cap = 64;
  char **names = malloc((size_t)cap * sizeof *names);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(p, &sb) != 0) continue;
    if (want_dirs ? !S_ISDIR(sb.st_mode) : !(S_ISREG(sb.st_mode) && has_jpeg_ext(e->d_name))) continue;
    if (*n == cap) names = realloc(names, (size_t)(cap *= 2) * sizeof *names);
    names[(*n)++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)*n, sizeof *names, cmp_str);
  return names;
}

static void add_file(inet *s, const char *path, int32_t label) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->files = realloc(s->files, (size_t)s->cap * sizeof *s->files);
  }
  s->files[s->n].path = strdup(path);
  s->files[s->n].label = label;
  s->n++;
}

/* decode, resize the shorter side to S, keep the centre S×S, RGB */
static int decode(tjhandle tj, const char *path, int S, uint8_t *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = len > 0 ? malloc((size_t)len) : NULL;
  int ok = buf && fread(buf, 1, (size_t)len, f) == (size_t)len;
  fclose(f);
  int w, h, sub, cs;
  if (!ok || tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &sub, &cs) != 0 || w < 1 || h < 1) {
    free(buf);
    return -1;
  }
  int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  int pf = cmyk ? TJPF_CMYK : TJPF_RGB, ps = cmyk ? 4 : 3;
  uint8_t *img = malloc((size_t)w * h * ps);
  if (!img || tjDecompress2(tj, buf, (unsigned long)len, img, w, 0, h, pf, TJFLAG_ACCURATEDCT) != 0) {
    free(buf);
    free(img);
    return -1;
  }
  free(buf);
  if (cmyk) { /* Adobe's inverted CMYK, as PIL reads it: R = C*K/255 ... */
    for (size_t i = 0; i < (size_t)w * h; i++) {
      unsigned k = img[4 * i + 3];
      img[3 * i + 0] = (uint8_t)(img[4 * i + 0] * k / 255);
      img[3 * i + 1] = (uint8_t)(img[4 * i + 1] * k / 255);
      img[3 * i + 2] = (uint8_t)(img[4 * i + 2] * k / 255);
    }
  }
  /* the shorter side becomes S: scale s; the centre S×S of the scaled image is the source box
   * [ox, ox + S/s) × [oy, oy + S/s) */
  double s = (double)S / (w < h ? w : h);
  double box = S / s, ox = (w - box) / 2, oy = (h - box) / 2;
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++) {
      double sx0 = ox + x / s, sx1 = ox + (x + 1) / s, sy0 = oy + y / s, sy1 = oy + (y + 1) / s;
      double acc[3] = {0, 0, 0}, wsum = 0;
      if (s >= 1) { /* enlarging: bilinear at the pixel centre */
        double fx = (sx0 + sx1) / 2 - 0.5, fy = (sy0 + sy1) / 2 - 0.5;
        fx = fx < 0 ? 0 : fx > w - 1 ? w - 1 : fx;
        fy = fy < 0 ? 0 : fy > h - 1 ? h - 1 : fy;
        int x0 = (int)fx, y0 = (int)fy, x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
        double ax = fx - x0, ay = fy - y0;
        for (int c = 0; c < 3; c++)
          acc[c] = (1 - ay) * ((1 - ax) * img[((size_t)y0 * w + x0) * 3 + c] + ax * img[((size_t)y0 * w + x1) * 3 + c]) +
                   ay * ((1 - ax) * img[((size_t)y1 * w + x0) * 3 + c] + ax * img[((size_t)y1 * w + x1) * 3 + c]);
        wsum = 1;
      } else { /* shrinking: average over the box, partial pixels weighted by coverage */
        for (int yy = (int)floor(sy0); yy < (int)ceil(sy1) && yy < h; yy++) {
          double wy = fmin(sy1, yy + 1) - fmax(sy0, yy);
          if (wy <= 0) continue;
          for (int xx = (int)floor(sx0); xx < (int)ceil(sx1) && xx < w; xx++) {
            double wx = fmin(sx1, xx + 1) - fmax(sx0, xx);
            if (wx <= 0) continue;
            const uint8_t *p = img + ((size_t)yy * w + xx) * 3;
            acc[0] += wx * wy * p[0];
            acc[1] += wx * wy * p[1];
            acc[2] += wx * wy * p[2];
            wsum += wx * wy;
          }
        }
      }
      for (int c = 0; c < 3; c++) {
        double v = acc[c] / (wsum > 0 ? wsum : 1) + 0.5;
        out[((size_t)y * S + x) * 3 + c] = (uint8_t)(v > 255 ? 255 : v);
      }
    }
  free(img);
  return 0;
}

static void inet_prefetch(void *ctx, const int64_t *ids, int n) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  memcpy(s->ids, ids, (size_t)n * sizeof *ids);
  s->nids = n;
#pragma omp parallel
  {
    tjhandle tj = tjInitDecompress();
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < n; i++) s->ok[i] = tj && decode(tj, s->files[ids[i]].path, s->size, s->pix + (size_t)i * px) == 0;
    if (tj) tjDestroy(tj);
  }
}

static int inet_get(void *ctx, int64_t id, uint8_t *pixels, int32_t *label) {
  inet *s = ctx;
  size_t px = (size_t)s->size * s->size * 3;
  for (int i = 0; i < s->nids; i++)
    if (s->ids[i] == id) {
      if (!s->ok[i]) {
        MNT_WARN("%s: not a readable JPEG; skipped", s->files[id].path);
        return SKIP_SAMPLE;
      }
      memcpy(pixels, s->pix + (size_t)i * px, px);
      *label = s->files[id].label;
      return MNT_OK;
    }
  MNT_ERR("internal: sample %lld was not prefetched", (long long)id);
  return MNT_ESYS;
}

int mnt_convert_imagenet(const char *src, const char *out, int nshards, int size, const char *val_labels,
                         long long seed) {
  if (size < 1) {
    MNT_ERR("--size must be >= 1 (the stored image side, e.g. 256)");
    return MNT_EARG;
  }
  inet s = {.size = size};
  int nclasses = 0, st = MNT_OK;
  char **classes = NULL;
  if (!val_labels) { /* class folders, in sorted order as torchvision's ImageFolder */
    classes = list_dir(src, 1, &nclasses);
    if (!classes || nclasses == 0) {
      MNT_ERR("%s: no class folders (expected SRC/<wnid>/*.JPEG)", src);
      return MNT_EARG;
    }
    for (int c = 0; c < nclasses; c++) {
      char dir[4096];
      snprintf(dir, sizeof dir, "%s/%s", src, classes[c]);
      int nf;
      char **files = list_dir(dir, 0, &nf);
      for (int i = 0; i < nf; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        add_file(&s, p, c);
        free(files[i]);
      }
      free(files);
    }
  } else { /* a flat folder and "FILE WNID" lines; classes are the sorted distinct wnids */
    FILE *f = fopen(val_labels, "r");
    if (!f) {
      MNT_ERR("%s: %s", val_labels, strerror(errno));
      return MNT_EARG;
    }
    char name[1024], wnid[256];
    int cap = 0, nl = 0;
    char **fn = NULL, **wn = NULL;
    while (fscanf(f, "%1023s %255s", name, wnid) == 2) {
      if (nl == cap) {
        cap = cap ? 2 * cap : 1024;
        fn = realloc(fn, (size_t)cap * sizeof *fn);
        wn = realloc(wn, (size_t)cap * sizeof *wn);
      }
      fn[nl] = strdup(name);
      wn[nl++] = strdup(wnid);
    }
    fclose(f);
    classes = malloc((size_t)(nl ? nl : 1) * sizeof *classes);
    for (int i = 0; i < nl; i++) classes[i] = wn[i];
    qsort(classes, (size_t)nl, sizeof *classes, cmp_str);
    for (int i = 0; i < nl; i++)
      if (nclasses == 0 || strcmp(classes[nclasses - 1], classes[i])) classes[nclasses++] = classes[i];
    for (int i = 0; i < nl; i++) {
      char **hit = bsearch(&wn[i], classes, (size_t)nclasses, sizeof *classes, cmp_str);
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", src, fn[i]);
      add_file(&s, p, (int32_t)(hit - classes));
      free(fn[i]);
    }
    for (int c = 0; c < nclasses; c++) classes[c] = strdup(classes[c]);
    for (int i = 0; i < nl; i++) free(wn[i]);
    free(fn);
    free(wn);
    if (nclasses == 0) {
      MNT_ERR("%s: no \"FILE WNID\" lines", val_labels);
      st = MNT_EARG;
    }
  }
  if (st == MNT_OK && s.n == 0) {
    MNT_ERR("%s: no JPEG files", src);
    st = MNT_EARG;
  }
  s.ids = malloc(PREFETCH * sizeof *s.ids);
  s.ok = malloc(PREFETCH * sizeof *s.ok);
  s.pix = malloc((size_t)PREFETCH * size * size * 3);
  if (st == MNT_OK && (!s.ids || !s.ok || !s.pix)) st = MNT_ENOMEM;
  if (st == MNT_OK) {
    printf("convert imagenet: %lld JPEG files in %d classes from %s, %d threads\n", (long long)s.n, nclasses, src,
           omp_get_max_threads());
    source so = {.n = s.n, .size = size, .channels = 3, .nclasses = nclasses, .class_names = classes, .ctx = &s,
                 .get = inet_get, .prefetch = inet_prefetch};
    st = mnt_convert_write(&so, out, nshards, seed);
  }
  for (int64_t i = 0; i < s.n; i++) free(s.files[i].path);
  for (int c = 0; c < nclasses; c++) free(classes[c]);
  free(classes);
  free(s.files);
  free(s.ids);
  free(s.ok);
  free(s.pix);
  return st;
}
