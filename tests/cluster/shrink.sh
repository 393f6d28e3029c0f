#!/usr/bin/env bash
# shrink.sh — --on-rank-loss shrink on the local cluster: resnet8 on Fashion-MNIST, 4 ranks on 2
# nodes, 400 steps of global batch 64, ranks killed from outside (SIGKILL to the process Slurm
# started, found by its PMIX_RANK) while the job trains:
#   rank    rank 3 killed at step ~100: the run finishes on 3 ranks, summary.json says so
#           (rank_losses, final_ranks), the recovery's line comes within 10 s of the kill, and the
#           validation top-1 is within 1.5 points of the uninterrupted run's (run first, same seed);
#   node    both ranks of node2 killed at once: it finishes on node1's two;
#   rank0   rank 0 killed: the new rank 0 writes metrics.jsonl and summary.json to the end and
#           releases the run's locks;
#   stop    rank 3 stopped (SIGSTOP) at step ~100 with MNT_COMM_TIMEOUT=5: excluded after the
#           deadline; continued 15 s later, it exits 1 saying it was left out, having written
#           nothing (no file of its own in the run directory);
#   twice   rank 3 killed at step ~100, then rank 1 at step ~200: it finishes on 2 ranks;
#   ckpt    a checkpoint every step (one is always being written) and rank 3 killed: every
#           checkpoint committed verifies (mntrain inspect), the newest resumes on all 4 ranks;
#   eval    rank 3 killed during the evaluation at a quarter epoch: the run goes on and finishes;
#   split   node2's link cut for 20 s at step ~100 (ip link set mntv2 down: a network split, 2 + 2
#           ranks, MNT_COMM_TIMEOUT=10): node1's group holds rank 0 and goes on (exactly half, the
#           tie-breaker); node2's has no quorum and exits without writing: metrics.jsonl has no step
#           twice and no torn line, every checkpoint kept verifies, none set aside, and they are of
#           one lineage (steps and membership epochs in order, those after the split by 2 ranks);
#   uneven  the same with 3 ranks, rank 0 alone on node1 (SLURM_HOSTFILE) and node1's link cut:
#           node2's two ranks go on (a majority), the new rank 0 takes over the run's locks and
#           outputs; rank 0 exits without writing;
#   resume  rank 3 killed at step ~100, the job stopped at step 250 (--stop-after) and resumed on 4
#           ranks: summary.json and mntrain report still name the loss;
#   requeue job_templates/train.sbatch (ON_RANK_LOSS=shrink) with --min-ranks 4: rank 3 killed,
#           the survivors commit a checkpoint and stop (exit 3), the template requeues the job, and
#           the requeued job resumes at full size (4 ranks) from the checkpoint the 3 wrote.
# SHRINK_NODES, SHRINK_RANKS and SHRINK_STEPS (2, 4, 400) change the layout and the run's length for
# the node case: the scale stage runs it at 32 ranks on 8 nodes (tests/scale/scale.sh shrink).
#                                                   shrink.sh path/to/mntrain CASE
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
case=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh" # fashion_mnist_sets, slurm_or_skip, await_requeued, fail (tests/lib.sh)
NODES=${SHRINK_NODES:-2} RANKS=${SHRINK_RANKS:-4} STEPS=${SHRINK_STEPS:-400}
PER=$((RANKS / NODES))
slurm_or_skip "$NODES"
w=$(mktemp -d)
job=""
cleanup() {
  [ -n "$job" ] && scancel "$job" 2>/dev/null
  pkill -CONT -f "$m train .*$w/" 2>/dev/null
  rm -rf "$w"
}
trap cleanup EXIT
fashion_mnist_sets "$m" "$w"
args=(--data "$w/train" --val "$w/test" --arch resnet8 --size 28 --batch-per-rank 16 --lr 0.4 --warmup-epochs 0.05
  --schedule cosine --pad-crop 2 --val-crop 1 --threads 1 --log-every 10 --timestamps --seed 1)
# run NAME [train options]: 4 ranks on 2 nodes into $w/NAME, output in $w/NAME.log; its srun status
run() {
  local name=$1
  shift
  "$here/srun_test.sh" 600 -N"$NODES" -n"$RANKS" --ntasks-per-node="$PER" --kill-on-bad-exit=0 --no-kill -- "$m" train "${args[@]}" \
    --out "$w/$name" "$@" >"$w/$name.log" 2>&1
}
# pids_of NAME RANKS...: the processes of run NAME with those ranks
pids_of() {
  local name=$1 p r
  shift
  for p in $(pgrep -f "$m train .*--out $w/$name( |$)"); do
    for r in "$@"; do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMIX_RANK=$r" && echo "$p"
    done
  done
}
# signal_at NAME STEP SIG RANKS...: once run NAME's log shows step STEP, SIG to those ranks; the
# time (date +%s.%N) into $w/NAME.t
signal_at() {
  local name=$1 step=$2 sig=$3 p
  shift 3
  for _ in $(seq 1 3000); do
    grep -q "step $step/" "$w/$name.log" 2>/dev/null && break
    sleep 0.02
  done
  p=$(pids_of "$name" "$@")
  [ -n "$p" ] || { echo "shrink: no process of ranks $* in run $name" >&2; return 1; }
  # shellcheck disable=SC2086 # one word per pid
  kill -"$sig" $p && date +%s.%N >"$w/$name.t"
  echo "shrink: SIG$sig to rank(s) $* of run $name (pid ${p//$'\n'/ }) after step $step"
}
# summary NAME KEY: a value of run NAME's summary.json (python's repr)
summary() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$w/$1/summary.json" "$2"; }
on_fail() { for f in "$w"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done; }
# finished NAME RANKS: run NAME finished on RANKS ranks (summary.json), its losses said
finished() {
  [ -f "$w/$1/summary.json" ] || fail "run $1 wrote no summary.json"
  [ "$(summary "$1" final_ranks)" = "$2" ] || fail "run $1 finished on $(summary "$1" final_ranks) ranks, not $2"
  [ "$(summary "$1" steps_done)" = "$STEPS" ] || fail "run $1 did $(summary "$1" steps_done) steps, not $STEPS"
  grep -q "mntrain train: lost rank" "$w/$1.log" || fail "run $1: no line names the lost rank"
}
# the recovery of run NAME: seconds from the signal to the line saying the survivors go on
recovery_s() {
  local t1 hms
  hms=$(sed -nE 's/^[0-9-]+T([0-9:.]+)Z mntrain train: lost rank.*going on.*/\1/p' "$w/$1.log" | head -n1)
  [ -n "$hms" ] || { echo 999; return; }
  t1=$(date -u -d "$(date -u +%F) $hms" +%s.%N)
  awk -v a="$(cat "$w/$1.t")" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}

case $case in
rank)
  run base --steps 400 --ckpt-every-steps 200 --sample-log
  rc=$?
  [ $rc -eq 77 ] && exit 77
  [ $rc -eq 0 ] || fail "the uninterrupted run exited $rc"
  signal_at kill 100 KILL 3 &
  run kill --steps 400 --ckpt-every-steps 200 --on-rank-loss shrink --trace "$w/trace" --trace-steps 95:140 --sample-log
  wait
  finished kill 3
  "$m" report "$w/kill" --out "$w/report" >"$w/report.log" 2>&1 || fail "mntrain report failed on the run"
  grep -q "lost by $w/kill: rank 3 on node2 in step" "$w/report.log" || fail "mntrain report does not show the loss"
  grep -q '"recovery", ' "$w/trace/trace-rank-00000.json" || fail "rank 0's --trace has no recovery span"
  # the survivors' traces merge (rank 3 has none), the recovery among their spans
  "$m" report --trace "$w/trace" --out "$w/trep" >"$w/trep.log" 2>&1 || { cat "$w/trep.log"; fail "report --trace refuses the trace of a run that shrank"; }
  grep -q "shrank from 4 to 3" "$w/trep.log" || fail "report --trace does not say the job shrank"
  grep -q '"recovery"' "$w/trep/trace.json" || fail "the merged trace.json has no recovery span"
  # a checkpoint written by the 3: the split as they had it (64 over 3: 21 or 22 per rank)
  "$m" inspect "$w/kill/ckpt" >"$w/insp.log" 2>&1 || fail "inspect of the checkpoints failed"
  grep -q "21 or 22 per rank, 16 per rank at the start" "$w/insp.log" || { cat "$w/insp.log"; fail "inspect does not show the 3 ranks' split"; }
  [ "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rank_losses"][0]["rank"])' \
    "$w/kill/summary.json")" = 3 ] || fail "summary.json's rank_losses does not name rank 3"
  grep -q '"rank_lost":"rank 3 on' "$w/kill/metrics.jsonl" || fail "metrics.jsonl has no line for the loss"
  # the survivors trained on the same global batches as the uninterrupted run, split among 3
  /usr/bin/python3 - "$w" <<'PY' || fail "the survivors' samples are not the uninterrupted run's global batches"
import glob, json, sys
w = sys.argv[1]
def steps(d):
    out = {}
    for f in glob.glob(f"{w}/{d}/samples-rank-*.txt"):
        for line in open(f):
            v = line.split()
            if len(v) > 1: out.setdefault(int(v[0]), []).extend(int(x) for x in v[1:])
    return out
base, kill = steps("base"), steps("kill")
lost = json.load(open(f"{w}/kill/summary.json"))["rank_losses"][0]["step"]
after = [s for s in range(lost + 2, 401)]
bad = [s for s in after if sorted(kill.get(s, [])) != sorted(base[s])]
print(f"shrink: steps {after[0]}..400 after the loss: {len(after) - len(bad)} of {len(after)} global batches the same samples")
sys.exit(1 if bad or not after else 0)
PY
  rec=$(recovery_s kill)
  a=$(summary base val_top1) b=$(summary kill val_top1)
  echo "shrink: rank 3 killed: going on $rec s after the kill; validation top-1 $b against $a uninterrupted"
  awk -v r="$rec" 'BEGIN { exit !(r <= 10) }' || fail "the survivors went on $rec s after the kill (more than 10 s)"
  awk -v a="$a" -v b="$b" 'BEGIN { d = (a - b) * 100; if (d < 0) d = -d; exit !(d <= 1.5) }' ||
    fail "top-1 $b is more than 1.5 points from the uninterrupted run's $a"
  ;;
node)
  # the last node's ranks (Slurm's block distribution: ranks RANKS-PER .. RANKS-1)
  mapfile -t victims < <(seq $((RANKS - PER)) $((RANKS - 1)))
  signal_at node $((STEPS / 4)) KILL "${victims[@]}" &
  run node --steps "$STEPS" --on-rank-loss shrink
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished node $((RANKS - PER))
  line=$(grep "mntrain train: lost rank" "$w/node.log" | head -n1)
  [ "$(grep -o "rank [0-9]* on node[0-9]*" <<<"$line" | sort -u | wc -l)" = "$PER" ] ||
    fail "the loss of the last node's $PER ranks is not one line naming them: $line"
  echo "shrink: the last node's $PER ranks killed: going on $(recovery_s node) s after the kill, on $((RANKS - PER)) ranks"
  ;;
rank0)
  # rank 0 writes the run's outputs and holds its locks: the new rank 0 takes them over
  signal_at rank0 100 KILL 0 &
  run rank0 --steps 400 --on-rank-loss shrink --ckpt-every-steps 200
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished rank0 3
  grep -q '"step":400,"checkpoint_step":400' "$w/rank0/metrics.jsonl" || fail "metrics.jsonl has no line of the end"
  [ -e "$w/rank0/mntrain.lock" ] && fail "the run's lock is left behind after rank 0 was lost"
  [ -e "$w/rank0/ckpt/mntrain.lock" ] && fail "the checkpoints' lock is left behind after rank 0 was lost"
  echo "shrink: rank 0 killed: the new rank 0 wrote the outputs to the end and released the locks"
  ;;
stop)
  export MNT_COMM_TIMEOUT=5
  { signal_at stop 100 STOP 3 && sleep 15 && pkill -CONT -f "$m train .*--out $w/stop( |$)"; } &
  run stop --steps 400 --on-rank-loss shrink
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished stop 3
  grep -q "rank 3 on node2: error: .*left out" "$w/stop.log" || fail "the continued rank 3 did not say it was left out"
  grep -q "node2: task 3: Exited with exit code 1" "$w/stop.log" || fail "the continued rank 3 did not exit 1"
  for f in "$w"/stop/*00003*; do
    [ -e "$f" ] && fail "rank 3 wrote $f after it was left out"
  done
  echo "shrink: rank 3 stopped: excluded after MNT_COMM_TIMEOUT (going on $(recovery_s stop) s after SIGSTOP), left out when continued"
  ;;
twice)
  { signal_at twice 100 KILL 3 && signal_at twice 200 KILL 1; } &
  run twice --steps 400 --on-rank-loss shrink
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished twice 2
  [ "$(grep -c "mntrain train: lost rank" "$w/twice.log")" = 2 ] || fail "not two losses said"
  echo "shrink: two losses in a row: finished on 2 ranks"
  ;;
ckpt)
  signal_at ckpt 100 KILL 3 &
  run ckpt --steps 400 --on-rank-loss shrink --ckpt-every-steps 1 --keep 400
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished ckpt 3
  n=0
  for d in "$w"/ckpt/ckpt/step-*; do
    "$m" inspect "$d" >"$w/inspect.log" 2>&1 || { cat "$w/inspect.log"; fail "checkpoint $d does not verify"; }
    n=$((n + 1))
  done
  [ $n -gt 300 ] || fail "only $n checkpoints committed"
  # the newest, written by 3 ranks, resumes on all 4: the run is complete
  run ckpt --steps 400 --on-rank-loss shrink --ckpt-every-steps 1 --keep 400 || fail "the resume on 4 ranks failed"
  grep -q "resuming from .*step-00000400" "$w/ckpt.log" || fail "the resume did not start from step 400's checkpoint"
  echo "shrink: a loss while checkpoints were written: $n checkpoints, every one verified; the last resumes on 4 ranks"
  ;;
eval)
  # the evaluation at a quarter epoch follows step 235's line (--log-every 5) and takes over a second
  { signal_at eval 235 CONT 3 >/dev/null && sleep 0.3 && signal_at eval 235 KILL 3; } &
  run eval --steps 400 --on-rank-loss shrink --eval-every 0.25 --log-every 5
  rc=$?
  wait
  [ $rc -eq 77 ] && exit 77
  finished eval 3
  step=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rank_losses"][0]["step"])' \
    "$w/eval/summary.json")
  sed -n '/step 235\//,/lost rank/p' "$w/eval.log" | grep -q "validation" &&
    fail "the evaluation after step 235 ended before the loss: the kill came too late to test a loss in it"
  [ "$step" = 235 ] || fail "the loss was in step $step, not during the evaluation after step 235"
  # the evaluation the loss cut short is run again: one validation line after step 235 and one at the end
  vals=$(/usr/bin/python3 -c 'import json,sys; print(sorted(j["step"] for j in map(json.loads, open(sys.argv[1])) if "val_top1" in j))' \
    "$w/eval/metrics.jsonl")
  [ "$vals" = "[235, 400]" ] || fail "validation lines at steps $vals, not [235, 400]: the evaluation cut short was not run again"
  grep -q "the evaluation after step 235 was cut short by the loss: run again" "$w/eval.log" || fail "the rerun is not said"
  echo "shrink: rank 3 killed during an evaluation: it was run again, and the survivors finished"
  ;;
requeue)
  tmpl=$here/../../job_templates/train.sbatch
  job=$(cd "$w" && MNTRAIN=$m OUT=$w/rq CKPT_DIR=$w/rq-ckpt sbatch --parsable -N2 --ntasks-per-node=2 --cpus-per-task=1 \
    --time=10 --output="$w/rq.log" "$tmpl" "${args[@]}" --steps 400 --min-ranks 4 --precision fp32) ||
    fail "sbatch failed"
  echo "submitted job $job"
  signal_at rq 100 KILL 3 || fail "could not kill rank 3"
  await_requeued "$job"
  job=""
  grep -q "fewer than --min-ranks 4: stopping after the checkpoint" "$w/rq.log" || fail "the survivors did not stop below --min-ranks"
  grep -q "preempted with a checkpoint .*requeueing" "$w/rq.log" || fail "the template did not requeue"
  grep -q "resuming from" "$w/rq.log" || fail "the requeued job did not resume"
  grep -q "4 ranks on 2 nodes.*resumed" "$w/rq.log" || fail "the requeued job did not run on 4 ranks"
  grep -q "mntrain train: done: 400 steps" "$w/rq.log" || fail "the requeued job did not complete"
  echo "shrink: below --min-ranks: checkpoint, exit 3, requeued, resumed on 4 ranks and done"
  ;;
split | uneven)
  # a network split: one node's link on the cluster's bridge down for 20 s (the nodes are network
  # namespaces, job_templates/tools/local-cluster.sh), while the filesystem stays shared, as a
  # parallel filesystem on another network does
  if [ "$case" = split ]; then cut=mntv2 srun_layout=(-N2 -n4 --ntasks-per-node=2) keep=2 lose="2 3"
  else
    cut=mntv1 srun_layout=(-N2 -n3 --distribution=arbitrary) keep=2 lose=0
    printf 'node1\nnode2\nnode2\n' >"$w/hosts"
    export SLURM_HOSTFILE=$w/hosts # rank 0 alone on node1, ranks 1 and 2 on node2
  fi
  ip link show "$cut" >/dev/null 2>&1 || { echo "SKIP: no link $cut (the cluster runs without network namespaces)"; exit 77; }
  [ "$(id -u)" = 0 ] || { echo "SKIP: cutting a link needs root"; exit 77; }
  export MNT_COMM_TIMEOUT=10
  { for _ in $(seq 1 3000); do grep -q "step 100/" "$w/$case.log" 2>/dev/null && break; sleep 0.05; done
    ip link set "$cut" down && echo "shrink: $cut down after step 100" && sleep 20; ip link set "$cut" up
    echo "shrink: $cut up again"; } &
  cutter=$!
  "$here/srun_test.sh" 600 "${srun_layout[@]}" --kill-on-bad-exit=0 --no-kill -- "$m" train "${args[@]}" \
    --out "$w/$case" --steps 400 --on-rank-loss shrink --ckpt-every-steps 20 --keep 100 --eval-every 0.25 \
    >"$w/$case.log" 2>&1
  rc=$?
  wait "$cutter"
  ip link set "$cut" up 2>/dev/null
  [ $rc -eq 77 ] && exit 77
  finished "$case" "$keep"
  for r in $lose; do
    grep -q "rank $r on node[0-9]*: error: .*shrink: this rank's group has no quorum" "$w/$case.log" ||
      fail "rank $r (the group cut off) did not say it had no quorum"
  done
  n=$(grep -c "mntrain train: lost rank" "$w/$case.log")
  [ "$n" = 1 ] || fail "$n lines of a loss, not 1 (both groups went on?)"
  grep -q "mntrain train: lost rank.*; quorum: " "$w/$case.log" || fail "the loss's line does not say which quorum rule let it go on"
  [ -e "$w/$case/mntrain.lock" ] && fail "the run's lock is left behind"
  /usr/bin/python3 - "$w/$case" "$keep" <<'PY' || fail "metrics.jsonl or the checkpoints are not of one group"
import glob, json, os, sys
out, keep = sys.argv[1], int(sys.argv[2])
seen, bad = {}, []
for i, line in enumerate(open(f"{out}/metrics.jsonl")):
    try:
        j = json.loads(line)
    except ValueError:
        bad.append(f"line {i + 1} is torn: {line[:80]!r}")
        continue
    kind = ("loss" if "loss" in j else "val" if "val_top1" in j else "ckpt" if "checkpoint" in j else
            "ckpt-start" if "ckpt_stall_ms" in j else "lost" if "rank_lost" in j else "other")
    key = (j.get("checkpoint_step") if kind == "ckpt" else j.get("step"), kind)  # a commit: its checkpoint's step
    if kind in ("loss", "val", "ckpt", "lost") and key in seen:
        bad.append(f"step {key[0]} has two {kind} lines (lines {seen[key]} and {i + 1})")
    seen[key] = i + 1
lost = [k for k in seen if k[1] == "lost"]
if len(lost) != 1:
    bad.append(f"{len(lost)} loss lines")
dirs = sorted(glob.glob(f"{out}/ckpt/step-*"))
aside = [d for d in dirs if "superseded" in d]
if aside:
    bad.append(f"set aside: {aside}")
prev = (-1, -1)
for d in dirs:
    m = json.load(open(f"{d}/MANIFEST.json"))
    e, step, world = m.get("membership_epoch", 0), m["step"], m["world_size"]
    if (step, e) <= prev or e < prev[1]:
        bad.append(f"{d}: step {step} epoch {e} after step {prev[0]} epoch {prev[1]}: not one lineage")
    if e == 1 and world != keep:
        bad.append(f"{d}: membership epoch 1 but written by {world} ranks, not {keep}")
    prev = (step, e)
if not any(json.load(open(f"{d}/MANIFEST.json")).get("membership_epoch", 0) == 1 for d in dirs):
    bad.append("no checkpoint of the group that went on")
print(f"split: {len(seen)} metrics lines, {len(dirs)} checkpoints")
for b in bad:
    print("split:", b)
sys.exit(1 if bad else 0)
PY
  n=0
  for d in "$w/$case"/ckpt/step-*; do
    "$m" inspect "$d" >"$w/inspect.log" 2>&1 || { cat "$w/inspect.log"; fail "checkpoint $d does not verify"; }
    n=$((n + 1))
  done
  echo "shrink: $case: one group went on ($keep ranks), the other exited without writing; $n checkpoints verified"
  ;;
resume)
  signal_at resume 100 KILL 3 &
  run resume --steps 400 --on-rank-loss shrink --ckpt-every-steps 50 --stop-after 250
  wait
  grep -q "mntrain train: lost rank 3" "$w/resume.log" || fail "the loss was not recovered from"
  grep -q "mntrain train: stopped after step" "$w/resume.log" || fail "the job did not stop at --stop-after"
  run resume --steps 400 --on-rank-loss shrink --ckpt-every-steps 50 || fail "the resumed job failed"
  [ "$(/usr/bin/python3 -c 'import json,sys; print([l["rank"] for l in json.load(open(sys.argv[1]))["rank_losses"]])' \
    "$w/resume/summary.json")" = "[3]" ] || fail "summary.json after the resume does not name the loss of rank 3"
  "$m" report "$w/resume" --out "$w/report" >"$w/report.log" 2>&1 || fail "mntrain report failed on the run"
  grep -q "lost by $w/resume: rank 3 on node2 in step" "$w/report.log" || fail "mntrain report does not show the loss"
  echo "shrink: a loss, a stop and a resume: summary.json and the report name the loss"
  ;;
*)
  echo "usage: shrink.sh MNTRAIN rank|node|rank0|stop|twice|ckpt|eval|split|uneven|resume|requeue" >&2
  exit 2
  ;;
esac
echo "ok: shrink $case"
