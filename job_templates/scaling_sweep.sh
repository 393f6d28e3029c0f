#!/usr/bin/env bash
# scaling_sweep.sh — a weak-scaling sweep with the job templates, run on a login node (it submits
# jobs; it is not a job script itself). The same training (STEPS steps, the same batch per rank,
# the same data) on 1, 2, 4, ... ranks of one node up to a full node, then on every node count of
# NODES with full nodes, each one an sbatch job of train.sbatch (DEVICE=cpu) or train-gpu.sbatch
# (DEVICE=cuda) into its own run directory OUT/ranks-N; the runs form a dependency chain (one after
# the other, so that no run shares the machine with another and every time is its own); a last job,
# dependent on all of them (afterany: it also reports when a run failed), runs
# `mntrain report OUT/ranks-N ... --out OUT`: OUT/scaling.csv and OUT/scaling.svg.
#   scaling_sweep.sh [NAME=VALUE ...] [--wait] [--help] [mntrain train options ...]
# e.g. scaling_sweep.sh NODES="1 2 4 8 16" DEVICE=cuda PARTITION=gpu ACCOUNT=proj DATA=/lustre/in1k-train --wait
#      scaling_sweep.sh ARCH=resnet8 SIZE=32 STEPS=40 --wait        (the local 2-node cluster: 1, 2, 4 ranks)
# NAME=VALUE sets one of the variables below for this sweep (they are not read from the environment,
# where names like ARCH or SIZE often mean something else); other arguments go to every run's
# `mntrain train` (e.g. --topology hier). --wait follows the jobs until the report job has
# finished, then prints the report; without it the script returns once everything is submitted.
# MNTRAIN names the binary (default: mntrain on PATH, e.g. after `module load mntrain`, else the one
# installed with this script).

# ---- what you change: here, or NAME=VALUE on the command line ------------------------------------
PARTITION=""           # sbatch --partition (empty: the cluster's default)
ACCOUNT=""             # sbatch --account (empty: your default)
TIME=00:30:00          # time limit of each run
DEVICE=cpu             # cpu: train.sbatch, one rank per socket; cuda: train-gpu.sbatch, one rank per GPU
NODES="1 2"            # node counts of the full-node runs
RANKS_PER_NODE=""      # ranks on a full node (empty: 2 on CPUs, one per socket; 4 on GPUs, one per GPU)
WITHIN_NODE=yes        # also 1, 2, 4, ... ranks on one node, below RANKS_PER_NODE (no: full nodes only)
CPUS_PER_TASK=""       # sbatch --cpus-per-task (empty: the template's)
STEPS=50               # steps of every run (the first 5 are warm-up, not timed)
DATA=""                # training set (mntrain convert); empty: a synthetic one, made in OUT/data
ARCH=resnet50          # resnet8|20|18|34|50|101
SIZE=224               # image side in pixels
BATCH_PER_RANK=""      # images per rank per step (empty: 32 on CPUs, 256 on GPUs)
OUT=mntrain-sweep-$(date +%Y%m%d-%H%M%S)  # the sweep's directory: ranks-N/, logs/, scaling.csv, scaling.svg
CHAIN=yes              # yes: one run after the other; no: all at once (when the nodes are exclusive)
FORCE=no               # yes: replace an earlier sweep's runs in OUT
POLL=10                # --wait: seconds between looks at the queue
TEMPLATE=""            # the job script (empty: train.sbatch or train-gpu.sbatch beside this script)
# -----------------------------------------------------------------------------------------------
set -uo pipefail
vars="PARTITION ACCOUNT TIME DEVICE NODES RANKS_PER_NODE WITHIN_NODE CPUS_PER_TASK STEPS DATA ARCH SIZE BATCH_PER_RANK OUT CHAIN FORCE POLL TEMPLATE"
die() { echo "scaling_sweep.sh: $*" >&2; exit 2; }
wait_for=no
extra=()
for a in "$@"; do
  case $a in
    -h | --help) sed -n '2,/^# ----/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --wait) wait_for=yes ;;
    [A-Z]*=*)
      name=${a%%=*}
      [[ " $vars " == *" $name "* ]] || die "unknown variable $name (one of: $vars)"
      printf -v "$name" '%s' "${a#*=}" ;;
    *) extra+=("$a") ;;
  esac
done
# the binary: $MNTRAIN, else mntrain on PATH (module load mntrain), else the one installed with this file
MNTRAIN=${MNTRAIN:-$(command -v mntrain || echo '@MNTRAIN_INSTALLED_BIN@')}
command -v "$MNTRAIN" >/dev/null || { echo "scaling_sweep.sh: mntrain not found ('$MNTRAIN'): module load mntrain, or set MNTRAIN=/path/to/mntrain" >&2; exit 2; }
MNTRAIN=$(command -v "$MNTRAIN")
case $MNTRAIN in /*) ;; *) MNTRAIN=$PWD/$MNTRAIN ;; esac # the jobs and the report get a full path
command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm login node"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case $DEVICE in
  cpu) TEMPLATE=${TEMPLATE:-$here/train.sbatch}; RANKS_PER_NODE=${RANKS_PER_NODE:-2}; BATCH_PER_RANK=${BATCH_PER_RANK:-32} ;;
  cuda) TEMPLATE=${TEMPLATE:-$here/train-gpu.sbatch}; RANKS_PER_NODE=${RANKS_PER_NODE:-4}; BATCH_PER_RANK=${BATCH_PER_RANK:-256} ;;
  *) die "DEVICE=$DEVICE: cpu or cuda" ;;
esac
[ -f "$TEMPLATE" ] || die "TEMPLATE=$TEMPLATE: no such job script"
isnum() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
for v in RANKS_PER_NODE STEPS SIZE BATCH_PER_RANK POLL; do isnum "${!v}" || die "$v=${!v}: a positive integer"; done
[ -z "$CPUS_PER_TASK" ] || isnum "$CPUS_PER_TASK" || die "CPUS_PER_TASK=$CPUS_PER_TASK: a positive integer"
[ -n "$NODES" ] || die "NODES is empty"
for n in $NODES; do isnum "$n" || die "NODES=\"$NODES\": positive integers"; done

# the runs, as "nodes ranks-per-node": 1, 2, 4, ... ranks on one node below a full node, then full nodes
runs=()
if [ "$WITHIN_NODE" = yes ]; then
  for ((r = 1; r < RANKS_PER_NODE; r *= 2)); do runs+=("1 $r"); done
fi
for n in $NODES; do runs+=("$n $RANKS_PER_NODE"); done
seen=" "
max_ranks=0
for run in "${runs[@]}"; do
  read -r n r <<<"$run"
  [[ $seen != *" $((n * r)) "* ]] || die "NODES=\"$NODES\" has ranks=$((n * r)) twice"
  seen+="$((n * r)) "
  ((n * r > max_ranks)) && max_ranks=$((n * r))
done

mkdir -p "$OUT" || die "cannot create OUT=$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -e "$OUT/report.sbatch" ] || compgen -G "$OUT/ranks-*" >/dev/null; then
  [ "$FORCE" = yes ] || die "$OUT holds an earlier sweep (FORCE=yes replaces it, or choose another OUT)"
  rm -rf "$OUT"/ranks-* "$OUT/logs" "$OUT/report.sbatch" "$OUT/scaling.csv" "$OUT/scaling.svg"
fi
mkdir -p "$OUT/logs"

common=(--time="$TIME")
[ -n "$PARTITION" ] && common+=(--partition="$PARTITION")
[ -n "$ACCOUNT" ] && common+=(--account="$ACCOUNT")
ids=()
names=()
prev=""
cancel_and_die() { # a sweep is all or nothing: the runs submitted so far are cancelled
  [ ${#ids[@]} -eq 0 ] || { scancel "${ids[@]}"; echo "scaling_sweep.sh: cancelled jobs ${ids[*]}" >&2; }
  die "$@"
}
run_opts() { # run_opts NODES RANKS_PER_NODE: the sbatch options of that run in opts
  opts=("${common[@]}" --job-name="mntrain-sweep-$(($1 * $2))" --nodes="$1" --ntasks-per-node="$2"
    --output="$OUT/logs/ranks-$(($1 * $2))-%j.out")
  [ -n "$CPUS_PER_TASK" ] && opts+=(--cpus-per-task="$CPUS_PER_TASK")
  [ "$DEVICE" = cuda ] && opts+=(--gpus-per-node="$2")
}
# every run checked by Slurm first (a run that could never start would hold up the chain for good)
for run in "${runs[@]}"; do
  read -r n r <<<"$run"
  run_opts "$n" "$r"
  msg=$(sbatch --test-only "${opts[@]}" "$TEMPLATE" 2>&1) ||
    die "the $((n * r))-rank run ($n node(s) x $r) cannot run here: $(grep -v '^sbatch: Job' <<<"$msg" | tr '\n' ' ')"
done
echo "== mntrain scaling sweep in $OUT: $ARCH at $SIZE px, $STEPS steps of $BATCH_PER_RANK images per rank, $DEVICE"
if [ -z "$DATA" ]; then
  DATA=$OUT/data
  images=$((2 * max_ranks * BATCH_PER_RANK > 512 ? 2 * max_ranks * BATCH_PER_RANK : 512))
  echo "== synthetic data: $images images of 100 classes at $SIZE px -> $DATA"
  force=()
  [ "$FORCE" = yes ] && force=(--force)
  "$MNTRAIN" convert synth "$DATA" --classes 100 --images "$images" --size "$SIZE" --shards 8 "${force[@]}" >/dev/null ||
    die "mntrain convert synth failed (an earlier sweep's data with other settings in $DATA? FORCE=yes replaces it)"
fi
DATA=$(cd "$DATA" 2>/dev/null && pwd) || die "DATA: no such directory"

for run in "${runs[@]}"; do
  read -r n r <<<"$run"
  ranks=$((n * r))
  dir=$OUT/ranks-$ranks
  run_opts "$n" "$r"
  [ "$CHAIN" = yes ] && [ -n "$prev" ] && opts+=(--dependency="afterany:$prev")
  # --out/--ckpt-dir as options too: they hold under sbatch --export=NONE
  job=$(OUT=$dir CKPT_DIR=$dir/ckpt MNTRAIN=$MNTRAIN sbatch --parsable "${opts[@]}" "$TEMPLATE" --data "$DATA" \
    --arch "$ARCH" --size "$SIZE" --batch-per-rank "$BATCH_PER_RANK" --steps "$STEPS" --log-every 10 \
    --out "$dir" --ckpt-dir "$dir/ckpt" "${extra[@]}") || cancel_and_die "sbatch of the $ranks-rank run failed"
  job=${job%%;*}
  printf '   ranks-%-4s job %s: %s node(s) x %s rank(s), log %s\n' "$ranks" "$job" "$n" "$r" "$OUT/logs/ranks-$ranks-$job.out"
  ids+=("$job")
  names+=("ranks-$ranks")
  prev=$job
done

# the report job: a script of its own in OUT (sbatch OUT/report.sbatch redoes the report)
{
  echo '#!/bin/bash'
  echo "# the report of the scaling sweep in $OUT (written by scaling_sweep.sh)"
  echo '#SBATCH --job-name=mntrain-sweep-report'
  echo '#SBATCH --nodes=1'
  echo '#SBATCH --ntasks=1'
  echo '#SBATCH --time=00:10:00'
  echo 'set -uo pipefail'
  printf 'MNTRAIN=%q\n' "$MNTRAIN"
  printf 'OUT=%q\n' "$OUT"
  printf 'names=(%s)\n' "${names[*]}"
  cat <<'BODY'
runs=()
for r in "${names[@]}"; do
  if [ -f "$OUT/$r/summary.json" ]; then
    runs+=("$OUT/$r")
  else
    echo "warning: $r did not finish (no $OUT/$r/summary.json): see $OUT/logs/$r-*.out" >&2
  fi
done
[ ${#runs[@]} -gt 0 ] || { echo "no run of the sweep finished" >&2; exit 1; }
"$MNTRAIN" report "${runs[@]}" --out "$OUT"
BODY
} >"$OUT/report.sbatch"
dep=$(IFS=:; echo "${ids[*]}")
report=$(sbatch --parsable "${common[@]}" --dependency="afterany:$dep" --output="$OUT/logs/report-%j.out" \
  "$OUT/report.sbatch") ||
  cancel_and_die "sbatch of the report job failed"
report=${report%%;*}
echo "== report: job $report (--dependency=afterany:$dep): $OUT/scaling.csv, $OUT/scaling.svg (log $OUT/logs/report-$report.out)"
if [ "$wait_for" != yes ]; then
  echo "   submitted; follow them with: squeue -j $(IFS=,; echo "${ids[*]},$report")"
  exit 0
fi

# --wait: a line whenever a job changes state, until the report job has left the queue
trap 'echo; echo "stopped waiting; the jobs go on: squeue -j $(IFS=,; echo "${ids[*]},$report")"; exit 130' INT
all=("${ids[@]}" "$report")
labels=("${names[@]}" report)
declare -A last=()
while :; do
  queue=$(squeue -h -j "$(IFS=,; echo "${all[*]}")" -o '%i %T' 2>/dev/null)
  for i in "${!all[@]}"; do
    st=$(awk -v id="${all[i]}" '$1 == id { print $2 }' <<<"$queue")
    st=${st:-finished}
    if [ "${last[${all[i]}]:-}" != "$st" ]; then
      printf '   %s %-9s job %s: %s\n' "$(date +%T)" "${labels[i]}" "${all[i]}" "$st"
      last[${all[i]}]=$st
    fi
  done
  [ "${last[$report]}" = finished ] && break
  sleep "$POLL"
done
trap - INT
rc=0
for r in "${names[@]}"; do
  [ -f "$OUT/$r/summary.json" ] || { echo "== $r did not finish: see $OUT/logs/$r-*.out" >&2; rc=1; }
done
echo "== report ($OUT/logs/report-$report.out):"
cat "$OUT/logs/report-$report.out" 2>/dev/null
if [ -f "$OUT/scaling.csv" ]; then
  echo "== $OUT/scaling.csv, $OUT/scaling.svg"
else
  echo "== no $OUT/scaling.csv: the report job failed" >&2
  rc=1
fi
exit $rc
