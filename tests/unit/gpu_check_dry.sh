#!/usr/bin/env bash
# gpu_check_dry.sh — the CPU-side half of benchmarks/gpu_check.sh in every CI run: make the
# library bundle the GPU machine needs (benchmarks/gpu_bundle.sh: apt-get download + dpkg -x) and
# build mntrain and the gpu tests against it alone (gpu_check.sh --build-only: /usr excluded from
# CMake's searches, pkg-config limited to the bundle, every bundled library and header checked to
# come from the bundle). Skipped (77) without nvcc or without apt's package lists.
#   tests/unit/gpu_check_dry.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:?usage: gpu_check_dry.sh BUILD_DIR}/gpu-check-dry
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "SKIP: no nvcc (the bundle's build needs the CUDA compiler)"
  exit 77
fi
if ! command -v apt-get >/dev/null 2>&1 || ! apt-cache show libpmix-dev >/dev/null 2>&1; then
  echo "SKIP: no apt package lists to download the bundle from"
  exit 77
fi
mkdir -p "$work"
rm -rf "$work/gpu-bundle" "$work/build"
# the .deb files stay between runs (a rerun needs no download)
"$root/benchmarks/gpu_bundle.sh" --keep-debs "$work/debs" "$work/gpu-bundle"
"$root/benchmarks/gpu_check.sh" --build-only --bundle "$work/gpu-bundle" --build-dir "$work/build" \
  --out "$work/logs" --jobs "$(nproc)"
