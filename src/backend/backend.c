/* backend.c — backend selection and the layer handles every backend shares (see backend.h). A
 * handle holds its backend, its output size and the implementation's own object. */
#include "src/backend/backend.h"

#include <stdlib.h>
#include <string.h>

#include "src/cuda_module.h"
#include "src/check.h"
#include "src/log.h"

struct mnt_conv { mnt_backend *be; int OH, OW; void *h; };
struct mnt_bn { mnt_backend *be; void *h; };
struct mnt_pool { mnt_backend *be; int OH, OW; void *h; };

int mnt_precision_parse(const char *s, mnt_precision *p) {
  for (int i = 0; i < MNT_NPREC; i++)
    if (!strcmp(s, mnt_precision_name((mnt_precision)i))) {
      *p = (mnt_precision)i;
      return 0;
    }
  return -1;
}

const char *const mnt_device_names[MNT_NDEVICE] = {"cpu", "cuda", "auto"};

mnt_device mnt_device_auto(const char **why, int say) {
  static char reason[600]; /* the process's one answer: the probe is the same each time */
  static int said;
  if (!MNT_HAVE_CUDA_BACKEND) {
    *why = "this mntrain has no CUDA backend";
    return MNT_DEVICE_CPU;
  }
  const mnt_cuda_module *m = mnt_cuda_module_probe(reason, sizeof reason);
  if (m && !m->backend_create) snprintf(reason, sizeof reason, "the CUDA module has no CUDA backend");
  *why = reason;
  if (m && m->backend_create) return MNT_DEVICE_CUDA;
  if (say && !said) MNT_INFO("auto: %s; running on cpu", reason);
  said |= say;
  return MNT_DEVICE_CPU;
}

const char *mnt_backend_names(void) { return MNT_HAVE_CUDA_BACKEND ? "cpu, cuda" : "cpu"; }

/* cuda lives in the CUDA module (cuda_module.h), loaded here on first use: a cpu run never maps the
 * CUDA libraries */
int mnt_backend_create(const char *name, const mnt_backend_opts *o, mnt_backend **out) {
  *out = NULL;
  mnt_backend_opts def = {.precision = MNT_PREC_FP32, .device = -1};
  if (!o) o = &def;
  if (!name || !strcmp(name, "auto")) {
    const char *why;
    name = mnt_device_names[mnt_device_auto(&why, 1)];
  }
  mnt_backend_opts r = *o; /* auto resolved where the device is known */
  if (!strcmp(name, "cpu")) {
    if (r.precision == MNT_PREC_AUTO) r.precision = mnt_cpu_auto_precision();
    return mnt_backend_cpu_create(&r, out);
  }
  if (!strcmp(name, "cuda")) {
    if (!MNT_HAVE_CUDA_BACKEND) {
      MNT_ERR("--device cuda: this mntrain was built without the CUDA backend (it needs nvcc, cuDNN and cuBLAS at "
              "configure time: cmake -DMNT_CUDA=ON)");
      return MNT_EARG;
    }
    const mnt_cuda_module *m;
    MNT_CHECK(mnt_cuda_module_load("--device cuda", &m));
    if (!m->backend_create) {
      MNT_ERR("--device cuda: the CUDA module was built without the CUDA backend (cuDNN and cuBLAS)");
      return MNT_EARG;
    }
    return m->backend_create(&r, out);
  }
  MNT_ERR("unknown device '%s' (this build has: %s)", name, mnt_backend_names());
  return MNT_EARG;
}

void mnt_backend_destroy(mnt_backend *b) {
  if (b) b->ops->destroy(b);
}

int mnt_be_capture_refused(const mnt_backend *b, const char *what) {
  MNT_ERR(
      "%s inside a captured step (%s backend): a replayed graph cannot hold it; it belongs before the capture "
      "or after it",
      what, b->name);
  return MNT_EARG;
}

int mnt_be_capture_begin(mnt_backend *b) {
  if (b->capturing) {
    MNT_ERR("a capture began inside another");
    return MNT_EARG;
  }
  if (b->ops->capture_begin) MNT_CHECK(b->ops->capture_begin(b));
  b->capturing = 1;
  return MNT_OK;
}

int mnt_be_capture_end(mnt_backend *b, void **graph) {
  *graph = NULL;
  if (!b->capturing) {
    MNT_ERR("a capture ended that had not begun");
    return MNT_EARG;
  }
  b->capturing = 0;
  return b->ops->capture_end ? b->ops->capture_end(b, graph) : MNT_OK;
}

int mnt_be_graph_launch(mnt_backend *b, void *graph) {
  if (!graph || !b->ops->graph_launch) {
    MNT_ERR("no graph to launch on the %s backend", b->name);
    return MNT_EARG;
  }
  return b->ops->graph_launch(b, graph);
}

void mnt_be_graph_free(mnt_backend *b, void *graph) {
  if (graph && b->ops->graph_free) b->ops->graph_free(b, graph);
}

int mnt_be_graph_run(mnt_backend *b, void **graph, int (*body)(void *ctx), void *ctx, int *captured) {
  *captured = 0;
  if (!*graph) {
    MNT_CHECK(mnt_be_capture_begin(b));
    int st = body(ctx);
    void *g = NULL;
    int end = mnt_be_capture_end(b, &g); /* ends it whatever happened inside */
    if (st != MNT_OK || end != MNT_OK) {
      mnt_be_graph_free(b, g);
      return st != MNT_OK ? st : end;
    }
    *graph = g;
    *captured = g != NULL;
  }
  return *graph ? mnt_be_graph_launch(b, *graph) : MNT_OK;
}

static int out_dim(int in, int k, int s, int p) { return (in + 2 * p - k) / s + 1; }

int mnt_conv_create(mnt_backend *b, int N, int C, int H, int W, int K, int R, int s, int p, int need_dx,
                    mnt_conv **out) {
  *out = NULL;
  mnt_conv *c = calloc(1, sizeof *c);
  if (!c) return MNT_ENOMEM;
  *c = (mnt_conv){.be = b, .OH = out_dim(H, R, s, p), .OW = out_dim(W, R, s, p)};
  int st = b->ops->conv_create(b, N, C, H, W, K, R, s, p, need_dx, &c->h);
  if (st) {
    free(c);
    return st;
  }
  *out = c;
  return MNT_OK;
}
void mnt_conv_out_hw(const mnt_conv *c, int *OH, int *OW) {
  *OH = c->OH;
  *OW = c->OW;
}
int mnt_conv_forward(mnt_conv *c, const void *x, const float *w, void *y) { return c->be->ops->conv_forward(c->h, x, w, y); }
int mnt_conv_backward(mnt_conv *c, const void *x, const float *w, const void *dy, void *dx, float *dw) {
  return c->be->ops->conv_backward(c->h, x, w, dy, dx, dw);
}
void mnt_conv_destroy(mnt_conv *c) {
  if (!c) return;
  c->be->ops->conv_destroy(c->h);
  free(c);
}

int mnt_bn_create(mnt_backend *b, int N, int C, int H, int W, float eps, int fuse_relu, mnt_bn **out) {
  *out = NULL;
  mnt_bn *bn = calloc(1, sizeof *bn);
  if (!bn) return MNT_ENOMEM;
  bn->be = b;
  int st = b->ops->bn_create(b, N, C, H, W, eps, fuse_relu, &bn->h);
  if (st) {
    free(bn);
    return st;
  }
  *out = bn;
  return MNT_OK;
}
int mnt_bn_forward_train(mnt_bn *bn, const void *x, const float *gamma, const float *beta, void *y, float *save_mean,
                         float *save_var, float *run_mean, float *run_var, float momentum) {
  return bn->be->ops->bn_forward_train(bn->h, x, gamma, beta, y, save_mean, save_var, run_mean, run_var, momentum);
}
int mnt_bn_forward_infer(mnt_bn *bn, const void *x, const float *gamma, const float *beta, void *y,
                         const float *run_mean, const float *run_var) {
  return bn->be->ops->bn_forward_infer(bn->h, x, gamma, beta, y, run_mean, run_var);
}
int mnt_bn_backward(mnt_bn *bn, const void *x, const void *dy, const float *gamma, const float *save_mean,
                    const float *save_var, void *dx, float *dgamma, float *dbeta) {
  return bn->be->ops->bn_backward(bn->h, x, dy, gamma, save_mean, save_var, dx, dgamma, dbeta);
}
void mnt_bn_destroy(mnt_bn *bn) {
  if (!bn) return;
  bn->be->ops->bn_destroy(bn->h);
  free(bn);
}

int mnt_pool_create(mnt_backend *b, int N, int C, int H, int W, int R, int s, int p, mnt_pool **out) {
  *out = NULL;
  mnt_pool *pl = calloc(1, sizeof *pl);
  if (!pl) return MNT_ENOMEM;
  *pl = (mnt_pool){.be = b, .OH = out_dim(H, R, s, p), .OW = out_dim(W, R, s, p)};
  int st = b->ops->pool_create(b, N, C, H, W, R, s, p, &pl->h);
  if (st) {
    free(pl);
    return st;
  }
  *out = pl;
  return MNT_OK;
}
void mnt_pool_out_hw(const mnt_pool *pl, int *OH, int *OW) {
  *OH = pl->OH;
  *OW = pl->OW;
}
int mnt_pool_forward(mnt_pool *pl, const void *x, void *y) { return pl->be->ops->pool_forward(pl->h, x, y); }
int mnt_pool_backward(mnt_pool *pl, const void *dy, void *dx) { return pl->be->ops->pool_backward(pl->h, dy, dx); }
void mnt_pool_destroy(mnt_pool *pl) {
  if (!pl) return;
  pl->be->ops->pool_destroy(pl->h);
  free(pl);
}

static const char *impl_of(const char *(*op)(void *, int *), void *h, int *slow) {
  int s = 0;
  const char *t = op ? op(h, &s) : NULL;
  if (slow) *slow = s;
  return t ? t : "";
}
const char *mnt_conv_impl(const mnt_conv *c, int *slow) { return impl_of(c->be->ops->conv_impl, c->h, slow); }
int mnt_conv_algos(mnt_conv *c, int algos[3], int set) {
  if (c->be->ops->conv_algos) return c->be->ops->conv_algos(c->h, algos, set);
  if (!set) algos[0] = algos[1] = algos[2] = -1;
  return MNT_OK;
}
const char *mnt_bn_impl(const mnt_bn *bn, int *slow) { return impl_of(bn->be->ops->bn_impl, bn->h, slow); }
const char *mnt_pool_impl(const mnt_pool *pl, int *slow) { return impl_of(pl->be->ops->pool_impl, pl->h, slow); }
