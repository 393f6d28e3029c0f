#!/usr/bin/env bash
# train_learns.sh — a short data-parallel run on real data learns: resnet8 on Fashion-MNIST
# (Debian's dataset-fashion-mnist), 4 ranks on 2 nodes, 300 steps of global batch 64, validated on
# the 10,000 test images: top-1 must be well above chance (0.1); we ask for 0.75. It uses the
# small-image recipe (--pad-crop, --val-crop 1) and label smoothing, which config.json must echo.
# The run's summary.json must carry the keys the scaling report reads.   train_learns.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh" # fashion_mnist_sets
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fashion_mnist_sets "$m" "$w"
"$here/srun_test.sh" 300 -N2 -n4 --ntasks-per-node=2 -- "$m" train --data "$w/train" --val "$w/test" --arch resnet8 \
  --size 28 --batch-per-rank 16 --steps 300 --lr 0.4 --warmup-epochs 0.05 --schedule cosine --pad-crop 2 \
  --val-crop 1 --label-smoothing 0.05 --threads 1 --log-every 100 --out "$w/out" 2>&1 | tee "$w/log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "FAIL: training exited $rc"; exit 1; }
/usr/bin/python3 - "$w/out/summary.json" "$w/out/metrics.jsonl" "$w/out/config.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = json.load(open(sys.argv[3]))
keys = ["version", "arch", "image_size", "device", "comm", "topology", "ranks", "nodes", "ranks_per_node",
        "threads_per_rank", "batch_per_rank", "global_batch", "steps", "img_per_s", "img_per_s_per_rank", "step_ms",
        "phases_ms", "grad_bytes", "allreduce_busbw_gbs", "slurm_job_id", "loss", "top1", "val_top1"]
missing = [k for k in keys if k not in s]
lines = [json.loads(l) for l in open(sys.argv[2])]
fails = []
if missing: fails.append(f"summary.json lacks {missing}")
if s.get("ranks") != 4 or s.get("nodes") != 2 or s.get("global_batch") != 64: fails.append(f"summary: {s}")
if (c.get("pad_crop"), c.get("val_crop"), c.get("label_smoothing"), c.get("grad_dtype")) != (2, 1.0, 0.05, "fp32"):
    fails.append(f"config.json does not echo the options: {c}")
if not s.get("val_top1", 0) > 0.75: fails.append(f"validation top-1 {s.get('val_top1')} is not above 0.75")
if not any("val_top1" in l for l in lines) or not any("loss" in l and "ms" in l for l in lines):
    fails.append("metrics.jsonl lacks training or validation lines")
for f in fails: print("FAIL:", f)
print(f"train_learns: validation top-1 {s.get('val_top1'):.4f} after {s.get('steps')} steps, {s.get('img_per_s'):.0f} img/s, "
      f"{len(fails)} failures")
sys.exit(1 if fails else 0)
PY
