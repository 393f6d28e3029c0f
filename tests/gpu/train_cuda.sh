#!/usr/bin/env bash
# train_cuda.sh — `mntrain train` on one GPU, one rank, a few steps on a synthetic set (mntrain
# convert synth), as a user runs it:
#   1. --device cuda (the communicator follows: nccl), fp32, resnet8;
#   2. --comm nccl (the device follows: cuda), bf16 activations and bf16 gradients, resnet18 with
#      2 MB buckets (a dozen allreduce requests waited for per step), validation at the end and a
#      checkpoint every 4 steps (host buffers staged through the GPU);
#   3. bf16 resnet8 with and without MNT_COPY_OVERLAP: the same checkpoint, bit for bit;
#   4. the same with --cuda-graph on (the step captured and replayed): the same checkpoint again.
# Each must exit 0 with a finite loss and a summary.json that says cuda and nccl; the log must not
# hold a CUDA error. The first kernel after an NCCL wait that saw "not ready" used to fail with
# "device not ready" (a poll's cudaErrorNotReady left as the thread's last error): both runs
# would stop at step 1. Skips (77), saying why, without a GPU or without the CUDA backend.
#   train_cuda.sh path/to/mntrain
set -u
m=$(realpath "$1")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
py=/usr/bin/python3
command -v "$py" >/dev/null 2>&1 || py=python3

ver=$("$m" --version 2>&1)
if ! grep -q 'devices: .*cuda' <<<"$ver"; then
  echo "SKIP: this mntrain has no CUDA backend ($ver)"
  exit 77
fi
"$m" convert synth "$w/data" --classes 10 --images 512 --size 40 --shards 2 >/dev/null ||
  { echo "FAIL: convert"; exit 1; }
"$m" convert synth "$w/val" --classes 10 --images 128 --size 40 --shards 1 --seed 2 >/dev/null || exit 1

fail=0
# run NAME ARGS...: one training run into $w/NAME, its output in $w/NAME.log; its exit status
run() {
  local name=$1
  shift
  echo "+ mntrain train $* --out \$W/$name"
  "$m" train --data "$w/data" --size 32 --batch-per-rank 32 --steps 8 --log-every 2 --pad-crop 4 --out "$w/$name" \
    "$@" >"$w/$name.log" 2>&1
}
# check NAME PRECISION: the run's summary and log
check() {
  local name=$1 prec=$2
  if grep -nE 'not ready|cudaError|CUDA error|failed: ' "$w/$name.log"; then
    echo "FAIL: $name: a CUDA error in the log (above)"
    fail=1
  fi
  "$py" - "$w/$name/summary.json" "$prec" "$name" <<'PY' || fail=1
import json, math, sys
s = json.load(open(sys.argv[1]))
want = {"device": "cuda", "comm": "nccl", "steps": 8, "ranks": 1}
bad = [f"{k} {s.get(k)!r}, want {v!r}" for k, v in want.items() if s.get(k) != v]
if s.get("precision", sys.argv[2]) != sys.argv[2]:
    bad.append(f"precision {s.get('precision')!r}, want {sys.argv[2]}")
if not (isinstance(s.get("loss"), (int, float)) and math.isfinite(s["loss"])):
    bad.append(f"loss {s.get('loss')!r} is not finite")
if not s.get("img_per_s", 0) > 0:
    bad.append(f"img_per_s {s.get('img_per_s')!r}")
for b in bad:
    print(f"FAIL: {sys.argv[3]}: summary.json: {b}")
extra = ", ".join(f"{k} {s[k]}" for k in ("val_top1", "bn_mode", "reference_layers") if k in s)
print(f"{'ok' if not bad else 'FAIL'}: {sys.argv[3]}: {s.get('steps')} steps on {s.get('device')}/{s.get('comm')}, "
      f"loss {s.get('loss')}, {s.get('img_per_s', 0):.0f} img/s{', ' + extra if extra else ''}")
sys.exit(1 if bad else 0)
PY
}

# same_ckpt WHAT A B: the checkpoints of step 16 of runs A and B hold the same weights, optimizer state
# and BN statistics, bit for bit, at the same position in the data
same_ckpt() {
  "$py" - "$w/$2/ckpt/step-00000016" "$w/$3/ckpt/step-00000016" "$1" "$2" "$3" <<'PY'
import json, sys
def load(d):
    m = json.load(open(f"{d}/MANIFEST.json"))
    with open(f"{d}/{m['file']}", "rb") as f:
        data = {}
        for ds in m["datasets"]:
            if ds["name"].startswith(("/model/", "/optim/", "/bn/")):
                f.seek(ds["offset"])
                data[ds["name"]] = f.read(ds["bytes"])
    return m["state"], data
what, a_name, b_name = sys.argv[3], sys.argv[4], sys.argv[5]
(s_on, on), (s_off, off) = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in on if on[k] != off.get(k)] + [k for k in off if k not in on]
pos = [(k, s_on[k], s_off[k]) for k in ("step", "epoch", "cursor") if s_on[k] != s_off[k]]
for k in bad[:5]:
    print(f"FAIL: {what}: {k} differs between {a_name} and {b_name}")
for k, a, b in pos:
    print(f"FAIL: {what}: the checkpoint's {k} is {a} in {a_name}, {b} in {b_name}")
if not bad and not pos and on:
    print(f"ok: {what}: {len(on)} tensors bit-identical in {a_name} and {b_name}, position "
          f"epoch {s_on['epoch']} cursor {s_on['cursor']}")
sys.exit(1 if bad or pos or not on else 0)
PY
}

run fp32 --device cuda --arch resnet8
rc=$?
nodev='no (CUDA device|GPU) visible|CUDA driver|could not (be )?open|cannot (open|load)'
if [ $rc -eq 2 ] && grep -qiE "$nodev" "$w/fp32.log"; then
  echo "SKIP: no GPU for this process: $(grep -m1 -iE 'error' "$w/fp32.log" | sed 's/^.*error: //')"
  exit 77
fi
if [ $rc -ne 0 ]; then
  echo "FAIL: fp32: mntrain train --device cuda exited $rc"
  tail -n 30 "$w/fp32.log"
  fail=1
else
  check fp32 fp32
fi

run bf16 --comm nccl --precision bf16 --grad-dtype bf16 --arch resnet18 --bucket-mb 2 --val "$w/val" \
  --ckpt-every-steps 4
rc=$?
if [ $rc -ne 0 ]; then
  echo "FAIL: bf16: mntrain train --comm nccl --precision bf16 exited $rc"
  tail -n 30 "$w/bf16.log"
  fail=1
else
  check bf16 bf16
  if ! ls "$w"/bf16/ckpt/step-*/MANIFEST.json >/dev/null 2>&1; then
    echo "FAIL: bf16: no committed checkpoint in $w/bf16: $(find "$w/bf16" -maxdepth 3 | tr '\n' ' ')"
    fail=1
  fi
fi
# 3. the upload of the next batch beside the current step (two lanes, a copy stream) changes no
#    number: the same run with MNT_COPY_OVERLAP=off (each batch up at its own step's start) ends with
#    the same weights, momentum and BN statistics, bit for bit, and the same position in the data
#    (the checkpoint names the batch trained, not the one already on its way up)
#    (20 steps: the prefetch crosses the epoch of 16 batches; the checkpoint of step 16 compared)
run overlap_on --device cuda --arch resnet8 --precision bf16 --steps 20 --ckpt-every-steps 8
rc_on=$?
MNT_COPY_OVERLAP=off run overlap_off --device cuda --arch resnet8 --precision bf16 --steps 20 --ckpt-every-steps 8
rc_off=$?
for n in overlap_on overlap_off; do
  if grep -nE 'not ready|cudaError|CUDA error|failed: ' "$w/$n.log"; then
    echo "FAIL: $n: a CUDA error in the log (above)"
    fail=1
  fi
done
if [ $rc_on -ne 0 ] || [ $rc_off -ne 0 ]; then
  echo "FAIL: overlap: mntrain train exited $rc_on (MNT_COPY_OVERLAP=on) and $rc_off (off)"
  tail -n 20 "$w/overlap_on.log" "$w/overlap_off.log"
  fail=1
else
  same_ckpt overlap overlap_on overlap_off || fail=1
fi
# 4. the step captured as a CUDA graph (one per upload lane) and replayed changes no number either:
#    the overlap_on run again with --cuda-graph on, the same checkpoint of step 16, bit for bit
run graph --device cuda --arch resnet8 --precision bf16 --steps 20 --ckpt-every-steps 8 --cuda-graph on
rc=$?
if grep -nE 'not ready|cudaError|CUDA error|failed: ' "$w/graph.log"; then
  echo "FAIL: graph: a CUDA error in the log (above)"
  fail=1
fi
if [ $rc -ne 0 ] || [ $rc_on -ne 0 ]; then
  echo "FAIL: graph: mntrain train --cuda-graph on exited $rc"
  tail -n 20 "$w/graph.log"
  fail=1
else
  grep -q "captured as a CUDA graph" "$w/graph.log" || { echo "FAIL: graph: the log does not say the step was captured"; fail=1; }
  same_ckpt "CUDA graph" overlap_on graph || fail=1
fi
[ $fail -eq 0 ] && echo "train_cuda: ok" || echo "train_cuda: FAILED"
exit $fail
