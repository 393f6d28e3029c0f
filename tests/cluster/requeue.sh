#!/usr/bin/env bash
# requeue.sh — preemption end to end with the real sbatch: job_templates/train.sbatch on 2 nodes,
# `scancel --signal=USR1` once a checkpoint is committed; every rank stops after the same step with
# a checkpoint (exit 3), the template requeues the job, the requeued job resumes by itself into the
# same run directory and completes, and its final weights equal an uninterrupted run's bit for bit
# (its BN running statistics to float rounding: see the comparison below).
#   requeue.sh MNTRAIN [local|gluster]
# The data: CKPT_DATA=synth (default: convert synth, format 2, trained at --size 16), or jpeg / raw:
# format 3 (tests/lib.sh: train_set: 120 non-square pictures converted with --resize 32, trained at
# --size 24) with a format 3 validation set after every epoch: both runs then end with the same
# validation top-1.
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fs=${2:-local}
here=$(cd "$(dirname "$0")" && pwd)
tmpl=$here/../../job_templates/train.sbatch
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
ck=$w/ckpt
if [ "$fs" = gluster ]; then
  mnt=$(ckpt_fs_or_skip) || exit 77
  ck=$mnt/test-requeue-$$
fi
job=""
cleanup() {
  [ -n "$job" ] && scancel "$job" 2>/dev/null
  rm -rf "$w"
  # the volume is mounted in the nodes' namespaces only
  [ "$fs" = gluster ] && "$MNT_LOCAL_CLUSTER" nsexec node1 -- rm -rf "$ck"
}
trap cleanup EXIT
on_fail() { [ -f "$w/job.out" ] && cat "$w/job.out"; } # fail (tests/lib.sh) shows the job's output
data=${CKPT_DATA:-synth}
val=()
[ "$data" = synth ] || val=(--val "$w/val")
train_set "${val[@]}" "$data" "$m" "$w/data" --classes 10 --images 512 --size 16 --shards 2 || exit $?
args=(--data "$w/data" "${val[@]}" --arch resnet8 --size "$train_size" --seed 9 --lr 0.4 --log-every 5 --batch-per-rank 8 --steps 120
  --ckpt-every-steps 10 --precision auto) # auto: the template's own default, on both runs
# the uninterrupted run, with the same checkpoints (they average the BN statistics) and threads
"$here/srun_test.sh" 300 -N2 -n2 -- "$m" train "${args[@]}" --threads 1 --out "$w/ref" --ckpt-dir "$w/ref-ckpt" \
  --export "$w/ref.h5" >"$w/ref.log" 2>&1 || { cat "$w/ref.log"; fail "the reference run failed"; }
job=$(cd "$w" && MNTRAIN=$m OUT=$w/run CKPT_DIR=$ck sbatch --parsable -N2 --ntasks-per-node=1 --cpus-per-task=1 --time=10 \
  --output="$w/job.out" "$tmpl" "${args[@]}" --export "$w/run.h5") || fail "sbatch failed"
echo "submitted job $job"
for _ in $(seq 1 600); do # the first checkpoint committed
  grep -q '"checkpoint":' "$w/run/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
grep -q '"checkpoint":' "$w/run/metrics.jsonl" 2>/dev/null || fail "no checkpoint within 60 s"
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 failed"
echo "sent SIGUSR1 to job $job"
await_requeued "$job" # the requeued job started at once, and finished
job=""
cat "$w/job.out"
grep -q "stopped after step .*SIGUSR1" "$w/job.out" || fail "no rank stopped on SIGUSR1"
grep -q "preempted with a checkpoint .*requeueing" "$w/job.out" || fail "the template did not requeue"
grep -q "(attempt 2)" "$w/job.out" || fail "no second attempt"
grep -q "resuming from" "$w/job.out" || fail "the requeued job did not resume"
grep -q "mntrain train: done: 120 steps" "$w/job.out" || fail "the requeued job did not complete"
/usr/bin/python3 - "$w/ref.h5" "$w/run.h5" <<'PY' || fail "the preempted and resumed run trained another model"
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"SKIP: {e}"); sys.exit(77)
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
# the weights bit for bit; the BN running statistics to float rounding: every checkpoint averages
# them over the ranks in place, and the stop adds one at a step the uninterrupted run did not
# checkpoint (where SIGUSR1 lands), which rounds differently (the EMA is linear: the same numbers)
bad = [f"model/{k}" for k in a["model"] if not np.array_equal(a["model"][k][()], b["model"][k][()])]
worst = 0.0
for k in a["bn"]:
    x, y = a["bn"][k][()].astype(np.float64), b["bn"][k][()].astype(np.float64)
    e = float(np.max(np.abs(x - y)) / max(float(np.max(np.abs(x))), 1e-30))
    worst = max(worst, e)
    if e > 1e-5:
        bad.append(f"bn/{k} ({e:.1e})")
print(f"{len(bad)} tensors differ from the uninterrupted run (weights bit for bit; BN statistics within "
      f"1e-5 relative, worst {worst:.1e})" + (": " + ", ".join(bad[:5]) if bad else ""))
sys.exit(1 if bad else 0)
PY
if [ ${#val[@]} -gt 0 ]; then
  /usr/bin/python3 - "$w/ref/summary.json" "$w/run/summary.json" <<'PY' || fail "the validation top-1 differs"
import json, sys
a, b = (json.load(open(p)).get("val_top1") for p in sys.argv[1:])
print(f"validation top-1: uninterrupted {a}, preempted and resumed {b}")
sys.exit(0 if a is not None and a == b else 1)
PY
fi
echo "ok: SIGUSR1 -> checkpoint -> requeue -> resume -> done, weights bit-identical to an uninterrupted run ($data data)"
