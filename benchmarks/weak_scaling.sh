#!/usr/bin/env bash
# weak_scaling.sh — weak scaling on this machine: resnet18 at 64 px, batch 32 per rank, 1 compute
# thread and 1 loader thread per rank: 1 rank against 2 ranks on one node (shared memory) and on two
# nodes (TCP), in ROUNDS rounds, each the three runs back to back, so that each round's efficiency
# is against that round's own 1-rank run (this host's speed drifts by 10-25% within minutes: runs
# minutes apart cannot be compared). Prints each round's `mntrain report` table, then per setting
# the median efficiency of the rounds and the lowest. With TRACE=1 every multi-rank run also writes
# its timeline (steps 10-29) and `mntrain report --trace` its trace.json and trace.svg (slowest step).
# Quiet machine only; the local cluster must be up (job_templates/tools/local-cluster.sh up).
#   benchmarks/weak_scaling.sh [path/to/mntrain] [work dir] [steps, default 30] [rounds, default 3]
# Environment: TRACE=1 (timelines), ONEDNN_MAX_CPU_ISA (passed to the jobs: AVX2 caps oneDNN).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-weak}
steps=${3:-30}
rounds=${4:-3}
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
mkdir -p "$work"
[ -f "$work/data/index.json" ] || "$m" convert synth "$work/data" --classes 100 --images 4096 --size 72 --shards 2 >/dev/null
run() { # run NAME SRUN_ARGS...
  local name=$1 trace=()
  shift
  [ "${TRACE:-0}" = 1 ] && [ "$name" != "${name#*-}" ] && trace=(--trace "$work/$name/trace" --trace-steps 10:29)
  srun --mpi=pmix "$@" "$m" train --data "$work/data" --arch resnet18 --size 64 --batch-per-rank 32 \
    --steps "$steps" --threads 1 --loader-threads 1 --log-every 10 --out "$work/$name" --force "${trace[@]}" \
    >"$work/$name.log" 2>&1
  if [ ${#trace[@]} -gt 0 ]; then "$m" report --trace "$work/$name/trace" --out "$work/$name/trace" >/dev/null; fi
}
echo "# weak_scaling: $(date -u +%FT%TZ), resnet18 64 px, batch 32 per rank, 1 thread per rank, $steps steps," \
  "$rounds rounds, ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-unset}, $(nproc) cores"
: >"$work/efficiency.txt"
for r in $(seq 1 "$rounds"); do
  run "one-r$r" -N1 -n1
  run "one-node-r$r" -N1 -n2
  run "two-nodes-r$r" -N2 -n2
  echo "## round $r"
  "$m" report "$work/one-r$r" "$work/one-node-r$r" "$work/two-nodes-r$r" --out "$work/r$r" | tee "$work/r$r.txt"
  for s in one-node two-nodes; do
    e=$(awk -v d="$work/$s-r$r" '$NF == d { for (i = 1; i <= NF; i++) if ($i ~ /%$/) { sub(/%/, "", $i); print $i / 100; exit } }' "$work/r$r.txt")
    echo "$s $r $e" >>"$work/efficiency.txt"
  done
done
echo "## efficiency E = (img/s_N / N) / (img/s_1 / 1), each round against its own 1-rank run"
printf '%-10s %-28s %8s %8s\n' setting rounds median lowest
for s in one-node two-nodes; do
  awk -v s="$s" '$1 == s { print $3 }' "$work/efficiency.txt" | sort -g | awk -v s="$s" '
    { v[NR] = $1; all = all sprintf("%s%.3f", NR > 1 ? " " : "", $1) }
    END { med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%-10s %-28s %8.3f %8.3f\n", s, all, med, v[1] }'
done
