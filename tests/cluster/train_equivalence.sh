#!/usr/bin/env bash
# train_equivalence.sh — distributed training is the same computation: 1 rank × batch 16 (batch
# norm over groups of 4) and 4 ranks on 2 nodes × batch 4 reach the same weights, and so does
# --topology hier. They are not bit-identical: the fp32 gradient sums are added in another order
# (conv backward over 16 images vs 4 × 4 images + the ring). Two comparisons:
# - after 1 step, where nothing has amplified that rounding yet: within 1e-5 relative to each
#   tensor's largest value. A gradient lost or counted twice moves a batch-norm bias (0 at start,
#   so its largest value is the update itself) by 1/N of it: far outside.
# - after EQ_STEPS steps: the steps amplify that rounding (batch norm over 4 images divides by a
#   small variance). Most in batch-norm biases, which start at 0: at 128 ranks a bias of largest
#   value ~1e-3 differs by ~4e-8, 3.8e-5 of itself but 4e-8 of its layer's weights (~1), the scale
#   a bias acts on. So each tensor is compared relative to the largest value of its layer (weight
#   and bias together), again within 1e-5; a genuinely different run (batch norm over all the
#   images) must stay far outside it.
# - the batch-norm statistics the runs export under --bn-eval recompute (the last 2 steps' batches
#   through the final weights, each rank its share, averaged over ranks): the groups of EQ_BATCH
#   images are the same on 1 rank and on N, so the statistics agree within 1e-4 of each tensor's
#   largest; averaged over ranks wrongly (summed, or rank 0's alone) they are far outside.
#   train_equivalence.sh path/to/mntrain
# The shape comes from the environment (the scale tests, tests/scale/scale.sh, set it; the defaults
# are the test above): EQ_RANKS ranks (4) on EQ_NODES nodes (2) × EQ_BATCH images (4) against
# 1 rank × EQ_RANKS·EQ_BATCH images in BN groups of EQ_BATCH, EQ_STEPS steps (5) at --lr EQ_LR
# (0.4), each run within EQ_TIMEOUT seconds (120). The data: EQ_DATA=synth (default: convert synth,
# format 2, 512 images of 16 px, trained at --size 16), or jpeg / raw: format 3 (tests/lib.sh:
# train_set: 120 non-square pictures converted with --resize 32, trained at --size 24), where each
# image's box is drawn from its own width and height, the same on every rank.
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
ranks=${EQ_RANKS:-4} nodes=${EQ_NODES:-2} batch=${EQ_BATCH:-4} steps=${EQ_STEPS:-5} limit=${EQ_TIMEOUT:-120} lr=${EQ_LR:-0.4}
global=$((ranks * batch))
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
# shellcheck source=/dev/null
. "$here/lib.sh"
train_set "${EQ_DATA:-synth}" "$m" "$w/data" --classes 10 --images 512 --size 16 --shards 2 || exit $?
common=(train --data "$w/data" --arch resnet8 --size "$train_size" --seed 3 --lr "$lr")
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
many=(-N"$nodes" -n"$ranks" --ntasks-per-node=$((ranks / nodes)) -O) # -O: more ranks than CPUs at scale
long=(--steps "$steps" --log-every "$steps" --threads 1)
short=(--steps 1 --log-every 1 --threads 1)
recompute=(--bn-eval recompute --bn-recompute-batches 2)
run one -N1 -n1 -- "${long[@]}" --batch-per-rank "$global" --bn-batch "$batch" "${recompute[@]}"
run four "${many[@]}" -- "${long[@]}" --batch-per-rank "$batch" "${recompute[@]}"
run hier "${many[@]}" -- "${long[@]}" --batch-per-rank "$batch" --topology hier
run fullbn -N1 -n1 -- "${long[@]}" --batch-per-rank "$global"
run one_s1 -N1 -n1 -- "${short[@]}" --batch-per-rank "$global" --bn-batch "$batch"
run four_s1 "${many[@]}" -- "${short[@]}" --batch-per-rank "$batch"
/usr/bin/python3 - "$w" "$ranks" "$global" "$steps" <<'PY'
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"SKIP: {e}"); sys.exit(77)
w, ranks, glob, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(n, group="model"):
    with h5py.File(f"{w}/{n}.h5", "r") as f:
        return {k: np.array(f[group][k], dtype=np.float64) for k in f[group]}
one, four, hier, full, one_s1, four_s1 = (load(n) for n in ("one", "four", "hier", "fullbn", "one_s1", "four_s1"))
def worst(a, b, by_layer):
    """the largest |a - b| of each tensor relative to the largest |b| of the tensor, or of its layer
    (the tensors that share its name up to the last dot: a layer's weight and bias)"""
    scale = {}
    for k in b:
        layer = k.rsplit(".", 1)[0] if by_layer else k
        scale[layer] = max(scale.get(layer, 0.0), float(np.max(np.abs(b[k]))))
    return max((float(np.max(np.abs(a[k] - b[k]))) / max(scale[k.rsplit(".", 1)[0] if by_layer else k], 1e-12), k)
               for k in a)
fails = 0
for name, a, b, lim, by_layer, want_close in (
        (f"{ranks} ranks flat after 1 step (each tensor)", four_s1, one_s1, 1e-5, False, True),
        (f"{ranks} ranks flat after {steps} steps (each layer)", four, one, 1e-5, True, True),
        (f"{ranks} ranks hier after {steps} steps (each layer)", hier, one, 1e-5, True, True),
        (f"BN over all {glob} after {steps} steps (each layer; must differ)", full, one, 1e-3, True, False)):
    e, k = worst(a, b, by_layer)
    ok = e <= lim if want_close else e > lim
    fails += not ok
    print(f"{'ok' if ok else 'FAIL'}: {name} vs 1 rank x {glob}: worst relative difference {e:.2e} ({k}), "
          f"{'must be <=' if want_close else 'must be >'} {lim:g}")
    if not by_layer or not want_close:
        continue
    e, k = worst(a, b, False)
    print(f"note: the same relative to each tensor alone: {e:.2e} ({k})")
e, k = worst(load("four", "bn"), load("one", "bn"), False)
ok = e <= 1e-4
fails += not ok
print(f"{'ok' if ok else 'FAIL'}: --bn-eval recompute statistics, {ranks} ranks vs 1 rank x {glob}: worst relative "
      f"difference {e:.2e} ({k}), must be <= 1e-4")
sys.exit(1 if fails else 0)
PY
