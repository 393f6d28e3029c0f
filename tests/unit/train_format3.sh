#!/usr/bin/env bash
# train_format3.sh — training on format 3 sets (images at their aspect ratio, JPEG or raw records) in
# one process, no cluster; tests/imagefolder.py's 120 non-square pictures of 10 classes converted
# with --resize 32 (tests/lib.sh: train_set), trained at --size 24 with a format 3 validation set:
# - for --codec jpeg and raw, and for a format 2 set (convert synth) beside them: 12 steps of 16
#   images straight (a validation set of the same format) equal 6 steps stopped with a checkpoint
#   (--stop-after, exit 3) + a resume of 6: weights and BN statistics bit for bit, the same training
#   and validation lines in metrics.jsonl (120 images are 7 batches: the resume is inside the first
#   epoch, the validation after epoch 1 and the second epoch's order come after it); inspect finds
#   the checkpoints valid. JPEG once more stopped at step 7, an epoch's end: a stop checkpoints
#   before that epoch's validation, and the resumed run must do it;
# - a format 3 checkpoint does not resume on another conversion of the same pictures (raw instead
#   of jpeg): refused naming data_fingerprint (exit 2);
# - it learns: 40 steps on the JPEG set reach a validation top-1 of 0.5 (chance 0.1; 0.9 measured).
# Exit 77 naming the reason without numpy, PIL or h5py for /usr/bin/python3.
#   train_format3.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$(realpath "$1")
fail=0
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || skip "no h5py/numpy for /usr/bin/python3 (apt-get install python3-h5py)"
for k in jpeg raw; do
  train_set --val "$w/val-$k" "$k" "$m" "$w/$k" || exit $?
done
# shellcheck disable=SC2154 # train_size: set by train_set (tests/lib.sh)
f3_size=$train_size
train_set synth "$m" "$w/synth" --classes 10 --images 160 --size 16 --shards 2 || exit $?
synth_size=$train_size
"$m" convert synth "$w/val-synth" --classes 10 --images 30 --size 16 --shards 1 --seed 2 >/dev/null || exit 1

# same A.h5 B.h5: /model and /bn bit for bit; A.jsonl B.jsonl: the same training and validation lines
same() {
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
bad = [f"{g}/{k}" for g in ("model", "bn") for k in a[g] if not np.array_equal(a[g][k][()], b[g][k][()])]
keys = ("step", "epoch", "loss", "top1", "lr", "val_loss", "val_top1", "val_top5")
def lines(p):
    return [{k: j[k] for k in keys if k in j} for j in map(json.loads, open(p)) if "loss" in j or "val_loss" in j]
la, lb = lines(sys.argv[3]), lines(sys.argv[4])
nval = sum("val_loss" in x for x in la)
if la != lb or nval == 0:
    bad.append(f"metrics.jsonl ({len(la)} lines, {nval} validations, vs {len(lb)})")
print(f"{len(bad)} differ" + (": " + ", ".join(bad[:5]) if bad else f" ({len(la)} metrics lines, {nval} validations)"))
sys.exit(1 if bad else 0)
PY
}
# resume_equal NAME DATA SIZE VAL STOP: 12 steps straight = STOP, stop, resume 12 - STOP
resume_equal() {
  local name=$1 data=$2 size=$3 val=$4 k=$5
  local a=(train --data "$data" --val "$val" --arch resnet8 --size "$size" --batch-per-rank 16 --steps 12 --lr 0.4
    --seed 4 --threads 1 --log-every 2 --ckpt-every-steps 6)
  local s=$w/$name-straight r=$w/$name-resumed
  "$m" "${a[@]}" --out "$s" --export "$s.h5" >"$s.log" 2>&1 || { cat "$s.log"; bad "$name: the straight run failed"; return; }
  "$m" "${a[@]}" --out "$r" --export "$r.h5" --stop-after "$k" >"$r.1.log" 2>&1
  local rc=$?
  [ $rc -eq 3 ] || { cat "$r.1.log"; bad "$name: the stopped run exited $rc, not 3"; return; }
  [ ! -e "$r.h5" ] || { bad "$name: a stopped run wrote its final weights"; return; }
  "$m" "${a[@]}" --out "$r" --export "$r.h5" >"$r.2.log" 2>&1 || { cat "$r.2.log"; bad "$name: the resumed run failed"; return; }
  grep -q "resuming from .*(step $k," "$r.2.log" || { cat "$r.2.log"; bad "$name: the second run did not resume from step $k"; return; }
  if out=$(same "$s.h5" "$r.h5" "$s/metrics.jsonl" "$r/metrics.jsonl"); then
    ok "$name: 12 steps straight = $k + stop + resume $((12 - k)): $out"
  else
    bad "$name: resumed run differs from the straight one: $out"
  fi
  if ! "$m" inspect "$r/ckpt" >"$r.inspect" 2>&1 || ! grep -q "step-00000012: ok" "$r.inspect"; then
    cat "$r.inspect"
    bad "$name: inspect does not find the checkpoints valid"
  fi
}
resume_equal jpeg "$w/jpeg" "$f3_size" "$w/val-jpeg" 6
resume_equal jpeg-epoch-end "$w/jpeg" "$f3_size" "$w/val-jpeg" 7
resume_equal raw "$w/raw" "$f3_size" "$w/val-raw" 6
resume_equal format2 "$w/synth" "$synth_size" "$w/val-synth" 6

# another conversion of the same pictures is another dataset
"$m" train --data "$w/raw" --arch resnet8 --size "$f3_size" --batch-per-rank 16 --steps 12 --lr 0.4 --seed 4 --threads 1 \
  --log-every 2 --ckpt-every-steps 6 --out "$w/other" --ckpt-dir "$w/jpeg-resumed/ckpt" >"$w/other.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "of another run: its data_fingerprint" "$w/other.log"; then
  ok "a JPEG set's checkpoint is refused on the raw set (exit 2, data_fingerprint)"
else
  cat "$w/other.log"
  bad "a JPEG set's checkpoint on the raw set: exit $rc, not refused naming data_fingerprint"
fi

# it learns
"$m" train --data "$w/jpeg" --val "$w/val-jpeg" --arch resnet8 --size "$f3_size" --batch-per-rank 16 --steps 40 --lr 0.4 \
  --threads 1 --log-every 10 --out "$w/learn" >"$w/learn.log" 2>&1 || { cat "$w/learn.log"; bad "the 40-step run failed"; }
top1=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("val_top1", 0))' "$w/learn/summary.json" 2>/dev/null)
if /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.5 else 1)' "${top1:-0}"; then
  ok "40 steps on the JPEG set: validation top-1 $top1 (>= 0.5; chance 0.1)"
else
  bad "40 steps on the JPEG set: validation top-1 ${top1:-none}, want >= 0.5"
fi
finish train_format3 "$fail"
