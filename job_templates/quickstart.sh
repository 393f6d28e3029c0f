#!/usr/bin/env bash
# quickstart.sh — the main job on a fresh Debian 12 machine, as root, in one command:
# installs what is missing, builds mntrain, brings up the local two-node Slurm cluster, submits
# job_templates/allreduce.sbatch with sbatch (4 ranks on 2 nodes), follows its output while it
# runs, and leaves the cluster up for more (job_templates/local-cluster.sh down stops it).
#   job_templates/quickstart.sh [bench options, default: -b 1K -e 64M -f 4]
# Environment: BUILD_DIR (default build), OUT (default /tmp/mntrain-quickstart).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
out=${OUT:-/tmp/mntrain-quickstart}
[ "$(id -u)" -eq 0 ] || { echo "quickstart: run as root (it installs packages and starts Slurm)" >&2; exit 1; }

missing=0
for c in cmake cc srun slurmctld munged pkg-config; do command -v "$c" >/dev/null || missing=1; done
pkg-config --exists pmix 2>/dev/null || missing=1
if [ $missing -eq 1 ]; then
  echo "== installing packages (job_templates/install-deps.sh)"
  job_templates/install-deps.sh
fi
echo "== building in $build"
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "== local Slurm cluster"
job_templates/local-cluster.sh up
mkdir -p "$out"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-b 1K -e 64M -f 4)
echo "== sbatch job_templates/allreduce.sbatch ${args[*]}"
jobid=$(MNTRAIN="$root/$build/mntrain" sbatch --parsable --chdir="$out" --nodes=2 --ntasks-per-node=2 \
  --output="$out/allreduce-%j.out" job_templates/allreduce.sbatch "${args[@]}")
log="$out/allreduce-$jobid.out"
echo "   job $jobid, output $log"
# follow the output until the job leaves the queue
while [ ! -f "$log" ] && squeue -h -j "$jobid" 2>/dev/null | grep -q .; do sleep 0.5; done
touch "$log"
tail -n +1 -f "$log" &
tailpid=$!
while squeue -h -j "$jobid" 2>/dev/null | grep -q .; do sleep 1; done
sleep 1
kill "$tailpid" 2>/dev/null || true
state=$(sacct -n -X -j "$jobid" -o State 2>/dev/null | head -n1 | tr -d ' ' || true)
if grep -q '# Out of bounds values : 0 OK' "$log"; then
  echo "== done: job $jobid finished, results are correct; full output in $log"
  echo "   stop the cluster with: job_templates/local-cluster.sh down"
else
  echo "== job $jobid did not finish correctly (${state:-state unknown}); see $log" >&2
  exit 1
fi
