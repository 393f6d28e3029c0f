/* cuda_module.c — the host's side of cuda_module.h: finding the CUDA module, loading it with
 * dlopen when a command asks for a GPU, checking it is from this build, and describing it for
 * --version without loading it (where it is; what this build compiled it against).
 *
 * Where the module is: MNT_CUDA_MODULE (a path; nothing else is tried), else relative to the
 * executable (/proc/self/exe): MNT_CUDA_MODULE_RELDIR (the install layout, bin/../lib/mntrain),
 * then MNT_CUDA_MODULE_BUILD_RELDIR (the build tree: <build>/lib/mntrain beside <build>/mntrain).
 * Those three names come from CMakeLists.txt. */
#include "src/cuda_module.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/env.h"
#include "src/check.h"
#include "src/log.h"
#include "src/path.h"
#include "mnt_cuda_iface.h" /* MNT_CUDA_IFACE, generated from the shared headers */

#ifndef MNT_CUDA_MODULE_FILE
#define MNT_CUDA_MODULE_FILE "mntrain-cuda.so"
#endif
#ifndef MNT_CUDA_MODULE_RELDIR
#define MNT_CUDA_MODULE_RELDIR "../lib/mntrain"
#endif
#ifndef MNT_CUDA_MODULE_BUILD_RELDIR
#define MNT_CUDA_MODULE_BUILD_RELDIR "lib/mntrain"
#endif
#ifndef MNT_CUDA_BUILT /* CMakeLists.txt: the versions found at configure time, as the module has them */
#define MNT_CUDA_BUILT "?"
#endif

#if MNT_HAVE_CUDA

/* snprintf that may cut: paths and loader messages are long, the buffers fixed */
__attribute__((format(printf, 3, 4))) static void say(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

/* ---- where the module is ---------------------------------------------------------------------- */

enum { NCAND = 2 };

/* the candidate paths in order; n: how many. MNT_CUDA_MODULE, when set, is the only one. */
static int candidates(char cand[NCAND][MNT_PATH_MAX], int *from_env) {
  const char *env = mnt_env_cuda_module();
  *from_env = env != NULL;
  if (env) {
    say(cand[0], MNT_PATH_MAX, "%s", env);
    return 1;
  }
  char exe[MNT_PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (k <= 0) return 0;
  exe[k] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return 0;
  *slash = 0;
  int n = 0;
  const char *rel[NCAND] = {MNT_CUDA_MODULE_RELDIR, MNT_CUDA_MODULE_BUILD_RELDIR};
  for (int i = 0; i < NCAND; i++) {
    if (rel[i][0] == '/') say(cand[n], MNT_PATH_MAX, "%s/%s", rel[i], MNT_CUDA_MODULE_FILE);
    else say(cand[n], MNT_PATH_MAX, "%s/%s/%s", exe, rel[i], MNT_CUDA_MODULE_FILE);
    n++;
  }
  return n;
}

/* the first candidate that exists into path (the real path); 0 when none: why says where it looked */
static int find_module(char *path, char *why, size_t n) {
  char cand[NCAND][MNT_PATH_MAX];
  int from_env = 0, nc = candidates(cand, &from_env);
  for (int i = 0; i < nc; i++)
    if (access(cand[i], F_OK) == 0) {
      if (!realpath(cand[i], path)) say(path, MNT_PATH_MAX, "%s", cand[i]);
      return 1;
    }
  if (from_env) say(why, n, "MNT_CUDA_MODULE=%s: %s", cand[0], strerror(errno));
  else if (nc == 2) say(why, n, "neither %s nor %s exists (reinstall mntrain, or set MNT_CUDA_MODULE)", cand[0], cand[1]);
  else say(why, n, "/proc/self/exe cannot be read, and MNT_CUDA_MODULE is not set");
  return 0;
}

/* ---- loading -------------------------------------------------------------------------------------- */

static struct {
  pthread_mutex_t mu;
  int tried, st, nolib; /* nolib: a library the module needs is missing */
  const mnt_cuda_module *mod;
  char path[MNT_PATH_MAX];
  char err[1536];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* the library dlopen could not open, from its message ("libcudart.so.13: cannot open shared object
 * file: No such file or directory"); "" when the message is of another kind */
static void missing_lib(const char *msg, char *out, size_t n) {
  out[0] = 0;
  const char *at = msg ? strstr(msg, ": cannot open shared object file") : NULL;
  if (!at) return;
  const char *start = msg;
  for (const char *p = msg; p + 1 < at; p++)
    if (p[0] == ':' && p[1] == ' ') start = p + 2;
  say(out, n, "%.*s", (int)(at - start), start);
}

static int check_table(const mnt_cuda_module *m, const char *path) {
  if (m && m->abi == MNT_CUDA_MODULE_ABI && m->size >= sizeof *m && m->iface && !strcmp(m->iface, MNT_CUDA_IFACE))
    return MNT_OK;
  say(S.err, sizeof S.err,
           "the CUDA module %s is from another mntrain build (its ABI %u, interface %s, mntrain %s; this "
           "binary's: ABI %d, interface %s, mntrain %s): install the binary and lib/mntrain/ together",
           path, m ? m->abi : 0u, m && m->iface ? m->iface : "?", m && m->version ? m->version : "?",
           MNT_CUDA_MODULE_ABI, MNT_CUDA_IFACE, MNT_VERSION);
  return MNT_EARG;
}

static int do_load(void) {
  /* linked into this program (a gpu test): no file to open */
  mnt_cuda_module_entry_fn entry = (mnt_cuda_module_entry_fn)dlsym(RTLD_DEFAULT, MNT_CUDA_MODULE_ENTRY);
  if (entry) {
    say(S.path, sizeof S.path, "(linked into this program)");
  } else {
    char why[2 * MNT_PATH_MAX + 64];
    if (!find_module(S.path, why, sizeof why)) {
      say(S.err, sizeof S.err, "cannot find the CUDA module: %s", why);
      return MNT_EARG;
    }
    dlerror();
    void *h = dlopen(S.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      char lib[MNT_PATH_MAX];
      missing_lib(e, lib, sizeof lib);
      S.nolib = lib[0] != 0;
      if (S.nolib)
        say(S.err, sizeof S.err, "cannot load the CUDA module %s: %s could not be opened (dlerror: %s)", S.path, lib,
            e ? e : "?");
      else
        say(S.err, sizeof S.err, "cannot load the CUDA module %s (dlerror: %s)", S.path, e ? e : "?");
      return MNT_EARG;
    }
    entry = (mnt_cuda_module_entry_fn)dlsym(h, MNT_CUDA_MODULE_ENTRY);
    if (!entry) {
      const char *e = dlerror();
      say(S.err, sizeof S.err, "%s is not mntrain's CUDA module (dlerror: %s)", S.path, e ? e : "?");
      return MNT_EARG; /* left open: a library's destructors may not run safely half-used */
    }
  }
  const mnt_cuda_module *m = entry();
  MNT_CHECK(check_table(m, S.path));
  S.mod = m;
  char rt[160];
  m->runtime(rt, sizeof rt);
  MNT_DBG("CUDA module %s: built against %s; running %s", S.path, m->built, rt);
  return MNT_OK;
}

static int ensure_loaded(void) {
  pthread_mutex_lock(&S.mu);
  if (!S.tried) {
    S.tried = 1;
    S.st = do_load();
  }
  pthread_mutex_unlock(&S.mu);
  return S.st;
}

int mnt_cuda_module_load(const char *why, const mnt_cuda_module **out) {
  *out = NULL;
  int st = ensure_loaded();
  if (st != MNT_OK) {
    MNT_ERR("%s: %s", why ? why : "CUDA", S.err); /* first: the log keeps 400 characters of a line */
    if (S.nolib)
      MNT_INFO("on a node without the CUDA libraries run with --device cpu --comm cpu, or make them visible "
               "(module load cuda, LD_LIBRARY_PATH); mntrain --version says whether they resolve");
    return st;
  }
  *out = S.mod;
  return MNT_OK;
}

/* a GPU driver is there to talk to (device nodes of Linux, WSL) */
static int driver_visible(void) {
  return access("/dev/nvidiactl", F_OK) == 0 || access("/proc/driver/nvidia/version", F_OK) == 0 ||
         access("/dev/dxg", F_OK) == 0;
}

const mnt_cuda_module *mnt_cuda_module_probe(char *why, size_t n) {
  char reason[256] = "";
  snprintf(why, n, "a GPU is visible");
  if (!driver_visible() && !dlsym(RTLD_DEFAULT, MNT_CUDA_MODULE_ENTRY)) {
    snprintf(why, n, "no NVIDIA GPU driver here (no /dev/nvidiactl)");
  } else if (ensure_loaded() != MNT_OK) {
    snprintf(why, n, "%s", S.err);
  } else if (S.mod->device_count(reason, sizeof reason) <= 0) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(why, n, "the CUDA module sees no GPU%s%s%s%s%s", v ? " (CUDA_VISIBLE_DEVICES=" : "", v ? v : "",
             v ? ")" : "", reason[0] ? ": " : "", reason);
  } else {
    return S.mod;
  }
  return NULL;
}

void mnt_cuda_module_describe(FILE *f) {
  char path[MNT_PATH_MAX], why[2 * MNT_PATH_MAX + 64];
  if (!find_module(path, why, sizeof why)) {
    fprintf(f, "cuda module: not found: %s; --device cuda and --comm nccl cannot run\n", why);
    return;
  }
  fprintf(f, "cuda module: %s\n", path);
  fprintf(f, "cuda module built against: %s\n", MNT_CUDA_BUILT);
}

#else /* no CUDA parts in this build */

int mnt_cuda_module_load(const char *why, const mnt_cuda_module **out) {
  *out = NULL;
  MNT_ERR("%s: this mntrain was built without the CUDA parts (they need nvcc, and cuDNN, cuBLAS and NCCL, at "
          "configure time: cmake -DMNT_CUDA=ON)",
          why ? why : "CUDA");
  return MNT_EARG;
}

const mnt_cuda_module *mnt_cuda_module_probe(char *why, size_t n) {
  snprintf(why, n, "this mntrain was built without the CUDA parts");
  return NULL;
}

void mnt_cuda_module_describe(FILE *f) {
  fprintf(f, "cuda module: none (this mntrain was built without the CUDA parts)\n");
}

#endif
