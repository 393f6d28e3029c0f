/* backend_cpu.c — the CPU compute backend on oneDNN 2.6 or 3.x (see backend.h; onednn.h is where the two
 * APIs differ): memory is the host's,
 * every op runs synchronously (the "stream" is the calling thread, mnt_stream NULL). Primitives are
 * created once per layer shape; every step only binds the data pointers and executes.
 * Precision. fp32: everything fp32. bf16 (--precision bf16): activations and their gradients are
 * bf16, and so are the convolutions' inputs (a bf16 copy of the weights, made by the reorder into
 * the layout each pass wants, once per step); weight gradients, batch-norm scale, shift and
 * statistics stay fp32 (oneDNN's bf16 primitives take and give them so), as do the parameters,
 * momentum and the loss. oneDNN runs bf16 natively on avx512_core_bf16 (vdpbf16ps) and
 * avx512_core_amx (tiles), emulates it on plain avx512_core, and has no bf16 kernels below
 * AVX-512: there --precision bf16 is refused (mnt_backend_cpu_create). */
#include <oneapi/dnnl/dnnl_debug.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/backend/backend.h"
#include "src/check.h"
#include "src/log.h"
#include "src/backend/cpu/cpu_ops.h"
#include "src/backend/cpu/onednn.h"
#include "src/dtype.h"
#include "src/env.h"
#include "src/simd.h"

typedef struct cpu_impl {
  dnnl_engine_t eng;
  dnnl_stream_t strm;
  int plan_only;             /* layers choose implementations only (mnt_backend_opts.plan_only) */
  dnnl_data_type_t adt;      /* the activations' type: f32, or bf16 */
  int block;                 /* channels per vector block (16 on AVX-512, 8 below) */
  dnnl_format_tag_t layout;  /* activations with a multiple of block channels: nChw16c, nChw8c or nhwc */
  long long reorders[2];     /* reorders run so far: [0] activations, [1] weights (mnt_be_reorders) */
  float *fbuf;               /* bf16: fp32 scratch of the fully connected layer and the loss */
  size_t fbuf_n;
} cpu_impl;
#define IMPL(b) ((cpu_impl *)(b)->impl)

/* The ISA oneDNN runs on. dnnl_cpu_isa_t is a set of bits (avx2_vnni, 0x407, is numerically above
 * avx512_core, 0x27, without containing it), so ISAs are compared as sets. */
static int isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t want) { return ((unsigned)isa & (unsigned)want) == (unsigned)want; }

const char *mnt_cpu_isa_name(void) {
  static const struct {
    dnnl_cpu_isa_t isa;
    const char *name;
  } NAMES[] = {{dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"},
               {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
               {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
               {dnnl_cpu_isa_avx512_core, "avx512_core"},
               MNT_DNNL_XEON_PHI_ISAS{dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
               {dnnl_cpu_isa_avx2, "avx2"},
               {dnnl_cpu_isa_avx, "avx"},
               {dnnl_cpu_isa_sse41, "sse41"}};
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
    if (isa_has(isa, NAMES[i].isa)) return NAMES[i].name;
  return "no JIT (reference kernels only)";
}

const char *mnt_cpu_onednn_version(void) {
  static char s[64];
  const dnnl_version_t *v = dnnl_version();
  int n = snprintf(s, sizeof s, "%d.%d.%d", v->major, v->minor, v->patch);
  if (v->major != DNNL_VERSION_MAJOR || v->minor != DNNL_VERSION_MINOR || v->patch != DNNL_VERSION_PATCH)
    snprintf(s + n, sizeof s - (size_t)n, " (built with %d.%d.%d)", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR,
             DNNL_VERSION_PATCH);
  return s;
}

/* Activations with a channel count divisible by the block are kept in the layout oneDNN's
 * convolutions run fastest on (cpu_impl.layout: blocked nChw16c on AVX-512, nChw8c below; nhwc where
 * the bf16 kernels want it, AMX's brgemm convolutions); the rest (the 3-channel input image) stay
 * NCHW. */
static dnnl_format_tag_t act_tag(const cpu_impl *c, int C) { return C % c->block ? dnnl_nchw : c->layout; }

/* oneDNN status checks, named as check.h's: MNT_DNNL_OK is an expression (MNT_OK, or the call's
 * text and oneDNN's status name logged at the caller's file:line and MNT_ENOMEM / MNT_ESYS),
 * MNT_DNNL_CHECK returns that status from the caller, MNT_DNNL_CHECK_GOTO stores it in st and
 * jumps to out. */
static int mnt_dnnl_ok_at(dnnl_status_t s, const char *call, const char *file, int line) {
  if (s == dnnl_success) return MNT_OK;
  mnt_log_at(MNT_LOG_ERROR, file, line, "oneDNN: %s failed: %s (%d)", call, dnnl_status2str(s), (int)s);
  return s == dnnl_out_of_memory ? MNT_ENOMEM : MNT_ESYS;
}
#define MNT_DNNL_OK(call) mnt_dnnl_ok_at((call), #call, __FILE__, __LINE__)
#define MNT_DNNL_CHECK(call) MNT_CHECK(MNT_DNNL_OK(call))
#define MNT_DNNL_CHECK_GOTO(call, st, label) MNT_CHECK_GOTO(MNT_DNNL_OK(call), st, label)

/* A primitive with its memory objects, bound to our pointers at each execution. */
typedef struct prim {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
} prim;

static void prim_free(prim *p) {
  if (p->p) dnnl_primitive_destroy(p->p);
  if (p->pd) dnnl_primitive_desc_destroy(p->pd);
  p->p = NULL;
  p->pd = NULL;
}

/* Execute with (arg id, memory desc, pointer) triples; memories wrap our buffers. */
typedef struct {
  int arg;
  md_ref md;
  const void *ptr;
} bind;

static int run_prim(mnt_backend *b, prim *p, int n, const bind *binds) {
  dnnl_exec_arg_t args[12];
  dnnl_memory_t mem[12];
  int st = MNT_OK;
  for (int i = 0; i < n; i++) {
    if (dnnl_memory_create(&mem[i], binds[i].md, IMPL(b)->eng, (void *)binds[i].ptr) != dnnl_success) {
      MNT_ERR("oneDNN: memory_create for argument %d failed", binds[i].arg);
      for (int j = 0; j < i; j++) dnnl_memory_destroy(mem[j]);
      return MNT_ESYS;
    }
    args[i].arg = binds[i].arg;
    args[i].memory = mem[i];
  }
  dnnl_status_t es = dnnl_primitive_execute(p->p, IMPL(b)->strm, n, args);
  if (es == dnnl_success) es = dnnl_stream_wait(IMPL(b)->strm);
  if (es != dnnl_success) {
    MNT_ERR("oneDNN: primitive execution failed with status %d", (int)es);
    st = MNT_ESYS;
  }
  for (int i = 0; i < n; i++) dnnl_memory_destroy(mem[i]);
  return st;
}

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

/* the end of a layer's create: *out = h when st is MNT_OK, else h released */
static int made(int st, void *h, void (*destroy)(void *), void **out) {
  if (st == MNT_OK) *out = h;
  else destroy(h);
  return st;
}

/* what fwd leaves for the backward pass (max pooling's argmax, fused ReLU's mask): *ws and a buffer */
static int alloc_workspace(const prim *fwd, mnt_md *ws, void **buf) {
  MNT_DNNL_CHECK(md_copy(ws, dnnl_primitive_desc_query_md(fwd->pd, dnnl_query_workspace_md, 0)));
  *buf = malloc(dnnl_memory_desc_get_size(MD(*ws)) + 64);
  return *buf ? MNT_OK : MNT_ENOMEM;
}

static int md_equal(md_ref a, md_ref b) { return dnnl_memory_desc_equal(a, b); }

/* ---- choosing implementations ------------------------------------------------------------------
 * oneDNN offers several implementations of each primitive, best first (walked by onednn.h's impl_walk). A
 * reference implementation ("ref:any": plain loops, 100-1000x slower) is never taken while another
 * exists: a layer takes the best non-reference implementation in the activations' own layout, else
 * in another layout (nhwc, then nchw, where the GEMM-based convolutions serve every shape), with
 * the activations reordered around that one pass. Only when nothing else exists does a layer run
 * a reference implementation, and it says so (conv_impl and friends: *slow).
 * Found on oneDNN 2.6 (Debian 12) with AVX2 and no AVX-512: jit:avx2 has no backward-weights for a
 * 3x3 convolution of a 1x1 or 2x2 input (ResNet-18/34 at 32-64 px: layer4) and no backward-data for
 * the 3-channel image (the stem, whose input gradient is never computed); x64:gemm:jit in nchw
 * serves both. Everything else has a jit:avx2 or jit_1x1:avx2 implementation in nChw8c. oneDNN 3.2 and
 * 3.7 choose the same implementations there. */
static int is_ref(const char *impl) { return !strncmp(impl, "ref", 3); }

static const char *impl_name(const_dnnl_primitive_desc_t pd) {
  const char *s = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s) return "?";
  return s;
}

/* The best non-reference implementation of op (*pd), or NULL when there is none; *first: the best
 * implementation whatever it is (NULL when none exists at all), when asked for. */
static int pick_pd(mnt_backend *b, const op_spec *op, const_dnnl_primitive_desc_t hint, dnnl_primitive_desc_t *pd,
                   dnnl_primitive_desc_t *first) {
  *pd = NULL;
  if (first) *first = NULL;
  impl_walk w;
  int st = MNT_DNNL_OK(walk_begin(op, IMPL(b)->eng, hint, &w));
  for (int more = st == MNT_OK && w.pd; more; more = walk_next(&w)) {
    int ref = is_ref(impl_name(w.pd));
    if (ref && (!first || *first)) continue;
    dnnl_primitive_desc_t q = walk_copy(&w);
    if (!q) {
      st = MNT_ENOMEM;
      break;
    }
    if (!ref) {
      *pd = q;
      break;
    }
    *first = q;
  }
  walk_end(&w);
  if (st != MNT_OK && first && *first) {
    dnnl_primitive_desc_destroy(*first);
    *first = NULL;
  }
  return st;
}

/* the best non-reference implementation, else the reference one (*ref set to 1); the primitive is
 * made unless the backend only plans */
static int pick_prim(mnt_backend *b, const op_spec *op, const_dnnl_primitive_desc_t hint, prim *out, int *ref) {
  dnnl_primitive_desc_t first;
  MNT_CHECK(pick_pd(b, op, hint, &out->pd, &first));
  if (!out->pd) {
    if (!first) {
      MNT_ERR("oneDNN has no implementation of this primitive");
      return MNT_ESYS;
    }
    out->pd = first;
    *ref = 1;
  } else if (first) {
    dnnl_primitive_desc_destroy(first);
  }
  if (!IMPL(b)->plan_only) MNT_DNNL_CHECK(dnnl_primitive_create(&out->p, out->pd));
  return MNT_OK;
}

/* ---- convolution ------------------------------------------------------------------------ */
enum { FWD, BWD_DATA, BWD_W, NPASS };
static const char *const PASS_NAME[NPASS] = {"fwd", "bwd-data", "bwd-weights"};

/* One pass of a convolution: its primitive, the activation layouts it runs in (the convolution's own
 * or another, with reorders around it) and the weights' layout it wants (OIHW is the slab's). */
typedef struct conv_pass {
  prim p;
  dnnl_primitive_desc_t hint; /* backward passes: a forward descriptor in the same layouts */
  mnt_md x, y, w;             /* x, y: as this pass runs them; w: (diff) weights */
  int x_alt, y_alt;           /* x / y differ from the convolution's own layouts */
  prim re_x, re_y;            /* reorders between the own and this pass's x / y layouts */
  void *wbuf;                 /* weights in w's layout (and type) when that is not fp32 OIHW */
  prim re_w;
  int ref;
  char impl[64];              /* "jit:avx2", "x64:gemm:jit (nchw)", ... */
} conv_pass;

typedef struct cpu_conv {
  mnt_backend *b;
  int N, C, H, W, K, R, s, p, OH, OW, need_dx;
  dnnl_dims_t strides, pad_l, pad_r;
  mnt_md x, y, w; /* x, y: the activations' own layouts; w: OIHW (the slab) */
  conv_pass pass[NPASS];
  void *xbuf, *ybuf;          /* x / y in a pass's other layout (only when some pass needs one) */
  char impl[200];
} cpu_conv;

static int make_reorder(mnt_backend *b, md_ref from, md_ref to, prim *out) {
  MNT_DNNL_CHECK(dnnl_reorder_primitive_desc_create(&out->pd, from, IMPL(b)->eng, to, IMPL(b)->eng, NULL));
  MNT_DNNL_CHECK(dnnl_primitive_create(&out->p, out->pd));
  return MNT_OK;
}

static const char *tag_name(dnnl_format_tag_t t) {
  return t == dnnl_nhwc ? "nhwc" : t == dnnl_nchw ? "nchw" : t == dnnl_nChw8c ? "nChw8c" : "nChw16c";
}

static const op_kind CONV_OP[NPASS] = {OP_CONV_FWD, OP_CONV_BWD_DATA, OP_CONV_BWD_W};

/* Pass d in activation layouts xm, ym, the weights in any layout (in the activations' type; their
 * gradient fp32: oneDNN accumulates it so in bf16): its best non-reference descriptor (*pd, NULL if
 * none), with *first (when asked) the best of any kind when that is a reference one, and *hint the
 * forward descriptor a backward pass is made with (kept as long as what was made with it; NULL
 * when nothing was). */
static int conv_try(cpu_conv *c, int d, md_ref xm, md_ref ym, dnnl_primitive_desc_t *pd, dnnl_primitive_desc_t *first,
                    dnnl_primitive_desc_t *hint) {
  *pd = *hint = NULL;
  if (first) *first = NULL;
  dnnl_dims_t wd = {c->K, c->C, c->R, c->R};
  mnt_md wa, wf;
  int st = MNT_OK;
  MNT_DNNL_CHECK(md_make(&wa, 4, wd, IMPL(c->b)->adt, dnnl_format_tag_any));
  MNT_DNNL_CHECK_GOTO(md_make(&wf, 4, wd, dnnl_f32, dnnl_format_tag_any), st, out_wa);
  op_spec o = {.kind = CONV_OP[d],
               .src = xm,
               .w = d == BWD_W ? MD(wf) : MD(wa),
               .dst = ym,
               .strides = c->strides,
               .pad_l = c->pad_l,
               .pad_r = c->pad_r};
  if (d != FWD) { /* backward descriptors need a forward one of the same layouts */
    op_spec f = o;
    f.kind = OP_CONV_FWD;
    f.w = MD(wa);
    MNT_DNNL_CHECK_GOTO(op_first(&f, IMPL(c->b)->eng, NULL, hint), st, out);
    if (!*hint) goto out; /* no forward in these layouts: no backward either */
  }
  st = pick_pd(c->b, &o, *hint, pd, first);
  if (first && *first && *pd) {
    dnnl_primitive_desc_destroy(*first);
    *first = NULL;
  }
out:
  if (*hint && (st || (!*pd && !(first && *first)))) {
    dnnl_primitive_desc_destroy(*hint);
    *hint = NULL;
  }
  md_free(&wf);
out_wa:
  md_free(&wa);
  return st;
}

/* Choose pass d's implementation (descriptor only): the best non-reference one in the own layouts,
 * else in nhwc, else in nchw; a reference one only when nothing else exists. */
static int conv_pass_plan(cpu_conv *c, int d) {
  static const dnnl_format_tag_t ALT[] = {dnnl_nhwc, dnnl_nchw};
  conv_pass *ps = &c->pass[d];
  dnnl_primitive_desc_t pd, first, hint;
  MNT_CHECK(conv_try(c, d, MD(c->x), MD(c->y), &pd, &first, &hint));
  const char *alt = NULL;
  mnt_md xm, ym; /* the layouts that serve, when not the own ones */
  dnnl_dims_t xd = {c->N, c->C, c->H, c->W}, yd = {c->N, c->K, c->OH, c->OW};
  for (size_t t = 0; !pd && t < sizeof ALT / sizeof *ALT; t++) {
    dnnl_primitive_desc_t h = NULL;
    dnnl_data_type_t adt = IMPL(c->b)->adt;
    dnnl_status_t sx = md_make(&xm, 4, xd, adt, ALT[t]), sy = md_make(&ym, 4, yd, adt, ALT[t]);
    int st = MNT_DNNL_OK(sx != dnnl_success ? sx : sy);
    if (st == MNT_OK && !(md_equal(MD(xm), MD(c->x)) && md_equal(MD(ym), MD(c->y)))) /* else: tried */
      st = conv_try(c, d, MD(xm), MD(ym), &pd, NULL, &h);
    if (st || !pd) {
      md_free(&xm);
      md_free(&ym);
      if (st == MNT_OK) continue;
      if (first) dnnl_primitive_desc_destroy(first);
      if (hint) dnnl_primitive_desc_destroy(hint);
      return st;
    }
    /* the reference one of the own layouts is not needed */
    if (first) dnnl_primitive_desc_destroy(first);
    if (hint) dnnl_primitive_desc_destroy(hint);
    first = NULL;
    hint = h;
    alt = tag_name(ALT[t]);
  }
  if (!pd && !first) {
    MNT_ERR("oneDNN has no implementation of this convolution's %s pass", PASS_NAME[d]);
    return MNT_ESYS;
  }
  ps->ref = !pd;
  ps->p.pd = pd ? pd : first;
  ps->hint = hint;
  if (alt) {
    ps->x = xm;
    ps->y = ym;
    snprintf(ps->impl, sizeof ps->impl, "%s (%s)", impl_name(ps->p.pd), alt);
  } else {
    MNT_DNNL_CHECK(md_copy(&ps->x, MD(c->x)));
    MNT_DNNL_CHECK(md_copy(&ps->y, MD(c->y)));
    snprintf(ps->impl, sizeof ps->impl, "%s", impl_name(ps->p.pd));
  }
  ps->x_alt = !md_equal(MD(ps->x), MD(c->x));
  ps->y_alt = !md_equal(MD(ps->y), MD(c->y));
  MNT_DNNL_CHECK(
      md_copy(&ps->w,
              dnnl_primitive_desc_query_md(ps->p.pd, d == BWD_W ? dnnl_query_diff_weights_md : dnnl_query_weights_md,
                                           0)));
  return MNT_OK;
}

static void *alloc_like(md_ref m) { return aligned_alloc(64, (dnnl_memory_desc_get_size(m) + 63) / 64 * 64); }

/* pass d's primitive, its reorders and buffers (after conv_pass_plan) */
static int conv_pass_build(cpu_conv *c, int d) {
  conv_pass *ps = &c->pass[d];
  mnt_backend *b = c->b;
  MNT_DNNL_CHECK(dnnl_primitive_create(&ps->p.p, ps->p.pd));
  /* x goes into the pass (fwd, bwd-weights) or comes out of it (bwd-data: dx); y the other way
   * for fwd (y out) and into it for the backward passes (dy) */
  if (ps->x_alt)
    MNT_CHECK(d == BWD_DATA ? make_reorder(b, MD(ps->x), MD(c->x), &ps->re_x)
                            : make_reorder(b, MD(c->x), MD(ps->x), &ps->re_x));
  if (ps->y_alt)
    MNT_CHECK(d == FWD ? make_reorder(b, MD(ps->y), MD(c->y), &ps->re_y)
                       : make_reorder(b, MD(c->y), MD(ps->y), &ps->re_y));
  if (ps->x_alt && !c->xbuf && !(c->xbuf = alloc_like(MD(c->x)))) return MNT_ENOMEM;
  if (ps->y_alt && !c->ybuf && !(c->ybuf = alloc_like(MD(c->y)))) return MNT_ENOMEM;
  if (!md_equal(MD(ps->w), MD(c->w))) {
    if (!(ps->wbuf = alloc_like(MD(ps->w)))) return MNT_ENOMEM;
    MNT_CHECK(d == BWD_W ? make_reorder(b, MD(ps->w), MD(c->w), &ps->re_w)
                         : make_reorder(b, MD(c->w), MD(ps->w), &ps->re_w));
  }
  return MNT_OK;
}

static void conv_destroy(void *h);
static int conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                       void **out) {
  cpu_conv *c = calloc(1, sizeof *c);
  if (!c) return MNT_ENOMEM;
  *c = (cpu_conv){.b = b, .N = N, .C = C, .H = H, .W = W, .K = K, .R = R, .s = s, .p = p, .need_dx = need_dx};
  c->OH = out_dim(H, R, s, p);
  c->OW = out_dim(W, R, s, p);
  if (c->OH < 1 || c->OW < 1) {
    MNT_ERR("convolution %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    free(c);
    return MNT_EARG;
  }
  c->strides[0] = c->strides[1] = s;
  c->pad_l[0] = c->pad_l[1] = p;
  /* right padding as oneDNN wants it: what PyTorch's floor division implies */
  c->pad_r[0] = (c->OH - 1) * s + R - H - p;
  c->pad_r[1] = (c->OW - 1) * s + R - W - p;
  dnnl_dims_t xd = {N, C, H, W}, wd = {K, C, R, R}, yd = {N, K, c->OH, c->OW};
  int st = MNT_OK;
  dnnl_data_type_t adt = IMPL(b)->adt;
  MNT_DNNL_CHECK_GOTO(md_make(&c->x, 4, xd, adt, act_tag(IMPL(b), C)), st, out);
  MNT_DNNL_CHECK_GOTO(md_make(&c->w, 4, wd, dnnl_f32, dnnl_oihw), st, out);
  MNT_DNNL_CHECK_GOTO(md_make(&c->y, 4, yd, adt, act_tag(IMPL(b), K)), st, out);
  size_t at = 0;
  for (int d = 0; d < NPASS; d++) {
    if (d == BWD_DATA && !need_dx) continue;
    MNT_CHECK_GOTO(conv_pass_plan(c, d), st, out);
    if (!IMPL(b)->plan_only) MNT_CHECK_GOTO(conv_pass_build(c, d), st, out);
    at += (size_t)snprintf(c->impl + at, sizeof c->impl - at, "%s%s %s", at ? ", " : "", PASS_NAME[d],
                           c->pass[d].impl);
    if (at >= sizeof c->impl) at = sizeof c->impl - 1;
  }
out:
  if (st != MNT_OK)
    MNT_ERR("could not set up a %dx%d convolution %d->%d channels, stride %d, on %dx%d", R, R, C, K, s, H, W);
  return made(st, c, conv_destroy, out);
}

static const char *conv_impl(void *h, int *slow) {
  cpu_conv *c = h;
  *slow = c->pass[FWD].ref || c->pass[BWD_DATA].ref || c->pass[BWD_W].ref;
  return c->impl;
}

/* what: 0 an activation, 1 weights (counted apart: bench step reports both) */
static int reorder(mnt_backend *b, int what, prim *re, md_ref from_md, const void *from, md_ref to_md, void *to) {
  bind bs[] = {{DNNL_ARG_FROM, from_md, from}, {DNNL_ARG_TO, to_md, to}};
  IMPL(b)->reorders[what]++;
  return run_prim(b, re, 2, bs);
}

/* the weights as pass d wants them: the slab's OIHW or the pass's reordered copy (forward's copy
 * serves backward-data when their layouts agree) */
static int conv_weights(cpu_conv *c, int d, const float *w, const void **out) {
  conv_pass *ps = &c->pass[d];
  *out = w;
  if (!ps->wbuf) return MNT_OK;
  if (d == BWD_DATA && c->pass[FWD].wbuf && md_equal(MD(ps->w), MD(c->pass[FWD].w))) {
    *out = c->pass[FWD].wbuf;
    return MNT_OK;
  }
  MNT_CHECK(reorder(c->b, 1, &ps->re_w, MD(c->w), w, MD(ps->w), ps->wbuf));
  *out = ps->wbuf;
  return MNT_OK;
}

/* an input activation of pass d in the pass's layout: itself, or reordered into buf */
static int conv_in(cpu_conv *c, int alt, prim *re, md_ref own, md_ref theirs, const void *a, void *buf,
                   const void **out) {
  *out = a;
  if (!alt) return MNT_OK;
  MNT_CHECK(reorder(c->b, 0, re, own, a, theirs, buf));
  *out = buf;
  return MNT_OK;
}

static int conv_forward(void *h, const void *x, const float *w, void *y) {
  cpu_conv *c = h;
  conv_pass *ps = &c->pass[FWD];
  const void *wf, *xi;
  MNT_CHECK(conv_weights(c, FWD, w, &wf));
  MNT_CHECK(conv_in(c, ps->x_alt, &ps->re_x, MD(c->x), MD(ps->x), x, c->xbuf, &xi));
  bind bs[] = {{DNNL_ARG_SRC, MD(ps->x), xi},
               {DNNL_ARG_WEIGHTS, MD(ps->w), wf},
               {DNNL_ARG_DST, MD(ps->y), ps->y_alt ? c->ybuf : y}};
  MNT_CHECK(run_prim(c->b, &ps->p, 3, bs));
  if (ps->y_alt) MNT_CHECK(reorder(c->b, 0, &ps->re_y, MD(ps->y), c->ybuf, MD(c->y), y));
  return MNT_OK;
}

static int conv_backward(void *h, const void *x, const float *w, const void *dy, void *dx, float *dw) {
  cpu_conv *c = h;
  if (dx && !c->need_dx) {
    MNT_ERR("internal: the input gradient of a convolution created without one (need_dx 0)");
    return MNT_EARG;
  }
  conv_pass *ps = &c->pass[BWD_W];
  const void *xi, *dyi;
  MNT_CHECK(conv_in(c, ps->x_alt, &ps->re_x, MD(c->x), MD(ps->x), x, c->xbuf, &xi));
  MNT_CHECK(conv_in(c, ps->y_alt, &ps->re_y, MD(c->y), MD(ps->y), dy, c->ybuf, &dyi));
  bind bw[] = {{DNNL_ARG_SRC, MD(ps->x), xi},
               {DNNL_ARG_DIFF_DST, MD(ps->y), dyi},
               {DNNL_ARG_DIFF_WEIGHTS, MD(ps->w), ps->wbuf ? ps->wbuf : dw}};
  MNT_CHECK(run_prim(c->b, &ps->p, 3, bw));
  if (ps->wbuf) MNT_CHECK(reorder(c->b, 1, &ps->re_w, MD(ps->w), ps->wbuf, MD(c->w), dw));
  if (!dx) return MNT_OK;
  ps = &c->pass[BWD_DATA];
  const void *wb;
  MNT_CHECK(conv_weights(c, BWD_DATA, w, &wb));
  MNT_CHECK(conv_in(c, ps->y_alt, &ps->re_y, MD(c->y), MD(ps->y), dy, c->ybuf, &dyi));
  bind bd[] = {{DNNL_ARG_DIFF_DST, MD(ps->y), dyi},
               {DNNL_ARG_WEIGHTS, MD(ps->w), wb},
               {DNNL_ARG_DIFF_SRC, MD(ps->x), ps->x_alt ? c->xbuf : dx}};
  MNT_CHECK(run_prim(c->b, &ps->p, 3, bd));
  if (ps->x_alt) MNT_CHECK(reorder(c->b, 0, &ps->re_x, MD(ps->x), c->xbuf, MD(c->x), dx));
  return MNT_OK;
}

static void conv_destroy(void *h) {
  cpu_conv *c = h;
  if (!c) return;
  for (int d = 0; d < NPASS; d++) {
    conv_pass *ps = &c->pass[d];
    prim_free(&ps->p);
    prim_free(&ps->re_x);
    prim_free(&ps->re_y);
    prim_free(&ps->re_w);
    if (ps->hint) dnnl_primitive_desc_destroy(ps->hint);
    md_free(&ps->x);
    md_free(&ps->y);
    md_free(&ps->w);
    free(ps->wbuf);
  }
  md_free(&c->x);
  md_free(&c->y);
  md_free(&c->w);
  free(c->xbuf);
  free(c->ybuf);
  free(c);
}

/* ---- batch normalization ------------------------------------------------------------------ */
typedef struct cpu_bn {
  mnt_backend *b;
  int N, C, HW;
  float eps;
  int relu;
  mnt_md x, c1, ws;
  void *workspace; /* fused ReLU: which outputs were clipped, from forward to backward */
  prim fwd, infer, bwd;
  int ref;
  char impl[160];
} cpu_bn;

static void bn_destroy(void *h);
static int bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, void **out) {
  cpu_bn *bn = calloc(1, sizeof *bn);
  if (!bn) return MNT_ENOMEM;
  *bn = (cpu_bn){.b = b, .N = N, .C = C, .HW = H * W, .eps = eps, .relu = fuse_relu};
  dnnl_dims_t xd = {N, C, H, W}, cd = {C};
  unsigned flags = dnnl_use_scale | dnnl_use_shift | (fuse_relu ? dnnl_fuse_norm_relu : 0u);
  int st = MNT_OK;
  MNT_DNNL_CHECK_GOTO(md_make(&bn->x, 4, xd, IMPL(b)->adt, act_tag(IMPL(b), C)), st, out);
  MNT_DNNL_CHECK_GOTO(md_make(&bn->c1, 1, cd, dnnl_f32, dnnl_a), st, out);
  op_spec fd = {.kind = OP_BN_FWD, .src = MD(bn->x), .prop = dnnl_forward_training, .eps = eps, .flags = flags};
  op_spec id = fd, bd = fd;
  id.prop = dnnl_forward_inference;
  id.flags |= dnnl_use_global_stats;
  bd.kind = OP_BN_BWD;
  MNT_CHECK_GOTO(pick_prim(b, &fd, NULL, &bn->fwd, &bn->ref), st, out);
  MNT_CHECK_GOTO(pick_prim(b, &id, NULL, &bn->infer, &bn->ref), st, out);
  MNT_CHECK_GOTO(pick_prim(b, &bd, bn->fwd.pd, &bn->bwd, &bn->ref), st, out);
  snprintf(bn->impl, sizeof bn->impl, "fwd %s, infer %s, bwd %s", impl_name(bn->fwd.pd), impl_name(bn->infer.pd),
           impl_name(bn->bwd.pd));
  if (fuse_relu && !IMPL(b)->plan_only) MNT_CHECK_GOTO(alloc_workspace(&bn->fwd, &bn->ws, &bn->workspace), st, out);
out:
  if (st != MNT_OK)
    MNT_ERR("could not set up batch normalization over %d channels of %dx%dx%d", C, N, H, W);
  return made(st, bn, bn_destroy, out);
}

static int bn_forward_train(void *h, const void *x, const float *gamma, const float *beta, void *y,
                            float *save_mean, float *save_var, float *run_mean, float *run_var, float momentum) {
  cpu_bn *bn = h;
  bind bs[] = {{DNNL_ARG_SRC, MD(bn->x), x},
               {DNNL_ARG_SCALE, MD(bn->c1), gamma},
               {DNNL_ARG_SHIFT, MD(bn->c1), beta},
               {DNNL_ARG_DST, MD(bn->x), y},
               {DNNL_ARG_MEAN, MD(bn->c1), save_mean},
               {DNNL_ARG_VARIANCE, MD(bn->c1), save_var},
               {DNNL_ARG_WORKSPACE, MD(bn->ws), bn->workspace}};
  MNT_CHECK(run_prim(bn->b, &bn->fwd, bn->relu ? 7 : 6, bs));
  double m = (double)bn->N * bn->HW;
  float unbias = m > 1 ? (float)(m / (m - 1)) : 1.0f;
  for (int c = 0; c < bn->C; c++) {
    run_mean[c] = (1 - momentum) * run_mean[c] + momentum * save_mean[c];
    run_var[c] = (1 - momentum) * run_var[c] + momentum * save_var[c] * unbias;
  }
  return MNT_OK;
}

static int bn_forward_infer(void *h, const void *x, const float *gamma, const float *beta, void *y,
                            const float *run_mean, const float *run_var) {
  cpu_bn *bn = h;
  bind bs[] = {{DNNL_ARG_SRC, MD(bn->x), x},          {DNNL_ARG_SCALE, MD(bn->c1), gamma},
               {DNNL_ARG_SHIFT, MD(bn->c1), beta},    {DNNL_ARG_DST, MD(bn->x), y},
               {DNNL_ARG_MEAN, MD(bn->c1), run_mean}, {DNNL_ARG_VARIANCE, MD(bn->c1), run_var}};
  return run_prim(bn->b, &bn->infer, 6, bs);
}

static int bn_backward(void *h, const void *x, const void *dy, const float *gamma, const float *save_mean,
                       const float *save_var, void *dx, float *dgamma, float *dbeta) {
  cpu_bn *bn = h;
  bind bs[10] = {{DNNL_ARG_SRC, MD(bn->x), x},
                 {DNNL_ARG_DIFF_DST, MD(bn->x), dy},
                 {DNNL_ARG_SCALE, MD(bn->c1), gamma},
                 {DNNL_ARG_MEAN, MD(bn->c1), save_mean},
                 {DNNL_ARG_VARIANCE, MD(bn->c1), save_var},
                 {DNNL_ARG_DIFF_SRC, MD(bn->x), dx},
                 {DNNL_ARG_DIFF_SCALE, MD(bn->c1), dgamma},
                 {DNNL_ARG_DIFF_SHIFT, MD(bn->c1), dbeta}};
  int n = 8;
  if (BN_BWD_TAKES_SHIFT) bs[n++] = (bind){DNNL_ARG_SHIFT, MD(bn->c1), gamma}; /* 2.6 insists; unread */
  if (bn->relu) bs[n++] = (bind){DNNL_ARG_WORKSPACE, MD(bn->ws), bn->workspace};
  return run_prim(bn->b, &bn->bwd, n, bs);
}

static const char *bn_impl(void *h, int *slow) {
  cpu_bn *bn = h;
  *slow = bn->ref;
  return bn->impl;
}

static void bn_destroy(void *h) {
  cpu_bn *bn = h;
  if (!bn) return;
  prim_free(&bn->fwd);
  prim_free(&bn->infer);
  prim_free(&bn->bwd);
  md_free(&bn->x);
  md_free(&bn->c1);
  md_free(&bn->ws);
  free(bn->workspace);
  free(bn);
}

/* ---- max pooling ----------------------------------------------------------------------------- */
typedef struct cpu_pool {
  mnt_backend *b;
  int OH, OW;
  dnnl_dims_t strides, kernel, pad_l, pad_r;
  mnt_md x, y, ws;
  void *workspace;
  prim fwd, bwd;
  int ref;
  char impl[120];
} cpu_pool;

static void pool_destroy(void *h);
static int pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, void **out) {
  cpu_pool *pl = calloc(1, sizeof *pl);
  if (!pl) return MNT_ENOMEM;
  pl->b = b;
  pl->OH = out_dim(H, R, s, p);
  pl->OW = out_dim(W, R, s, p);
  if (pl->OH < 1 || pl->OW < 1) {
    MNT_ERR("max pooling %dx%d stride %d on a %dx%d input has no output", R, R, s, H, W);
    free(pl);
    return MNT_EARG;
  }
  dnnl_dims_t xd = {N, C, H, W}, yd = {N, C, pl->OH, pl->OW};
  pl->strides[0] = pl->strides[1] = s;
  pl->kernel[0] = pl->kernel[1] = R;
  pl->pad_l[0] = pl->pad_l[1] = p;
  pl->pad_r[0] = (pl->OH - 1) * s + R - H - p;
  pl->pad_r[1] = (pl->OW - 1) * s + R - W - p;
  int st = MNT_OK;
  MNT_DNNL_CHECK_GOTO(md_make(&pl->x, 4, xd, IMPL(b)->adt, act_tag(IMPL(b), C)), st, out);
  MNT_DNNL_CHECK_GOTO(md_make(&pl->y, 4, yd, IMPL(b)->adt, act_tag(IMPL(b), C)), st, out);
  op_spec fd = {.kind = OP_POOL_FWD,
                .src = MD(pl->x),
                .dst = MD(pl->y),
                .strides = pl->strides,
                .kernel = pl->kernel,
                .pad_l = pl->pad_l,
                .pad_r = pl->pad_r};
  op_spec bd = fd;
  bd.kind = OP_POOL_BWD;
  MNT_CHECK_GOTO(pick_prim(b, &fd, NULL, &pl->fwd, &pl->ref), st, out);
  MNT_CHECK_GOTO(pick_prim(b, &bd, pl->fwd.pd, &pl->bwd, &pl->ref), st, out);
  snprintf(pl->impl, sizeof pl->impl, "fwd %s, bwd %s", impl_name(pl->fwd.pd), impl_name(pl->bwd.pd));
  if (!IMPL(b)->plan_only) MNT_CHECK_GOTO(alloc_workspace(&pl->fwd, &pl->ws, &pl->workspace), st, out);
out:
  if (st != MNT_OK)
    MNT_ERR("could not set up max pooling %dx%d stride %d on %dx%dx%dx%d", R, R, s, N, C, H, W);
  return made(st, pl, pool_destroy, out);
}

static int pool_forward(void *h, const void *x, void *y) {
  cpu_pool *pl = h;
  bind bs[] = {{DNNL_ARG_SRC, MD(pl->x), x},
               {DNNL_ARG_DST, MD(pl->y), y},
               {DNNL_ARG_WORKSPACE, MD(pl->ws), pl->workspace}};
  return run_prim(pl->b, &pl->fwd, 3, bs);
}

static int pool_backward(void *h, const void *dy, void *dx) {
  cpu_pool *pl = h;
  bind bs[] = {{DNNL_ARG_DIFF_DST, MD(pl->y), dy},
               {DNNL_ARG_WORKSPACE, MD(pl->ws), pl->workspace},
               {DNNL_ARG_DIFF_SRC, MD(pl->x), dx}};
  return run_prim(pl->b, &pl->bwd, 3, bs);
}

static const char *pool_impl(void *h, int *slow) {
  cpu_pool *pl = h;
  *slow = pl->ref;
  return pl->impl;
}

static void pool_destroy(void *h) {
  cpu_pool *pl = h;
  if (!pl) return;
  prim_free(&pl->fwd);
  prim_free(&pl->bwd);
  md_free(&pl->x);
  md_free(&pl->y);
  md_free(&pl->ws);
  free(pl->workspace);
  free(pl);
}

/* ---- memory: the host's; every op has finished when it returns ------------------------------ */
/* 256-byte aligned and zeroed without touching the pages: calloc hands out fresh mmap'd (zero)
 * pages for large sizes, so memory is resident only where it is written (a pooled gradient
 * buffer larger than its use stays partly untouched); the block's start is kept before it */
static int cpu_alloc(mnt_backend *b, size_t bytes, void **p) {
  (void)b;
  void *raw = calloc(1, bytes + 256 + sizeof(void *));
  if (!raw) {
    *p = NULL;
    MNT_ERR("out of memory allocating %zu bytes", bytes);
    return MNT_ENOMEM;
  }
  uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 255) & ~(uintptr_t)255;
  ((void **)a)[-1] = raw;
  *p = (void *)a;
  return MNT_OK;
}
static void cpu_free(mnt_backend *b, void *p) {
  (void)b;
  if (p) free(((void **)p)[-1]);
}
static int cpu_copy(mnt_backend *b, void *dst, const void *src, size_t bytes, mnt_copy_kind k) {
  (void)b;
  (void)k;
  if (dst != src) memmove(dst, src, bytes);
  return MNT_OK;
}
static int cpu_memset0(mnt_backend *b, void *p, size_t bytes) {
  (void)b;
  memset(p, 0, bytes);
  return MNT_OK;
}
static int cpu_sync(mnt_backend *b) {
  (void)b;
  return MNT_OK;
}

/* element (n, c, hw) of an activation with C channels, in its layout (see act_tag) */
static size_t act_index(const cpu_impl *ci, int n, int c, int hw, int C, int HW) {
  dnnl_format_tag_t t = act_tag(ci, C);
  if (t == dnnl_nchw) return ((size_t)n * C + (size_t)c) * (size_t)HW + (size_t)hw;
  if (t == dnnl_nhwc) return ((size_t)n * (size_t)HW + (size_t)hw) * (size_t)C + (size_t)c;
  size_t b = (size_t)ci->block;
  return (((size_t)n * ((size_t)C / b) + (size_t)c / b) * (size_t)HW + (size_t)hw) * b + (size_t)c % b;
}

/* one activation element as fp32, and one stored (bf16: rounded to nearest even) */
static inline float act_get(const cpu_impl *ci, const void *a, size_t i) {
  return ci->adt == dnnl_bf16 ? mnt_bf16_widen(((const uint16_t *)a)[i]) : ((const float *)a)[i];
}
static inline void act_put(const cpu_impl *ci, void *a, size_t i, float v) {
  if (ci->adt == dnnl_bf16) ((uint16_t *)a)[i] = mnt_bf16_round(v);
  else ((float *)a)[i] = v;
}

static int cpu_act_upload(mnt_backend *b, const float *src, void *act, int N, int C, int H, int W) {
  const cpu_impl *ci = IMPL(b);
  int HW = H * W;
  if (act_tag(ci, C) == dnnl_nchw && ci->adt == dnnl_f32) {
    if ((const void *)src != act) memcpy(act, src, (size_t)N * C * HW * sizeof(float));
    return MNT_OK;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++)
    for (int j = 0; j < HW; j++) act_put(ci, act, act_index(ci, i / C, i % C, j, C, HW), src[(size_t)i * HW + j]);
  return MNT_OK;
}

static int cpu_act_download(mnt_backend *b, const void *act, float *dst, int N, int C, int H, int W) {
  const cpu_impl *ci = IMPL(b);
  int HW = H * W;
  if (act_tag(ci, C) == dnnl_nchw && ci->adt == dnnl_f32) {
    if ((void *)dst != act) memcpy(dst, act, (size_t)N * C * HW * sizeof(float));
    return MNT_OK;
  }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++)
    for (int j = 0; j < HW; j++) dst[(size_t)i * HW + j] = act_get(ci, act, act_index(ci, i / C, i % C, j, C, HW));
  return MNT_OK;
}

/* global average pooling: in the activations' layout and type (the sum in fp32) */
static int cpu_gap_forward(mnt_backend *b, const void *x, void *y, int N, int C, int HW) {
  const cpu_impl *ci = IMPL(b);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++) {
    int n = i / C, c = i % C;
    float s = 0;
    for (int j = 0; j < HW; j++) s += act_get(ci, x, act_index(ci, n, c, j, C, HW));
    act_put(ci, y, (size_t)i, s / (float)HW);
  }
  return MNT_OK;
}

static int cpu_gap_backward(mnt_backend *b, const void *dy, void *dx, int N, int C, int HW) {
  const cpu_impl *ci = IMPL(b);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N * C; i++) {
    int n = i / C, c = i % C;
    float g = act_get(ci, dy, (size_t)i) / (float)HW;
    for (int j = 0; j < HW; j++) act_put(ci, dx, act_index(ci, n, c, j, C, HW), g);
  }
  return MNT_OK;
}

float *mnt_cpu_scratch(mnt_backend *b, size_t n) {
  cpu_impl *c = IMPL(b);
  if (n <= c->fbuf_n) return c->fbuf;
  free(c->fbuf);
  c->fbuf_n = 0;
  if (!(c->fbuf = malloc(n * sizeof(float)))) {
    MNT_ERR("out of memory: %zu bytes of scratch", n * sizeof(float));
    return NULL;
  }
  c->fbuf_n = n;
  return c->fbuf;
}

static void cpu_reorders(mnt_backend *b, long long out[2]) {
  out[0] = IMPL(b)->reorders[0];
  out[1] = IMPL(b)->reorders[1];
}

static void cpu_destroy(mnt_backend *b) {
  if (!b) return;
  cpu_impl *c = IMPL(b);
  if (c) {
    free(c->fbuf);
    dnnl_stream_destroy(c->strm);
    dnnl_engine_destroy(c->eng);
    free(c);
  }
  free(b);
}

static const mnt_backend_ops cpu_ops = {
    .alloc = cpu_alloc, .free = cpu_free, .host_alloc = cpu_alloc, .host_free = cpu_free, .copy = cpu_copy,
    .memset0 = cpu_memset0, .sync = cpu_sync, .act_upload = cpu_act_upload, .act_download = cpu_act_download,
    .conv_create = conv_create, .conv_forward = conv_forward, .conv_backward = conv_backward,
    .conv_destroy = conv_destroy, .bn_create = bn_create, .bn_forward_train = bn_forward_train,
    .bn_forward_infer = bn_forward_infer, .bn_backward = bn_backward, .bn_destroy = bn_destroy,
    .pool_create = pool_create, .pool_forward = pool_forward, .pool_backward = pool_backward,
    .pool_destroy = pool_destroy, .conv_impl = conv_impl, .bn_impl = bn_impl, .pool_impl = pool_impl,
    .relu_forward = mnt_cpu_relu_forward, .relu_backward = mnt_cpu_relu_backward,
    .add_forward = mnt_cpu_add_forward, .act_acc = mnt_cpu_act_acc, .gap_forward = cpu_gap_forward,
    .gap_backward = cpu_gap_backward, .fc_forward = mnt_cpu_fc_forward, .fc_backward = mnt_cpu_fc_backward,
    .softmax_xent = mnt_cpu_softmax_xent, .f32_acc = mnt_cpu_f32_acc, .f32_scale = mnt_cpu_f32_scale, .sgd_step = mnt_cpu_sgd_step,
    .lars_step = mnt_cpu_lars_step, .rmsw_step = mnt_cpu_rmsw_step,
    .nonfinite = mnt_cpu_nonfinite, .f32_poison = mnt_cpu_f32_poison, .cast_from_f32 = mnt_cpu_cast_from_f32, .cast_to_f32 = mnt_cpu_cast_to_f32,
    .reorders = cpu_reorders, .destroy = cpu_destroy};

/* bf16 on this CPU: native (avx512_core_bf16: vdpbf16ps; avx512_core_amx: tiles), emulated
 * (avx512_core), or none (below AVX-512: oneDNN 2.x has no bf16 kernels there, 3.x only on avx2_vnni_2,
 * which mntrain does not use) */
typedef enum { BF16_NONE, BF16_EMULATED, BF16_NATIVE, BF16_AMX } bf16_kind;
static bf16_kind cpu_bf16_kind(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return isa_has(isa, dnnl_cpu_isa_avx512_core_amx)    ? BF16_AMX
         : isa_has(isa, dnnl_cpu_isa_avx512_core_bf16) ? BF16_NATIVE
         : isa_has(isa, dnnl_cpu_isa_avx512_core)      ? BF16_EMULATED
                                                       : BF16_NONE;
}

/* --precision auto on the CPU: bf16 where the CPU has bf16 instructions. Measured with bench step
 * (benchmarks/README.md, "bf16 on CPUs"): on an AMD EPYC with avx512_bf16 and no AMX a ResNet-50
 * or ResNet-18 step runs about 1.8x its fp32 speed; oneDNN reports 12x for a convolution on an
 * Intel Xeon with AMX. Emulated bf16 (plain avx512_core) is slower than fp32: fp32 there. */
mnt_precision mnt_cpu_auto_precision(void) {
  return cpu_bf16_kind() >= BF16_NATIVE ? MNT_PREC_BF16 : MNT_PREC_FP32;
}

/* The layout of blocked activations for type adt: MNT_CPU_LAYOUT, else the one oneDNN's best
 * convolution takes on a typical ResNet shape (3x3, 64 -> 64 channels, 56x56) when asked for any. */
static int choose_layout(cpu_impl *c, mnt_backend *b) {
  const char *env = mnt_env_cpu_layout(); /* a word of the table's (env.c checked it), any case */
  dnnl_format_tag_t blocked = c->block == 16 ? dnnl_nChw16c : dnnl_nChw8c;
  c->layout = blocked;
  if (env && !strcasecmp(env, "nhwc")) c->layout = dnnl_nhwc;
  if ((env && strcasecmp(env, "auto")) || c->adt == dnnl_f32) return MNT_OK;
  dnnl_dims_t xd = {16, 64, 56, 56}, wd = {64, 64, 3, 3}, one = {1, 1};
  mnt_md m[4]; /* x, y and the weights in any layout; x in nhwc */
  dnnl_status_t s[4] = {md_make(&m[0], 4, xd, c->adt, dnnl_format_tag_any),
                        md_make(&m[1], 4, xd, c->adt, dnnl_format_tag_any),
                        md_make(&m[2], 4, wd, c->adt, dnnl_format_tag_any), md_make(&m[3], 4, xd, c->adt, dnnl_nhwc)};
  int st = MNT_OK;
  for (int i = 0; i < 4 && st == MNT_OK; i++) st = MNT_DNNL_OK(s[i]);
  dnnl_primitive_desc_t p = NULL;
  op_spec od = {
      .kind = OP_CONV_FWD, .src = MD(m[0]), .w = MD(m[2]), .dst = MD(m[1]), .strides = one, .pad_l = one, .pad_r = one};
  if (st == MNT_OK) st = pick_pd(b, &od, NULL, &p, NULL);
  if (p && md_equal(dnnl_primitive_desc_query_md(p, dnnl_query_src_md, 0), MD(m[3]))) c->layout = dnnl_nhwc;
  if (p) dnnl_primitive_desc_destroy(p);
  for (int i = 0; i < 4; i++) md_free(&m[i]);
  return st;
}

int mnt_backend_cpu_create(const mnt_backend_opts *o, mnt_backend **out) {
  *out = NULL;
  mnt_precision prec = o ? o->precision : MNT_PREC_FP32; /* auto: resolved by mnt_backend_create */
  if (prec == MNT_PREC_AUTO) {
    MNT_ERR("internal: --precision auto reached the CPU backend unresolved (mnt_backend_create resolves it)");
    return MNT_EARG;
  }
  if (prec == MNT_PREC_BF16 && cpu_bf16_kind() == BF16_NONE) {
    MNT_ERR("--precision bf16 on the CPU needs AVX-512 (oneDNN has no bf16 kernels for %s, the instruction set it "
            "runs here%s): use --precision fp32 or auto", mnt_cpu_isa_name(),
            getenv("ONEDNN_MAX_CPU_ISA") ? ", capped by ONEDNN_MAX_CPU_ISA" : "");
    return MNT_EARG;
  }
  mnt_backend *b = calloc(1, sizeof *b);
  cpu_impl *c = calloc(1, sizeof *c);
  if (!b || !c) {
    free(b);
    free(c);
    return MNT_ENOMEM;
  }
  *b = (mnt_backend){.ops = &cpu_ops, .name = "cpu", .host_visible = 1, .device = -1,
                     .precision = prec, .act_bytes = prec == MNT_PREC_BF16 ? 2 : sizeof(float), .impl = c};
  c->plan_only = o && o->plan_only;
  c->adt = prec == MNT_PREC_BF16 ? dnnl_bf16 : dnnl_f32;
  c->block = isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core) ? 16 : 8;
  if (dnnl_engine_create(&c->eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&c->strm, c->eng, dnnl_stream_default_flags) != dnnl_success) {
    MNT_ERR("oneDNN: could not create a CPU engine and stream");
    if (c->eng) dnnl_engine_destroy(c->eng);
    free(c);
    free(b);
    return MNT_ESYS;
  }
  if (choose_layout(c, b) != MNT_OK) {
    cpu_destroy(b);
    return MNT_ESYS;
  }
  static int warned; /* once per process */
  if (prec == MNT_PREC_BF16 && !warned && cpu_bf16_kind() == BF16_EMULATED) {
    warned = 1;
    MNT_WARN("--precision bf16 on %s: this CPU has no bf16 instructions and oneDNN emulates them, slower than fp32 "
             "(README: Precision); --precision auto picks fp32 here", mnt_cpu_isa_name());
  }
  *out = b;
  return MNT_OK;
}
