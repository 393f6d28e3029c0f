/* onednn.h — the seam between oneDNN 2.x (2.6: Debian 12) and 3.x (3.0 on: Debian 13, sites, oneAPI)
 * for the CPU backend (backend_cpu.c), which includes it and nothing else does. The backend is
 * written once against what is here; only this file looks at DNNL_VERSION_MAJOR. Where the two
 * APIs differ:
 * - Memory descriptors. 2.x: a struct, passed by pointer and copied by value. 3.x: an opaque
 *   handle, created and destroyed (dnnl_memory_desc_create_with_tag / _destroy), passed by value.
 *   Here an owned descriptor is an mnt_md (md_make, md_copy, md_free), and what the API takes is
 *   an md_ref: MD(m) of an mnt_md, or what dnnl_primitive_desc_query_md returns (owned by the
 *   primitive descriptor, valid as long as it is; md_copy keeps one longer).
 * - Primitive descriptors. 2.x: an op descriptor (*_desc_init), then an iterator over the
 *   implementations (dnnl_primitive_desc_iterator_*). 3.x: *_primitive_desc_create gives the first
 *   implementation, dnnl_primitive_desc_next_impl moves to the next. Here an op_spec says what
 *   the operation is, and impl_walk walks its implementations best first (walk_begin, walk_next,
 *   walk_copy, walk_end) on either.
 * - Batch normalization backward: 2.6 requires DNNL_ARG_SHIFT with dnnl_use_shift (it does not
 *   read it), 3.x refuses the argument (BN_BWD_TAKES_SHIFT).
 * - The ISA names: 3.x dropped avx512_mic and avx512_mic_4ops (Xeon Phi): MNT_DNNL_XEON_PHI_ISAS, the
 *   entries of backend_cpu.c's name table that exist only on 2.x.
 * The configure step (CMakeLists.txt) accepts 2.6, 2.7 and 3.x; this file refuses anything else at
 * compile time too. */
#ifndef MNT_BACKEND_CPU_ONEDNN_H
#define MNT_BACKEND_CPU_ONEDNN_H

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>

#if DNNL_VERSION_MAJOR == 2 && DNNL_VERSION_MINOR >= 6
#define MNT_DNNL3 0
#elif DNNL_VERSION_MAJOR == 3
#define MNT_DNNL3 1
#else
#error "mntrain's CPU backend supports oneDNN 2.6, 2.7 and 3.x"
#endif

#if MNT_DNNL3
typedef dnnl_memory_desc_t mnt_md;       /* an owned handle (NULL: none) */
typedef const_dnnl_memory_desc_t md_ref; /* as the API takes it */
#define MD(m) ((md_ref)(m))
#define BN_BWD_TAKES_SHIFT 0
#define MNT_DNNL_XEON_PHI_ISAS /* gone from 3.0 */
#else
typedef dnnl_memory_desc_t mnt_md; /* a value */
typedef const dnnl_memory_desc_t *md_ref;
#define MD(m) ((md_ref) & (m))
#define BN_BWD_TAKES_SHIFT 1
#define MNT_DNNL_XEON_PHI_ISAS \
  {dnnl_cpu_isa_avx512_mic_4ops, "avx512_mic_4ops"}, {dnnl_cpu_isa_avx512_mic, "avx512_mic"},
#endif

/* *m: a descriptor of dims[0..nd) in type dt and layout tag (dnnl_format_tag_any: the primitive's
 * choice) */
static inline dnnl_status_t md_make(mnt_md *m, int nd, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                    dnnl_format_tag_t tag) {
#if MNT_DNNL3
  *m = NULL;
  return dnnl_memory_desc_create_with_tag(m, nd, dims, dt, tag);
#else
  return dnnl_memory_desc_init_by_tag(m, nd, dims, dt, tag);
#endif
}

/* *dst: a descriptor of its own equal to src (3.x: *dst is overwritten, not released first) */
static inline dnnl_status_t md_copy(mnt_md *dst, md_ref src) {
#if MNT_DNNL3
  *dst = NULL;
  return dnnl_memory_desc_clone(dst, src);
#else
  *dst = *src;
  return dnnl_success;
#endif
}

/* release what md_make or md_copy made (a zeroed mnt_md too; 3.x: set to NULL) */
static inline void md_free(mnt_md *m) {
#if MNT_DNNL3
  if (*m) dnnl_memory_desc_destroy(*m);
  *m = NULL;
#else
  (void)m;
#endif
}

/* what one operation is: its kind and the fields that kind reads */
typedef enum {
  OP_CONV_FWD,      /* src, w, dst (forward training, direct) */
  OP_CONV_BWD_DATA, /* src (diff_src), w, dst (diff_dst) */
  OP_CONV_BWD_W,    /* src, w (diff_weights), dst (diff_dst) */
  OP_BN_FWD,        /* src (= dst); prop: training or inference; eps, flags */
  OP_BN_BWD,        /* src (= diff_src = diff_dst); eps, flags (dnnl_backward) */
  OP_POOL_FWD,      /* src, dst, max pooling, forward training; strides, kernel, pads */
  OP_POOL_BWD       /* src (diff_src), dst (diff_dst) */
} op_kind;

typedef struct op_spec {
  op_kind kind;
  md_ref src, w, dst;
  const dnnl_dim_t *strides, *kernel, *pad_l, *pad_r; /* two each: convolution and pooling */
  dnnl_prop_kind_t prop;                              /* OP_BN_FWD */
  float eps;                                          /* batch normalization */
  unsigned flags;
} op_spec;

/* The implementations of one operation, best first. w.pd is the current one (owned by the walk:
 * walk_copy gives one of the caller's); NULL when oneDNN has none. */
typedef struct impl_walk {
  dnnl_primitive_desc_t pd;
#if !MNT_DNNL3
  dnnl_primitive_desc_iterator_t it;
  union {
    dnnl_convolution_desc_t conv;
    dnnl_batch_normalization_desc_t bn;
    dnnl_pooling_desc_t pool;
  } od; /* kept beside its iterator */
#endif
} impl_walk;

#if !MNT_DNNL3
static inline dnnl_status_t op_desc_init(const op_spec *o, impl_walk *w) {
  switch (o->kind) {
    case OP_CONV_FWD:
      return dnnl_convolution_forward_desc_init(&w->od.conv, dnnl_forward_training, dnnl_convolution_direct, o->src,
                                                o->w, NULL, o->dst, o->strides, o->pad_l, o->pad_r);
    case OP_CONV_BWD_DATA:
      return dnnl_convolution_backward_data_desc_init(&w->od.conv, dnnl_convolution_direct, o->src, o->w, o->dst,
                                                      o->strides, o->pad_l, o->pad_r);
    case OP_CONV_BWD_W:
      return dnnl_convolution_backward_weights_desc_init(&w->od.conv, dnnl_convolution_direct, o->src, o->w, NULL,
                                                         o->dst, o->strides, o->pad_l, o->pad_r);
    case OP_BN_FWD: return dnnl_batch_normalization_forward_desc_init(&w->od.bn, o->prop, o->src, o->eps, o->flags);
    case OP_BN_BWD:
      return dnnl_batch_normalization_backward_desc_init(&w->od.bn, dnnl_backward, o->src, o->src, o->eps, o->flags);
    case OP_POOL_FWD:
      return dnnl_pooling_forward_desc_init(&w->od.pool, dnnl_forward_training, dnnl_pooling_max, o->src, o->dst,
                                            o->strides, o->kernel, o->pad_l, o->pad_r);
    case OP_POOL_BWD:
      return dnnl_pooling_backward_desc_init(&w->od.pool, dnnl_pooling_max, o->src, o->dst, o->strides, o->kernel,
                                             o->pad_l, o->pad_r);
  }
  return dnnl_invalid_arguments;
}
#else
static inline dnnl_status_t op_pd_create(const op_spec *o, dnnl_engine_t eng, const_dnnl_primitive_desc_t hint,
                                         dnnl_primitive_desc_t *pd) {
  static const dnnl_dims_t none = {0, 0}; /* dilations: none */
  switch (o->kind) {
    case OP_CONV_FWD:
      return dnnl_convolution_forward_primitive_desc_create(pd, eng, dnnl_forward_training, dnnl_convolution_direct,
                                                            o->src, o->w, NULL, o->dst, o->strides, none, o->pad_l,
                                                            o->pad_r, NULL);
    case OP_CONV_BWD_DATA:
      return dnnl_convolution_backward_data_primitive_desc_create(pd, eng, dnnl_convolution_direct, o->src, o->w,
                                                                  o->dst, o->strides, none, o->pad_l, o->pad_r, hint,
                                                                  NULL);
    case OP_CONV_BWD_W:
      return dnnl_convolution_backward_weights_primitive_desc_create(pd, eng, dnnl_convolution_direct, o->src, o->w,
                                                                     NULL, o->dst, o->strides, none, o->pad_l, o->pad_r,
                                                                     hint, NULL);
    case OP_BN_FWD:
      return dnnl_batch_normalization_forward_primitive_desc_create(pd, eng, o->prop, o->src, o->src, o->eps, o->flags,
                                                                    NULL);
    case OP_BN_BWD:
      return dnnl_batch_normalization_backward_primitive_desc_create(pd, eng, dnnl_backward, o->src, o->src, o->src,
                                                                     o->eps, o->flags, hint, NULL);
    case OP_POOL_FWD:
      return dnnl_pooling_forward_primitive_desc_create(pd, eng, dnnl_forward_training, dnnl_pooling_max, o->src,
                                                        o->dst, o->strides, o->kernel, none, o->pad_l, o->pad_r, NULL);
    case OP_POOL_BWD:
      return dnnl_pooling_backward_primitive_desc_create(pd, eng, dnnl_pooling_max, o->src, o->dst, o->strides,
                                                         o->kernel, none, o->pad_l, o->pad_r, hint, NULL);
  }
  return dnnl_invalid_arguments;
}
#endif

/* Start walking o's implementations (hint: the forward descriptor a backward one is made with).
 * dnnl_unimplemented is not an error: w->pd is NULL then. */
static inline dnnl_status_t walk_begin(const op_spec *o, dnnl_engine_t eng, const_dnnl_primitive_desc_t hint,
                                       impl_walk *w) {
  dnnl_status_t s;
  w->pd = NULL;
#if MNT_DNNL3
  s = op_pd_create(o, eng, hint, &w->pd);
#else
  w->it = NULL;
  s = op_desc_init(o, w);
  if (s == dnnl_success) s = dnnl_primitive_desc_iterator_create(&w->it, &w->od, NULL, eng, hint);
  if (s == dnnl_success && !(w->pd = dnnl_primitive_desc_iterator_fetch(w->it))) s = dnnl_unimplemented;
#endif
  if (s == dnnl_unimplemented) s = dnnl_success;
  return s;
}

/* on to the next implementation: 1, or 0 when that was the last (w->pd is NULL then) */
static inline int walk_next(impl_walk *w) {
  if (!w->pd) return 0;
#if MNT_DNNL3
  if (dnnl_primitive_desc_next_impl(w->pd) == dnnl_success) return 1;
  dnnl_primitive_desc_destroy(w->pd);
#else
  dnnl_primitive_desc_destroy(w->pd);
  if (dnnl_primitive_desc_iterator_next(w->it) == dnnl_success && (w->pd = dnnl_primitive_desc_iterator_fetch(w->it)))
    return 1;
#endif
  w->pd = NULL;
  return 0;
}

/* the current implementation as a descriptor of the caller's (NULL when out of memory) */
static inline dnnl_primitive_desc_t walk_copy(const impl_walk *w) {
  dnnl_primitive_desc_t q = NULL;
#if MNT_DNNL3
  if (dnnl_primitive_desc_clone(&q, w->pd) != dnnl_success) q = NULL;
#else
  q = dnnl_primitive_desc_iterator_fetch(w->it);
#endif
  return q;
}

static inline void walk_end(impl_walk *w) {
  if (w->pd) dnnl_primitive_desc_destroy(w->pd);
  w->pd = NULL;
#if !MNT_DNNL3
  if (w->it) dnnl_primitive_desc_iterator_destroy(w->it);
  w->it = NULL;
#endif
}

/* the first implementation of o alone (*pd NULL when oneDNN has none) */
static inline dnnl_status_t op_first(const op_spec *o, dnnl_engine_t eng, const_dnnl_primitive_desc_t hint,
                                     dnnl_primitive_desc_t *pd) {
  impl_walk w;
  dnnl_status_t s = walk_begin(o, eng, hint, &w);
  *pd = NULL;
  if (s == dnnl_success && w.pd && !(*pd = walk_copy(&w))) s = dnnl_out_of_memory;
  walk_end(&w);
  return s;
}

#endif
