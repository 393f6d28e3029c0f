#!/usr/bin/env bash
# large_batch.sh — large batches on Fashion-MNIST (Debian's dataset-fashion-mnist, converted with
# `mntrain convert idx`), resnet8, 2 ranks on the local 2-node cluster, 1 compute thread each, batch
# per rank = global / 2, --bn-batch 32 (batch norm always over groups of 32 images, as 32-image GPUs
# would), the small-image recipe of fashion_mnist.sh (random crop with 2 px zero padding + flip, the
# whole image for validation, wd 5e-4 without decay on BN parameters and biases), test top-1 after
# every epoch. Two modes:
#
# MODE=ablation (the default): ChainerMN's team's techniques for batch 32k (Akiba, Suzuki, Fukuda,
# arXiv 1711.04325) and MLPerf's, one at a time, at global batch 2,048 and 8,192, against momentum
# SGD at 256 (the baseline: lr 0.2 per 256, warm-up 2 epochs, cosine). Runs, seed 1:
#   bB-lars         LARS (You et al., arXiv 1708.03888; eta 0.001, lr 0.5 per 256, warm-up 2, poly)
#   bB-lars-bn      + --bn-eval recompute (the batches of the last 4096 / (B/2) steps, at least 1,
#                   through the current weights before each evaluation: about 4,096 images a rank)
#   bB-lars-bn-ls   + --label-smoothing 0.1 (MLPerf's)
#   bB-rmsw         --optimizer rmsprop-warmup --schedule slow-start, no linear warm-up (the blend
#                   is the warm-up), --rmsprop-warmup at its default (10:5 of 90 epochs scaled to
#                   the run); lr 0.05 per 256 for the SGD part and --rmsprop-lr 1e-4: 5-epoch probes
#                   at 8,192 (2026-12-06) diverged by epoch 3 with lr 0.2 or 0.1 (with --rmsprop-lr
#                   1e-3 or 1e-4) and with 0.05 at --rmsprop-lr 1e-3
#   bB-best         the combination the runs above point to: the better optimizer of LARS and
#                   rmsprop-warmup + slow-start, with recomputed BN if it helped LARS and label
#                   smoothing if it helped LARS + BN (not run when it is one of the above)
# then seed 2 of the best configuration of each batch. Prints a table of final top-1 against the
# baseline and the goals (2,048 within 0.5 points of it, 8,192 within 3), and `mntrain report` of
# all runs into WORK/report (learning.svg: the curves). About 6 min per run at 16 epochs on 2 cores.
#
# MODE=longer: configurations of the ablation by name (LONGER, default "b256-sgd b2048-rmsw
# b8192-lars-bn-ls": the baseline and the best single change of each batch at 16 epochs) at more epochs
# (default 32), seed 1; a table of the final top-1, the curve at a quarter, half and three quarters of
# the run, and the first epoch at which each came within its goal of the baseline's final top-1.
# Names: bB-sgd, bB-lars, bB-lars-bn, bB-lars-bn-ls, bB-rmsw, bB-rmsw-bn. About 12 min per run.
#
# MODE=compare: momentum SGD with the linear scaling rule and warm-up (Goyal et al., arXiv
# 1706.02677) against LARS (as MLPerf's ResNet-50 reference: eta 0.001, warm-up then poly (power 2)
# decay, label smoothing 0.1) at global batch 256, 2,048 and 8,192, seeds 1 and 2 (all of seed 1
# first); a table of the final top-1 per seed, the mean, the best epoch, minutes per run and the
# mean's difference from the 256 baseline. About 4-5 min per run at 12 epochs on 2 cores (~3,000
# img/s whatever the batch): ~45 min for the 10 runs; peak memory ~4.2 GB per rank at 4,096 per rank.
#
# In both modes a run whose summary.json exists is not run again: the benchmark resumes where it stopped.
#
#   benchmarks/large_batch.sh [path/to/mntrain] [work dir, default /tmp/mntrain-large-batch]
# Environment: MODE (ablation|longer|compare), EPOCHS (default 16 for ablation, 32 for longer, 12
# for compare), LONGER (longer: the run names), BATCHES
# (ablation: default "2048 8192"), SEEDS (compare: default "1 2"), WARMUP (epochs, default 2),
# SGD_LR, LARS_LR and RMSW_LR (per 256 images, mntrain scales linearly; defaults 0.2, 0.5 and 0.05),
# RMSPROP_LR (rmsprop-warmup's --rmsprop-lr, default 1e-4), LARS_BATCHES
# (compare: global batches run with LARS, default "2048 8192"; add 256 for the optional row), ONLY
# (compare: space-separated run names such as "b8192-lars" to run only those configurations).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
work=${2:-/tmp/mntrain-large-batch}
mode=${MODE:-ablation}
case "$mode" in
  ablation) epochs=${EPOCHS:-16} ;;
  longer) epochs=${EPOCHS:-32} ;;
  compare) epochs=${EPOCHS:-12} ;;
  *) echo "MODE: ablation, longer or compare, not '$mode'" >&2; exit 2 ;;
esac
seeds=${SEEDS:-1 2}
warmup=${WARMUP:-2}
sgd_lr=${SGD_LR:-0.2}
lars_lr=${LARS_LR:-0.5}
rmsw_lr=${RMSW_LR:-0.05}
rmsprop_lr=${RMSPROP_LR:-1e-4}
lars_batches=${LARS_BATCHES:-2048 8192}
only=${ONLY:-}
fm=/usr/share/datasets/fashion-mnist
[ -x "$m" ] || { echo "no mntrain binary at $m (first argument)" >&2; exit 1; }
[ -r "$fm/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST at $fm: apt-get install dataset-fashion-mnist" >&2; exit 1; }
scontrol ping >/dev/null 2>&1 || { echo "no Slurm cluster: job_templates/tools/local-cluster.sh up" >&2; exit 1; }
mkdir -p "$work/runs"
"$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$work/train" --shards 4 >/dev/null
"$m" convert idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" "$work/test" --shards 2 >/dev/null

common=(--arch resnet8 --size 28 --bn-batch 32 --epochs "$epochs" --pad-crop 2 --val-crop 1 --wd 5e-4 --no-bn-decay
  --threads 1 --log-every 50)

# one training run: NAME GLOBAL SEED FLAGS... into $work/runs/NAME-sSEED (skipped when it finished before)
train_run() {
  local name=$1 b=$2 s=$3
  shift 3
  local out="$work/runs/$name-s$s"
  if [ -f "$out/summary.json" ]; then
    echo "$name seed $s: done before ($out/summary.json)"
    return 0
  fi
  echo "$name seed $s: $* ... $(date -u +%H:%M:%S) UTC"
  mkdir -p "$out"
  local t0 t1 rc=0
  t0=$(date +%s)
  srun --mpi=pmix -N2 -n2 "$m" train --data "$work/train" --val "$work/test" "${common[@]}" \
    --batch-per-rank $((b / 2)) --seed "$s" "$@" --out "$out" --force >"$out/log" 2>&1 || rc=$?
  t1=$(date +%s)
  echo "$((t1 - t0))" >"$out/seconds"
  printf '%s\n' "$*" >"$out/flags"
  if [ "$rc" -ne 0 ]; then
    echo "  FAILED (exit $rc), $((t1 - t0)) s: tail of $out/log:"
    tail -n 5 "$out/log" | sed 's/^/    /'
  else
    grep 'validation:' "$out/log" | awk '{ printf "%s%s", (NR > 1 ? " " : "  top-1 by epoch: "), $7 } END { print "" }'
    echo "  done in $((t1 - t0)) s"
  fi
}

# the wall time since start_all
all_runs_took() {
  local t=$(($(date +%s) - start_all))
  echo "# all runs: $((t / 60)) min $((t % 60)) s"
}

# the final top-1 of a finished run NAME-sS (empty when it has none)
top1() {
  /usr/bin/python3 -c 'import json, sys
try:
    print(json.load(open(sys.argv[1])).get("val_top1", ""))
except (OSError, ValueError):
    print("")' "$work/runs/$1/summary.json"
}
# success when the number A is above B (both given)
above() {
  [ -n "$1" ] && [ -n "$2" ] && /usr/bin/python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$1" "$2"
}

lars=(--optimizer lars --lars-eta 0.001 --schedule poly --lr "$lars_lr" --warmup-epochs "$warmup")
rmsw=(--optimizer rmsprop-warmup --schedule slow-start --lr "$rmsw_lr" --rmsprop-lr "$rmsprop_lr" --warmup-epochs 0)
baseline=(--optimizer sgd --schedule cosine --lr "$sgd_lr" --warmup-epochs "$warmup")

if [ "$mode" = longer ]; then
  # the ablation's configurations by name at more epochs, seed 1, with the epoch at which each first
  # came within its goal of the baseline's final top-1
  names=${LONGER:-b256-sgd b2048-rmsw b8192-lars-bn-ls}
  echo "# large batches, longer: resnet8, Fashion-MNIST, 2 ranks on 2 nodes, $epochs epochs, bn-batch 32: $names; runs in $work/runs"
  start_all=$(date +%s)
  for n in $names; do
    b=${n%%-*}
    b=${b#b}
    c=${n#*-}
    case "$b" in '' | *[!0-9]*) echo "LONGER: '$n' does not start with bB- (B the global batch)" >&2; exit 2 ;; esac
    nb=$((4096 / (b / 2)))
    [ "$nb" -ge 1 ] || nb=1
    bn=(--bn-eval recompute --bn-recompute-batches "$nb")
    case "$c" in
      sgd) flags=("${baseline[@]}") ;;
      lars) flags=("${lars[@]}") ;;
      lars-bn) flags=("${lars[@]}" "${bn[@]}") ;;
      lars-bn-ls) flags=("${lars[@]}" "${bn[@]}" --label-smoothing 0.1) ;;
      rmsw) flags=("${rmsw[@]}") ;;
      rmsw-bn) flags=("${rmsw[@]}" "${bn[@]}") ;;
      *) echo "LONGER: '$n' is not one of bB-sgd, bB-lars, bB-lars-bn, bB-lars-bn-ls, bB-rmsw, bB-rmsw-bn" >&2; exit 2 ;;
    esac
    train_run "$n" "$b" 1 "${flags[@]}"
  done
  all_runs_took
  /usr/bin/python3 - "$work/runs" "$names" <<'EOF'
import os, re, sys
runs, names = sys.argv[1], sys.argv[2].split()
goals = {2048: 0.5, 8192: 3.0}
def curve(name):  # test top-1 in % after each epoch, from the run's log
    try:
        lines = open(os.path.join(runs, name + "-s1", "log")).read().splitlines()
    except OSError:
        return []
    return [100 * float(l.split()[6]) for l in lines if "validation:" in l]
base = curve(next((n for n in names if n.startswith("b256-")), "b256-sgd"))
print("| run | final top-1 | best epoch | top-1 at 1/4, 1/2, 3/4 of the run | min/run | vs 256 (final) | first epoch within the goal of the 256 run's final |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for n in names:
    c = curve(n)
    if not c:
        print(f"| {n} | (no curve) | | | | | |")
        continue
    b = int(re.match(r"b(\d+)-", n).group(1))
    try:
        mins = f"{int(open(os.path.join(runs, n + '-s1', 'seconds')).read()) / 60:.1f}"
    except (OSError, ValueError):
        mins = "-"
    k = len(c)
    marks = ", ".join(f"{c[max(0, k * q // 4 - 1)]:.2f}" for q in (1, 2, 3))
    vs = f"{c[-1] - base[-1]:+.2f}" if base else "-"
    first = "-"
    if base and b in goals:
        hit = [i + 1 for i, v in enumerate(c) if v >= base[-1] - goals[b]]
        first = f"epoch {hit[0]} of {k}" if hit else f"not reached (goal: {goals[b]:g} points)"
    print(f"| {n} | {c[-1]:.2f} | {max(c):.2f} | {marks} | {mins} | {vs} | {first} |")
print("(test top-1 in % on the 10,000 test images after each epoch, seed 1)")
EOF
  if "$m" report "$work"/runs/*-s1 --out "$work/report" >"$work/report.txt" 2>&1; then
    echo "# report: $work/report (learning.svg, learning.csv)"
  else
    echo "# note: mntrain report failed on these runs (see $work/report.txt); the table above is the result"
  fi
  exit 0
fi

if [ "$mode" = ablation ]; then
  batches=${BATCHES:-2048 8192}
  echo "# large batches, ablation: resnet8, Fashion-MNIST, 2 ranks on 2 nodes, $epochs epochs, bn-batch 32; batches $batches; runs in $work/runs"
  start_all=$(date +%s)
  train_run b256-sgd 256 1 "${baseline[@]}"
  for b in $batches; do
    nb=$((4096 / (b / 2)))
    [ "$nb" -ge 1 ] || nb=1
    bn=(--bn-eval recompute --bn-recompute-batches "$nb")
    train_run "b$b-lars" "$b" 1 "${lars[@]}"
    train_run "b$b-lars-bn" "$b" 1 "${lars[@]}" "${bn[@]}"
    train_run "b$b-lars-bn-ls" "$b" 1 "${lars[@]}" "${bn[@]}" --label-smoothing 0.1
    train_run "b$b-rmsw" "$b" 1 "${rmsw[@]}"
  done
  for b in $batches; do # the combination the single changes point to
    nb=$((4096 / (b / 2)))
    [ "$nb" -ge 1 ] || nb=1
    use_bn=0 use_ls=0 use_rmsw=0
    above "$(top1 "b$b-lars-bn-s1")" "$(top1 "b$b-lars-s1")" && use_bn=1
    above "$(top1 "b$b-lars-bn-ls-s1")" "$(top1 "b$b-lars-bn-s1")" && use_ls=1
    above "$(top1 "b$b-rmsw-s1")" "$(top1 "b$b-lars-s1")" && use_rmsw=1
    flags=()
    if [ "$use_rmsw" = 1 ]; then flags+=("${rmsw[@]}"); else flags+=("${lars[@]}"); fi
    [ "$use_bn" = 1 ] && flags+=(--bn-eval recompute --bn-recompute-batches "$nb")
    [ "$use_ls" = 1 ] && flags+=(--label-smoothing 0.1)
    same=""
    case "$use_rmsw$use_bn$use_ls" in
      000 | 001) same="b$b-lars" ;; 010) same="b$b-lars-bn" ;; 011) same="b$b-lars-bn-ls" ;; 100 | 101) same="b$b-rmsw" ;;
    esac
    if [ -n "$same" ]; then
      echo "b$b-best: the combination is $same (run already)"
    else
      train_run "b$b-best" "$b" 1 "${flags[@]}"
    fi
  done
  for b in $batches; do # seed 2 of the best of each batch
    best="" besttop=""
    for c in lars lars-bn lars-bn-ls rmsw best; do
      t=$(top1 "b$b-$c-s1")
      [ -n "$t" ] || continue
      if [ -z "$besttop" ] || above "$t" "$besttop"; then best=$c besttop=$t; fi
    done
    [ -n "$best" ] || continue
    read -r -a flags <"$work/runs/b$b-$best-s1/flags"
    train_run "b$b-$best" "$b" 2 "${flags[@]}"
  done
  all_runs_took
  /usr/bin/python3 - "$work/runs" "$batches" <<'EOF'
import json, os, sys
runs, batches = sys.argv[1], sys.argv[2].split()
def load(name):
    d = os.path.join(runs, name)
    try:
        j = json.load(open(os.path.join(d, "summary.json")))
    except (OSError, ValueError):
        return None
    sec = int(open(os.path.join(d, "seconds")).read()) if os.path.exists(os.path.join(d, "seconds")) else None
    flags = open(os.path.join(d, "flags")).read().strip() if os.path.exists(os.path.join(d, "flags")) else ""
    return j.get("val_top1"), j.get("best_val_top1"), sec, flags
base = load("b256-sgd-s1")
pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
WHAT = {"sgd": "SGD, cosine (baseline)", "lars": "LARS, poly", "lars-bn": "LARS + recomputed BN",
        "lars-bn-ls": "LARS + recomputed BN + label smoothing 0.1", "rmsw": "rmsprop-warmup + slow-start",
        "best": "the combination"}
print("| global batch | configuration | seed 1 final top-1 | seed 2 final top-1 | best epoch | min/run | vs 256 SGD |")
print("| --- | --- | --- | --- | --- | --- | --- |")
rows = [("256", "sgd")] + [(b, c) for b in batches for c in ("lars", "lars-bn", "lars-bn-ls", "rmsw", "best")]
bestof = {}
for b, c in rows:
    r1, r2 = load(f"b{b}-{c}-s1"), load(f"b{b}-{c}-s2")
    if r1 is None or r1[0] is None:
        continue
    what = WHAT[c] + (": " + r1[3] if c == "best" else "")
    fins = [x[0] for x in (r1, r2) if x and x[0] is not None]
    mean = sum(fins) / len(fins)
    if b != "256" and (b not in bestof or mean > bestof[b][0]):
        bestof[b] = (mean, c, len(fins))
    secs = [x[2] for x in (r1, r2) if x and x[2]]
    d = "-" if base is None or base[0] is None else f"{100 * (mean - base[0]):+.2f}"
    mins = "-" if not secs else f"{sum(secs) / len(secs) / 60:.1f}"
    print(f"| {int(b):,} | {what} | {pct(r1[0])} | {pct(r2[0]) if r2 else '-'} | "
          f"{pct(max(x[1] for x in (r1, r2) if x and x[1] is not None))} | {mins} | {d} |")
print("(test top-1 in % on the 10,000 test images after the last epoch; best epoch: the highest after any epoch;")
print(" vs 256 SGD: the mean of the seeds run against the baseline's seed 1, in points)")
goals = {"2048": 0.005, "8192": 0.03}
for b, (mean, c, n) in sorted(bestof.items(), key=lambda x: int(x[0])):
    if base is None or base[0] is None or b not in goals:
        continue
    gap = base[0] - mean
    print(f"goal: {int(b):,} within {100 * goals[b]:g} points of the 256 baseline: best {c} ({n} seed"
          f"{'s' if n > 1 else ''}) {100 * -gap:+.2f} points:", "met" if gap <= goals[b] else "NOT met")
EOF
  if "$m" report "$work"/runs/*-s[12] --out "$work/report" >"$work/report.txt" 2>&1; then
    echo "# report: $work/report (learning.svg, learning.csv); its learning table:"
    sed -n '/^== learning/,$p' "$work/report.txt"
  else
    echo "# note: mntrain report failed on these runs (see $work/report.txt); the table above is the result"
  fi
  exit 0
fi

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
  if [ "$o" = lars ]; then
    lr=$lars_lr
    opt=(--optimizer lars --lars-eta 0.001 --schedule poly --label-smoothing 0.1)
  else
    lr=$sgd_lr
    opt=(--optimizer sgd --schedule cosine)
  fi
  echo "run $i/$total: batch $b $o seed $s (lr $lr per 256)"
  train_run "b$b-$o" "$b" "$s" --warmup-epochs "$warmup" --lr "$lr" "${opt[@]}"
done
all_runs_took

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
