/* test_cuda_cast.c — the GPU casts (kernels/cast.cu) agree bit for bit with the CPU ones
 * (src/dtype.c). Skips (77) where there is no GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/backend/cuda/device.h"
#include "kernels/cast.h"
#include "src/dtype.h"

#include "tests/gpu/gpu_test.h"

int main(void) {
  if (mnt_cuda_device_count() <= 0) {
    printf("SKIP: no CUDA device here\n");
    return 77;
  }
  enum { N = 1 << 20 };
  float *h = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  uint16_t *h16 = malloc(N * 2), *want = malloc(N * 2);
  for (int i = 0; i < N; i++) {
    uint32_t u = (uint32_t)i * 2654435761u;
    memcpy(&h[i], &u, 4);
    if (h[i] != h[i]) h[i] = 1.5f; /* NaN payloads may differ: not compared */
  }
  float *d;
  uint16_t *d16;
  float *dback;
  if (cudaMalloc((void **)&d, N * 4) || cudaMalloc((void **)&d16, N * 2) || cudaMalloc((void **)&dback, N * 4)) {
    fprintf(stderr, "FAIL: cudaMalloc\n");
    return 1;
  }
  cudaMemcpy(d, h, N * 4, cudaMemcpyHostToDevice);
  for (int t = 1; t <= 2; t++) {
    if (mnt_cuda_cast(0, t, d, d16, N, NULL) || mnt_cuda_cast(t, 0, d16, dback, N, NULL) ||
        cudaDeviceSynchronize() != cudaSuccess) {
      fprintf(stderr, "FAIL: kernel launch for type %d\n", t);
      return 1;
    }
    cudaMemcpy(h16, d16, N * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(back, dback, N * 4, cudaMemcpyDeviceToHost);
    mnt_from_f32((mnt_dtype)t, h, want, N);
    for (int i = 0; i < N; i++) {
      float w = t == 1 ? mnt_bf16_to_f32(want[i]) : mnt_f16_to_f32(want[i]);
      if (h16[i] != want[i] || memcmp(&back[i], &w, 4) != 0) {
        if (failures++ < 10) fprintf(stderr, "FAIL: %s(%a) gpu %04x cpu %04x\n", t == 1 ? "bf16" : "fp16", (double)h[i], h16[i], want[i]);
      }
    }
  }
  cudaFree(d);
  cudaFree(d16);
  cudaFree(dback);
  free(h); free(back); free(h16); free(want);
  return gpu_test_end("test_cuda_cast");
}
