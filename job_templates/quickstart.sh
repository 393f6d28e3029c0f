#!/usr/bin/env bash
# quickstart.sh — the main job, on a fresh Debian 12 or 13 machine, as root, in one command: installs
# what is missing, builds mntrain, brings up the local two-node Slurm cluster, converts
# Fashion-MNIST (Debian's dataset-fashion-mnist) to shards, submits job_templates/train.sbatch with
# sbatch for 1, 2 and 4 ranks (one after the other), follows each job's output while it runs (a
# rerun replaces the earlier runs: --force). Then the 2-rank run once more with checkpoints,
# preempted (SIGUSR1) after its first checkpoint: it requeues itself and resumes to the same result.
# Every run evaluates the test set every EVAL_EVERY epochs and stops at TARGET top-1 (time to
# accuracy, as MLPerf scores training). It ends with `mntrain report` of the 1/2/4-rank sweep: the
# weak-scaling table (OUT/scaling.csv, OUT/scaling.svg) and the learning table, each run's final and
# best top-1 and its epochs and seconds to the target (OUT/learning.csv, OUT/learning.svg; open the
# SVGs in a browser). The cluster stays up afterwards (job_templates/tools/local-cluster.sh down
# stops it).
#   job_templates/quickstart.sh [extra mntrain train options]
# Environment: BUILD_DIR (default build), OUT (default /tmp/mntrain-quickstart), STEPS (default 300),
# TARGET (default 0.75; 1-rank runs of 300 steps end near 0.76), EVAL_EVERY (default 0.1 epochs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${BUILD_DIR:-build}
out=${OUT:-/tmp/mntrain-quickstart}
steps=${STEPS:-300}
target=${TARGET:-0.75}
eval_every=${EVAL_EVERY:-0.1}
fm=/usr/share/datasets/fashion-mnist
[ "$(id -u)" -eq 0 ] || { echo "quickstart: run as root (it installs packages and starts Slurm)" >&2; exit 1; }

missing=0
for c in cmake cc srun slurmctld munged pkg-config; do command -v "$c" >/dev/null || missing=1; done
pkg-config --exists pmix jansson libturbojpeg libjpeg 2>/dev/null || missing=1
[ -f "$fm/train-images-idx3-ubyte.gz" ] || missing=1
if [ $missing -eq 1 ]; then
  echo "== installing packages (job_templates/tools/install-deps.sh)"
  job_templates/tools/install-deps.sh
fi
echo "== building in $build"
cmake -S . -B "$build" >/dev/null
cmake --build "$build" -j "$(nproc)"
case $build in /*) m=$build/mntrain ;; *) m=$root/$build/mntrain ;; esac
echo "== local Slurm cluster"
job_templates/tools/local-cluster.sh up
mkdir -p "$out"
echo "== Fashion-MNIST -> $out/fmnist-{train,test}"
"$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$out/fmnist-train" --shards 4
"$m" convert idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$out/fmnist-test" --shards 2

follow() { # follow JOBID LOG: print the log while the job runs (and runs again when requeued); fail if it did not succeed
  local job=$1 log=$2 state gone=0
  while [ ! -f "$log" ] && squeue -h -j "$job" 2>/dev/null | grep -q .; do sleep 0.5; done
  touch "$log"
  tail -n +1 -f "$log" &
  local tailpid=$!
  # squeue may not list a job for a moment while it is being requeued (seen with Slurm 24.11): the
  # job is finished when it has been absent for 2 s
  while [ $gone -lt 4 ]; do
    if squeue -h -j "$job" 2>/dev/null | grep -q .; then gone=0; else gone=$((gone + 1)); fi
    sleep 0.5
  done
  kill "$tailpid" 2>/dev/null || true
  wait "$tailpid" 2>/dev/null || true
  state=$(sacct -n -X -j "$job" -o State 2>/dev/null | head -n1 | tr -d ' ' || true)
  grep -q "mntrain train: done" "$log" || { echo "== job $job failed (${state:-state unknown}); see $log" >&2; return 1; }
}

runs=()
for ranks in 1 2 4; do
  nodes=$(( ranks == 1 ? 1 : 2 ))
  per_node=$(( ranks / nodes ))
  dir="$out/run-$ranks"
  echo "== sbatch job_templates/train.sbatch: $ranks rank(s) on $nodes node(s), resnet8, $steps steps of 32 images per rank"
  # one CPU per rank: the local cluster's two nodes share this machine's cores
  job=$(MNTRAIN="$m" sbatch --parsable --chdir="$out" --nodes="$nodes" --ntasks-per-node="$per_node" --cpus-per-task=1 \
    --output="$out/train-$ranks-%j.out" job_templates/train.sbatch \
    --data "$out/fmnist-train" --val "$out/fmnist-test" --arch resnet8 --size 28 --batch-per-rank 32 \
    --steps "$steps" --lr 0.4 --warmup-epochs 0.05 --schedule cosine --pad-crop 2 --val-crop 1 --log-every 50 \
    --eval-every "$eval_every" --target-top1 "$target" --out "$dir" --force "$@")
  echo "   job $job, output $out/train-$ranks-$job.out"
  follow "$job" "$out/train-$ranks-$job.out"
  runs+=("$dir")
done
echo "== preemption: the 2-rank job again, with a checkpoint every 50 steps; once one is committed it gets SIGUSR1"
echo "   (what Slurm sends 120 s before the time limit): it stops with a checkpoint, requeues itself and resumes"
pre="$out/run-preempt"
rm -rf "$pre"
job=$(MNTRAIN="$m" OUT="$pre" sbatch --parsable --chdir="$out" --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 \
  --output="$out/train-preempt-%j.out" job_templates/train.sbatch \
  --data "$out/fmnist-train" --val "$out/fmnist-test" --arch resnet8 --size 28 --batch-per-rank 32 \
  --steps "$steps" --lr 0.4 --warmup-epochs 0.05 --schedule cosine --pad-crop 2 --val-crop 1 --log-every 50 \
  --eval-every "$eval_every" --target-top1 "$target" --ckpt-every-steps 50 "$@")
echo "   job $job, output $out/train-preempt-$job.out"
( # the preemption, and (local cluster only) the requeued job started without Slurm's ~2 min requeue delay,
  # as soon as the first attempt's step daemons are gone
  until grep -q '"checkpoint":' "$pre/metrics.jsonl" 2>/dev/null; do
    squeue -h -j "$job" 2>/dev/null | grep -q . || exit 0
    sleep 0.2
  done
  scancel --signal=USR1 "$job"
  for _ in $(seq 1 600); do
    st=$(squeue -h -j "$job" -o '%T %r' 2>/dev/null)
    [ -z "$st" ] && exit 0
    # (step daemons of this PID namespace: another cluster on the machine has job ids of its own)
    if [ "$st" = "PENDING BeginTime" ] && ! pgrep --ns $$ --nslist pid -f "slurmstepd: \[$job\." >/dev/null; then
      sleep 1 # started within ~0.1 s of the requeue, slurmctld kills it ("Job credential revoked")
      scontrol update JobId="$job" StartTime=now
      exit 0
    fi
    sleep 0.2
  done
) &
follow "$job" "$out/train-preempt-$job.out"
wait
grep -E "stopped after|requeueing|attempt 2|resuming from" "$out/train-preempt-$job.out" | sed 's/^/   /'
/usr/bin/python3 - "$out/run-2/summary.json" "$pre/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
print(f"   val top-1: uninterrupted 2-rank run {a.get('val_top1', float('nan')):.4f}, preempted and resumed "
      f"{b.get('val_top1', float('nan')):.4f} (resumed from step {b['resumed_from_step']})")
PY
echo "== results: mntrain report (weak scaling: the same batch per rank; E = (img/s_N / N) / (img/s_1 / 1);"
echo "   learning: top-1 on the test set, and the epochs and seconds each run took to reach $target)"
"$m" report "${runs[@]}" --out "$out"
echo "   (this machine has 2 cores: 4 ranks share them, so efficiency here measures oversubscription, not the network)"
echo "== done; outputs in $out; stop the cluster with: job_templates/tools/local-cluster.sh down"
