#!/usr/bin/env bash
# train_bf16.sh — --precision bf16 on the CPU, trained for real and resumed across precisions:
# resnet8 on Fashion-MNIST (Debian's dataset-fashion-mnist), 2 ranks on 2 nodes, 300 steps of
# global batch 64, the same seed in four runs:
#   fp32; bf16 (its validation top-1 within 1.5 points of fp32's: bf16's 8-bit mantissa costs
#   ResNet training no accuracy when weights, BN and the loss stay fp32);
#   bf16 stopped at step 150 with a checkpoint (exit 3) and resumed in fp32, and fp32 stopped and
#   resumed in bf16 (checkpoints hold fp32 state whatever computed it: both finish, their
#   config.json and start lines name the precision of the job that ran, and both end within 1.5
#   points of fp32).
# Below AVX-512 (no bf16 kernels in oneDNN) bf16 must be refused, naming the ISA: that is checked
# instead.                                                     train_bf16.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh" # fashion_mnist_sets
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fashion_mnist_sets "$m" "$w"
# run NAME PRECISION [extra train options]: the step's exit status; its output in $w/NAME.log
run() {
  local name=$1 prec=$2
  shift 2
  "$here/srun_test.sh" 300 -N2 -n2 --ntasks-per-node=1 -- "$m" train --data "$w/train" --val "$w/test" \
    --arch resnet8 --size 28 --batch-per-rank 32 --steps 300 --lr 0.4 --warmup-epochs 0.05 --schedule cosine \
    --pad-crop 2 --val-crop 1 --threads 1 --log-every 100 --precision "$prec" --out "$w/$name" "$@" \
    >"$w/$name.log" 2>&1
}
run fp32 fp32
rc=$?
[ "$rc" -eq 77 ] && { cat "$w/fp32.log"; exit 77; }
[ "$rc" -eq 0 ] || { cat "$w/fp32.log"; echo "FAIL: the fp32 run exited $rc"; exit 1; }
isa=$(sed -n 's/.* cpu fp32 on \([a-z0-9_]*\).*/\1/p' "$w/fp32.log" | head -1)
[ -n "$isa" ] || { cat "$w/fp32.log"; echo "FAIL: the start line does not name the precision and the ISA"; exit 1; }
if [ "${isa#avx512}" = "$isa" ]; then # no bf16 kernels: the refusal, naming the ISA, is the behaviour
  run bf16 bf16
  rc=$?
  if [ "$rc" -eq 2 ] && grep -q "needs AVX-512.*$isa" "$w/bf16.log"; then
    echo "train_bf16: --precision bf16 refused on $isa (exit 2), as it must be"
    exit 0
  fi
  cat "$w/bf16.log"
  echo "FAIL: --precision bf16 on $isa: exit $rc, not the refusal naming the ISA"
  exit 1
fi
run bf16 bf16 || { cat "$w/bf16.log"; echo "FAIL: the bf16 run failed"; exit 1; }
fails=0
for pair in "bf16 fp32" "fp32 bf16"; do
  read -r first second <<<"$pair"
  name="$first-then-$second"
  run "$name" "$first" --ckpt-every-steps 1000 --stop-after 150
  rc=$?
  [ "$rc" -eq 3 ] || { cat "$w/$name.log"; echo "FAIL: $name: the stop exited $rc, not 3"; exit 1; }
  mv "$w/$name.log" "$w/$name.first.log"
  run "$name" "$second" --ckpt-every-steps 1000 || { cat "$w/$name.log"; echo "FAIL: $name: the resume in $second failed"; exit 1; }
  if ! grep -q "cpu $second on $isa, resumed" "$w/$name.log"; then
    cat "$w/$name.log"
    echo "FAIL: $name: the resumed job's start line does not say cpu $second on $isa"
    fails=$((fails + 1))
  fi
done
/usr/bin/python3 - "$w" <<'PY' || fails=$((fails + 1))
import json, sys
w = sys.argv[1]
top = {}
fails = []
for name, prec in (("fp32", "fp32"), ("bf16", "bf16"), ("bf16-then-fp32", "fp32"), ("fp32-then-bf16", "bf16")):
    s = json.load(open(f"{w}/{name}/summary.json"))
    c = json.load(open(f"{w}/{name}/config.json"))
    top[name] = s["val_top1"]
    if c.get("precision") != prec or s.get("precision") != prec:
        fails.append(f"{name}: config.json / summary.json say precision {c.get('precision')} / {s.get('precision')}, not {prec}")
    if c.get("steps") != 300:
        fails.append(f"{name}: config.json says {c.get('steps')} steps, not 300")
for name in ("bf16", "bf16-then-fp32", "fp32-then-bf16"):
    d = abs(top[name] - top["fp32"]) * 100
    print(f"train_bf16: {name} validation top-1 {top[name]:.4f} against fp32's {top['fp32']:.4f}: {d:.2f} points")
    if d > 1.5:
        fails.append(f"{name}: {d:.2f} points from fp32 (more than 1.5)")
if top["fp32"] < 0.75:
    fails.append(f"fp32 reached only {top['fp32']:.4f}")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
PY
[ "$fails" -eq 0 ] || exit 1
echo "train_bf16: ok"
