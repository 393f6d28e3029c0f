#!/usr/bin/env bash
# large_batch.sh — large batches at the same number of epochs: momentum SGD with the linear scaling
# rule and warm-up (Goyal et al., arXiv 1706.02677) against LARS (You et al., arXiv 1708.03888, as
# MLPerf's ResNet-50 reference: eta 0.001, warm-up then poly (power 2) decay, label smoothing 0.1)
# at global batch 256, 2,048 and 8,192. Fashion-MNIST (Debian's dataset-fashion-mnist, converted
# with `mntrain convert idx`), resnet8, 2 ranks on the local 2-node cluster, 1 compute thread each,
# batch per rank = global / 2, and --bn-batch 32: batch norm always normalises over groups of 32
# images, as 32-image GPUs would. The small-image recipe of fashion_mnist.sh (random crop with
# 2 px zero padding + flip, whole image for validation, wd 5e-4 without decay on BN and biases),
# test top-1 after every epoch. Runs: 256 SGD (the baseline), 2048 SGD, 2048 LARS, 8192 SGD,
# 8192 LARS, each with seeds 1 and 2 (all of seed 1 first); then a table of the final top-1 per
# seed, the mean, the best epoch, minutes per run and the mean's difference from the 256 baseline,
# and `mntrain report` of all runs into WORK/report. The goal: LARS at 8,192 within 0.5 points of
# the 256 baseline and above SGD at 8,192. About 4-5 min per run at 12 epochs on 2 cores (~3,000
# img/s whatever the batch): ~45 min for the 10 runs; peak memory ~4.2 GB per rank at 4,096 per rank.
#   benchmarks/large_batch.sh [path/to/mntrain] [work dir, default /tmp/mntrain-large-batch]
# Environment: EPOCHS (default 12), SEEDS (default "1 2"), WARMUP (epochs, default 2),
# SGD_LR and LARS_LR (per 256 images, mntrain scales linearly; defaults 0.2 and 0.5),
# LARS_BATCHES (global batches run with LARS, default "2048 8192"; add 256 for the optional row),
# ONLY (space-separated run names such as "b8192-lars" to run only those configurations).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-large-batch}
epochs=${EPOCHS:-12}
seeds=${SEEDS:-1 2}
warmup=${WARMUP:-2}
sgd_lr=${SGD_LR:-0.2}
lars_lr=${LARS_LR:-0.5}
lars_batches=${LARS_BATCHES:-2048 8192}
only=${ONLY:-}
fm=/usr/share/datasets/fashion-mnist
[ -x "$m" ] || { echo "no mntrain binary at $m (first argument)" >&2; exit 1; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST at $fm: apt-get install dataset-fashion-mnist" >&2; exit 1; }
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
mkdir -p "$work/runs"
"$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$work/train" --shards 4 >/dev/null
"$m" convert idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$work/test" --shards 2 >/dev/null

# the configurations, baseline first: "global optimizer"
configs=("256 sgd" "2048 sgd")
for b in $lars_batches; do [ "$b" = 256 ] && configs+=("256 lars"); done
for b in $lars_batches; do [ "$b" = 2048 ] && configs+=("2048 lars"); done
configs+=("8192 sgd")
for b in $lars_batches; do [ "$b" = 8192 ] && configs+=("8192 lars"); done
if [ -n "$only" ]; then
  kept=()
  for c in "${configs[@]}"; do
    read -r b o <<<"$c"
    case " $only " in *" b$b-$o "*) kept+=("$c") ;; esac
  done
  configs=("${kept[@]}")
fi
runs=()
for s in $seeds; do for c in "${configs[@]}"; do runs+=("$c $s"); done; done
total=${#runs[@]}
[ "$total" -gt 0 ] || { echo "nothing to run (ONLY='$only')" >&2; exit 2; }

echo "# large batches: resnet8, Fashion-MNIST, 2 ranks on 2 nodes, $epochs epochs, warm-up $warmup, bn-batch 32; $total runs in $work/runs"
start_all=$(date +%s)
i=0
for r in "${runs[@]}"; do
  read -r b o s <<<"$r"
  i=$((i + 1))
  name="b$b-$o-s$s"
  out="$work/runs/$name"
  if [ "$o" = lars ]; then
    lr=$lars_lr
    opt=(--optimizer lars --lars-eta 0.001 --schedule poly --label-smoothing 0.1)
  else
    lr=$sgd_lr
    opt=(--optimizer sgd --schedule cosine)
  fi
  echo "run $i/$total: batch $b $o seed $s (lr $lr per 256) ... $(date -u +%H:%M:%S) UTC"
  t0=$(date +%s)
  mkdir -p "$out"
  rc=0
  srun --mpi=pmix -N2 -n2 "$m" train --data "$work/train" --val "$work/test" --arch resnet8 --size 28 \
    --batch-per-rank $((b / 2)) --bn-batch 32 --epochs "$epochs" --warmup-epochs "$warmup" --lr "$lr" "${opt[@]}" \
    --pad-crop 2 --val-crop 1 --wd 5e-4 --no-bn-decay --seed "$s" --threads 1 --log-every 50 \
    --out "$out" --force >"$out/log" 2>&1 || rc=$?
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$out/seconds"
  if [ "$rc" -ne 0 ]; then
    echo "  FAILED (exit $rc), $((t1 - t0)) s: tail of $out/log:"
    tail -n 5 "$out/log" | sed 's/^/    /'
  else
    grep 'validation:' "$out/log" | awk '{ printf "%s%s", (NR > 1 ? " " : "  top-1 by epoch: "), $7 } END { print "" }'
    echo "  done in $((t1 - t0)) s"
  fi
done
end_all=$(date +%s)
echo "# all runs: $(( (end_all - start_all) / 60 )) min $(( (end_all - start_all) % 60 )) s"

# the table: one row per configuration, both seeds side by side
/usr/bin/python3 - "$work/runs" "$seeds" "$sgd_lr" "$lars_lr" "${configs[@]}" <<'EOF'
import json, os, sys
runs, seeds, sgd_lr, lars_lr, configs = sys.argv[1], sys.argv[2].split(), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
def load(b, o, s):
    d = os.path.join(runs, f"b{b}-{o}-s{s}")
    try:
        with open(os.path.join(d, "summary.json")) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    sec = None
    try:
        with open(os.path.join(d, "seconds")) as f:
            sec = int(f.read())
    except (OSError, ValueError):
        pass
    return j.get("val_top1"), j.get("best_val_top1"), sec
rows, base = [], None
for c in configs:
    b, o = c.split()
    r = [load(b, o, s) for s in seeds]
    fin = [x[0] for x in r if x and x[0] is not None]
    best = [x[1] for x in r if x and x[1] is not None]
    secs = [x[2] for x in r if x and x[2] is not None]
    mean = sum(fin) / len(fin) if fin else None
    if b == "256" and o == "sgd":
        base = mean
    lr = sgd_lr if o == "sgd" else lars_lr
    rows.append((b, o, lr, r, mean, max(best) if best else None, sum(secs) / len(secs) / 60 if secs else None))
pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
hdr = ["global batch", "optimizer", "lr /256 (global)"] + [f"seed {s} final top-1" for s in seeds] + ["mean", "best epoch", "min/run", "vs 256 SGD"]
print("| " + " | ".join(hdr) + " |")
print("|" + " --- |" * len(hdr))
for b, o, lr, r, mean, best, mins in rows:
    d = "-" if mean is None or base is None else f"{100 * (mean - base):+.2f}"
    cells = [b, o.upper(), f"{lr:g} ({lr * int(b) / 256:g})"] + [pct(x[0] if x else None) for x in r] + [pct(mean), pct(best), "-" if mins is None else f"{mins:.1f}", d]
    print("| " + " | ".join(cells) + " |")
print("(top-1 in %, on the 10,000 test images after the last epoch; best epoch: the highest after any epoch of either seed;")
print(" vs 256 SGD: the mean's difference from the baseline's mean in points)")
def mean_of(b, o):
    for rb, ro, _, _, mean, _, _ in rows:
        if rb == b and ro == o:
            return mean
lars8, sgd8 = mean_of("8192", "lars"), mean_of("8192", "sgd")
if lars8 is not None and base is not None:
    ok1 = lars8 >= base - 0.005
    print(f"goal: LARS at 8192 within 0.5 points of the 256 baseline: {100 * (lars8 - base):+.2f} points:", "met" if ok1 else "NOT met")
    if sgd8 is not None:
        print(f"goal: LARS above SGD at 8192: {100 * (lars8 - sgd8):+.2f} points:", "met" if lars8 > sgd8 else "NOT met")
EOF

# mntrain report over every run (throughput, and the learning curves where it reads them)
if "$m" report "$work"/runs/* --out "$work/report"; then
  echo "# report: $work/report"
else
  echo "# note: mntrain report exited $? on these runs (they are neither weak nor strong scaling, and this" \
    "mntrain may not yet accept runs with validation curves); the table above is the result"
fi
