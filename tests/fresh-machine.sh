#!/usr/bin/env bash
# fresh-machine.sh — the install steps on a machine that has nothing: a minimal Debian root of the
# suite asked for (mmdebstrap --variant=apt: apt and essential packages only), the committed tree
# (git archive HEAD) copied in, and inside a chroot: job_templates/tools/install-deps.sh, the CMake
# build with warnings as errors, and the unit tests. This is what catches a package that the
# developers' machines happen to have but install-deps.sh does not install (it happened: oneDNN's
# CMake config wanted OpenCL, a Recommends that --no-install-recommends leaves out).
#   tests/fresh-machine.sh [bookworm|trixie]   (as root; .ci/run runs both; default bookworm)
# bookworm (Debian 12): the above, about 5 minutes, most of it apt.
# trixie (Debian 13: Slurm 24.11, PMIx 5, HDF5 1.14, oneDNN 3, GCC 14): the above, then the 2-node
# local cluster (job_templates/tools/local-cluster.sh up) inside the root, in PID, network, mount,
# UTS and IPC namespaces of its own (unshare; a fresh /proc, /sys and /dev/shm there), so that it
# never sees nor touches this machine's processes, addresses or cluster, and on it the cluster
# tests FRESH_CLUSTER_TESTS (a ctest -R regex; default: PMIx world of 4 ranks, a 2-node training
# with a checkpoint and its resume, a preempted and requeued job's resume, a shrink after a killed
# rank); a test that skips fails this stage; then the README's main job, job_templates/quickstart.sh,
# on that cluster (FRESH_QUICKSTART=0 leaves it out). About 12 minutes, 5 of them apt.
# Environment: FRESH_KEEP=1 keeps the root for a look afterwards (its path is printed);
# FRESH_MIRROR (default http://deb.debian.org/debian); FRESH_CLUSTER_TIMEOUT (seconds, default
# 1500) bounds the cluster tests, and the quickstart apart. Exit status: 0 when everything in the chroot
# passed, 77 (skipped) without root or mmdebstrap, 2 for an unknown suite, 1 otherwise. The
# cluster, its namespaces, the mounts and the root are removed on every exit, also on failure or
# Ctrl-C (the namespaces' processes are killed with their init: unshare --kill-child).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
suite=${1:-bookworm}
case $suite in
  bookworm | trixie) ;;
  *) echo "usage: tests/fresh-machine.sh [bookworm|trixie]" >&2; exit 2 ;;
esac
cluster_tests=${FRESH_CLUSTER_TESTS:-'^(cluster_world_4|cluster_ckpt_exact|cluster_requeue|cluster_shrink_rank)$'}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: fresh-machine.sh needs root (chroot, mounts)"; exit 77; }
command -v mmdebstrap >/dev/null || { echo "SKIP: apt-get install mmdebstrap"; exit 77; }
git -C "$src" rev-parse --verify -q HEAD >/dev/null || { echo "fresh-machine: $src is not a git checkout" >&2; exit 1; }

work=$(mktemp -d /var/tmp/mntrain-fresh.XXXXXX)
root=$work/root
ns_pid=""
cleanup() {
  local rc=$?
  # the cluster's namespaces: unshare --kill-child SIGKILLs their init, and every process in the
  # PID namespace dies with it; the network and mount namespaces go with their last process
  if [ -n "$ns_pid" ] && kill -0 "$ns_pid" 2>/dev/null; then
    kill -9 "$ns_pid" 2>/dev/null || true
    wait "$ns_pid" 2>/dev/null || true
  fi
  for m in "$root/dev" "$root/proc"; do
    if mountpoint -q "$m" 2>/dev/null; then umount -R "$m" 2>/dev/null || umount -R -l "$m" || true; fi
  done
  if [ "${FRESH_KEEP:-0}" = 1 ]; then echo "fresh-machine: kept $work"; else rm -rf --one-file-system "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
echo "== fresh-machine: mmdebstrap --variant=apt $suite ($work)"
mmdebstrap --quiet --variant=apt "$suite" "$work/root.tar" "${FRESH_MIRROR:-http://deb.debian.org/debian}"
mkdir "$root"
tar -C "$root" -xf "$work/root.tar"
rm "$work/root.tar"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# no daemon may start inside the chroot while packages install (munge, slurm)
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mkdir "$root/src"
git -C "$src" archive HEAD | tar -C "$root/src" -x
echo "== fresh-machine: tree $(git -C "$src" rev-parse --short HEAD) copied in"
mount --bind /proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --make-rslave "$root/dev" # unmounting our copy must never reach the host's /dev
# shellcheck disable=SC2016
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive /bin/bash -euo pipefail -c '
cd /src
echo "== fresh-machine (chroot): job_templates/tools/install-deps.sh"
job_templates/tools/install-deps.sh
echo "== fresh-machine (chroot): cmake, warnings as errors"
cmake -S . -B build -DMNT_WERROR=ON
cmake --build build -j "$(nproc)"
echo "== fresh-machine (chroot): unit tests"
ctest --test-dir build -L unit --output-on-failure
'

if [ "$suite" = trixie ]; then
  echo "== fresh-machine: the local cluster in namespaces of its own ($(chroot "$root" /usr/sbin/slurmd -V)), ctest -R '$cluster_tests'"
  # the machine's name resolves in the root as on an installed Debian (srun needs it; the network
  # namespace has no DNS)
  echo "127.0.1.1	$(hostname)" >>"$root/etc/hosts"
  # In new namespaces: the root bound onto itself (a mount point, so that unshare --propagation and
  # ip netns, run by local-cluster.sh inside, can change its propagation: EINVAL otherwise), then
  # this PID namespace's /proc, this network namespace's /sys, a /dev/shm of its own (/dev is the
  # machine's), the loopback up. In the background so that cleanup can kill it.
  # shellcheck disable=SC2016
  unshare --pid --fork --kill-child --net --mount --uts --ipc --propagation private \
    /bin/bash -euo pipefail -c '
root=$1
mount --rbind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs -o ro sysfs "$root/sys"
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm"
ip link set lo up
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  CLUSTER_TESTS="$2" CLUSTER_TIMEOUT="$3" QUICKSTART="$4" /bin/bash -euo pipefail -c "
cd /src
trap \"job_templates/tools/local-cluster.sh down || true\" EXIT
job_templates/tools/local-cluster.sh up
timeout \"\$CLUSTER_TIMEOUT\" ctest --test-dir build -R \"\$CLUSTER_TESTS\" --no-tests=error --output-on-failure | tee /tmp/cluster-tests.out
! grep -q \"Skipped\" /tmp/cluster-tests.out || { echo \"fresh-machine: a cluster test skipped\" >&2; exit 1; }
if [ \"\$QUICKSTART\" = 1 ]; then
  echo \"== fresh-machine (namespaces): job_templates/quickstart.sh, the main job of README.md\"
  timeout \"\$CLUSTER_TIMEOUT\" job_templates/quickstart.sh
fi
"' bash "$root" "$cluster_tests" "${FRESH_CLUSTER_TIMEOUT:-1500}" "${FRESH_QUICKSTART:-1}" &
  ns_pid=$!
  wait "$ns_pid"
fi
echo "== fresh-machine: $suite ok ($(($(date +%s) - t0)) s)"
