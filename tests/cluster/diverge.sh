#!/usr/bin/env bash
# diverge.sh — a diverging run on 2 ranks of 2 nodes: each rank's batch-norm statistics and loss are
# its own, so a rank that finds its own non-finite carries that into the gradient allreduce, and every
# rank decides alike (tests/unit/diverge.sh checks one process):
# - without --skip-nonfinite the job ends with exit 1 on every rank at once (no abort, no hang),
#   naming the tensor and the step;
# - with --skip-nonfinite the ranks skip the same steps: the checkpoint, written in shares by both
#   ranks (4 KiB stripes), holds the same weights as rank 0's export, all finite.
#   diverge.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
py=/usr/bin/python3
$py -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py is not installed (install-deps.sh)"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/tr" --classes 4 --images 512 --size 16 --shards 2 >/dev/null || fail "convert synth"
run=("$m" train --data "$w/tr" --arch resnet8 --size 16 --batch-per-rank 16 --threads 1 --loader-threads 1
  --lr 1000 --momentum 0.99 --wd 0 --steps 60 --log-every 20 --ckpt-stripe 4096)
"$here/srun_test.sh" 120 -N2 -n2 -- "${run[@]}" --out "$w/a" >"$w/a.log" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
n=$(grep -cE "error: .*NaN or Inf in " "$w/a.log")
if [ $rc -eq 1 ] && [ "$n" -ge 1 ] && ! grep -q "aborting the job" "$w/a.log"; then
  ok "stopped together (exit 1, no abort): $(grep -oE "step [0-9]+ \(epoch [0-9.]+\): NaN or Inf in [^;]*" "$w/a.log" | head -n1)"
else
  bad "the diverged job: exit $rc, $n messages naming what was not finite:"; cat "$w/a.log"
fi
"$here/srun_test.sh" 120 -N2 -n2 -- "${run[@]}" --skip-nonfinite --ckpt-every-steps 1000 --out "$w/b" --export "$w/b.h5" \
  >"$w/b.log" 2>&1 || { bad "--skip-nonfinite on 2 ranks: exit $?"; cat "$w/b.log"; }
$py - "$w/b" "$w/b.h5" <<'PY' || fail=1
import glob, json, sys, h5py, numpy as np
run, export = sys.argv[1], sys.argv[2]
skipped = json.load(open(f"{run}/summary.json"))["skipped_steps"]
ck = sorted(glob.glob(f"{run}/ckpt/step-*/state.h5"))[-1]
bad = []
with h5py.File(ck, "r") as c, h5py.File(export, "r") as e:
    for name, d in e["model"].items():
        a, b = c["model"][name][()], d[()]
        if not np.isfinite(a).all() or not np.array_equal(a, b):
            bad.append(name)
if skipped < 1:
    print("FAIL: no step was skipped: the run did not diverge as the test needs")
    sys.exit(1)
if bad:
    print(f"FAIL: the checkpoint's weights (both ranks' shares) differ from rank 0's export, or are not finite: {bad[:4]}")
    sys.exit(1)
print(f"ok: {skipped} steps skipped alike on both ranks: the checkpoint's weights are the export's, finite")
PY
finish diverge "$fail"
