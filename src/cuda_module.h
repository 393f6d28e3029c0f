/* cuda_module.h — the CUDA parts as a module loaded on demand.
 * defines: mnt_cuda_module (the table the module's one entry point returns), MNT_CUDA_MODULE_ABI,
 *          MNT_CUDA_MODULE_ENTRY,
 *          mnt_cuda_module_load (the host: find it, dlopen it once, check it; MNT_EARG naming the
 *            library that could not be opened and dlerror's text), mnt_cuda_module_probe (for
 *            "auto": the module when it loads and sees a GPU, else NULL, said once at INFO),
 *          mnt_cuda_module_describe (for --version: where it is and what it was built against; loads
 *            nothing).
 *
 * The CUDA backend (src/backend/cuda/), the NCCL communicator (src/comm/nccl/) and the kernels
 * (kernels/) build into lib/mntrain/mntrain-cuda.so, the only file linked with cudart, cuDNN,
 * cuBLAS and NCCL. The host finds it through MNT_CUDA_MODULE (a path), else beside its own
 * executable: <bin>/../lib/mntrain/ installed, <build>/lib/mntrain/ in the build tree. The module
 * calls the host's mnt_* functions (log, env, world, dtype), which the executable exports; it
 * exports mnt_cuda_module_entry, which returns the table below. A program that links the module
 * (the gpu tests) has the entry in its own symbol table; the host then uses that one. */
#ifndef MNT_CUDA_MODULE_H
#define MNT_CUDA_MODULE_H

#include <stddef.h>
#include <stdio.h>

/* The table's entries take the seams' types, declared here by name only, so that the seams that
 * load the module (backend/backend.c, comm/comm.c) and this header do not include each other; an
 * enum goes through the table as an int (mnt_topology, mnt_copy_kind). */
typedef struct mnt_backend mnt_backend;
typedef struct mnt_backend_opts mnt_backend_opts;
typedef struct mnt_world mnt_world;
typedef struct mnt_comm mnt_comm;

/* Raised when the table or the meaning of an entry changes. The host also compares MNT_CUDA_IFACE
 * (a hash of the headers both sides compile against, generated at build time): a module must come
 * from the same build as the binary. */
#define MNT_CUDA_MODULE_ABI 2
#define MNT_CUDA_MODULE_ENTRY "mnt_cuda_module_entry"

typedef struct mnt_cuda_module {
  unsigned abi;        /* MNT_CUDA_MODULE_ABI of the module's build */
  unsigned size;       /* sizeof(mnt_cuda_module) there */
  const char *iface;   /* MNT_CUDA_IFACE of the module's build */
  const char *version; /* MNT_VERSION of the module's build */
  const char *built;   /* what it was compiled against: "CUDA 13.0.88, cuDNN 9.19.0, NCCL 2.28.9" */
  /* what runs: "CUDA runtime 13.0, driver 12.8, cuDNN 9.19.0, NCCL 2.28.9" (driver "none" without one) */
  void (*runtime)(char *buf, size_t n);
  /* GPUs this process sees; 0 without a GPU or driver (no CUDA error left), why (len bytes) then
   * holds the runtime's reason when there was one ("" when it counted 0) */
  int (*device_count)(char *why, size_t len);
  /* NULL when the build had no cuDNN/cuBLAS, or no NCCL */
  int (*backend_create)(const mnt_backend_opts *o, mnt_backend **out);
  int (*comm_create)(mnt_world *w, int topo, mnt_comm **out); /* topo: an mnt_topology */
  /* GPU memory on the current device, for buffers outside a backend (bench allreduce's) */
  int (*mem_alloc)(size_t bytes, void **p);
  void (*mem_free)(void *p);
  /* synchronous: returns when the copy is complete (the device waited for where cudaMemcpy alone
   * does not promise it: mnt_copy_waits_after) */
  int (*mem_copy)(void *dst, const void *src, size_t bytes, int kind); /* kind: an mnt_copy_kind */
  /* the current device: its index, PCI domain/bus/device and name */
  int (*device_info)(int *device, unsigned pci[3], char *name, size_t n);
} mnt_cuda_module;

typedef const mnt_cuda_module *(*mnt_cuda_module_entry_fn)(void);

/* The module, loaded on first use. why: what asks for it ("--device cuda"), for the message.
 * MNT_EARG when this build has no CUDA parts, the module is not found, one of its libraries cannot
 * be opened (the message names it and gives dlerror's text), or it is from another build. */
int mnt_cuda_module_load(const char *why, const mnt_cuda_module **out);
/* For "auto" (backend.h, mnt_device_auto): the module when a GPU driver is visible, the module loads
 * and sees a GPU; else NULL, and why[0..n) says why (the caller says it where it reports the choice).
 * Never an error. */
const mnt_cuda_module *mnt_cuda_module_probe(char *why, size_t n);
/* For --version: lines "cuda module: ..." saying where it is (or why there is none) and what this
 * build compiled it against. Loads nothing: whether its libraries load on this node shows when a
 * run asks for a GPU (the message names the library that could not be opened). */
void mnt_cuda_module_describe(FILE *f);

#endif
