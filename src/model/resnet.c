/* resnet.c — ResNet v1.5 as a table of layers built once; resnet_forward runs the table in order
 * and resnet_backward in reverse (see resnet.h). Activations have their own buffers; a gradient
 * that several layers contribute to (a block's input feeds its branch and its shortcut) is
 * written by the first contributor and added to by the others. */
#include "src/model/resnet.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/log.h"
#include "src/rng.h" /* mnt_splitmix64_next */
#include "src/simd.h" /* mnt_vec_nonfinite */
#include "src/sysmem.h"

enum { OP_CONV, OP_BN, OP_RELU, OP_MAXPOOL, OP_ADD, OP_GAP, OP_FC };

struct mnt_layer {
  int kind;
  int in, in2, out;   /* activation indices (in2: second input of OP_ADD) */
  int p0, p1;         /* parameter indices: conv w; bn gamma, beta; fc w, b */
  int s0, s1;         /* bn: running mean, running var (stat indices) */
  size_t save;        /* bn: offset of its saved mean/var in bn_save */
  int C, H, W;        /* output shape (per image) */
  int inC, inH, inW;  /* input shape */
  mnt_conv *conv;
  mnt_bn **bng;       /* one per BN group of the batch (see mnt_resnet_create_ex) */
  mnt_pool *pool;
};

typedef struct builder {
  mnt_resnet *r;
  int cap_p, cap_s, cap_l, cap_a;
  int (*shape)[3]; /* C, H, W of every activation */
  size_t nsave;
  int err;
  int dry; /* plan only: shapes and sizes, no backend objects (mnt_resnet_plan_bytes) */
  mnt_layer_fn visit; /* mnt_resnet_walk: called with every layer the backend makes */
  void *vctx;
} builder;

static void visit(builder *b, const char *name, int kind, int N, const mnt_layer *l, int K, int R, int s, int p,
                  int flag) {
  if (!b->visit || b->err) return;
  mnt_layer_shape sh = {.name = name, .kind = kind, .N = N, .C = l->inC, .H = l->inH, .W = l->inW, .K = K, .R = R,
                        .s = s, .p = p, .flag = flag};
  b->visit(b->vctx, &sh);
}

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

#define ALIGN_F 64 /* 256 bytes */

static int grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 0;
  int nc = *cap ? *cap * 2 : 64;
  while (nc < need) nc *= 2;
  void *q = realloc(*p, (size_t)nc * elem);
  if (!q) return -1;
  *p = q;
  *cap = nc;
  return 0;
}

static int add_param(builder *b, const char *name, int ndims, const int *dims, int no_decay) {
  mnt_resnet *r = b->r;
  if (grow((void **)&r->params, &b->cap_p, r->nparams + 1, sizeof *r->params)) return b->err = MNT_ENOMEM, -1;
  mnt_param *p = &r->params[r->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndims = ndims;
  p->n = 1;
  for (int i = 0; i < ndims; i++) p->n *= (size_t)(p->dims[i] = dims[i]);
  p->off = r->nw;
  p->no_decay = no_decay;
  r->nw += (p->n + ALIGN_F - 1) / ALIGN_F * ALIGN_F;
  return r->nparams++;
}

static int add_stat(builder *b, const char *name, int C) {
  mnt_resnet *r = b->r;
  if (grow((void **)&r->stats, &b->cap_s, r->nstats + 1, sizeof *r->stats)) return b->err = MNT_ENOMEM, -1;
  mnt_param *p = &r->stats[r->nstats];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndims = 1;
  p->dims[0] = C;
  p->n = (size_t)C;
  p->off = r->nbn;
  r->nbn += (size_t)C;
  return r->nstats++;
}

static int new_act(builder *b, int C, int H, int W) {
  mnt_resnet *r = b->r;
  if (grow((void **)&b->shape, &b->cap_a, r->nact + 1, sizeof *b->shape)) return b->err = MNT_ENOMEM, -1;
  b->shape[r->nact][0] = C;
  b->shape[r->nact][1] = H;
  b->shape[r->nact][2] = W;
  return r->nact++;
}

static mnt_layer *new_layer(builder *b, int kind, int in) {
  mnt_resnet *r = b->r;
  if (grow((void **)&r->layers, &b->cap_l, r->nlayers + 1, sizeof *r->layers)) {
    b->err = MNT_ENOMEM;
    return NULL;
  }
  mnt_layer *l = &r->layers[r->nlayers++];
  memset(l, 0, sizeof *l);
  l->kind = kind;
  l->in = in;
  l->in2 = -1;
  l->inC = b->shape[in][0];
  l->inH = b->shape[in][1];
  l->inW = b->shape[in][2];
  return l;
}

static int conv(builder *b, int in, const char *name, int K, int R, int s, int p) {
  if (b->err) return -1;
  mnt_layer *l = new_layer(b, OP_CONV, in);
  if (!l) return -1;
  int dims[4] = {K, l->inC, R, R}, OH, OW;
  char full[96];
  snprintf(full, sizeof full, "%s.weight", name);
  l->p0 = add_param(b, full, 4, dims, 0);
  visit(b, name, MNT_LAYER_CONV, b->r->batch, l, K, R, s, p, in != 0);
  if (b->dry) {
    OH = out_dim(l->inH, R, s, p);
    OW = out_dim(l->inW, R, s, p);
  } else {
    int st = mnt_conv_create(b->r->be, b->r->batch, l->inC, l->inH, l->inW, K, R, s, p, in != 0, &l->conv);
    if (st) return b->err = st, -1;
    mnt_conv_out_hw(l->conv, &OH, &OW);
  }
  l->C = K, l->H = OH, l->W = OW;
  return l->out = new_act(b, K, OH, OW);
}

static int bn_act(builder *b, int in, const char *name, int relu) {
  if (b->err) return -1;
  mnt_layer *l = new_layer(b, OP_BN, in);
  if (!l) return -1;
  char full[96];
  int C = l->inC;
  snprintf(full, sizeof full, "%s.weight", name);
  l->p0 = add_param(b, full, 1, &C, 1);
  snprintf(full, sizeof full, "%s.bias", name);
  l->p1 = add_param(b, full, 1, &C, 1);
  snprintf(full, sizeof full, "%s.running_mean", name);
  l->s0 = add_stat(b, full, C);
  snprintf(full, sizeof full, "%s.running_var", name);
  l->s1 = add_stat(b, full, C);
  l->save = b->nsave;
  int G = b->r->batch / b->r->bn_group;
  b->nsave += 2 * (size_t)C * (size_t)G;
  l->C = C, l->H = l->inH, l->W = l->inW;
  visit(b, name, MNT_LAYER_BN, b->r->bn_group, l, C, 0, 0, 0, relu);
  if (b->dry) return l->out = new_act(b, C, l->H, l->W);
  if (!(l->bng = calloc((size_t)G, sizeof *l->bng))) return b->err = MNT_ENOMEM, -1;
  for (int g = 0; g < G; g++) {
    int st = mnt_bn_create(b->r->be, b->r->bn_group, C, l->inH, l->inW, 1e-5f, relu, &l->bng[g]);
    if (st) return b->err = st, -1;
  }
  return l->out = new_act(b, C, l->H, l->W);
}

static int bn(builder *b, int in, const char *name) { return bn_act(b, in, name, 0); }
/* batch norm with the ReLU after it fused in (one pass each way) */
static int bn_relu(builder *b, int in, const char *name) { return bn_act(b, in, name, 1); }

static int simple(builder *b, int kind, int in, int in2) {
  if (b->err) return -1;
  mnt_layer *l = new_layer(b, kind, in);
  if (!l) return -1;
  l->in2 = in2;
  l->C = l->inC, l->H = l->inH, l->W = l->inW;
  if (kind == OP_GAP) l->H = l->W = 1;
  return l->out = new_act(b, l->C, l->H, l->W);
}

static int maxpool(builder *b, int in) {
  if (b->err) return -1;
  mnt_layer *l = new_layer(b, OP_MAXPOOL, in);
  if (!l) return -1;
  l->C = l->inC;
  visit(b, "maxpool", MNT_LAYER_POOL, b->r->batch, l, l->C, 3, 2, 1, 0);
  if (b->dry) {
    l->H = out_dim(l->inH, 3, 2, 1);
    l->W = out_dim(l->inW, 3, 2, 1);
  } else {
    int st = mnt_pool_create(b->r->be, b->r->batch, l->inC, l->inH, l->inW, 3, 2, 1, &l->pool);
    if (st) return b->err = st, -1;
    mnt_pool_out_hw(l->pool, &l->H, &l->W);
  }
  return l->out = new_act(b, l->C, l->H, l->W);
}

static int fc(builder *b, int in, int classes) {
  if (b->err) return -1;
  mnt_layer *l = new_layer(b, OP_FC, in);
  if (!l) return -1;
  int dw[2] = {classes, l->inC};
  l->p0 = add_param(b, "fc.weight", 2, dw, 0);
  l->p1 = add_param(b, "fc.bias", 1, &classes, 1);
  visit(b, "fc", MNT_LAYER_FC, b->r->batch, l, classes, 0, 0, 0, 1);
  l->C = classes, l->H = l->W = 1;
  return l->out = new_act(b, classes, 1, 1);
}

/* torchvision BasicBlock / Bottleneck; the shortcut comes after the branch, as in state_dict */
static int block(builder *b, int x, const char *name, int planes, int stride, int bottleneck, int *inplanes) {
  char n[96];
  int out_planes = bottleneck ? planes * 4 : planes;
  int y;
  if (bottleneck) {
    snprintf(n, sizeof n, "%s.conv1", name); y = conv(b, x, n, planes, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn1", name);   y = bn_relu(b, y, n);
    snprintf(n, sizeof n, "%s.conv2", name); y = conv(b, y, n, planes, 3, stride, 1);
    snprintf(n, sizeof n, "%s.bn2", name);   y = bn_relu(b, y, n);
    snprintf(n, sizeof n, "%s.conv3", name); y = conv(b, y, n, out_planes, 1, 1, 0);
    snprintf(n, sizeof n, "%s.bn3", name);   y = bn(b, y, n);
  } else {
    snprintf(n, sizeof n, "%s.conv1", name); y = conv(b, x, n, planes, 3, stride, 1);
    snprintf(n, sizeof n, "%s.bn1", name);   y = bn_relu(b, y, n);
    snprintf(n, sizeof n, "%s.conv2", name); y = conv(b, y, n, planes, 3, 1, 1);
    snprintf(n, sizeof n, "%s.bn2", name);   y = bn(b, y, n);
  }
  int sc = x;
  if (stride != 1 || *inplanes != out_planes) {
    snprintf(n, sizeof n, "%s.downsample.0", name); sc = conv(b, x, n, out_planes, 1, stride, 0);
    snprintf(n, sizeof n, "%s.downsample.1", name); sc = bn(b, sc, n);
  }
  *inplanes = out_planes;
  return simple(b, OP_RELU, simple(b, OP_ADD, y, sc), -1);
}

typedef struct { const char *name; int small, bottleneck, blocks[4]; } archdef;
static const archdef ARCHS[] = {
    {"resnet8", 1, 0, {1, 1, 1, 0}},   {"resnet20", 1, 0, {3, 3, 3, 0}}, {"resnet18", 0, 0, {2, 2, 2, 2}},  {"resnet34", 0, 0, {3, 4, 6, 3}},
    {"resnet50", 0, 1, {3, 4, 6, 3}},  {"resnet101", 0, 1, {3, 4, 23, 3}},
};

static const archdef *find_arch(const char *a) {
  for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++)
    if (!strcmp(ARCHS[i].name, a)) return &ARCHS[i];
  return NULL;
}

int mnt_resnet_known(const char *arch) { return find_arch(arch) != NULL; }

const char *mnt_resnet_arch_names(void) {
  static char names[128]; /* "resnet8, resnet20, ..., resnet101": built once, from ARCHS */
  if (!names[0]) {
    size_t len = 0, n = sizeof ARCHS / sizeof *ARCHS;
    for (size_t i = 0; i < n; i++)
      len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? (i + 1 < n ? ", " : " or ") : "", ARCHS[i].name);
  }
  return names;
}

/* reproducible normal and uniform numbers (splitmix64 of rng.h + Box-Muller) */
static double unif(uint64_t *s) {
  return ((double)(mnt_splitmix64_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static double normal(uint64_t *s) { return sqrt(-2.0 * log(unif(s))) * cos(6.283185307179586 * unif(s)); }

/* into host buffers hw (nw floats) and hbn (nbn floats), uploaded by the caller */
static void init_weights(const mnt_resnet *r, float *hw, float *hbn, uint64_t seed, int zero_init_residual,
                         int bottleneck) {
  const char *last_bn = bottleneck ? ".bn3.weight" : ".bn2.weight"; /* the last BN of a branch */
  for (int i = 0; i < r->nparams; i++) {
    mnt_param *p = &r->params[i];
    float *w = hw + p->off;
    uint64_t s = seed ^ (0x51ed270b27ull * (uint64_t)(i + 1)); /* per tensor: independent of order */
    const char *leaf = strrchr(p->name, '.');
    int is_bn = p->ndims == 1 && strcmp(p->name, "fc.bias") != 0;
    if (p->ndims == 4) { /* conv: kaiming_normal_(mode="fan_out", nonlinearity="relu") */
      double std = sqrt(2.0 / ((double)p->dims[0] * p->dims[2] * p->dims[3]));
      for (size_t k = 0; k < p->n; k++) w[k] = (float)(std * normal(&s));
    } else if (is_bn) {
      float v = !strcmp(leaf, ".weight") ? 1.0f : 0.0f;
      size_t nl = strlen(p->name), ll = strlen(last_bn);
      if (zero_init_residual && !strncmp(p->name, "layer", 5) && nl > ll && !strcmp(p->name + nl - ll, last_bn))
        v = 0.0f;
      for (size_t k = 0; k < p->n; k++) w[k] = v;
    } else { /* nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias */
      int fan_in = r->params[!strcmp(leaf, ".bias") ? i - 1 : i].dims[1];
      double bound = 1.0 / sqrt((double)fan_in);
      for (size_t k = 0; k < p->n; k++) w[k] = (float)((2.0 * unif(&s) - 1.0) * bound);
    }
  }
  for (int i = 0; i < r->nstats; i++) {
    float v = strstr(r->stats[i].name, "running_var") ? 1.0f : 0.0f;
    for (size_t k = 0; k < r->stats[i].n; k++) hbn[r->stats[i].off + k] = v;
  }
}

int mnt_resnet_create(mnt_backend *be, const char *arch, int classes, int size, int batch, uint64_t seed,
                      int zero_init_residual, mnt_resnet **out) {
  return mnt_resnet_create_ex(be, arch, classes, size, batch, batch, seed, zero_init_residual, out);
}

/* the arguments' checks, shared by create and plan */
static int check_args(const char *arch, int classes, int size, int batch, int bn_group, const archdef **out) {
  const archdef *a = find_arch(arch ? arch : "");
  if (!a) {
    MNT_ERR("unknown architecture '%s' (known: %s)", arch ? arch : "", mnt_resnet_arch_names());
    return MNT_EARG;
  }
  if (classes < 1 || batch < 1 || size < 1) {
    MNT_ERR("%s needs classes >= 1, batch >= 1 and size >= 1 (got %d, %d, %d)", arch, classes, batch, size);
    return MNT_EARG;
  }
  int min_size = a->small ? 4 : 32; /* the last stage must keep at least one pixel */
  if (size < min_size) {
    MNT_ERR("image size %d is too small for %s (at least %d px)", size, arch, min_size);
    return MNT_EARG;
  }
  if (bn_group < 1 || batch % bn_group) {
    MNT_ERR("a batch of %d cannot be split into batch-norm groups of %d", batch, bn_group);
    return MNT_EARG;
  }
  *out = a;
  return MNT_OK;
}

/* the layer table of architecture a into b->r (shapes only when b->dry) */
static int build(builder *b, const archdef *a, int classes) {
  int x = new_act(b, 3, b->r->size, b->r->size), y;
  int inplanes;
  if (a->small) {
    y = bn_relu(b, conv(b, x, "conv1", 16, 3, 1, 1), "bn1");
    inplanes = 16;
  } else {
    y = maxpool(b, bn_relu(b, conv(b, x, "conv1", 64, 7, 2, 3), "bn1"));
    inplanes = 64;
  }
  int widths[4] = {64, 128, 256, 512}, small_w[3] = {16, 32, 64};
  for (int st = 0; st < 4 && a->blocks[st]; st++)
    for (int k = 0; k < a->blocks[st]; k++) {
      char name[32];
      snprintf(name, sizeof name, "layer%d.%d", st + 1, k);
      y = block(b, y, name, a->small ? small_w[st] : widths[st], k == 0 && st > 0 ? 2 : 1, a->bottleneck, &inplanes);
    }
  fc(b, simple(b, OP_GAP, y, -1), classes);
  return b->err;
}

int mnt_resnet_plan_bytes(const char *arch, int classes, int size, int batch, int bn_group, size_t act_bytes,
                          size_t *bytes) {
  const archdef *a;
  MNT_CHECK(check_args(arch, classes, size, batch, bn_group, &a));
  mnt_resnet r = {.classes = classes, .size = size, .batch = batch, .bn_group = bn_group};
  builder b = {.r = &r, .dry = 1};
  int st = build(&b, a, classes);
  double f = sizeof(float), e = (double)act_bytes, acts = 0, widest = 0, relu_ws = 0;
  double rss = (double)mnt_rss_bytes(), process = rss > 24.0 * 1048576 ? rss : 24.0 * 1048576;
  for (int i = 0; i < r.nact && !st; i++) {
    double n = (double)batch * b.shape[i][0] * b.shape[i][1] * b.shape[i][2];
    acts += n; /* the input included */
    if (n > widest) widest = n;
  }
  for (int i = 0; i < r.nlayers && !st; i++)
    if (r.layers[i].kind == OP_BN) relu_ws += (double)batch * r.layers[i].C * r.layers[i].H * r.layers[i].W;
  /* slabs (weights, gradients, momentum: fp32) and the backend's reordered copies of the conv
   * weights (up to three, in the activations' type); activations, logits' gradient, scratch and the
   * pooled gradient buffers (peak about three of the widest), act_bytes per element; BN saves and
   * fused-ReLU workspaces (a byte per element). Against bench step's peak RSS: within 4% for
   * resnet50 at 224 px (batch 8 and 32) and 3% for resnet18 in fp32, within 6% in bf16 (cpu). */
  double total = 3 * (f + e) * (double)r.nw + f * ((double)r.nbn + (double)b.nsave) + e * (acts + 4 * widest) +
                 relu_ws + process; /* the process itself: libraries (now), oneDNN's kernels */
  free(b.shape);
  free(r.layers);
  free(r.params);
  free(r.stats);
  *bytes = (size_t)total;
  return st;
}

int mnt_resnet_walk(const char *arch, int classes, int size, int batch, int bn_group, mnt_layer_fn fn, void *ctx) {
  const archdef *a;
  MNT_CHECK(check_args(arch, classes, size, batch, bn_group, &a));
  mnt_resnet r = {.classes = classes, .size = size, .batch = batch, .bn_group = bn_group};
  builder b = {.r = &r, .dry = 1, .visit = fn, .vctx = ctx};
  int st = build(&b, a, classes);
  free(b.shape);
  free(r.layers);
  free(r.params);
  free(r.stats);
  return st;
}

static void count_flops(void *ctx, const mnt_layer_shape *l) {
  double *f = ctx, macs;
  if (l->kind == MNT_LAYER_CONV) {
    int OH = out_dim(l->H, l->R, l->s, l->p), OW = out_dim(l->W, l->R, l->s, l->p);
    macs = (double)l->N * l->K * l->C * l->R * l->R * OH * OW;
  } else if (l->kind == MNT_LAYER_FC) {
    macs = (double)l->N * l->C * l->K;
  } else {
    return;
  }
  f[0] += 2 * macs;
  f[1] += 2 * macs * (l->flag ? 2 : 1); /* weight gradient, and the input's unless it is the image */
}

int mnt_resnet_flops(const char *arch, int classes, int size, int batch, double *fwd, double *bwd) {
  double f[2] = {0, 0};
  MNT_CHECK(mnt_resnet_walk(arch, classes, size, batch, batch, count_flops, f));
  *fwd = f[0];
  *bwd = f[1];
  return MNT_OK;
}

/* the layer's name: its parameter's without ".weight" */
static void layer_name(const mnt_resnet *r, const mnt_layer *l, char *out, size_t n) {
  if (l->kind == OP_MAXPOOL) {
    snprintf(out, n, "maxpool");
    return;
  }
  const char *p = r->params[l->p0].name;
  size_t len = strlen(p), suf = strlen(".weight");
  if (len > suf && !strcmp(p + len - suf, ".weight")) len -= suf;
  snprintf(out, n, "%.*s", (int)len, p);
}

/* what layer l runs (NULL for layers the backend does not make) */
static const char *layer_impl(const mnt_layer *l, int *slow) {
  *slow = 0;
  if (l->kind == OP_CONV) return mnt_conv_impl(l->conv, slow);
  if (l->kind == OP_BN) return mnt_bn_impl(l->bng[0], slow);
  if (l->kind == OP_MAXPOOL) return mnt_pool_impl(l->pool, slow);
  return NULL;
}

static void append(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t n, size_t *at, const char *fmt, ...) {
  if (*at >= n) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *at, n - *at, fmt, ap);
  va_end(ap);
  *at = k < 0 ? n : *at + (size_t)k >= n ? n - 1 : *at + (size_t)k;
}

int mnt_resnet_slow_layers(const mnt_resnet *r, char *buf, size_t n) {
  int count = 0;
  size_t at = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < r->nlayers; i++) {
    int slow;
    const char *impl = layer_impl(&r->layers[i], &slow);
    if (!impl || !slow) continue;
    char name[96];
    layer_name(r, &r->layers[i], name, sizeof name);
    append(buf, n, &at, "%s%s (%s)", count++ ? "; " : "", name, impl);
  }
  return count;
}

int mnt_resnet_impls(const mnt_resnet *r, mnt_layer_kind kind, char *buf, size_t n) {
  int op = kind == MNT_LAYER_CONV ? OP_CONV : kind == MNT_LAYER_BN ? OP_BN : kind == MNT_LAYER_POOL ? OP_MAXPOOL : -1;
  int distinct = 0;
  size_t at = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < r->nlayers; i++) {
    int slow, seen = 0, count = 0;
    if (r->layers[i].kind != op) continue;
    const char *impl = layer_impl(&r->layers[i], &slow);
    for (int j = 0; j < r->nlayers && !seen; j++)
      if (r->layers[j].kind == op) {
        const char *other = layer_impl(&r->layers[j], &slow);
        if (j < i && !strcmp(other, impl)) seen = 1;
        else count += !strcmp(other, impl);
      }
    if (seen) continue;
    append(buf, n, &at, "%s%s x%d", distinct++ ? "; " : "", impl[0] ? impl : "?", count);
  }
  return distinct;
}

/* backend memory, zeroed; NULL (and st set) on failure */
static void *be_alloc(mnt_resnet *r, size_t bytes, int *st) {
  void *p = NULL;
  if (!*st) *st = mnt_be_alloc(r->be, bytes ? bytes : 1, &p);
  return p;
}

int mnt_resnet_create_ex(mnt_backend *be, const char *arch, int classes, int size, int batch, int bn_group,
                         uint64_t seed, int zero_init_residual, mnt_resnet **out) {
  *out = NULL;
  const archdef *a;
  MNT_CHECK(check_args(arch, classes, size, batch, bn_group, &a));
  mnt_resnet *r = calloc(1, sizeof *r);
  if (!r) return MNT_ENOMEM;
  r->bn_group = bn_group;
  r->nstate = 1;
  r->bn_momentum = 0.1f;
  snprintf(r->arch, sizeof r->arch, "%s", arch);
  r->classes = classes;
  r->size = size;
  r->batch = batch;
  r->be = be;
  builder b = {.r = r};
  build(&b, a, classes);
  int st = b.err;
  size_t E = be->act_bytes, F = sizeof(float);
  if (!st) {
    r->act = calloc((size_t)r->nact, sizeof *r->act);
    r->dact = calloc((size_t)r->nact, sizeof *r->dact);
    r->act_n = calloc((size_t)r->nact, sizeof *r->act_n);
    r->written = calloc((size_t)r->nact, sizeof *r->written);
    if (!r->act || !r->dact || !r->act_n || !r->written) st = MNT_ENOMEM;
    r->labels = be_alloc(r, (size_t)batch * sizeof *r->labels, &st);
    r->bn_save = be_alloc(r, (b.nsave + 1) * F, &st);
    r->w = be_alloc(r, r->nw * F, &st);
    r->g = be_alloc(r, r->nw * F, &st);
    r->m = be_alloc(r, r->nw * F, &st);
    r->bn = be_alloc(r, (r->nbn + 1) * F, &st);
    r->out3 = be_alloc(r, 4 * F, &st);
    r->flag = be_alloc(r, sizeof *r->flag, &st);
  }
  for (int i = 0; i < r->nact && !st; i++) {
    r->act_n[i] = (size_t)batch * (size_t)b.shape[i][0] * (size_t)b.shape[i][1] * (size_t)b.shape[i][2];
    if (r->act_n[i] > r->scratch_n) r->scratch_n = r->act_n[i];
    r->act[i] = be_alloc(r, r->act_n[i] * E, &st); /* act[0]: the input, filled by mnt_resnet_forward */
    if (i == r->nact - 1) r->dact[i] = be_alloc(r, r->act_n[i] * E, &st);
  }
  r->scratch = be_alloc(r, r->scratch_n * E, &st);
  r->bn_tmp = be_alloc(r, 2 * 2048 * F, &st); /* 2 x the widest BN */
  r->bn_run = be_alloc(r, 4 * 2048 * F, &st);
  free(b.shape);
  float *hw = NULL, *hbn = NULL;
  if (!st && (!(hw = calloc(r->nw, F)) || !(hbn = calloc(r->nbn + 1, F)))) st = MNT_ENOMEM;
  if (!st) {
    init_weights(r, hw, hbn, seed, zero_init_residual, a->bottleneck);
    st = mnt_be_copy(be, r->w, hw, r->nw * F, MNT_COPY_H2D);
    if (!st) st = mnt_be_copy(be, r->bn, hbn, r->nbn * F, MNT_COPY_H2D);
    if (!st) st = mnt_be_sync(be);
  }
  free(hw);
  free(hbn);
  if (st) {
    if (st == MNT_ENOMEM) MNT_ERR("out of memory building %s for batch %d at %d px", arch, batch, size);
    mnt_resnet_destroy(r);
    return st;
  }
  *out = r;
  return MNT_OK;
}

int mnt_resnet_optim_state(mnt_resnet *r, int k) {
  if (k < 1) k = 1;
  if (k == r->nstate) return mnt_be_memset0(r->be, r->m, (size_t)k * r->nw * sizeof(float));
  float *m = NULL;
  MNT_CHECK(mnt_be_alloc(r->be, (size_t)k * r->nw * sizeof(float), (void **)&m));
  mnt_be_free(r->be, r->m);
  r->m = m;
  r->nstate = k;
  return MNT_OK;
}

void mnt_resnet_destroy(mnt_resnet *r) {
  if (!r) return;
  mnt_backend *be = r->be;
  for (int i = 0; i < r->nlayers; i++) {
    mnt_conv_destroy(r->layers[i].conv);
    for (int g = 0; r->layers[i].bng && g < r->batch / r->bn_group; g++) mnt_bn_destroy(r->layers[i].bng[g]);
    free(r->layers[i].bng);
    mnt_pool_destroy(r->layers[i].pool);
  }
  for (int i = 0; i < r->nact && r->act; i++) mnt_be_free(be, r->act[i]);
  if (r->dact) mnt_be_free(be, r->dact[r->nact - 1]);
  for (int i = 0; i < r->npool; i++) mnt_be_free(be, r->pool[i].p);
  free(r->pool);
  free(r->act); free(r->dact); free(r->act_n); free(r->written);
  void *bufs[] = {r->labels, r->bn_save, r->bn_tmp, r->bn_run, r->w, r->g, r->m, r->bn, r->scratch, r->out3, r->flag};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) mnt_be_free(be, bufs[i]);
  free(r->layers); free(r->params); free(r->stats);
  free(r);
}

void *mnt_resnet_input(mnt_resnet *r) { return r->act[0]; }

int mnt_resnet_forward(mnt_resnet *r, const float *x, int train) {
  mnt_backend *be = r->be;
  if (x) MNT_CHECK(mnt_act_upload(be, x, r->act[0], r->batch, 3, r->size, r->size));
  size_t F = sizeof(float);
  for (int i = 0; i < r->nlayers; i++) {
    mnt_layer *l = &r->layers[i];
    const void *in = r->act[l->in];
    void *out = r->act[l->out];
    size_t n = r->act_n[l->out];
    switch (l->kind) {
      case OP_CONV: MNT_CHECK(mnt_conv_forward(l->conv, in, r->w + r->params[l->p0].off, out)); break;
      case OP_BN: {
        const float *gm = r->w + r->params[l->p0].off, *bt = r->w + r->params[l->p1].off;
        float *rm = r->bn + r->stats[l->s0].off, *rv = r->bn + r->stats[l->s1].off;
        size_t per = n / (size_t)r->batch * (size_t)r->bn_group; /* elements per BN group */
        int G = r->batch / r->bn_group;
        size_t C = (size_t)l->C;
        /* G groups update the running statistics as G ranks do: each from the same old values, then
         * averaged (what averaging over ranks gives), not G momentum updates in a row */
        float *old = r->bn_run, *sum = r->bn_run + 2 * C;
        if (train && G > 1) {
          MNT_CHECK(mnt_be_copy(be, old, rm, C * F, MNT_COPY_D2D));
          MNT_CHECK(mnt_be_copy(be, old + C, rv, C * F, MNT_COPY_D2D));
          MNT_CHECK(mnt_be_memset0(be, sum, 2 * C * F));
        }
        for (int g = 0; g < G; g++) {
          float *save = r->bn_save + l->save + 2 * C * (size_t)g;
          const void *xg = mnt_act_at(be, in, (size_t)g * per);
          void *yg = mnt_act_at(be, out, (size_t)g * per);
          if (train && G > 1 && g > 0) {
            MNT_CHECK(mnt_be_copy(be, rm, old, C * F, MNT_COPY_D2D));
            MNT_CHECK(mnt_be_copy(be, rv, old + C, C * F, MNT_COPY_D2D));
          }
          if (train)
            MNT_CHECK(mnt_bn_forward_train(l->bng[g], xg, gm, bt, yg, save, save + C, rm, rv, r->bn_momentum));
          else
            MNT_CHECK(mnt_bn_forward_infer(l->bng[g], xg, gm, bt, yg, rm, rv));
          if (train && G > 1) {
            MNT_CHECK(mnt_f32_acc(be, sum, rm, C));
            MNT_CHECK(mnt_f32_acc(be, sum + C, rv, C));
          }
        }
        if (train && G > 1) {
          MNT_CHECK(mnt_f32_scale(be, sum, 1.0f / (float)G, 2 * C));
          MNT_CHECK(mnt_be_copy(be, rm, sum, C * F, MNT_COPY_D2D));
          MNT_CHECK(mnt_be_copy(be, rv, sum + C, C * F, MNT_COPY_D2D));
        }
        break;
      }
      case OP_RELU: MNT_CHECK(mnt_relu_forward(be, in, out, n)); break;
      case OP_ADD: MNT_CHECK(mnt_add_forward(be, in, r->act[l->in2], out, n)); break;
      case OP_MAXPOOL: MNT_CHECK(mnt_pool_forward(l->pool, in, out)); break;
      case OP_GAP: MNT_CHECK(mnt_gap_forward(be, in, out, r->batch, l->inC, l->inH * l->inW)); break;
      case OP_FC:
        MNT_CHECK(mnt_fc_forward(be, in, r->w + r->params[l->p0].off, r->w + r->params[l->p1].off, out, r->batch,
                                 l->inC, r->classes));
        break;
    }
  }
  return MNT_OK;
}

const void *mnt_resnet_logits(const mnt_resnet *r) { return r->act[r->nact - 1]; }

int mnt_resnet_loss_dev(mnt_resnet *r, const int32_t *dev_labels, int n, int for_backward) {
  if (n < 1 || n > r->batch) {
    MNT_ERR("internal: a loss over %d of a batch of %d", n, r->batch);
    return MNT_EARG;
  }
  return mnt_softmax_xent(r->be, r->act[r->nact - 1], dev_labels, for_backward ? r->dact[r->nact - 1] : NULL, n,
                          r->classes, for_backward ? r->label_smoothing : 0.0f, r->out3);
}

int mnt_resnet_loss(mnt_resnet *r, const int32_t *labels, int n, int for_backward) {
  if (n < 1 || n > r->batch) {
    MNT_ERR("internal: a loss over %d of a batch of %d", n, r->batch);
    return MNT_EARG;
  }
  MNT_CHECK(mnt_be_copy(r->be, r->labels, labels, (size_t)n * sizeof *labels, MNT_COPY_H2D));
  return mnt_resnet_loss_dev(r, r->labels, n, for_backward);
}

int mnt_resnet_read_loss(mnt_resnet *r, float out[3]) {
  return mnt_be_copy(r->be, out, r->out3, 3 * sizeof(float), MNT_COPY_D2H);
}

/* the smallest free pooled buffer of at least n elements (a new one if none) */
static void *acquire(mnt_resnet *r, size_t n) {
  int best = -1;
  for (int i = 0; i < r->npool; i++)
    if (!r->pool[i].used && r->pool[i].n >= n && (best < 0 || r->pool[i].n < r->pool[best].n)) best = i;
  if (best < 0) {
    if (r->npool == r->cap_pool) {
      int nc = r->cap_pool ? 2 * r->cap_pool : 16;
      struct mnt_gradbuf *q = realloc(r->pool, (size_t)nc * sizeof *q);
      if (!q) return NULL;
      r->pool = q;
      r->cap_pool = nc;
    }
    void *p = NULL;
    if (mnt_be_alloc(r->be, n * r->be->act_bytes, &p) != MNT_OK) return NULL;
    r->pool[r->npool] = (struct mnt_gradbuf){p, n, 0};
    best = r->npool++;
  }
  r->pool[best].used = 1;
  return r->pool[best].p;
}

static struct mnt_gradbuf *pooled(mnt_resnet *r, const void *p) {
  for (int i = 0; i < r->npool; i++)
    if (r->pool[i].p == p) return &r->pool[i];
  return NULL;
}

static void release(mnt_resnet *r, int a) {
  if (a == r->nact - 1 || !r->dact[a]) return; /* dlogits stays */
  struct mnt_gradbuf *b = pooled(r, r->dact[a]);
  if (b && b->used > 0) b->used--;
  r->dact[a] = NULL;
}

/* Where a layer writes its input gradient: straight into dact[in] (taken from the pool) when it
 * is the first contributor this pass, otherwise into scratch, added afterwards by finish_dx. */
static void *dx_target(mnt_resnet *r, int in) {
  if (in == 0) return NULL; /* the input image needs no gradient */
  if (r->written[in]) return r->scratch;
  if (!r->dact[in]) r->dact[in] = acquire(r, r->act_n[in]);
  return r->dact[in];
}
/* dact[in] += t; a buffer that also holds another activation's gradient (shared by a residual add)
 * is left as it is: the sum goes to a buffer of in's own */
static int acc_dx(mnt_resnet *r, int in, const void *t) {
  struct mnt_gradbuf *b = pooled(r, r->dact[in]);
  if (b && b->used > 1) {
    void *own = acquire(r, r->act_n[in]);
    if (!own) {
      MNT_ERR("out of memory for a gradient of %zu elements", r->act_n[in]);
      return MNT_ENOMEM;
    }
    MNT_CHECK(mnt_add_forward(r->be, r->dact[in], t, own, r->act_n[in]));
    b = pooled(r, r->dact[in]); /* acquire may have moved the pool */
    b->used--;
    r->dact[in] = own;
    return MNT_OK;
  }
  return mnt_act_acc(r->be, r->dact[in], t, r->act_n[in]);
}

static int finish_dx(mnt_resnet *r, int in, void *t) {
  if (!t) return MNT_OK;
  if (t == r->scratch) MNT_CHECK(acc_dx(r, in, t));
  r->written[in] = 1;
  return MNT_OK;
}

/* A residual add's backward: its output's gradient, unchanged, is each input's. An input with no
 * gradient yet takes dy's buffer as its own (no copy; the buffer counts one more holder); one with
 * a gradient adds dy to it. */
static int add_backward(mnt_resnet *r, const mnt_layer *l) {
  void *dy = r->dact[l->out];
  for (int k = 0; k < 2; k++) {
    int a = k ? l->in2 : l->in;
    if (a == 0) continue; /* the input image needs no gradient */
    if (!r->written[a] && !r->dact[a]) {
      struct mnt_gradbuf *b = pooled(r, dy);
      if (!b) { /* dlogits, which is not pooled: a copy */
        if (!(r->dact[a] = acquire(r, r->act_n[a]))) return MNT_ENOMEM;
        MNT_CHECK(mnt_be_copy(r->be, r->dact[a], dy, r->act_n[a] * r->be->act_bytes, MNT_COPY_D2D));
      } else {
        b->used++;
        r->dact[a] = dy;
      }
    } else {
      MNT_CHECK(acc_dx(r, a, dy));
    }
    r->written[a] = 1;
  }
  release(r, l->out);
  return MNT_OK;
}

static void ready(mnt_resnet *r, int p) {
  if (r->grad_ready) r->grad_ready(r->grad_ctx, r->params[p].off, r->params[p].n);
}

int mnt_resnet_backward(mnt_resnet *r) {
  mnt_backend *be = r->be;
  memset(r->written, 0, (size_t)r->nact * sizeof *r->written);
  for (int a = 0; a < r->nact; a++) release(r, a);
  r->written[r->nact - 1] = 1;
  for (int i = r->nlayers - 1; i >= 0; i--) {
    mnt_layer *l = &r->layers[i];
    if (l->kind == OP_ADD) {
      MNT_CHECK(add_backward(r, l));
      continue;
    }
    const void *dy = r->dact[l->out];
    void *dx = dx_target(r, l->in);
    if (l->in != 0 && !dx) {
      MNT_ERR("out of memory for a gradient of %zu elements", r->act_n[l->in]);
      return MNT_ENOMEM;
    }
    switch (l->kind) {
      case OP_CONV:
        MNT_CHECK(mnt_conv_backward(l->conv, r->act[l->in], r->w + r->params[l->p0].off, dy, dx,
                                    r->g + r->params[l->p0].off));
        ready(r, l->p0);
        break;
      case OP_BN: {
        size_t per = r->act_n[l->out] / (size_t)r->batch * (size_t)r->bn_group, C = (size_t)l->C;
        float *dg = r->g + r->params[l->p0].off, *db = r->g + r->params[l->p1].off, *tmp = r->bn_tmp;
        for (int g = 0; g < r->batch / r->bn_group; g++) {
          const float *save = r->bn_save + l->save + 2 * C * (size_t)g;
          void *dxg = mnt_act_at(be, dx ? dx : r->scratch, (size_t)g * per);
          MNT_CHECK(mnt_bn_backward(l->bng[g], mnt_act_at(be, r->act[l->in], (size_t)g * per),
                                    mnt_act_at(be, dy, (size_t)g * per), r->w + r->params[l->p0].off, save, save + C,
                                    dxg, g ? tmp : dg, g ? tmp + C : db));
          if (g) {
            MNT_CHECK(mnt_f32_acc(be, dg, tmp, C));
            MNT_CHECK(mnt_f32_acc(be, db, tmp + C, C));
          }
        }
        ready(r, l->p1);
        ready(r, l->p0);
        break;
      }
      case OP_RELU:
        if (dx) MNT_CHECK(mnt_relu_backward(be, r->act[l->out], dy, dx, r->act_n[l->out]));
        break;
      case OP_ADD: break; /* add_backward, above */
      case OP_MAXPOOL:
        if (dx) MNT_CHECK(mnt_pool_backward(l->pool, dy, dx));
        break;
      case OP_GAP:
        if (dx) MNT_CHECK(mnt_gap_backward(be, dy, dx, r->batch, l->inC, l->inH * l->inW));
        break;
      case OP_FC:
        MNT_CHECK(mnt_fc_backward(be, r->act[l->in], r->w + r->params[l->p0].off, dy, dx, r->g + r->params[l->p0].off,
                                  r->g + r->params[l->p1].off, r->batch, l->inC, r->classes));
        ready(r, l->p1);
        ready(r, l->p0);
        break;
    }
    MNT_CHECK(finish_dx(r, l->in, dx));
    release(r, l->out); /* every consumer of this output came later in forward: all done */
  }
  return MNT_OK;
}

int mnt_resnet_conv_algos(mnt_resnet *r, int *algos, int *n, int set) {
  *n = 0;
  for (int i = 0; i < r->nlayers; i++) {
    if (r->layers[i].kind != OP_CONV) continue;
    if (algos) MNT_CHECK(mnt_conv_algos(r->layers[i].conv, algos + 3 * *n, set));
    (*n)++;
  }
  return MNT_OK;
}

const mnt_param *mnt_resnet_first_nonfinite(const mnt_param *ps, int n, const float *base) {
  for (int i = 0; i < n; i++)
    if (mnt_vec_nonfinite(base + ps[i].off, ps[i].n)) return &ps[i];
  return NULL;
}

const mnt_param *mnt_resnet_find(const mnt_resnet *r, const char *name, int *is_stat) {
  for (int i = 0; i < r->nparams; i++)
    if (!strcmp(r->params[i].name, name)) {
      if (is_stat) *is_stat = 0;
      return &r->params[i];
    }
  for (int i = 0; i < r->nstats; i++)
    if (!strcmp(r->stats[i].name, name)) {
      if (is_stat) *is_stat = 1;
      return &r->stats[i];
    }
  return NULL;
}
