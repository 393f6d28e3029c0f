/* cpu_ops.h — private to src/backend/cpu/: the CPU backend's element-wise and small ops (cpu_ops.c),
 * which need no oneDNN primitive: activations, residual adds, the fully connected
 * layer (oneDNN's sgemm), softmax cross-entropy, the optimizers' steps, casts. backend_cpu.c puts them
 * in its ops table; their contracts are backend.h's. */
#ifndef MNT_CPU_OPS_H
#define MNT_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "src/backend/backend.h"

/* backend_cpu.c: n floats of the backend's scratch (grown as needed, kept until the backend is
 * destroyed; one user at a time), NULL when memory runs out (logged) */
float *mnt_cpu_scratch(mnt_backend *b, size_t n);

int mnt_cpu_relu_forward(mnt_backend *b, const void *xv, void *yv, size_t n);
int mnt_cpu_relu_backward(mnt_backend *b, const void *yv, const void *dyv, void *dxv, size_t n);
int mnt_cpu_add_forward(mnt_backend *b, const void *x1, const void *x2, void *yv, size_t n);
int mnt_cpu_f32_acc(mnt_backend *b, float *y, const float *x, size_t n, const int32_t *skip);
int mnt_cpu_act_acc(mnt_backend *b, void *y, const void *x, size_t n);
int mnt_cpu_f32_scale(mnt_backend *b, float *y, float a, size_t n);
int mnt_cpu_fc_forward(mnt_backend *b, const void *x, const float *w, const float *bias, void *yv, int N, int I, int O);
int mnt_cpu_fc_backward(mnt_backend *b, const void *x, const float *w, const void *dyv, void *dx, float *dw, float *dbias, int N, int I, int O);
int mnt_cpu_softmax_xent(mnt_backend *b, const void *lv, const int32_t *labels, void *dv, int N, int classes, float smoothing, float *out3);
int mnt_cpu_sgd_step(mnt_backend *b, float *w, const float *g, float *m, size_t n, const mnt_step_hp *hp, float mu,
                     float wd, int first, const int32_t *skip);
int mnt_cpu_lars_step(mnt_backend *b, float *w, const float *g, float *m, const mnt_lars_seg *seg, int nseg,
                      const mnt_step_hp *hp, float mu, float wd, float eta, int first, const int32_t *skip);
int mnt_cpu_rmsw_step(mnt_backend *b, float *w, const float *g, float *m, float *v, size_t n, const mnt_step_hp *hp,
                      const mnt_rmsw_hp *c, int first, const int32_t *skip);
int mnt_cpu_nonfinite(mnt_backend *b, const float *x, size_t n, int32_t *flag);
int mnt_cpu_f32_poison(mnt_backend *b, float *x, size_t n, const int32_t *flags, int nflags);
int mnt_cpu_cast_from_f32(mnt_backend *b, mnt_dtype t, const float *src, void *dst, size_t n);
int mnt_cpu_cast_to_f32(mnt_backend *b, mnt_dtype t, const void *src, float *dst, size_t n);

#endif
