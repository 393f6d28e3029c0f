#!/usr/bin/env bash
# train_equivalence.sh — distributed training is the same computation: 1 rank × batch 16 (batch
# norm over groups of 4) and 4 ranks on 2 nodes × batch 4 reach the same weights after 5 steps, and
# so does --topology hier. They are not bit-identical: the fp32 gradient sums are added in another
# order (conv backward over 16 images vs 4 × 4 images + the ring), so the test allows 1e-5 relative
# to each tensor's largest value, and checks that a genuinely different run (batch norm over all 16)
# is far outside that.   train_equivalence.sh path/to/mntrain
# The shape comes from the environment (the scale tests, tests/scale/scale.sh, set it; the defaults
# are the test above): EQ_RANKS ranks (4) on EQ_NODES nodes (2) × EQ_BATCH images (4) against
# 1 rank × EQ_RANKS·EQ_BATCH images in BN groups of EQ_BATCH, EQ_STEPS steps (5) at --lr EQ_LR
# (0.4; more steps need a smaller one: 10 steps at 0.4 amplify rounding past 1e-5 on one rank
# alone), each run within EQ_TIMEOUT seconds (120).
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
ranks=${EQ_RANKS:-4} nodes=${EQ_NODES:-2} batch=${EQ_BATCH:-4} steps=${EQ_STEPS:-5} limit=${EQ_TIMEOUT:-120} lr=${EQ_LR:-0.4}
global=$((ranks * batch))
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$m" convert synth "$w/data" --classes 10 --images 512 --size 16 --shards 2 >/dev/null || exit 1
common=(train --data "$w/data" --arch resnet8 --size 16 --steps "$steps" --seed 3 --threads 1 --lr "$lr" --log-every "$steps")
run() { # run NAME SRUN_ARGS... -- TRAIN_ARGS...
  local name=$1
  shift
  local s=()
  while [ "$1" != "--" ]; do s+=("$1"); shift; done
  shift
  "$here/srun_test.sh" "$limit" "${s[@]}" -- "$m" "${common[@]}" --out "$w/$name" --export "$w/$name.h5" "$@" >"$w/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 77 ] && { cat "$w/$name.log"; exit 77; }
  [ $rc -eq 0 ] || { cat "$w/$name.log"; echo "FAIL: run $name exited $rc"; grep -m3 'error' "$w/$name.log"; exit 1; }
}
many=(-N"$nodes" -n"$ranks" --ntasks-per-node=$((ranks / nodes)))
run one -N1 -n1 -- --batch-per-rank "$global" --bn-batch "$batch"
run four "${many[@]}" -- --batch-per-rank "$batch"
run hier "${many[@]}" -- --batch-per-rank "$batch" --topology hier
run fullbn -N1 -n1 -- --batch-per-rank "$global"
/usr/bin/python3 - "$w" "$ranks" "$global" <<'PY'
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"SKIP: {e}"); sys.exit(77)
w, ranks, glob = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(n):
    with h5py.File(f"{w}/{n}.h5", "r") as f:
        return {k: np.array(f["model"][k], dtype=np.float64) for k in f["model"]}
one, four, hier, full = (load(n) for n in ("one", "four", "hier", "fullbn"))
def worst(a, b):
    return max((float(np.max(np.abs(a[k] - b[k])) / max(np.max(np.abs(b[k])), 1e-12)), k) for k in a)
fails = 0
for name, other, tol, want_close in ((f"{ranks} ranks flat", four, 1e-5, True), (f"{ranks} ranks hier", hier, 1e-5, True),
                                     (f"BN over all {glob} (must differ)", full, 1e-3, False)):
    e, k = worst(other, one)
    ok = e <= tol if want_close else e > tol
    fails += not ok
    print(f"{'ok' if ok else 'FAIL'}: {name} vs 1 rank x {glob}: worst relative difference {e:.2e} ({k}), "
          f"{'must be <=' if want_close else 'must be >'} {tol:g}")
sys.exit(1 if fails else 0)
PY
