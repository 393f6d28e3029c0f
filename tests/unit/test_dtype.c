/* test_dtype.c — bf16/fp16 conversions (against the compiler's _Float16 and exhaustive round
 * trips) and the reduction loops of the collectives. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "src/dtype.h"

#include "tests/expect.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float fl(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void round_trips(void) {
  /* every 16-bit pattern survives 16 -> 32 -> 16 (NaNs stay NaN) */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = mnt_f16_to_f32((uint16_t)h);
    uint16_t back = mnt_f32_to_f16(f);
    if (isnan(f)) EXPECT((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "fp16 NaN %04x lost", h);
    else EXPECT(back == h, "fp16 %04x -> %g -> %04x", h, (double)f, back);
    float g = mnt_bf16_to_f32((uint16_t)h);
    uint16_t gb = mnt_f32_to_bf16(g);
    if (isnan(g)) EXPECT((gb & 0x7f80) == 0x7f80 && (gb & 0x7f), "bf16 NaN %04x lost", h);
    else EXPECT(gb == h, "bf16 %04x -> %g -> %04x", h, (double)g, gb);
  }
}

static void against_compiler(void) {
#if defined(__FLT16_MAX__)
  /* the hardware/compiler conversion is the reference for fp16, on a sweep of float patterns */
  long checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 7919) {
    float f = fl((uint32_t)u);
    if (isnan(f)) continue;
    _Float16 ref = (_Float16)f;
    uint16_t rb;
    memcpy(&rb, &ref, 2);
    uint16_t got = mnt_f32_to_f16(f);
    EXPECT(got == rb, "fp16(%a): got %04x want %04x", (double)f, got, rb);
    if (got != rb && failures > 20) return;
    checked++;
  }
  EXPECT(checked > 500000, "too few fp16 samples: %ld", checked);
#else
  fprintf(stderr, "note: no _Float16 in this compiler; fp16 checked by round trips and cases only\n");
#endif
}

static void cases(void) {
  /* ties go to even */
  EXPECT(mnt_f32_to_bf16(fl(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
  EXPECT(mnt_f32_to_bf16(fl(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
  EXPECT(mnt_f32_to_bf16(fl(0x3f808001u)) == 0x3f81, "bf16 above tie rounds up");
  EXPECT(mnt_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00, "fp16 tie to even (down)");
  EXPECT(mnt_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02, "fp16 tie to even (up)");
  EXPECT(mnt_f32_to_f16(65504.0f) == 0x7bff, "fp16 max");
  EXPECT(mnt_f32_to_f16(65520.0f) == 0x7c00, "fp16 overflow to inf");
  EXPECT(mnt_f32_to_f16(-1e9f) == 0xfc00, "fp16 -inf");
  EXPECT(mnt_f32_to_f16(0x1p-24f) == 0x0001, "fp16 smallest subnormal");
  EXPECT(mnt_f32_to_f16(0x1p-26f) == 0x0000, "fp16 underflow to zero");
  EXPECT(mnt_f16_to_f32(0x0001) == 0x1p-24f, "fp16 subnormal decode");
  EXPECT(bits(mnt_f16_to_f32(0x8000)) == 0x80000000u, "fp16 -0");
  EXPECT(mnt_bf16_to_f32(mnt_f32_to_bf16(3.0f)) == 3.0f, "bf16 3");
  EXPECT(isinf(mnt_bf16_to_f32(mnt_f32_to_bf16(INFINITY))), "bf16 inf");
  EXPECT(mnt_f32_to_bf16(fl(0x7f7fffffu)) == 0x7f80, "bf16 max float rounds to inf");
}

static void reductions(void) {
  enum { N = 1003 };
  mnt_dtype types[] = {MNT_FP32, MNT_BF16, MNT_FP16, MNT_FP64};
  for (int ti = 0; ti < 4; ti++) {
    mnt_dtype t = types[ti];
    float a[N], b[N], got[N];
    uint8_t da[N * 8], db[N * 8];
    for (int i = 0; i < N; i++) {
      a[i] = (float)(i % 13) - 6;
      b[i] = (float)(i % 7) * 0.5f;
    }
    mnt_from_f32(t, a, da, N);
    mnt_from_f32(t, b, db, N);
    mnt_reduce(t, da, db, N, 1.0f);
    mnt_to_f32(t, da, got, N);
    for (int i = 0; i < N; i++) EXPECT(got[i] == a[i] + b[i], "%s sum[%d] %g", mnt_dtype_name(t), i, (double)got[i]);
    mnt_from_f32(t, a, da, N);
    mnt_reduce(t, da, db, N, 4.0f);
    mnt_to_f32(t, da, got, N);
    for (int i = 0; i < N; i++)
      EXPECT(got[i] == (a[i] + b[i]) / 4, "%s avg[%d] %g", mnt_dtype_name(t), i, (double)got[i]);
    mnt_scale_div(t, da, N, 0.5f);
    mnt_to_f32(t, da, got, N);
    for (int i = 0; i < N; i++)
      EXPECT(got[i] == (a[i] + b[i]) / 2, "%s scale[%d] %g", mnt_dtype_name(t), i, (double)got[i]);
  }
  /* fp32 accumulation: 1 + 2^-9 is not a bf16, but (x + y) is rounded once */
  uint16_t x = mnt_f32_to_bf16(256.0f), y = mnt_f32_to_bf16(1.0f);
  mnt_reduce(MNT_BF16, &x, &y, 1, 1.0f);
  EXPECT(mnt_bf16_to_f32(x) == 256.0f, "bf16 256+1 rounds to even 256, got %g", (double)mnt_bf16_to_f32(x));
  mnt_dtype pt;
  mnt_redop po;
  EXPECT(mnt_dtype_parse("half", &pt) == 0 && pt == MNT_FP16, "parse half");
  EXPECT(mnt_dtype_parse("bf16", &pt) == 0 && pt == MNT_BF16, "parse bf16");
  EXPECT(mnt_dtype_parse("int8", &pt) != 0, "parse int8 must fail");
  EXPECT(mnt_dtype_parse("double", &pt) != 0, "double is no training type");
  EXPECT(mnt_dtype_parse_comm("double", &pt) == 0 && pt == MNT_FP64 && mnt_dtype_size(pt) == 8, "parse double");
  EXPECT(mnt_dtype_parse_comm("bfloat16", &pt) == 0 && pt == MNT_BF16 && !strcmp(mnt_dtype_name(pt), "bfloat16"),
         "bfloat16, as nccl-tests names it");
  /* fp64 accumulates in fp64: 1 + 2^-40 is lost in fp32, kept here; avg divides once in fp64 */
  double x64 = 1.0, y64 = 0x1p-40;
  mnt_reduce(MNT_FP64, &x64, &y64, 1, 1.0f);
  EXPECT(x64 == 1.0 + 0x1p-40, "fp64 sum keeps 2^-40, got %.17g", x64);
  x64 = 1.0;
  y64 = 0.0;
  mnt_reduce(MNT_FP64, &x64, &y64, 1, 3.0f);
  EXPECT(x64 == 1.0 / 3.0, "fp64 avg 1/3, got %.17g", x64);
  EXPECT(mnt_redop_parse("avg", &po) == 0 && po == MNT_AVG, "parse avg");
  EXPECT(mnt_redop_parse("max", &po) != 0, "parse max must fail");
}

int main(void) {
  round_trips();
  cases();
  against_compiler();
  reductions();
  if (failures) {
    fprintf(stderr, "test_dtype: %d failures\n", failures);
    return 1;
  }
  printf("test_dtype: ok\n");
  return 0;
}
