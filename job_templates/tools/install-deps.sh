#!/usr/bin/env bash
# install-deps.sh — install what mntrain needs to build, test and run on Debian 12, as root.
#   job_templates/tools/install-deps.sh [--no-update]
# Build: cmake, a C compiler, pkg-config, PMIx, HDF5, oneDNN, OpenBLAS, libjpeg-turbo (its TurboJPEG and
# libjpeg APIs: libturbojpeg0-dev, libjpeg62-turbo-dev), libpng, xxHash, jansson, zlib.
# Cluster: Slurm (slurm-wlm, with the PMIx plugin) and munge; iproute2/util-linux for the
# local cluster's network and mount namespaces (mount: the bind mounts; "required" on a Debian
# install, but not in a minimal root); GlusterFS (glusterfs-server, glusterfs-client) for the
# local cluster's shared checkpoint volume (local-cluster.sh up --gluster). Peers: PyTorch
# (python3-torch), h5py. Data: Fashion-MNIST (dataset-fashion-mnist, IDX files under /usr/share/datasets/fashion-mnist).
# Checks: shellcheck (tests/unit/lint_shell.sh), clang-format (tests/unit/format_check.sh).
# Modulefile tests (tests/unit/modules.sh): Lmod, and tclsh for Environment Modules' modulecmd.tcl
# (that package conflicts with lmod: the test unpacks it with apt-get download + dpkg -x).
# CUDA (nvcc, cuDNN, NCCL) is not a Debian package: it is used from /usr/local/cuda when present.
# The install starts no daemon (munged, glusterd: local-cluster.sh starts its own): where no
# /usr/sbin/policy-rc.d exists, a temporary one that refuses every start is in place during
# apt-get and removed afterwards; an existing one (a container's, tests/fresh-machine.sh's) is kept.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "install-deps: run as root (apt-get install)" >&2; exit 1; }
packages=(
  build-essential cmake pkg-config
  libpmix-dev libhdf5-dev hdf5-tools libdnnl-dev libopenblas-dev libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libxxhash-dev libjansson-dev zlib1g-dev
  slurm-wlm munge iproute2 util-linux mount procps glusterfs-server glusterfs-client
  python3-torch python3-torchvision python3-h5py python3-numpy dataset-fashion-mnist
  shellcheck clang-format gdb mmdebstrap lmod tcl
)
policy=/usr/sbin/policy-rc.d
policy_mark="# install-deps.sh: no daemon starts during the install"
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n%s\nexit 101\n' "$policy_mark" >"$policy"
  chmod 755 "$policy"
  trap 'if grep -qF "$policy_mark" "$policy" 2>/dev/null; then rm -f "$policy"; fi' EXIT
  trap 'exit 130' INT TERM
fi
export DEBIAN_FRONTEND=noninteractive
[ "${1:-}" = "--no-update" ] || apt-get update -q
apt-get install -y -q --no-install-recommends "${packages[@]}"
