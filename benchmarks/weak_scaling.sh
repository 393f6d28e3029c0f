#!/usr/bin/env bash
# weak_scaling.sh — weak scaling on this machine (issue 6): resnet18 at 64 px, the same batch per
# rank, 1 thread per rank: 1 rank against 2 ranks on two nodes (TCP) and on one node (shared
# memory). The table is `mntrain report` of the three runs (E = (img/s_N / N) / (img/s_1 / 1) from
# each run's summary.json), which also writes WORK/scaling.csv and WORK/scaling.svg. Quiet machine only.
#   benchmarks/weak_scaling.sh [path/to/mntrain] [work dir] [steps, default 30]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-weak}
steps=${3:-30}
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/local-cluster.sh up" >&2; exit 1; }
mkdir -p "$work"
[ -f "$work/data/index.json" ] || "$m" convert synth "$work/data" --classes 100 --images 4096 --size 72 --shards 2 >/dev/null
run() { # run NAME SRUN_ARGS...
  local name=$1
  shift
  srun --mpi=pmix "$@" "$m" train --data "$work/data" --arch resnet18 --size 64 --batch-per-rank 32 \
    --steps "$steps" --threads 1 --loader-threads 1 --log-every 10 --out "$work/$name" --force >"$work/$name.log" 2>&1
}
run one -N1 -n1
run two-nodes -N2 -n2
run one-node -N1 -n2
echo "# weak_scaling: $(date -u +%FT%TZ), resnet18 64 px, batch 32 per rank, 1 thread per rank, $steps steps"
"$m" report "$work/one" "$work/two-nodes" "$work/one-node" --out "$work"
