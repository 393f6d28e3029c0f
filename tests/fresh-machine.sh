#!/usr/bin/env bash
# fresh-machine.sh — the install steps on a machine that has nothing: a minimal Debian 12 root
# (mmdebstrap --variant=apt: apt and essential packages only), the committed tree (git archive
# HEAD) copied in, and inside a chroot: job_templates/tools/install-deps.sh, the CMake build with
# warnings as errors, and the unit tests. This is what catches a package that the developers'
# machines happen to have but install-deps.sh does not install (it happened: oneDNN's CMake config
# wanted OpenCL, a Recommends that --no-install-recommends leaves out).
#   tests/fresh-machine.sh            (as root; .ci/run runs it; about 5 minutes, most of it apt)
# Environment: FRESH_KEEP=1 keeps the root for a look afterwards (its path is printed);
# FRESH_MIRROR (default http://deb.debian.org/debian). Exit status: 0 when everything in the chroot
# passed, 77 (skipped) without root or mmdebstrap, 1 otherwise. Mounts and the root are removed
# on every exit, also on failure or Ctrl-C.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "SKIP: fresh-machine.sh needs root (chroot, mounts)"; exit 77; }
command -v mmdebstrap >/dev/null || { echo "SKIP: apt-get install mmdebstrap"; exit 77; }
git -C "$src" rev-parse --verify -q HEAD >/dev/null || { echo "fresh-machine: $src is not a git checkout" >&2; exit 1; }

work=$(mktemp -d /var/tmp/mntrain-fresh.XXXXXX)
root=$work/root
cleanup() {
  local rc=$?
  for m in "$root/dev" "$root/proc"; do
    if mountpoint -q "$m" 2>/dev/null; then umount -R "$m" 2>/dev/null || umount -R -l "$m" || true; fi
  done
  if [ "${FRESH_KEEP:-0}" = 1 ]; then echo "fresh-machine: kept $work"; else rm -rf --one-file-system "$work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$(date +%s)
echo "== fresh-machine: mmdebstrap --variant=apt bookworm ($work)"
mmdebstrap --quiet --variant=apt bookworm "$work/root.tar" "${FRESH_MIRROR:-http://deb.debian.org/debian}"
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
echo "== fresh-machine: ok ($(($(date +%s) - t0)) s)"
