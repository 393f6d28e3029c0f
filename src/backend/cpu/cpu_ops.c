/* cpu_ops.c — the CPU backend's element-wise and small ops (see cpu_ops.h): plain loops over host
 * memory (src/simd.h's where they matter), the fully connected layer on oneDNN's sgemm.
 * bf16 activations (b->act_bytes 2): element-wise ops compute in fp32 and round once; the fully
 * connected layer multiplies the bf16 values (its input, and its weights and bias rounded to bf16,
 * as PyTorch's autocast casts them) exactly in fp32 with fp32 sums, on sgemm: products of two bf16
 * numbers are exact in fp32, so this is a bf16 GEMM with fp32 accumulation (0.1% of ResNet-50's
 * FLOPs: not worth a primitive); its output is rounded to bf16, and the loss reads the logits so. */
#include <oneapi/dnnl/dnnl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/cpu/cpu_ops.h"
#include "src/check.h"
#include "src/log.h"
#include "src/dtype.h"
#include "src/simd.h"

static int bf16(const mnt_backend *b) { return b->act_bytes == 2; }

/* n activations as fp32 into dst (bf16 widened), or src itself when they are fp32 */
static const float *as_f32(const mnt_backend *b, const void *src, float *dst, size_t n) {
  if (!bf16(b)) return src;
  mnt_to_f32(MNT_BF16, src, dst, n);
  return dst;
}
/* fp32 values rounded to bf16 and widened back: what a bf16 tensor of them holds */
static void round_bf16(float *x, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = mnt_bf16_widen(mnt_bf16_round(src[i]));
}

int mnt_cpu_relu_forward(mnt_backend *b, const void *xv, void *yv, size_t n) {
  if (bf16(b)) mnt_vec_relu_bf16(yv, xv, n);
  else mnt_vec_relu(yv, xv, n);
  return MNT_OK;
}

int mnt_cpu_relu_backward(mnt_backend *b, const void *yv, const void *dyv, void *dxv, size_t n) {
  if (bf16(b)) mnt_vec_relu_backward_bf16(dxv, yv, dyv, n);
  else mnt_vec_relu_backward(dxv, yv, dyv, n);
  return MNT_OK;
}

int mnt_cpu_add_forward(mnt_backend *b, const void *x1, const void *x2, void *yv, size_t n) {
  if (bf16(b)) mnt_vec_add_bf16(yv, x1, x2, n);
  else mnt_vec_add(yv, x1, x2, n);
  return MNT_OK;
}

int mnt_cpu_f32_acc(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip) {
  (void)b;
  if (!(skip && *skip)) mnt_vec_acc(y, x, n);
  return MNT_OK;
}
int mnt_cpu_act_acc(mnt_backend *b, void *y, const void *x, size_t n) {
  if (!bf16(b)) return mnt_cpu_f32_acc(b, y, x, n, NULL);
  mnt_vec_acc_bf16(y, x, n);
  return MNT_OK;
}

int mnt_cpu_f32_scale(mnt_backend *b, float *y, float a, size_t n) {
  (void)b;
  mnt_vec_scale(y, a, n);
  return MNT_OK;
}

int mnt_cpu_fc_forward(mnt_backend *b, const void *xv, const float *w, const float *bias, void *yv, int N, int I,
                       int O) {
  size_t nx = (size_t)N * I, nw = (size_t)O * I, ny = (size_t)N * O;
  float *sc = NULL;
  if (bf16(b) && !(sc = mnt_cpu_scratch(b, nx + nw + ny + (size_t)O))) return MNT_ENOMEM;
  const float *x = as_f32(b, xv, sc, nx);
  float *y = sc ? sc + nx + nw : yv, *bb = sc ? sc + nx + nw + ny : NULL;
  if (sc) { /* the weights and bias as bf16 holds them */
    round_bf16(sc + nx, w, nw);
    round_bf16(bb, bias, (size_t)O);
    w = sc + nx;
    bias = bb;
  }
  for (int n = 0; n < N; n++) memcpy(y + (size_t)n * O, bias, (size_t)O * sizeof(float));
  if (dnnl_sgemm('N', 'T', N, O, I, 1.0f, x, I, w, I, 1.0f, y, O) != dnnl_success) {
    MNT_ERR("oneDNN sgemm failed (fully connected %d -> %d)", I, O);
    return MNT_ESYS;
  }
  if (sc) mnt_from_f32(MNT_BF16, y, yv, ny);
  return MNT_OK;
}

int mnt_cpu_fc_backward(mnt_backend *b, const void *xv, const float *w, const void *dyv, void *dxv, float *dw,
                        float *dbias, int N, int I, int O) {
  size_t nx = (size_t)N * I, nw = (size_t)O * I, ny = (size_t)N * O;
  float *sc = NULL;
  if (bf16(b) && !(sc = mnt_cpu_scratch(b, 2 * nx + nw + ny))) return MNT_ENOMEM;
  const float *x = as_f32(b, xv, sc, nx), *dy = as_f32(b, dyv, sc ? sc + nx : NULL, ny);
  float *dx = sc ? sc + nx + ny : dxv;
  if (sc && dxv) {
    round_bf16(sc + 2 * nx + ny, w, nw);
    w = sc + 2 * nx + ny;
  }
  /* dw[O,I] = dy^T[O,N] x[N,I]; dx[N,I] = dy[N,O] w[O,I]; dbias = sum over N */
  if (dnnl_sgemm('T', 'N', O, I, N, 1.0f, dy, O, x, I, 0.0f, dw, I) != dnnl_success ||
      (dxv && dnnl_sgemm('N', 'N', N, I, O, 1.0f, dy, O, w, I, 0.0f, dx, I) != dnnl_success)) {
    MNT_ERR("oneDNN sgemm failed (fully connected backward %d -> %d)", I, O);
    return MNT_ESYS;
  }
  if (sc && dxv) mnt_from_f32(MNT_BF16, dx, dxv, nx);
  for (int o = 0; o < O; o++) {
    float s = 0;
    for (int n = 0; n < N; n++) s += dy[(size_t)n * O + o];
    dbias[o] = s;
  }
  return MNT_OK;
}

int mnt_cpu_softmax_xent(mnt_backend *b, const void *lv, const int32_t *labels, void *dv, int N, int classes,
                         float smoothing, float *out3) {
  size_t nl = (size_t)N * classes;
  float *sc = NULL;
  if (bf16(b) && !(sc = mnt_cpu_scratch(b, 2 * nl))) return MNT_ENOMEM;
  const float *logits = as_f32(b, lv, sc, nl);
  float *dlogits = sc && dv ? sc + nl : dv;
  double loss = 0, on = 1.0 - smoothing, off = (double)smoothing / classes;
  int t1 = 0, t5 = 0;
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * classes;
    int y = labels[n];
    if (y < 0 || y >= classes) {
      loss = NAN;
      continue;
    }
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
  if (sc && dv) mnt_from_f32(MNT_BF16, dlogits, dv, nl);
  out3[0] = (float)loss;
  out3[1] = (float)t1;
  out3[2] = (float)t5;
  return MNT_OK;
}

int mnt_cpu_sgd_step(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp, float mu,
                     float wd, int first, const int32_t *skip) {
  (void)b;
  if (skip && *skip) return MNT_OK;
  mnt_vec_sgd(w, g, m, n, hp->lr, mu, wd, first);
  return MNT_OK;
}

int mnt_cpu_lars_step(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                      const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip) {
  (void)b;
  if (skip && *skip) return MNT_OK;
  const float lr = hp->lr;
  for (int i = 0; i < nseg; i++) {
    float *ws = w + seg[i].off, *ms = m + seg[i].off;
    const float *gs = g + seg[i].off;
    float lr_i = lr, wd_i = 0;
    if (seg[i].adapt) {
      double ww, gg;
      mnt_vec_sumsq2(ws, gs, seg[i].n, &ww, &gg);
      double wn = sqrt(ww), gn = sqrt(gg);
      lr_i = wn > 0 && gn > 0 ? (float)(lr * (eta * wn / (gn + wd * wn))) : lr;
      wd_i = wd;
    }
    mnt_vec_lars(ws, gs, ms, seg[i].n, lr_i, mu, wd_i, first);
  }
  return MNT_OK;
}

int mnt_cpu_rmsw_step(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n, const mnt_step_hp *hp,
                      const mnt_rmsw_hp *c, int first, const int32_t *skip) {
  (void)b;
  if (skip && *skip) return MNT_OK;
  const float lr = hp->lr, as = hp->a_sgd, ar = hp->a_rms, mu1 = c->mu1, mu2 = c->mu2, eps = c->eps, wd = c->wd;
  const float c2 = 1.0f - mu2;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; i++) { /* the order of backend.h's mnt_rmsw_step, as the CUDA kernel's */
    float d = g[i] + wd * w[i];
    float dd = c2 * (d * d);
    float vi = first ? dd : mu2 * v[i] + dd;
    float s = (as + ar / (sqrtf(vi) + eps)) * d;
    float mi = first ? s : mu1 * m[i] + s;
    v[i] = vi;
    m[i] = mi;
    w[i] -= lr * mi;
  }
  return MNT_OK;
}

int mnt_cpu_nonfinite(mnt_backend *b, const float *x, size_t n, int32_t *flag) {
  (void)b;
  *flag = mnt_vec_nonfinite(x, n);
  return MNT_OK;
}

int mnt_cpu_f32_poison(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags) {
  (void)b;
  int any = 0;
  for (int i = 0; i < nflags; i++) any |= flags[i] != 0;
  for (size_t i = 0; any && i < n; i++) x[i] = NAN;
  return MNT_OK;
}

int mnt_cpu_cast_from_f32(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n) {
  (void)b;
  if (t == MNT_FP32) memmove(dst, src, n * sizeof(float));
  else mnt_from_f32(t, src, dst, n);
  return MNT_OK;
}
int mnt_cpu_cast_to_f32(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n) {
  (void)b;
  if (t == MNT_FP32) memmove(dst, src, n * sizeof(float));
  else mnt_to_f32(t, src, dst, n);
  return MNT_OK;
}

