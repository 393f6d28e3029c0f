/* test_isa.c — no layer of any architecture runs a oneDNN reference implementation ("ref:any",
 * 100-1000x slower than the JIT kernels) on the CPU ISA this process runs on. oneDNN reads
 * ONEDNN_MAX_CPU_ISA once per process, so CTest runs this program once per ISA (AVX2, AVX512_CORE
 * and the machine's own): every convolution, batch norm and max pool of resnet8/20 (8-64 px) and
 * resnet18/34/50/101 (32-256 px), for batches 1 to 256, is planned on a plan-only CPU backend (the
 * implementation choice of backend_cpu.c, nothing compiled or allocated), and the first layer that
 * would run a reference implementation fails the test by name. A cap above what the CPU has (AVX-512
 * on an AVX2 machine) cannot be checked here: skipped (77) with the reason. Both precisions: fp32, and
 * bf16 wherever oneDNN runs it (AVX-512 and up; below it --precision bf16 is refused, test_ops_bf16).
 *   test_isa [arch size batch]   (one configuration, for a look by hand)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "src/backend/backend.h"
#include "src/log.h"
#include "src/model/resnet.h"

#include "tests/expect.h"

typedef struct {
  mnt_backend *be;
  const char *arch;
  int size, batch;
  int layers, slow, verbose;
  /* shapes already planned: the same layer recurs across architectures and sizes */
  struct seen { mnt_layer_shape s; } *seen;
  int nseen, cap;
} plan_ctx;

static int same(const mnt_layer_shape *a, const mnt_layer_shape *b) {
  return a->kind == b->kind && a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->K == b->K &&
         a->R == b->R && a->s == b->s && a->p == b->p && a->flag == b->flag;
}

static void plan_layer(void *v, const mnt_layer_shape *l) {
  plan_ctx *c = v;
  if (l->kind == MNT_LAYER_FC) return; /* a GEMM, not a oneDNN primitive */
  for (int i = 0; i < c->nseen; i++)
    if (same(&c->seen[i].s, l)) return;
  if (c->nseen == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 256;
    c->seen = realloc(c->seen, (size_t)c->cap * sizeof *c->seen);
    if (!c->seen) abort();
  }
  c->seen[c->nseen++].s = *l;
  c->layers++;
  int slow = 0, st;
  const char *impl = "";
  if (l->kind == MNT_LAYER_CONV) {
    mnt_conv *cv;
    if ((st = mnt_conv_create(c->be, l->N, l->C, l->H, l->W, l->K, l->R, l->s, l->p, l->flag, &cv)) == MNT_OK) {
      impl = mnt_conv_impl(cv, &slow);
      if (slow || c->verbose) printf("  %s %dx%d %d->%d: %s\n", l->name, l->H, l->W, l->C, l->K, impl);
      mnt_conv_destroy(cv);
    }
  } else if (l->kind == MNT_LAYER_BN) {
    mnt_bn *bn;
    if ((st = mnt_bn_create(c->be, l->N, l->C, l->H, l->W, 1e-5f, l->flag, &bn)) == MNT_OK) {
      impl = mnt_bn_impl(bn, &slow);
      if (slow) fprintf(stderr, "  %s: %s\n", l->name, impl);
      mnt_bn_destroy(bn);
    }
  } else {
    mnt_pool *pl;
    if ((st = mnt_pool_create(c->be, l->N, l->C, l->H, l->W, l->R, l->s, l->p, &pl)) == MNT_OK) {
      impl = mnt_pool_impl(pl, &slow);
      if (slow) fprintf(stderr, "  %s: %s\n", l->name, impl);
      mnt_pool_destroy(pl);
    }
  }
  EXPECT(st == MNT_OK, "%s %d px batch %d: %s could not be planned (%s)", c->arch, c->size, c->batch, l->name,
         mnt_status_str(st));
  if (slow && !c->slow++)
    EXPECT(0, "%s %d px batch %d on %s: %s (%dx%d, %d -> %d channels) would run a reference implementation: %s",
           c->arch, c->size, c->batch, mnt_cpu_isa_name(), l->name, l->H, l->W, l->C, l->K, impl);
}

static void plan(plan_ctx *c, const char *arch, int size, int batch) {
  c->arch = arch;
  c->size = size;
  c->batch = batch;
  int st = mnt_resnet_walk(arch, 10, size, batch, batch, plan_layer, c);
  EXPECT(st == MNT_OK, "%s %d px batch %d: the layer walk failed (%s)", arch, size, batch, mnt_status_str(st));
}

/* "AVX512_CORE" asked of a CPU whose oneDNN tops out below it */
static int cap_above_cpu(const char *cap) {
  static const struct { const char *env, *isa; } CAPS[] = {{"AVX512_CORE", "avx512_core"}, {"AVX2", "avx2"}};
  const char *have = mnt_cpu_isa_name();
  for (size_t i = 0; i < sizeof CAPS / sizeof *CAPS; i++)
    if (!strcasecmp(cap, CAPS[i].env)) return strncmp(have, CAPS[i].isa, strlen(CAPS[i].isa)) != 0;
  return 0;
}

/* every configuration (or argv's one) planned in precision p; 1 when the backend cannot be made */
static int plan_all(mnt_precision p, int argc, char **argv) {
  mnt_backend_opts o = {.precision = p, .device = -1, .plan_only = 1};
  plan_ctx c = {0};
  if (mnt_backend_create("cpu", &o, &c.be) != MNT_OK) return 1;
  if (argc == 4) {
    c.verbose = 1; /* print every convolution */
    plan(&c, argv[1], atoi(argv[2]), atoi(argv[3]));
  } else {
    static const int BATCHES[] = {1, 2, 3, 4, 8, 16, 32, 64, 128, 256};
    static const int SMALL[] = {8, 16, 28, 32, 64}, LARGE[] = {32, 64, 72, 224, 256};
    static const char *const SMALL_ARCHS[] = {"resnet8", "resnet20"};
    static const char *const LARGE_ARCHS[] = {"resnet18", "resnet34", "resnet50", "resnet101"};
    for (size_t b = 0; b < sizeof BATCHES / sizeof *BATCHES; b++) {
      for (size_t a = 0; a < 2; a++)
        for (size_t s = 0; s < sizeof SMALL / sizeof *SMALL; s++) plan(&c, SMALL_ARCHS[a], SMALL[s], BATCHES[b]);
      for (size_t a = 0; a < 4; a++)
        for (size_t s = 0; s < sizeof LARGE / sizeof *LARGE; s++) plan(&c, LARGE_ARCHS[a], LARGE[s], BATCHES[b]);
    }
  }
  printf("test_isa: %d distinct layers planned in %s on %s, %d would run a reference implementation\n", c.layers,
         mnt_precision_name(p), mnt_cpu_isa_name(), c.slow);
  free(c.seen);
  mnt_backend_destroy(c.be);
  return 0;
}

int main(int argc, char **argv) {
  const char *cap = getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap) cap = getenv("DNNL_MAX_CPU_ISA");
  printf("test_isa: oneDNN runs on %s (cap %s)\n", mnt_cpu_isa_name(), cap ? cap : "none: the machine's own");
  if (cap && cap_above_cpu(cap)) {
    printf("test_isa: SKIP: this CPU offers %s, below the cap %s: that ISA cannot be checked on this machine\n",
           mnt_cpu_isa_name(), cap);
    return 77;
  }
  int nprec = strncmp(mnt_cpu_isa_name(), "avx512", 6) ? 1 : 2;
  for (int prec = 0; prec < nprec; prec++)
    if (plan_all(prec ? MNT_PREC_BF16 : MNT_PREC_FP32, argc, argv)) return 1;
  if (failures) {
    fprintf(stderr, "test_isa: %d failures\n", failures);
    return 1;
  }
  printf("test_isa: ok\n");
  return 0;
}
