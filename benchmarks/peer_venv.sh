#!/usr/bin/env bash
# peer_venv.sh — the benchmarks' peers at today's releases, from PyPI, in a venv of their own (never
# in CI or install-deps.sh: the product and its tests use Debian's packages only). Prints the venv's
# python. Idempotent: a venv that already has these versions is reused.
#   benchmarks/peer_venv.sh [torch|mpi4py|dali]...   (default: torch)
# MNT_PEER_VENV: where (default ~/.cache/mntrain/peer-venv). The versions are pinned here, so that a
# figure in benchmarks/README.md names what it measured; raise them when a new release is out.
#   torch:  PyTorch 2.15.0 and torchvision 0.29.2 (the newest on PyPI on 2026-12-06; it accepts
#           torch >= 2.14), the x86-64 wheel (its CUDA libraries come along; the CPU peers load them
#           but never use a GPU)
#   mpi4py: mpi4py 4.1.2, built against Debian's Open MPI (libopenmpi-dev, openmpi-bin: installed
#           here with apt-get when run as root, else asked for)
#   dali:   NVIDIA DALI 2.4.0 (nvidia-dali-cuda120), whose CPU pipeline needs no GPU
set -euo pipefail
venv=${MNT_PEER_VENV:-$HOME/.cache/mntrain/peer-venv}
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(torch)
pkgs=()
for w in "${want[@]}"; do
  case $w in
  torch) pkgs+=(torch==2.15.0 torchvision==0.29.2) ;;
  mpi4py)
    if ! command -v mpicc >/dev/null 2>&1; then
      if [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenmpi-dev openmpi-bin >&2
      else
        echo "peer_venv.sh: mpi4py needs Debian's Open MPI: apt-get install libopenmpi-dev openmpi-bin" >&2
        exit 1
      fi
    fi
    pkgs+=(mpi4py==4.1.2) ;;
  dali) pkgs+=(nvidia-dali-cuda120==2.4.0 pillow) ;;
  *) echo "peer_venv.sh: unknown peer '$w' (torch, mpi4py or dali)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv" >&2
fi
# pip install is a no-op (seconds) when the pinned versions are there
"$venv/bin/python" -m pip install -q "${pkgs[@]}" >&2
echo "$venv/bin/python"
