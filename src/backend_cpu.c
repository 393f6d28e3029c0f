/* backend_cpu.c — the CPU compute backend on oneDNN 2.x (see backend.h). Primitives are created
 * once per layer shape; every step only binds the data pointers and executes. */
#include <oneapi/dnnl/dnnl.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "log.h"

struct mnt_backend {
  dnnl_engine_t eng;
  dnnl_stream_t strm;
};

/* Activations with a channel count divisible by the block are kept blocked (nChw16c on AVX-512,
 * nChw8c otherwise), the layout oneDNN's direct convolutions run fastest on; the rest (the
 * 3-channel input image) stay NCHW. */
static int g_block;
int mnt_act_block(void) {
  if (!g_block) g_block = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core ? 16 : 8;
  return g_block;
}
static dnnl_format_tag_t act_tag(int C) {
  int b = mnt_act_block();
  return C % b ? dnnl_nchw : b == 16 ? dnnl_nChw16c : dnnl_nChw8c;
}

#define DNNL_TRY(call)                                                  \
  do {                                                                  \
    dnnl_status_t s_ = (call);                                          \
    if (s_ != dnnl_success) {                                           \
      MNT_ERR("oneDNN: %s failed with status %d", #call, (int)s_);      \
      return MNT_ESYS;                                                  \
    }                                                                   \
  } while (0)

int mnt_backend_create(mnt_backend **out) {
  mnt_backend *b = calloc(1, sizeof *b);
  if (!b) return MNT_ENOMEM;
  if (dnnl_engine_create(&b->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&b->strm, b->eng, dnnl_stream_default_flags) != dnnl_success) {
    MNT_ERR("oneDNN: could not create a CPU engine and stream");
    free(b);
    return MNT_ESYS;
  }
  *out = b;
  return MNT_OK;
}

void mnt_backend_destroy(mnt_backend *b) {
  if (!b) return;
  dnnl_stream_destroy(b->strm);
  dnnl_engine_destroy(b->eng);
  free(b);
}

/* A primitive with its memory objects, bound to our pointers at each execution. */
typedef struct prim {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
} prim;

static int prim_make(mnt_backend *b, const void *op_desc, const_dnnl_primitive_desc_t hint, prim *out) {
  DNNL_TRY(dnnl_primitive_desc_create(&out->pd, op_desc, NULL, b->eng, hint));
  DNNL_TRY(dnnl_primitive_create(&out->p, out->pd));
  return MNT_OK;
}

static void prim_free(prim *p) {
  if (p->p) dnnl_primitive_destroy(p->p);
  if (p->pd) dnnl_primitive_desc_destroy(p->pd);
  p->p = NULL;
  p->pd = NULL;
}

/* Execute with (arg id, memory desc, pointer) triples; memories wrap our buffers. */
typedef struct { int arg; const dnnl_memory_desc_t *md; const void *ptr; } bind;

static int run(mnt_backend *b, prim *p, int n, const bind *binds) {
  dnnl_exec_arg_t args[12];
  dnnl_memory_t mem[12];
  int st = MNT_OK;
  for (int i = 0; i < n; i++) {
    if (dnnl_memory_create(&mem[i], binds[i].md, b->eng, (void *)binds[i].ptr) != dnnl_success) {
      MNT_ERR("oneDNN: memory_create for argument %d failed", binds[i].arg);
      for (int j = 0; j < i; j++) dnnl_memory_destroy(mem[j]);
      return MNT_ESYS;
    }
    args[i].arg = binds[i].arg;
    args[i].memory = mem[i];
  }
  dnnl_status_t es = dnnl_primitive_execute(p->p, b->strm, n, args);
  if (es == dnnl_success) es = dnnl_stream_wait(b->strm);
  if (es != dnnl_success) {
    MNT_ERR("oneDNN: primitive execution failed with status %d", (int)es);
    st = MNT_ESYS;
  }
  for (int i = 0; i < n; i++) dnnl_memory_destroy(mem[i]);
  return st;
}

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* ---- convolution ------------------------------------------------------------------------ */
struct mnt_conv {
  mnt_backend *b;
  int N, C, H, W, K, R, s, p, OH, OW;
  dnnl_memory_desc_t x, w, y;       /* x, y: activation layouts; w: OIHW (the slab) */
  dnnl_memory_desc_t wf, wbd, dwb;  /* weights as forward / backward-data / backward-weights want them */
  float *wf_buf, *wbd_buf, *dwb_buf; /* NULL where the format is OIHW itself */
  prim fwd, bwd_data, bwd_w;
  prim to_wf, to_wbd, from_dwb;     /* reorders (unused where formats agree) */
};

static int make_reorder(mnt_backend *b, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, prim *out) {
  DNNL_TRY(dnnl_reorder_primitive_desc_create(&out->pd, from, b->eng, to, b->eng, NULL));
  DNNL_TRY(dnnl_primitive_create(&out->p, out->pd));
  return MNT_OK;
}

/* the weights format a primitive wants; a buffer and a reorder when it is not OIHW */
static int weights_view(mnt_conv *c, const prim *p, dnnl_query_t q, dnnl_memory_desc_t *md, float **buf,
                        prim *re, int to_prim) {
  *md = *dnnl_primitive_desc_query_md(p->pd, q, 0);
  if (dnnl_memory_desc_equal(md, &c->w)) return MNT_OK;
  *buf = aligned_alloc(64, (dnnl_memory_desc_get_size(md) + 63) / 64 * 64);
  if (!*buf) return MNT_ENOMEM;
  return to_prim ? make_reorder(c->b, &c->w, md, re) : make_reorder(c->b, md, &c->w, re);
}

int mnt_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, mnt_conv **out) {
  mnt_conv *c = calloc(1, sizeof *c);
  if (!c) return MNT_ENOMEM;
  *c = (mnt_conv){.b = b, .N = N, .C = C, .H = H, .W = W, .K = K, .R = R, .s = s, .p = p};
  c->OH = out_dim(H, R, s, p);
  c->OW = out_dim(W, R, s, p);
  if (c->OH < 1 || c->OW < 1) {
    MNT_ERR("convolution %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    free(c);
    return MNT_EARG;
  }
  dnnl_dims_t xd = {N, C, H, W}, wd = {K, C, R, R}, yd = {N, K, c->OH, c->OW};
  dnnl_dims_t st = {s, s}, pl = {p, p};
  /* right padding as oneDNN wants it: what PyTorch's floor division implies */
  dnnl_dims_t pr = {(c->OH - 1) * s + R - H - p, (c->OW - 1) * s + R - W - p};
  dnnl_memory_desc_t wany;
  int rc = MNT_ESYS;
  if (dnnl_memory_desc_init_by_tag(&c->x, 4, xd, dnnl_f32, act_tag(C)) ||
      dnnl_memory_desc_init_by_tag(&c->w, 4, wd, dnnl_f32, dnnl_oihw) ||
      dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any) ||
      dnnl_memory_desc_init_by_tag(&c->y, 4, yd, dnnl_f32, act_tag(K)))
    goto fail;
  dnnl_convolution_desc_t fd, bd, bw;
  if (dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &c->x, &wany, NULL,
                                         &c->y, st, pl, pr) ||
      dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &c->x, &wany, &c->y, st, pl, pr) ||
      dnnl_convolution_backward_weights_desc_init(&bw, dnnl_convolution_direct, &c->x, &wany, NULL, &c->y, st, pl,
                                                  pr))
    goto fail;
  if ((rc = prim_make(b, &fd, NULL, &c->fwd)) || (rc = prim_make(b, &bd, c->fwd.pd, &c->bwd_data)) ||
      (rc = prim_make(b, &bw, c->fwd.pd, &c->bwd_w)))
    goto fail;
  if ((rc = weights_view(c, &c->fwd, dnnl_query_weights_md, &c->wf, &c->wf_buf, &c->to_wf, 1)) ||
      (rc = weights_view(c, &c->bwd_data, dnnl_query_weights_md, &c->wbd, &c->wbd_buf, &c->to_wbd, 1)) ||
      (rc = weights_view(c, &c->bwd_w, dnnl_query_diff_weights_md, &c->dwb, &c->dwb_buf, &c->from_dwb, 0)))
    goto fail;
  *out = c;
  return MNT_OK;
fail:
  MNT_ERR("could not set up a %dx%d convolution %d->%d channels, stride %d, on %dx%d", R, R, C, K, s, H, W);
  mnt_conv_destroy(c);
  return rc ? rc : MNT_ESYS;
}

void mnt_conv_out_hw(const mnt_conv *c, int *OH, int *OW) {
  *OH = c->OH;
  *OW = c->OW;
}

static int reorder(mnt_backend *b, prim *re, const dnnl_memory_desc_t *from_md, const void *from,
                   const dnnl_memory_desc_t *to_md, void *to) {
  bind bs[] = {{DNNL_ARG_FROM, from_md, from}, {DNNL_ARG_TO, to_md, to}};
  return run(b, re, 2, bs);
}

int mnt_conv_forward(mnt_conv *c, const float *x, const float *w, float *y) {
  const float *wf = w;
  if (c->wf_buf) {
    MNT_CHECK(reorder(c->b, &c->to_wf, &c->w, w, &c->wf, c->wf_buf));
    wf = c->wf_buf;
  }
  bind bs[] = {{DNNL_ARG_SRC, &c->x, x}, {DNNL_ARG_WEIGHTS, &c->wf, wf}, {DNNL_ARG_DST, &c->y, y}};
  return run(c->b, &c->fwd, 3, bs);
}

int mnt_conv_backward(mnt_conv *c, const float *x, const float *w, const float *dy, float *dx, float *dw) {
  bind bw[] = {{DNNL_ARG_SRC, &c->x, x}, {DNNL_ARG_DIFF_DST, &c->y, dy},
               {DNNL_ARG_DIFF_WEIGHTS, &c->dwb, c->dwb_buf ? c->dwb_buf : dw}};
  MNT_CHECK(run(c->b, &c->bwd_w, 3, bw));
  if (c->dwb_buf) MNT_CHECK(reorder(c->b, &c->from_dwb, &c->dwb, c->dwb_buf, &c->w, dw));
  if (!dx) return MNT_OK;
  const float *wb = w;
  if (c->wbd_buf) { /* forward's reordered copy serves when the formats agree */
    if (c->wf_buf && dnnl_memory_desc_equal(&c->wbd, &c->wf)) wb = c->wf_buf;
    else {
      MNT_CHECK(reorder(c->b, &c->to_wbd, &c->w, w, &c->wbd, c->wbd_buf));
      wb = c->wbd_buf;
    }
  }
  bind bd[] = {{DNNL_ARG_DIFF_DST, &c->y, dy}, {DNNL_ARG_WEIGHTS, &c->wbd, wb}, {DNNL_ARG_DIFF_SRC, &c->x, dx}};
  return run(c->b, &c->bwd_data, 3, bd);
}

void mnt_conv_destroy(mnt_conv *c) {
  if (!c) return;
  prim_free(&c->fwd);
  prim_free(&c->bwd_data);
  prim_free(&c->bwd_w);
  prim_free(&c->to_wf);
  prim_free(&c->to_wbd);
  prim_free(&c->from_dwb);
  free(c->wf_buf);
  free(c->wbd_buf);
  free(c->dwb_buf);
  free(c);
}

/* ---- batch normalization ------------------------------------------------------------------ */
struct mnt_bn {
  mnt_backend *b;
  int N, C, HW;
  float eps;
  int relu;
  dnnl_memory_desc_t x, c1, ws;
  void *workspace; /* fused ReLU: which outputs were clipped, from forward to backward */
  prim fwd, infer, bwd;
};

int mnt_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, mnt_bn **out) {
  mnt_bn *bn = calloc(1, sizeof *bn);
  if (!bn) return MNT_ENOMEM;
  *bn = (mnt_bn){.b = b, .N = N, .C = C, .HW = H * W, .eps = eps, .relu = fuse_relu};
  dnnl_dims_t xd = {N, C, H, W}, cd = {C};
  unsigned flags = dnnl_use_scale | dnnl_use_shift | (fuse_relu ? dnnl_fuse_norm_relu : 0u);
  dnnl_batch_normalization_desc_t fd, id, bd;
  int rc = MNT_ESYS;
  if (dnnl_memory_desc_init_by_tag(&bn->x, 4, xd, dnnl_f32, act_tag(C)) ||
      dnnl_memory_desc_init_by_tag(&bn->c1, 1, cd, dnnl_f32, dnnl_a) ||
      dnnl_batch_normalization_forward_desc_init(&fd, dnnl_forward_training, &bn->x, eps, flags) ||
      dnnl_batch_normalization_forward_desc_init(&id, dnnl_forward_inference, &bn->x, eps,
                                                 flags | dnnl_use_global_stats) ||
      dnnl_batch_normalization_backward_desc_init(&bd, dnnl_backward, &bn->x, &bn->x, eps, flags))
    goto fail;
  if ((rc = prim_make(b, &fd, NULL, &bn->fwd)) || (rc = prim_make(b, &id, NULL, &bn->infer)) ||
      (rc = prim_make(b, &bd, bn->fwd.pd, &bn->bwd)))
    goto fail;
  if (fuse_relu) {
    bn->ws = *dnnl_primitive_desc_query_md(bn->fwd.pd, dnnl_query_workspace_md, 0);
    if (!(bn->workspace = malloc(dnnl_memory_desc_get_size(&bn->ws) + 64))) {
      rc = MNT_ENOMEM;
      goto fail;
    }
  }
  *out = bn;
  return MNT_OK;
fail:
  MNT_ERR("could not set up batch normalization over %d channels of %dx%dx%d", C, N, H, W);
  mnt_bn_destroy(bn);
  return rc ? rc : MNT_ESYS;
}

int mnt_bn_forward_train(mnt_bn *bn, const float *x, const float *gamma, const float *beta, float *y,
                         float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum) {
  bind bs[] = {{DNNL_ARG_SRC, &bn->x, x},         {DNNL_ARG_SCALE, &bn->c1, gamma},
               {DNNL_ARG_SHIFT, &bn->c1, beta},   {DNNL_ARG_DST, &bn->x, y},
               {DNNL_ARG_MEAN, &bn->c1, save_mean}, {DNNL_ARG_VARIANCE, &bn->c1, save_var},
               {DNNL_ARG_WORKSPACE, &bn->ws, bn->workspace}};
  MNT_CHECK(run(bn->b, &bn->fwd, bn->relu ? 7 : 6, bs));
  double m = (double)bn->N * bn->HW;
  float unbias = m > 1 ? (float)(m / (m - 1)) : 1.0f;
  for (int c = 0; c < bn->C; c++) {
    run_mean[c] = (1 - momentum) * run_mean[c] + momentum * save_mean[c];
    run_var[c] = (1 - momentum) * run_var[c] + momentum * save_var[c] * unbias;
  }
  return MNT_OK;
}

int mnt_bn_forward_infer(mnt_bn *bn, const float *x, const float *gamma, const float *beta, float *y,
                         const float *run_mean, const float *run_var) {
  bind bs[] = {{DNNL_ARG_SRC, &bn->x, x},         {DNNL_ARG_SCALE, &bn->c1, gamma},
               {DNNL_ARG_SHIFT, &bn->c1, beta},   {DNNL_ARG_DST, &bn->x, y},
               {DNNL_ARG_MEAN, &bn->c1, run_mean}, {DNNL_ARG_VARIANCE, &bn->c1, run_var}};
  return run(bn->b, &bn->infer, 6, bs);
}

int mnt_bn_backward(mnt_bn *bn, const float *x, const float *dy, const float *gamma, const float *save_mean,
                    const float *save_var, float *dx, float *dgamma, float *dbeta) {
  bind bs[] = {{DNNL_ARG_SRC, &bn->x, x},           {DNNL_ARG_DIFF_DST, &bn->x, dy},
               {DNNL_ARG_SCALE, &bn->c1, gamma},     {DNNL_ARG_SHIFT, &bn->c1, gamma}, /* 2.6 insists; unread */
               {DNNL_ARG_MEAN, &bn->c1, save_mean},
               {DNNL_ARG_VARIANCE, &bn->c1, save_var}, {DNNL_ARG_DIFF_SRC, &bn->x, dx},
               {DNNL_ARG_DIFF_SCALE, &bn->c1, dgamma}, {DNNL_ARG_DIFF_SHIFT, &bn->c1, dbeta},
               {DNNL_ARG_WORKSPACE, &bn->ws, bn->workspace}};
  return run(bn->b, &bn->bwd, bn->relu ? 10 : 9, bs);
}

void mnt_bn_destroy(mnt_bn *bn) {
  if (!bn) return;
  prim_free(&bn->fwd);
  prim_free(&bn->infer);
  prim_free(&bn->bwd);
  free(bn->workspace);
  free(bn);
}

/* ---- max pooling ----------------------------------------------------------------------------- */
struct mnt_pool {
  mnt_backend *b;
  int OH, OW;
  dnnl_memory_desc_t x, y, ws;
  void *workspace;
  prim fwd, bwd;
};

int mnt_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, mnt_pool **out) {
  mnt_pool *pl = calloc(1, sizeof *pl);
  if (!pl) return MNT_ENOMEM;
  pl->b = b;
  pl->OH = out_dim(H, R, s, p);
  pl->OW = out_dim(W, R, s, p);
  if (pl->OH < 1 || pl->OW < 1) {
    MNT_ERR("max pooling %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    free(pl);
    return MNT_EARG;
  }
  dnnl_dims_t xd = {N, C, H, W}, yd = {N, C, pl->OH, pl->OW}, st = {s, s}, k = {R, R}, pa = {p, p};
  dnnl_dims_t pr = {(pl->OH - 1) * s + R - H - p, (pl->OW - 1) * s + R - W - p};
  dnnl_pooling_desc_t fd, bd;
  int rc = MNT_ESYS;
  if (dnnl_memory_desc_init_by_tag(&pl->x, 4, xd, dnnl_f32, act_tag(C)) ||
      dnnl_memory_desc_init_by_tag(&pl->y, 4, yd, dnnl_f32, act_tag(C)) ||
      dnnl_pooling_forward_desc_init(&fd, dnnl_forward_training, dnnl_pooling_max, &pl->x, &pl->y, st, k, pa, pr) ||
      dnnl_pooling_backward_desc_init(&bd, dnnl_pooling_max, &pl->x, &pl->y, st, k, pa, pr))
    goto fail;
  if ((rc = prim_make(b, &fd, NULL, &pl->fwd)) || (rc = prim_make(b, &bd, pl->fwd.pd, &pl->bwd))) goto fail;
  pl->ws = *dnnl_primitive_desc_query_md(pl->fwd.pd, dnnl_query_workspace_md, 0);
  pl->workspace = malloc(dnnl_memory_desc_get_size(&pl->ws) + 64);
  if (!pl->workspace) {
    rc = MNT_ENOMEM;
    goto fail;
  }
  *out = pl;
  return MNT_OK;
fail:
  MNT_ERR("could not set up max pooling %dx%d stride %d on %dx%dx%dx%d", R, R, s, N, C, H, W);
  mnt_pool_destroy(pl);
  return rc ? rc : MNT_ESYS;
}

void mnt_pool_out_hw(const mnt_pool *pl, int *OH, int *OW) {
  *OH = pl->OH;
  *OW = pl->OW;
}

int mnt_pool_forward(mnt_pool *pl, const float *x, float *y) {
  bind bs[] = {{DNNL_ARG_SRC, &pl->x, x}, {DNNL_ARG_DST, &pl->y, y}, {DNNL_ARG_WORKSPACE, &pl->ws, pl->workspace}};
  return run(pl->b, &pl->fwd, 3, bs);
}

int mnt_pool_backward(mnt_pool *pl, const float *dy, float *dx) {
  bind bs[] = {{DNNL_ARG_DIFF_DST, &pl->y, dy}, {DNNL_ARG_WORKSPACE, &pl->ws, pl->workspace},
               {DNNL_ARG_DIFF_SRC, &pl->x, dx}};
  return run(pl->b, &pl->bwd, 3, bs);
}

void mnt_pool_destroy(mnt_pool *pl) {
  if (!pl) return;
  prim_free(&pl->fwd);
  prim_free(&pl->bwd);
  free(pl->workspace);
  free(pl);
}

/* ---- element-wise and small ops ---------------------------------------------------------- */
void mnt_relu_forward(const float *x, float *y, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

void mnt_relu_backward(const float *y, const float *dy, float *dx, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
}

void mnt_add_forward(const float *a, const float *b, float *y, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void mnt_acc(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* element (n, c, hw) of an activation with C channels, in its layout (see act_tag) */
static size_t act_index(int n, int c, int hw, int C, int HW) {
  int b = mnt_act_block();
  if (C % b) return ((size_t)n * C + (size_t)c) * (size_t)HW + (size_t)hw;
  return (((size_t)n * (size_t)(C / b) + (size_t)(c / b)) * (size_t)HW + (size_t)hw) * (size_t)b + (size_t)(c % b);
}

void mnt_gap_forward(const float *x, float *y, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++) {
    int n = i / C, c = i % C;
    float s = 0;
    for (int j = 0; j < HW; j++) s += x[act_index(n, c, j, C, HW)];
    y[i] = s / (float)HW;
  }
}

void mnt_gap_backward(const float *dy, float *dx, int N, int C, int HW) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++) {
    int n = i / C, c = i % C;
    float g = dy[i] / (float)HW;
    for (int j = 0; j < HW; j++) dx[act_index(n, c, j, C, HW)] = g;
  }
}

int mnt_fc_forward(const float *x, const float *w, const float *bias, float *y, int N, int I, int O) {
  for (int n = 0; n < N; n++) memcpy(y + (size_t)n * O, bias, (size_t)O * sizeof(float));
  if (dnnl_sgemm('N', 'T', N, O, I, 1.0f, x, I, w, I, 1.0f, y, O) != dnnl_success) {
    MNT_ERR("oneDNN sgemm failed (fully connected %d -> %d)", I, O);
    return MNT_ESYS;
  }
  return MNT_OK;
}

int mnt_fc_backward(const float *x, const float *w, const float *dy, float *dx, float *dw, float *dbias, int N,
                    int I, int O) {
  /* dw[O,I] = dy^T[O,N] x[N,I]; dx[N,I] = dy[N,O] w[O,I]; dbias = sum over N */
  if (dnnl_sgemm('T', 'N', O, I, N, 1.0f, dy, O, x, I, 0.0f, dw, I) != dnnl_success ||
      (dx && dnnl_sgemm('N', 'N', N, I, O, 1.0f, dy, O, w, I, 0.0f, dx, I) != dnnl_success)) {
    MNT_ERR("oneDNN sgemm failed (fully connected backward %d -> %d)", I, O);
    return MNT_ESYS;
  }
  for (int o = 0; o < O; o++) {
    float s = 0;
    for (int n = 0; n < N; n++) s += dy[(size_t)n * O + o];
    dbias[o] = s;
  }
  return MNT_OK;
}

float mnt_softmax_xent(const float *logits, const int32_t *labels, float *dlogits, int N, int classes, float smoothing,
                       int *top1, int *top5) {
  double loss = 0, on = 1.0 - smoothing, off = (double)smoothing / classes;
  int t1 = 0, t5 = 0;
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * classes;
    int y = labels[n];
    if (y < 0 || y >= classes) return NAN;
    float mx = -FLT_MAX;
    for (int k = 0; k < classes; k++) mx = z[k] > mx ? z[k] : mx;
    double s = 0, zsum = 0;
    for (int k = 0; k < classes; k++) {
      s += exp((double)(z[k] - mx));
      zsum += z[k];
    }
    double lse = log(s) + mx;
    loss += on * (lse - z[y]) + off * (classes * lse - zsum); /* target (1-e) onehot + e/K */
    int above = 0; /* classes scoring higher than the label: rank of the label */
    for (int k = 0; k < classes; k++) above += z[k] > z[y];
    t1 += above < 1;
    t5 += above < 5;
    if (dlogits)
      for (int k = 0; k < classes; k++)
        dlogits[(size_t)n * classes + k] = (float)((exp((double)z[k] - lse) - on * (k == y) - off) / N);
  }
  if (top1) *top1 = t1;
  if (top5) *top5 = t5;
  return (float)(loss / N);
}

void mnt_sgd_step(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * w[i];
    float v = first ? d : mu * m[i] + d;
    m[i] = v;
    w[i] -= lr * v;
  }
}
