#!/usr/bin/env bash
# templates.sh — the job templates as a user runs them, with the real sbatch on the local cluster.
#   templates.sh MNTRAIN train       train.sbatch as it is (1 node, 2 ranks of 2 CPUs) trains a tiny
#                                    synthetic run to completion; a copy without --cpus-per-task on
#                                    2 nodes warns about its one thread and completes too; without a
#                                    training set the job stops at once with exit 2 and says why
#   templates.sh MNTRAIN gpu         train-gpu.sbatch: its directives (one rank per GPU, --exclusive,
#                                    --mem=0, --signal/--requeue) and the job body it shares with
#                                    train.sbatch; `sbatch --test-only` accepts it as it is (or refuses
#                                    only the GPUs, which the local cluster has none of: no GRES), and
#                                    without the GPU request the GPU template trains on CPUs to
#                                    completion (--device cpu after the script)
#   templates.sh MNTRAIN sweep       scaling_sweep.sh --wait runs 1, 2 and 4 ranks into ranks-1/2/4
#                                    (summary.json with those ranks and nodes) and the report job
#                                    after them writes scaling.csv
# (shellcheck of the templates: tests/unit/lint_shell.sh.) Exit 77 (CTest: skipped) when the cluster
# is missing.
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
what=$2
here=$(cd "$(dirname "$0")" && pwd)
tmpl=$(cd "$here/../../job_templates" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"

slurm_or_skip
nodes=$(cluster_nodes)
w=$(mktemp -d)
cleanup() {
  local f
  for f in "$w"/*.id; do [ -s "$f" ] && scancel "$(cut -d';' -f1 "$f")" 2>/dev/null; done
  rm -rf "$w"
}
trap cleanup EXIT
"$m" convert synth "$w/data" --classes 10 --images 256 --size 16 --shards 2 >/dev/null || fail "convert synth"
tiny=(--data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --log-every 4)

# submit NAME SBATCH_ARGS... -- TEMPLATE ARGS...: sbatch --wait (the job's exit status), output in $w/NAME.out
submit() {
  local name=$1
  shift
  (cd "$w" && MNTRAIN=$m OUT=$w/$name timeout 300 sbatch --parsable --wait --time=10 --output="$w/$name.out" \
    "$@" >"$w/$name.id")
  local rc=$?
  echo "--- $name (job $(cut -d';' -f1 "$w/$name.id" 2>/dev/null), exit $rc):"
  cat "$w/$name.out" 2>/dev/null
  : >"$w/$name.id"
  return $rc
}
# summary_is RUN KEY VALUE...: summary.json of RUN has these values
summary_is() {
  local run=$1
  shift
  /usr/bin/python3 - "$w/$run/summary.json" "$@" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
kv = sys.argv[2:]
bad = [f"{k}={s.get(k)!r} (want {v})" for k, v in zip(kv[::2], kv[1::2]) if str(s.get(k)) != v]
print(f"{sys.argv[1]}: " + ("; ".join(bad) if bad else "ok"))
sys.exit(1 if bad else 0)
PY
}

case $what in
train)
  submit cpu "$tmpl/train.sbatch" "${tiny[@]}" --steps 12 || fail "train.sbatch did not succeed"
  grep -q "mntrain train: done: 12 steps" "$w/cpu.out" || fail "train.sbatch: no 'done: 12 steps'"
  grep -q "2 ranks of 2 CPUs (2 compute + 2 loader threads), cpu auto" "$w/cpu.out" ||
    fail "train.sbatch: not 2 ranks of 2 CPUs each (its #SBATCH lines), or not --precision auto"
  grep -Eq "M parameters, cpu (fp32|bf16) on [a-z0-9_]+" "$w/cpu.out" ||
    fail "train.sbatch: the start line does not name the precision auto chose and the CPU's ISA"
  ! grep -q "warning: no --cpus-per-task" "$w/cpu.out" || fail "train.sbatch warned although it has --cpus-per-task"
  summary_is cpu ranks 2 nodes 1 threads_per_rank 2 steps 12 || fail "train.sbatch: summary.json"
  [ -d "$w/cpu/ckpt" ] || fail "train.sbatch: no checkpoint directory OUT/ckpt"

  # a copy without --cpus-per-task: one CPU per rank, and a warning saying so
  grep -v '^#SBATCH --cpus-per-task' "$tmpl/train.sbatch" >"$w/nocpus.sbatch"
  submit one -N "$nodes" --ntasks-per-node=1 "$w/nocpus.sbatch" "${tiny[@]}" --steps 4 ||
    fail "train.sbatch without --cpus-per-task did not succeed"
  grep -q "warning: no --cpus-per-task: every rank gets 1 CPU" "$w/one.out" || fail "no warning about one thread"
  summary_is one ranks "$nodes" nodes "$nodes" threads_per_rank 1 || fail "without --cpus-per-task: summary.json"

  # no training set: exit 2 at once, saying what to set
  submit nodata "$tmpl/train.sbatch" --steps 4
  rc=$?
  [ $rc -eq 2 ] || fail "train.sbatch without a training set: exit $rc, want 2"
  grep -q "no training set: set DATA" "$w/nodata.out" || fail "train.sbatch without a training set: no message"
  echo "ok: train.sbatch trains to completion with the real sbatch; warns without --cpus-per-task; exit 2 without data"
  ;;
gpu)
  g=$tmpl/train-gpu.sbatch
  directive() { sed -n "s/^#SBATCH --$2=\{0,1\}//p" "$1" | head -n1; }
  for d in gpus-per-node ntasks-per-node cpus-per-task; do
    [[ $(directive "$g" $d) =~ ^[1-9][0-9]*$ ]] || fail "train-gpu.sbatch: no #SBATCH --$d=N"
  done
  [ "$(directive "$g" gpus-per-node)" = "$(directive "$g" ntasks-per-node)" ] ||
    fail "train-gpu.sbatch: --ntasks-per-node is not --gpus-per-node (one rank per GPU)"
  for f in "$g" "$tmpl/train.sbatch"; do
    grep -qx '#SBATCH --exclusive' "$f" || fail "$f: no #SBATCH --exclusive"
    for d in mem=0 signal=USR1@120 open-mode=append cpus-per-task; do
      grep -q "^#SBATCH --$d" "$f" || fail "$f: no #SBATCH --$d"
    done
    grep -qx '#SBATCH --requeue' "$f" || fail "$f: no #SBATCH --requeue"
  done
  for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_DEBUG; do
    grep -q "^#  *$v=" "$g" || fail "train-gpu.sbatch: $v is not documented"
  done
  body() { sed -n '/^# ---- the job: the same lines in train.sbatch and train-gpu.sbatch/,$p' "$1"; }
  [ -n "$(body "$g")" ] || fail "train-gpu.sbatch: no shared job body"
  diff <(body "$tmpl/train.sbatch") <(body "$g") || fail "the job bodies of train.sbatch and train-gpu.sbatch differ"
  # srun >= 22.05 takes --cpus-per-task from SRUN_CPUS_PER_TASK only (not visible on the local cluster: task/none)
  body "$g" | grep -q "^  export SRUN_CPUS_PER_TASK=\\\$cpus\$" || fail "the job body does not export SRUN_CPUS_PER_TASK"
  # as it is: accepted, or refused for the GPUs alone (the local cluster has no GRES)
  out=$(cd "$w" && sbatch --test-only "$g" 2>&1)
  rc=$?
  echo "sbatch --test-only train-gpu.sbatch: exit $rc: $out"
  if [ $rc -ne 0 ]; then
    grep -qi "generic resource\|gres" <<<"$out" || fail "sbatch --test-only refused train-gpu.sbatch for more than its GPUs"
  fi
  # without the GPU request, sized to the local cluster: accepted, and it trains on CPUs to completion
  fit=(-N "$nodes" --gpus-per-node=0 --ntasks-per-node=2 --cpus-per-task=2)
  out=$(cd "$w" && sbatch --test-only "${fit[@]}" "$g" 2>&1) ||
    fail "sbatch --test-only ${fit[*]} train-gpu.sbatch: $out"
  echo "sbatch --test-only ${fit[*]} train-gpu.sbatch: $out"
  submit gpu "${fit[@]}" "$g" "${tiny[@]}" --steps 8 --device cpu --precision fp32 ||
    fail "train-gpu.sbatch on CPUs did not succeed"
  grep -q "mntrain train: done: 8 steps" "$w/gpu.out" || fail "train-gpu.sbatch: no 'done: 8 steps'"
  summary_is gpu ranks $((2 * nodes)) nodes "$nodes" threads_per_rank 1 || fail "train-gpu.sbatch: summary.json"
  echo "ok: train-gpu.sbatch's directives pass sbatch --test-only (GPUs aside) and it trains with the real sbatch"
  ;;
sweep)
  # 1, 2, 4 ranks: 1 node x 1, 1 x 2, 2 x 2 (one node: 1 x 1, 1 x 2, 1 x 4)
  shape=()
  [ "$nodes" -eq 2 ] || shape=(NODES=1 RANKS_PER_NODE=4)
  (cd "$w" && MNTRAIN=$m timeout 360 "$tmpl/scaling_sweep.sh" "${shape[@]}" ARCH=resnet8 SIZE=16 STEPS=12 \
    BATCH_PER_RANK=8 OUT="$w/sweep" POLL=1 --wait) >"$w/sweep.log" 2>&1
  rc=$?
  cat "$w/sweep.log"
  for r in 1 2 4; do
    [ -f "$w/sweep/ranks-$r/summary.json" ] || fail "no ranks-$r/summary.json"
    summary_is "sweep/ranks-$r" ranks "$r" steps 12 || fail "ranks-$r: summary.json"
  done
  [ "$nodes" -eq 1 ] || summary_is sweep/ranks-4 nodes 2 || fail "ranks-4 is not on 2 nodes"
  # the runs one after the other, the report job after all of them
  ids=$(sed -n 's/^   ranks-[0-9]* *job \([0-9]*\):.*/\1/p' "$w/sweep.log" | paste -sd:)
  grep -q "== report: job [0-9]* (--dependency=afterany:$ids)" "$w/sweep.log" ||
    fail "no report job submitted with --dependency=afterany:$ids"
  # (config.json is written when a run starts, summary.json when it ends)
  [ "$w/sweep/ranks-2/config.json" -nt "$w/sweep/ranks-1/summary.json" ] || fail "ranks-2 started before ranks-1 ended"
  [ "$w/sweep/ranks-4/config.json" -nt "$w/sweep/ranks-2/summary.json" ] || fail "ranks-4 started before ranks-2 ended"
  report_log=$(echo "$w/sweep/logs"/report-*.out)
  [ "$report_log" -nt "$w/sweep/ranks-4/summary.json" ] || fail "the report job ran before the last run had finished"
  [ $rc -eq 0 ] || fail "scaling_sweep.sh --wait: exit $rc"
  [ -s "$w/sweep/scaling.csv" ] || fail "no scaling.csv"
  [ "$(tail -n +2 "$w/sweep/scaling.csv" | cut -d, -f1 | paste -sd' ')" = "1 2 4" ] ||
    fail "scaling.csv: not the runs of 1, 2 and 4 ranks"
  [ -s "$w/sweep/scaling.svg" ] || fail "no scaling.svg"
  cat "$w/sweep/scaling.csv"
  echo "ok: scaling_sweep.sh ran ranks-1, ranks-2, ranks-4 and the report job wrote scaling.csv"
  ;;
*)
  echo "usage: templates.sh MNTRAIN train|gpu|sweep" >&2
  exit 2
  ;;
esac
