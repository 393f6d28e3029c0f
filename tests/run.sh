#!/usr/bin/env bash
# run.sh — the test command: build mntrain, make sure a Slurm cluster is up, run every test.
#   tests/run.sh [--install] [ctest options, e.g. -L unit]
# --install  first install the Debian packages (job_templates/tools/install-deps.sh; needs root)
# If no cluster answers, it starts the local one (job_templates/tools/local-cluster.sh up --gluster, as
# root: with the GlusterFS checkpoint volume where FUSE and GlusterFS are available; the tests
# that need it report SKIPPED otherwise) and stops it again at the end, even when a test fails.
# Without root and without a cluster the cluster tests report SKIPPED; the scale tests (label scale,
# tests/scale/scale.sh) need 8 nodes and report SKIPPED on the 2-node cluster started here (.ci/run
# runs them on an 8-node one). Exit status: ctest's
# (non-zero when any test failed).
# Environment: BUILD_DIR (default build), CI=true turns warnings into errors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
if [ "${1:-}" = "--install" ]; then
  shift
  job_templates/tools/install-deps.sh
fi
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
cmake -S . -B "$build" -DMNT_WERROR=$werror
cmake --build "$build" -j "$(nproc)"

started=0
cleanup() {
  if [ $started -eq 1 ]; then job_templates/tools/local-cluster.sh down || true; fi
}
trap cleanup EXIT
if ! scontrol ping >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v slurmctld >/dev/null 2>&1; then
    job_templates/tools/local-cluster.sh up --gluster
    started=1
  else
    echo "run.sh: no Slurm cluster and not root: the cluster tests will be skipped"
  fi
fi
ctest --test-dir "$build" --output-on-failure "$@"
