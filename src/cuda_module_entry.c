/* cuda_module_entry.c — the CUDA module's side of cuda_module.h: its one exported entry point
 * (mnt_cuda_module_entry: the versioned table) and the few GPU-memory calls the host needs outside
 * a backend. Built into lib/mntrain/mntrain-cuda.so only, never into the executable. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "src/backend/backend.h"     /* mnt_backend_cuda_create, mnt_copy_kind */
#include "src/backend/cuda/device.h" /* mnt_cuda_device_count_why */
#include "src/comm/comm.h"           /* mnt_comm_nccl_create */
#include "src/cuda_module.h"
#include "src/log.h"
#include "mnt_cuda_iface.h" /* MNT_CUDA_IFACE, generated */
#if MNT_HAVE_CUDA_BACKEND
#include <cudnn.h>
#endif
#if MNT_HAVE_NCCL
#include <nccl.h>
#endif

#define MNT_STR_(x) #x
#define MNT_STR(x) MNT_STR_(x)

#ifndef MNT_CUDA_TOOLKIT_VERSION
#define MNT_CUDA_TOOLKIT_VERSION MNT_STR(CUDART_VERSION)
#endif
#if MNT_HAVE_CUDA_BACKEND
#define MNT_BUILT_CUDNN ", cuDNN " MNT_STR(CUDNN_MAJOR) "." MNT_STR(CUDNN_MINOR) "." MNT_STR(CUDNN_PATCHLEVEL)
#else
#define MNT_BUILT_CUDNN ", no cuDNN backend"
#endif
#if MNT_HAVE_NCCL
#define MNT_BUILT_NCCL ", NCCL " MNT_STR(NCCL_MAJOR) "." MNT_STR(NCCL_MINOR) "." MNT_STR(NCCL_PATCH)
#else
#define MNT_BUILT_NCCL ", no NCCL"
#endif
#define MNT_BUILT "CUDA " MNT_CUDA_TOOLKIT_VERSION MNT_BUILT_CUDNN MNT_BUILT_NCCL

static int cuda_fail(cudaError_t e, const char *what) {
  cudaGetLastError(); /* not sticky: leave no error for the next kernel launch to find */
  MNT_ERR("%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return e == cudaErrorMemoryAllocation ? MNT_ENOMEM : MNT_ESYS;
}

static void runtime(char *buf, size_t n) {
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
  cudaGetLastError();
  char d[32] = "none";
  if (drv > 0) snprintf(d, sizeof d, "%d.%d", drv / 1000, drv % 1000 / 10);
  size_t k = (size_t)snprintf(buf, n, "CUDA runtime %d.%d, driver %s", rt / 1000, rt % 1000 / 10, d);
#if MNT_HAVE_CUDA_BACKEND
  size_t v = cudnnGetVersion(); /* 9.19.0: 91900 */
  if (k < n) k += (size_t)snprintf(buf + k, n - k, ", cuDNN %zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
#endif
#if MNT_HAVE_NCCL
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess && k < n)
    k += (size_t)snprintf(buf + k, n - k, ", NCCL %d.%d.%d", nv / 10000, nv % 10000 / 100, nv % 100);
#endif
  (void)k;
}

static int mem_alloc(size_t bytes, void **p) {
  *p = NULL;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e != cudaSuccess) {
    *p = NULL;
    char what[64];
    snprintf(what, sizeof what, "cudaMalloc of %zu bytes", bytes);
    return cuda_fail(e, what);
  }
  return MNT_OK;
}

static void mem_free(void *p) {
  if (!p) return;
  cudaError_t e = cudaFree(p);
  if (e != cudaSuccess) cuda_fail(e, "cudaFree");
}

static int mem_copy(void *dst, const void *src, size_t bytes, int kind) { /* kind: an mnt_copy_kind */
  static const enum cudaMemcpyKind K[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
  if (kind < MNT_COPY_H2D || kind > MNT_COPY_D2D) {
    MNT_ERR("internal: copy kind %d", kind);
    return MNT_EARG;
  }
  cudaError_t e = cudaMemcpy(dst, src, bytes, K[kind]);
  if (e == cudaSuccess && mnt_copy_waits_after((mnt_copy_kind)kind)) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? MNT_OK : cuda_fail(e, "cudaMemcpy");
}

static int device_info(int *device, unsigned pci[3], char *name, size_t n) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDevice(device);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, *device);
  if (e != cudaSuccess) return cuda_fail(e, "cudaGetDeviceProperties");
  pci[0] = (unsigned)prop.pciDomainID;
  pci[1] = (unsigned)prop.pciBusID;
  pci[2] = (unsigned)prop.pciDeviceID;
  snprintf(name, n, "%s", prop.name);
  return MNT_OK;
}

#if MNT_HAVE_NCCL
static int comm_create(mnt_world *w, int topo, mnt_comm **out) { /* topo: an mnt_topology */
  return mnt_comm_nccl_create(w, (mnt_topology)topo, out);
}
#endif

static const mnt_cuda_module table = {
    .abi = MNT_CUDA_MODULE_ABI,
    .size = sizeof(mnt_cuda_module),
    .iface = MNT_CUDA_IFACE,
    .version = MNT_VERSION,
    .built = MNT_BUILT,
    .runtime = runtime,
    .device_count = mnt_cuda_device_count_why,
#if MNT_HAVE_CUDA_BACKEND
    .backend_create = mnt_backend_cuda_create,
#endif
#if MNT_HAVE_NCCL
    .comm_create = comm_create,
#endif
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .mem_copy = mem_copy,
    .device_info = device_info,
};

/* the one entry point (cuda_module.h); the declaration keeps -Wmissing-prototypes quiet */
__attribute__((visibility("default"))) const mnt_cuda_module *mnt_cuda_module_entry(void);
const mnt_cuda_module *mnt_cuda_module_entry(void) {
  return &table;
}
