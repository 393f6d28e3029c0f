/* resnet.c — ResNet v1.5 as a table of layers built once; resnet_forward runs the table in order
 * and resnet_backward in reverse (see resnet.h). Activations have their own buffers; a gradient
 * that several layers contribute to (a block's input feeds its branch and its shortcut) is
 * written by the first contributor and added to by the others. */
#include "model/resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

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
} builder;

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
  if (b->dry) {
    OH = out_dim(l->inH, R, s, p);
    OW = out_dim(l->inW, R, s, p);
  } else {
    int st = mnt_conv_create(b->r->be, b->r->batch, l->inC, l->inH, l->inW, K, R, s, p, &l->conv);
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

int mnt_resnet_arch_ok(const char *arch) { return find_arch(arch) ? 0 : -1; }

/* reproducible normal and uniform numbers (splitmix64 + Box-Muller) */
static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return ((double)(splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double normal(uint64_t *s) { return sqrt(-2.0 * log(unif(s))) * cos(6.283185307179586 * unif(s)); }

static void init_weights(mnt_resnet *r, uint64_t seed, int zero_init_residual, int bottleneck) {
  const char *last_bn = bottleneck ? ".bn3.weight" : ".bn2.weight"; /* the last BN of a branch */
  for (int i = 0; i < r->nparams; i++) {
    mnt_param *p = &r->params[i];
    float *w = r->w + p->off;
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
    for (size_t k = 0; k < r->stats[i].n; k++) r->bn[r->stats[i].off + k] = v;
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
    MNT_ERR("unknown architecture '%s' (known: resnet8, resnet20, resnet18, resnet34, resnet50, resnet101)",
            arch ? arch : "");
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

int mnt_resnet_plan_bytes(const char *arch, int classes, int size, int batch, int bn_group, size_t *bytes) {
  const archdef *a;
  MNT_CHECK(check_args(arch, classes, size, batch, bn_group, &a));
  mnt_resnet r = {.classes = classes, .size = size, .batch = batch, .bn_group = bn_group};
  builder b = {.r = &r, .dry = 1};
  int st = build(&b, a, classes);
  double f = sizeof(float), acts = 0, widest = 0, relu_ws = 0;
  for (int i = 0; i < r.nact && !st; i++) {
    double n = (double)batch * b.shape[i][0] * b.shape[i][1] * b.shape[i][2];
    if (i > 0) acts += n; /* the input belongs to the caller */
    if (n > widest) widest = n;
  }
  for (int i = 0; i < r.nlayers && !st; i++)
    if (r.layers[i].kind == OP_BN) relu_ws += (double)batch * r.layers[i].C * r.layers[i].H * r.layers[i].W;
  /* slabs (weights, gradients, momentum) and the backend's reordered copies of the conv weights
   * (up to three); activations, logits' gradient, scratch and the pooled gradient buffers (peak
   * about three of the widest); BN saves and fused-ReLU workspaces (a byte per element). Against
   * bench step's peak RSS: within 2% for resnet50 at 224 px (batch 8 and 32), 3% for resnet18. */
  double total = 6 * f * (double)r.nw + f * ((double)r.nbn + (double)b.nsave) + f * (acts + 4 * widest) + relu_ws +
                 24.0 * 1048576; /* the process itself: libraries, oneDNN's kernels (measured) */
  free(b.shape);
  free(r.layers);
  free(r.params);
  free(r.stats);
  *bytes = (size_t)total;
  return st;
}

int mnt_resnet_create_ex(mnt_backend *be, const char *arch, int classes, int size, int batch, int bn_group,
                         uint64_t seed, int zero_init_residual, mnt_resnet **out) {
  *out = NULL;
  const archdef *a;
  MNT_CHECK(check_args(arch, classes, size, batch, bn_group, &a));
  mnt_resnet *r = calloc(1, sizeof *r);
  if (!r) return MNT_ENOMEM;
  r->bn_group = bn_group;
  snprintf(r->arch, sizeof r->arch, "%s", arch);
  r->classes = classes;
  r->size = size;
  r->batch = batch;
  r->be = be;
  builder b = {.r = r};
  build(&b, a, classes);
  int st = b.err;
  if (!st) {
    r->act = calloc((size_t)r->nact, sizeof *r->act);
    r->dact = calloc((size_t)r->nact, sizeof *r->dact);
    r->act_n = calloc((size_t)r->nact, sizeof *r->act_n);
    r->written = calloc((size_t)r->nact, sizeof *r->written);
    r->labels = calloc((size_t)batch, sizeof *r->labels);
    r->bn_save = calloc(b.nsave + 1, sizeof(float));
    r->w = aligned_alloc(256, r->nw * sizeof(float));
    r->g = aligned_alloc(256, r->nw * sizeof(float));
    r->m = aligned_alloc(256, r->nw * sizeof(float));
    r->bn = calloc(r->nbn + 1, sizeof(float));
    if (!r->act || !r->dact || !r->act_n || !r->written || !r->labels || !r->bn_save || !r->w || !r->g || !r->m || !r->bn)
      st = MNT_ENOMEM;
  }
  for (int i = 0; i < r->nact && !st; i++) {
    r->act_n[i] = (size_t)batch * (size_t)b.shape[i][0] * (size_t)b.shape[i][1] * (size_t)b.shape[i][2];
    if (r->act_n[i] > r->scratch_n) r->scratch_n = r->act_n[i];
    if (i > 0 && !(r->act[i] = malloc(r->act_n[i] * sizeof(float)))) st = MNT_ENOMEM;
    if (!st && i == r->nact - 1 && !(r->dact[i] = malloc(r->act_n[i] * sizeof(float)))) st = MNT_ENOMEM;
  }
  if (!st && !(r->scratch = malloc(r->scratch_n * sizeof(float)))) st = MNT_ENOMEM;
  if (!st && !(r->bn_tmp = malloc(2 * 2048 * sizeof(float)))) st = MNT_ENOMEM; /* 2 x the widest BN */
  if (!st && !(r->bn_run = malloc(4 * 2048 * sizeof(float)))) st = MNT_ENOMEM;
  free(b.shape);
  if (st) {
    if (st == MNT_ENOMEM) MNT_ERR("out of memory building %s for batch %d at %d px", arch, batch, size);
    mnt_resnet_destroy(r);
    return st;
  }
  memset(r->g, 0, r->nw * sizeof(float));
  memset(r->m, 0, r->nw * sizeof(float));
  memset(r->w, 0, r->nw * sizeof(float));
  init_weights(r, seed, zero_init_residual, a->bottleneck);
  *out = r;
  return MNT_OK;
}

void mnt_resnet_destroy(mnt_resnet *r) {
  if (!r) return;
  for (int i = 0; i < r->nlayers; i++) {
    mnt_conv_destroy(r->layers[i].conv);
    for (int g = 0; r->layers[i].bng && g < r->batch / r->bn_group; g++) mnt_bn_destroy(r->layers[i].bng[g]);
    free(r->layers[i].bng);
    mnt_pool_destroy(r->layers[i].pool);
  }
  for (int i = 0; i < r->nact && r->act; i++)
    if (i > 0) free(r->act[i]);
  if (r->dact) free(r->dact[r->nact - 1]);
  for (int i = 0; i < r->npool; i++) free(r->pool[i].p);
  free(r->pool);
  free(r->act); free(r->dact); free(r->act_n); free(r->written); free(r->labels);
  free(r->bn_save); free(r->bn_tmp); free(r->bn_run); free(r->w); free(r->g); free(r->m); free(r->bn); free(r->scratch);
  free(r->layers); free(r->params); free(r->stats);
  free(r);
}

int mnt_resnet_forward(mnt_resnet *r, const float *x, int train) {
  r->act[0] = (float *)x;
  for (int i = 0; i < r->nlayers; i++) {
    mnt_layer *l = &r->layers[i];
    const float *in = r->act[l->in];
    float *out = r->act[l->out];
    size_t n = r->act_n[l->out];
    switch (l->kind) {
      case OP_CONV: MNT_CHECK(mnt_conv_forward(l->conv, in, r->w + r->params[l->p0].off, out)); break;
      case OP_BN: {
        const float *gm = r->w + r->params[l->p0].off, *bt = r->w + r->params[l->p1].off;
        float *rm = r->bn + r->stats[l->s0].off, *rv = r->bn + r->stats[l->s1].off;
        size_t per = n / (size_t)r->batch * (size_t)r->bn_group; /* floats per BN group */
        int G = r->batch / r->bn_group, C = l->C;
        /* G groups update the running statistics as G ranks do: each from the same old values, then
         * averaged (what averaging over ranks gives), not G momentum updates in a row */
        float *old = r->bn_run, *sum = r->bn_run + 2 * C;
        if (train && G > 1) {
          memcpy(old, rm, (size_t)C * sizeof(float));
          memcpy(old + C, rv, (size_t)C * sizeof(float));
          memset(sum, 0, 2 * (size_t)C * sizeof(float));
        }
        for (int g = 0; g < G; g++) {
          float *save = r->bn_save + l->save + 2 * (size_t)C * (size_t)g;
          if (train && G > 1 && g > 0) {
            memcpy(rm, old, (size_t)C * sizeof(float));
            memcpy(rv, old + C, (size_t)C * sizeof(float));
          }
          if (train)
            MNT_CHECK(mnt_bn_forward_train(l->bng[g], in + g * per, gm, bt, out + g * per, save, save + C, rm, rv, 0.1f));
          else
            MNT_CHECK(mnt_bn_forward_infer(l->bng[g], in + g * per, gm, bt, out + g * per, rm, rv));
          if (train && G > 1)
            for (int c = 0; c < C; c++) {
              sum[c] += rm[c];
              sum[C + c] += rv[c];
            }
        }
        if (train && G > 1)
          for (int c = 0; c < C; c++) {
            rm[c] = sum[c] / (float)G;
            rv[c] = sum[C + c] / (float)G;
          }
        break;
      }
      case OP_RELU: mnt_relu_forward(in, out, n); break;
      case OP_ADD: mnt_add_forward(in, r->act[l->in2], out, n); break;
      case OP_MAXPOOL: MNT_CHECK(mnt_pool_forward(l->pool, in, out)); break;
      case OP_GAP: mnt_gap_forward(in, out, r->batch, l->inC, l->inH * l->inW); break;
      case OP_FC:
        MNT_CHECK(mnt_fc_forward(in, r->w + r->params[l->p0].off, r->w + r->params[l->p1].off, out, r->batch, l->inC,
                                 r->classes));
        break;
    }
  }
  return MNT_OK;
}

const float *mnt_resnet_logits(const mnt_resnet *r) { return r->act[r->nact - 1]; }

float mnt_resnet_loss(mnt_resnet *r, const int32_t *labels, int *top1, int *top5) {
  memcpy(r->labels, labels, (size_t)r->batch * sizeof *labels);
  r->loss = mnt_softmax_xent(r->act[r->nact - 1], labels, r->dact[r->nact - 1], r->batch, r->classes,
                             r->label_smoothing, top1, top5);
  return r->loss;
}

/* the smallest free pooled buffer of at least n floats (a new one if none) */
static float *acquire(mnt_resnet *r, size_t n) {
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
    float *p = malloc(n * sizeof(float));
    if (!p) return NULL;
    r->pool[r->npool] = (struct mnt_gradbuf){p, n, 0};
    best = r->npool++;
  }
  r->pool[best].used = 1;
  return r->pool[best].p;
}

static void release(mnt_resnet *r, int a) {
  if (a == r->nact - 1 || !r->dact[a]) return; /* dlogits stays */
  for (int i = 0; i < r->npool; i++)
    if (r->pool[i].p == r->dact[a]) r->pool[i].used = 0;
  r->dact[a] = NULL;
}

/* Where a layer writes its input gradient: straight into dact[in] (taken from the pool) when it
 * is the first contributor this pass, otherwise into scratch, added afterwards by finish_dx. */
static float *dx_target(mnt_resnet *r, int in) {
  if (in == 0) return NULL; /* the input image needs no gradient */
  if (r->written[in]) return r->scratch;
  if (!r->dact[in]) r->dact[in] = acquire(r, r->act_n[in]);
  return r->dact[in];
}
static void finish_dx(mnt_resnet *r, int in, float *t) {
  if (!t) return;
  if (t == r->scratch) mnt_acc(r->dact[in], t, r->act_n[in]);
  r->written[in] = 1;
}

static void ready(mnt_resnet *r, int p) {
  if (r->grad_ready) r->grad_ready(r->grad_ctx, r->params[p].off, r->params[p].n);
}

int mnt_resnet_backward(mnt_resnet *r) {
  memset(r->written, 0, (size_t)r->nact * sizeof *r->written);
  for (int a = 0; a < r->nact; a++) release(r, a);
  r->written[r->nact - 1] = 1;
  for (int i = r->nlayers - 1; i >= 0; i--) {
    mnt_layer *l = &r->layers[i];
    const float *dy = r->dact[l->out];
    float *dx = dx_target(r, l->in);
    if (l->in != 0 && !dx) {
      MNT_ERR("out of memory for a gradient of %zu floats", r->act_n[l->in]);
      return MNT_ENOMEM;
    }
    switch (l->kind) {
      case OP_CONV:
        MNT_CHECK(mnt_conv_backward(l->conv, r->act[l->in], r->w + r->params[l->p0].off, dy, dx,
                                    r->g + r->params[l->p0].off));
        ready(r, l->p0);
        break;
      case OP_BN: {
        size_t per = r->act_n[l->out] / (size_t)r->batch * (size_t)r->bn_group;
        float *dg = r->g + r->params[l->p0].off, *db = r->g + r->params[l->p1].off, *tmp = r->bn_tmp;
        for (int g = 0; g < r->batch / r->bn_group; g++) {
          const float *save = r->bn_save + l->save + 2 * (size_t)l->C * (size_t)g;
          float *dxg = (dx ? dx : r->scratch) + g * per;
          MNT_CHECK(mnt_bn_backward(l->bng[g], r->act[l->in] + g * per, dy + g * per, r->w + r->params[l->p0].off,
                                    save, save + l->C, dxg, g ? tmp : dg, g ? tmp + l->C : db));
          if (g)
            for (int k = 0; k < l->C; k++) dg[k] += tmp[k], db[k] += tmp[l->C + k];
        }
        ready(r, l->p1);
        ready(r, l->p0);
        break;
      }
      case OP_RELU: if (dx) mnt_relu_backward(r->act[l->out], dy, dx, r->act_n[l->out]); break;
      case OP_ADD: {
        if (dx) memcpy(dx, dy, r->act_n[l->out] * sizeof(float));
        finish_dx(r, l->in, dx);
        float *dx2 = dx_target(r, l->in2);
        if (dx2) memcpy(dx2, dy, r->act_n[l->out] * sizeof(float));
        finish_dx(r, l->in2, dx2);
        release(r, l->out);
        continue;
      }
      case OP_MAXPOOL: if (dx) MNT_CHECK(mnt_pool_backward(l->pool, dy, dx)); break;
      case OP_GAP: if (dx) mnt_gap_backward(dy, dx, r->batch, l->inC, l->inH * l->inW); break;
      case OP_FC:
        MNT_CHECK(mnt_fc_backward(r->act[l->in], r->w + r->params[l->p0].off, dy, dx, r->g + r->params[l->p0].off,
                                  r->g + r->params[l->p1].off, r->batch, l->inC, r->classes));
        ready(r, l->p1);
        ready(r, l->p0);
        break;
    }
    finish_dx(r, l->in, dx);
    release(r, l->out); /* every consumer of this output came later in forward: all done */
  }
  return MNT_OK;
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
