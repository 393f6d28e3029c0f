/* simd.h — mntrain's own hot loops at the vector width of the CPU they run on, from one binary.
 * defines: mnt_simd_level (MNT_SIMD_SSE2 < MNT_SIMD_AVX2 < MNT_SIMD_AVX512), mnt_simd_active,
 *          mnt_simd_variant (what `mntrain --version` shows), mnt_simd_name, mnt_simd_supported,
 *          mnt_simd_force (tests), mnt_simd_env_check (MNT_SIMD against this CPU, for main);
 *          MNT_SIMD_CLONES / MNT_SIMD_CLONES_RET / MNT_SIMD_PICK (one body compiled per variant,
 *          the active one called); mnt_vec_acc, mnt_vec_scale, mnt_vec_add, mnt_vec_relu,
 *          mnt_vec_relu_backward, mnt_vec_sgd, mnt_vec_lars, mnt_vec_sumsq2, mnt_vec_nonfinite (the
 *          CPU backend's fp32 loops, OpenMP over chunks, each chunk run by the active variant).
 * The code is built for baseline x86-64 (SSE2), so the binary runs on any x86-64 node. A loop
 * that matters is written once as a static inline body and compiled three times: baseline,
 * target("avx2,fma") and target("avx512f,avx512bw,avx512dq,avx512vl"); the variant is chosen once
 * per process (the best the CPU runs, or MNT_SIMD=sse2|avx2|avx512 to force a lower one) and
 * every variant gives the baseline's results bit for bit: elementwise IEEE operations in the same
 * order and no contraction into FMA (ISO C mode, -std=c11, keeps -ffp-contract=off; the
 * per-variant test tests/unit/test_simd.c fails if a build fuses them). */
#ifndef MNT_SIMD_H
#define MNT_SIMD_H

#include <stddef.h>
#include <stdint.h>

typedef enum { MNT_SIMD_SSE2 = 0, MNT_SIMD_AVX2 = 1, MNT_SIMD_AVX512 = 2 } mnt_simd_level;
enum { MNT_SIMD_LEVELS = 3 };

/* The variant the loops run (chosen at the first call: MNT_SIMD, else the best supported). */
mnt_simd_level mnt_simd_active(void);
/* Its name: "sse2", "avx2" or "avx512" (on a non-x86 build the one variant is "generic"). */
const char *mnt_simd_variant(void);
const char *mnt_simd_name(mnt_simd_level v);
/* 1 when this build and this CPU (and its OS, which must save the vector registers) can run v */
int mnt_simd_supported(mnt_simd_level v);
/* Run variant v from now on (tests; the loops read it at each call). MNT_OK, or MNT_EARG when
 * this CPU cannot run it (nothing changes). */
int mnt_simd_force(mnt_simd_level v);
/* MNT_SIMD checked against this CPU (env.c has checked it is one of the words): MNT_OK, or
 * MNT_EARG logged ("environment variable MNT_SIMD='avx512': this CPU cannot run avx512 ...").
 * main calls it beside mnt_env_check, before any command runs. */
int mnt_simd_env_check(void);

/* ---- one body, three compilations -----------------------------------------------------------
 * MNT_SIMD_BODY marks the body (static, always inlined, so that it is compiled in each variant's
 * target). MNT_SIMD_CLONES(name, (params), (args)) defines static void name##_sse2/_avx2/_avx512
 * from name##_body; MNT_SIMD_CLONES_RET(type, ...) the same for a body returning type;
 * MNT_SIMD_PICK(name) is the active one, to be called: MNT_SIMD_PICK(name)(args). */
#define MNT_SIMD_BODY static inline __attribute__((always_inline))
#if defined(__x86_64__) || defined(__i386__)
#define MNT_SIMD_X86 1
#define MNT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt")))
#define MNT_TARGET_AVX512 \
  __attribute__((target("avx2,fma,f16c,bmi,bmi2,popcnt,avx512f,avx512bw,avx512dq,avx512vl")))
#else
#define MNT_SIMD_X86 0
#define MNT_TARGET_AVX2
#define MNT_TARGET_AVX512
#endif

#define MNT_SIMD_CLONES(name, params, args)                          \
  static void name##_sse2 params { name##_body args; }               \
  MNT_TARGET_AVX2 static void name##_avx2 params { name##_body args; } \
  MNT_TARGET_AVX512 static void name##_avx512 params { name##_body args; }
#define MNT_SIMD_CLONES_RET(type, name, params, args)                         \
  static type name##_sse2 params { return name##_body args; }                 \
  MNT_TARGET_AVX2 static type name##_avx2 params { return name##_body args; } \
  MNT_TARGET_AVX512 static type name##_avx512 params { return name##_body args; }
#define MNT_SIMD_PICK(name)                                              \
  (mnt_simd_active() == MNT_SIMD_AVX512 ? name##_avx512                  \
   : mnt_simd_active() == MNT_SIMD_AVX2 ? name##_avx2 : name##_sse2)

/* ---- the CPU backend's fp32 loops (n elements; OpenMP threads over 64-byte-aligned chunks where
 * noted; results independent of the thread count and the variant) ---------------------------- */
void mnt_vec_acc(float *y, const float *x, size_t n);                 /* y += x (threads above 64 Ki) */
void mnt_vec_scale(float *y, float a, size_t n);                      /* y *= a (threads above 64 Ki) */
void mnt_vec_add(float *y, const float *a, const float *b, size_t n); /* y = a + b (threads) */
void mnt_vec_relu(float *y, const float *x, size_t n);                /* y = x > 0 ? x : 0 (threads) */
void mnt_vec_relu_backward(float *dx, const float *y, const float *dy, size_t n); /* dx = y > 0 ? dy : 0 */
/* the same four on bf16 activations (dtype.h's rounding: computed in fp32, rounded once; threads
 * above 64 Ki) */
void mnt_vec_acc_bf16(uint16_t *y, const uint16_t *x, size_t n);
void mnt_vec_add_bf16(uint16_t *y, const uint16_t *a, const uint16_t *b, size_t n);
void mnt_vec_relu_bf16(uint16_t *y, const uint16_t *x, size_t n);
void mnt_vec_relu_backward_bf16(uint16_t *dx, const uint16_t *y, const uint16_t *dy, size_t n);
/* SGD with momentum and weight decay, as PyTorch: d = g + wd w; m = first ? d : mu m + d;
 * w -= lr m (threads above 64 Ki) */
void mnt_vec_sgd(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first);
/* LARS's step on one tensor: v = mu m + lr (g + wd w) (no mu m when first); m = v; w -= v (threads above
 * 64 Ki) */
void mnt_vec_lars(float *w, const float *g, float *m, size_t n, float lr, float mu, float wd, int first);
/* *xx = sum x^2, *yy = sum y^2, in double, in blocks fixed by n (the same on any thread count) */
void mnt_vec_sumsq2(const float *x, const float *y, size_t n, double *xx, double *yy);
/* 1 when any x is Inf or NaN (threads above 64 Ki) */
int mnt_vec_nonfinite(const float *x, size_t n);

#endif
