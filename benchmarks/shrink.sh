#!/usr/bin/env bash
# shrink.sh — what a lost rank costs, on the local cluster (job_templates/tools/local-cluster.sh up):
# 4 ranks on 2 nodes, a rank's process killed from outside (SIGKILL, found by its PMIX_RANK) at a
# quarter of the run, ROUNDS rounds per model:
#   shrink   --on-rank-loss shrink: seconds from the kill to the survivors' line "going on from step"
#            (their next step starts there), and the recovery's parts from metrics.jsonl: detection
#            (after the last step ended), agreement + rebuild, state broadcast + new split +
#            model, the checkpoint committed at once;
#   abort    --on-rank-loss abort (the default): seconds from the kill to the job down, then what a
#            requeue adds: Slurm's begin time for a requeued job (measured: a job requeued with
#            scontrol requeue, its StartTime), the start-up and checkpoint read of the resumed job
#            (its set-up line and first step), and the work since the last checkpoint (on average
#            half the interval: the templates checkpoint every 30 minutes).
# Models: resnet8 at 28 px on Fashion-MNIST (0.08 M parameters) and resnet18 at 64 px on synthetic
# images (11.2 M: its state is what the survivors broadcast and checkpoint).
#   benchmarks/shrink.sh [path/to/mntrain] [rounds, default 3]
# Run it on a quiet machine; it prints a table for benchmarks/README.md.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=$(cd "$(dirname "${1:-$here/../build/mntrain}")" && pwd)/$(basename "${1:-mntrain}")
rounds=${2:-3}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
scontrol ping >/dev/null 2>&1 || { echo "shrink.sh: no Slurm cluster (job_templates/tools/local-cluster.sh up)" >&2; exit 1; }
fm=/usr/share/datasets/fashion-mnist
"$m" convert idx "$fm/train-images-idx3-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz" "$w/fm" --shards 4 >/dev/null
"$m" convert synth "$w/syn" --classes 100 --images 4096 --size 64 --shards 4 >/dev/null
declare -A margs=(
  [resnet8]="--data $w/fm --arch resnet8 --size 28 --pad-crop 2 --steps 400 --log-every 10"
  [resnet18]="--data $w/syn --arch resnet18 --size 64 --steps 80 --log-every 5"
)
declare -A kill_at=([resnet8]=100 [resnet18]=20)
# one MODEL POLICY ROUND: a run with rank 3 killed; NAME.log, NAME/ (out), NAME.t (the kill's time)
one() {
  local model=$1 pol=$2 name=$w/$1-$2-$3 p
  rm -rf "$name" "$name.log"
  # shellcheck disable=SC2086 # the model's options are words
  srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 --kill-on-bad-exit=0 --no-kill "$m" train ${margs[$model]} \
    --batch-per-rank 16 --threads 1 --lr 0.1 --timestamps --ckpt-every-steps 1000000 --on-rank-loss "$pol" \
    --out "$name" >"$name.log" 2>&1 &
  local job=$!
  until grep -q "step ${kill_at[$model]}/" "$name.log" 2>/dev/null; do
    kill -0 $job 2>/dev/null || break
    sleep 0.01
  done
  for p in $(pgrep -f "$m train .*--out $name( |$)"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx PMIX_RANK=3; then
      kill -KILL "$p" && date +%s.%N >"$name.t"
    fi
  done
  wait $job
  date +%s.%N >"$name.end"
}
for model in resnet8 resnet18; do
  for r in $(seq 1 "$rounds"); do
    echo "shrink.sh: $model round $r of $rounds" >&2
    one "$model" shrink "$r"
    one "$model" abort "$r"
  done
  # the resumed job's start-up: the same run resumed from its checkpoint (the first one's)
  name=$w/$model-resume
  # shellcheck disable=SC2086
  srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 "$m" train ${margs[$model]} --batch-per-rank 16 --threads 1 --lr 0.1 \
    --timestamps --ckpt-every-steps ${kill_at[$model]} --stop-after ${kill_at[$model]} --out "$name" >"$name.1.log" 2>&1
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  srun --mpi=pmix -N2 -n4 --ntasks-per-node=2 "$m" train ${margs[$model]} --batch-per-rank 16 --threads 1 --lr 0.1 \
    --timestamps --ckpt-every-steps ${kill_at[$model]} --stop-after 1 --out "$name" >"$name.log" 2>&1
  echo "$start" >"$name.start"
done
# Slurm's begin time for a requeued job
job=$(sbatch --parsable --requeue -N1 -n1 --wrap "sleep 30" -o /dev/null)
until [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]; do sleep 0.2; done
scontrol requeue "$job"
sleep 1
req=$(date +%s)
begin=$(date -d "$(scontrol show job "$job" | sed -n 's/.*StartTime=\([^ ]*\).*/\1/p')" +%s)
scancel "$job"
/usr/bin/python3 - "$w" "$rounds" $((begin - req)) <<'PY'
import json, re, statistics, sys, datetime
w, rounds, requeue_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def t_of(line):  # the --timestamps prefix, seconds since the epoch
    return datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
def med(xs):
    xs = [x for x in xs if x is not None]
    if not xs: return "n/a"
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"
print("| model | policy | kill to next step (s) | detected after (s) | agree + rebuild (s) | state + split (s) | checkpoint (s) | kill to job down (s) | top-1 at the end |")
print("|---|---|---|---|---|---|---|---|---|")
for model in ("resnet8", "resnet18"):
    for pol in ("shrink", "abort"):
        go, det, agree, reg, ck, down, top = [], [], [], [], [], [], []
        for r in range(1, rounds + 1):
            n = f"{w}/{model}-{pol}-{r}"
            try: tk = float(open(n + ".t").read())
            except OSError: continue
            log = open(n + ".log").read().splitlines()
            if pol == "shrink":
                g = [l for l in log if "going on from step" in l]
                go.append(t_of(g[0]) - tk if g else None)
                for l in open(n + "/metrics.jsonl"):
                    j = json.loads(l)
                    if "rank_lost" in j:
                        det.append(j["detected_after_s"]); agree.append(j["recovery_s"]["agree"])
                        reg.append(j["recovery_s"]["regroup"]); ck.append(j["recovery_s"]["checkpoint"])
                try: top.append(json.load(open(n + "/summary.json"))["top1"])
                except (OSError, KeyError): pass
            else:
                down.append(float(open(n + ".end").read()) - tk)
        print(f"| {model} | {pol} | {med(go)} | {med(det)} | {med(agree)} | {med(reg)} | {med(ck)} | {med(down)} | {med(top)} |")
    log = open(f"{w}/{model}-resume.log").read().splitlines()
    st = float(open(f"{w}/{model}-resume.start").read())
    first = [l for l in log if re.search(r"set-up \(slowest rank\)", l)]
    print(f"\n{model}: a resumed job's first step {t_of(first[0]) - st:.1f} s after its srun started (checkpoint read included)" if first else "")
print(f"\nSlurm (this cluster's slurmctld): a requeued job's begin time is {requeue_s} s ahead")
PY
