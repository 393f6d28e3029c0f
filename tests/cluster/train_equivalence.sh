#!/usr/bin/env bash
# train_equivalence.sh — distributed training is the same computation: 1 rank × batch 16 (batch
# norm over groups of 4) and 4 ranks on 2 nodes × batch 4 reach the same weights after 5 steps, and
# so does --topology hier. They are not bit-identical: the fp32 gradient sums are added in another
# order (conv backward over 16 images vs 4 × 4 images + the ring), so the test allows 1e-5 relative
# to each tensor's largest value, and checks that a genuinely different run (batch norm over all 16)
# is far outside that.   train_equivalence.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$m" convert synth "$w/data" --classes 10 --images 512 --size 16 --shards 2 >/dev/null || exit 1
common=(train --data "$w/data" --arch resnet8 --size 16 --steps 5 --seed 3 --threads 1 --lr 0.4 --log-every 5)
run() { # run NAME SRUN_ARGS... -- TRAIN_ARGS...
  local name=$1
  shift
  local s=()
  while [ "$1" != "--" ]; do s+=("$1"); shift; done
  shift
  "$here/srun_test.sh" 120 "${s[@]}" -- "$m" "${common[@]}" --out "$w/$name" --export "$w/$name.h5" "$@" >"$w/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 77 ] && { cat "$w/$name.log"; exit 77; }
  [ $rc -eq 0 ] || { echo "FAIL: run $name exited $rc"; cat "$w/$name.log"; exit 1; }
}
run one -N1 -n1 -- --batch-per-rank 16 --bn-batch 4
run four -N2 -n4 --ntasks-per-node=2 -- --batch-per-rank 4
run hier -N2 -n4 --ntasks-per-node=2 -- --batch-per-rank 4 --topology hier
run fullbn -N1 -n1 -- --batch-per-rank 16
/usr/bin/python3 - "$w" <<'PY'
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"SKIP: {e}"); sys.exit(77)
w = sys.argv[1]
def load(n):
    with h5py.File(f"{w}/{n}.h5", "r") as f:
        return {k: np.array(f["model"][k], dtype=np.float64) for k in f["model"]}
one, four, hier, full = (load(n) for n in ("one", "four", "hier", "fullbn"))
def worst(a, b):
    return max((float(np.max(np.abs(a[k] - b[k])) / max(np.max(np.abs(b[k])), 1e-12)), k) for k in a)
fails = 0
for name, other, tol, want_close in (("4 ranks flat", four, 1e-5, True), ("4 ranks hier", hier, 1e-5, True),
                                     ("BN over all 16 (must differ)", full, 1e-3, False)):
    e, k = worst(other, one)
    ok = e <= tol if want_close else e > tol
    fails += not ok
    print(f"{'ok' if ok else 'FAIL'}: {name} vs 1 rank x 16: worst relative difference {e:.2e} ({k}), "
          f"{'must be <=' if want_close else 'must be >'} {tol:g}")
sys.exit(1 if fails else 0)
PY
