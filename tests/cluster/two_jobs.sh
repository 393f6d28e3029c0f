#!/usr/bin/env bash
# two_jobs.sh — two Slurm jobs on one run directory, as users resubmit a job that is still queued
# or running: job A trains (2 ranks on 2 nodes, sbatch); job B, started with the same command a few
# seconds later, is refused (exit 2) naming job A, and removes nothing of A's (config.json,
# metrics.jsonl, its incoming checkpoint: A commits its next checkpoints without an error). A is
# then killed outright (its rank 0 by SIGKILL: no chance to release its lock); job C takes the
# lock over, saying that Slurm reports A ended, and resumes A's run.
#   two_jobs.sh MNTRAIN
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
job=""
cleanup() { [ -n "$job" ] && scancel --signal=KILL "$job" 2>/dev/null; rm -rf "$w"; }
trap cleanup EXIT
on_fail() { for f in "$w"/*.out "$w"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done; } # fail (tests/lib.sh) shows the outputs
"$m" convert synth "$w/data" --classes 10 --images 512 --size 16 --shards 2 >/dev/null || exit 1
args=(train --data "$w/data" --arch resnet8 --size 16 --seed 3 --threads 1 --batch-per-rank 8 --log-every 10
  --steps 200000 --ckpt-every-steps 50 --out "$w/run")
job=$(cd "$w" && sbatch --parsable -N2 --ntasks-per-node=1 --cpus-per-task=1 --time=10 --job-name=mntrain-two-a \
  --output="$w/a.out" --wrap "srun --mpi=pmix $(printf '%q ' "$m" "${args[@]}")") || fail "sbatch failed"
echo "job A: $job"
for _ in $(seq 1 900); do # A has committed a checkpoint
  grep -q '"checkpoint":' "$w/run/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
grep -q '"checkpoint":' "$w/run/metrics.jsonl" 2>/dev/null || fail "job A committed no checkpoint within 90 s"
lines=$(wc -l <"$w/run/metrics.jsonl")
ckpts=$(grep -c '"checkpoint":' "$w/run/metrics.jsonl")
"$here/srun_test.sh" 120 -N2 -n2 -- "$m" "${args[@]}" >"$w/b.log" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "job B on A's --out: exit $rc, expected 2"
grep -q -- "--out $w/run is in use by another run: $w/run/mntrain.lock is held by Slurm job $job, .*Slurm says job $job is RUNNING" \
  "$w/b.log" || fail "job B's refusal does not name job A"
echo "ok: job B refused: $(grep -o 'is in use.*RUNNING' "$w/b.log" | head -n1)"
sleep 3 # A trains on: more metrics lines, a later checkpoint, its files all there
[ "$(wc -l <"$w/run/metrics.jsonl")" -gt "$lines" ] || fail "job A's metrics.jsonl stopped growing (or shrank)"
[ -s "$w/run/config.json" ] || fail "job A's config.json is gone"
# a later checkpoint committed (B removed nothing of A's incoming one) and no error from A
[ "$(grep -c '"checkpoint":' "$w/run/metrics.jsonl")" -gt "$ckpts" ] || fail "job A committed no checkpoint after job B"
grep -q "error" "$w/a.out" && fail "job A reported an error"
[ "$(squeue -h -j "$job" -o %T)" = RUNNING ] || fail "job A is no longer running"
echo "ok: job A runs on with its outputs intact"
# A's rank 0 killed without a chance to clean up (scancel would send SIGTERM first, whatever the
# signal): its lock stays, the job fails, and Slurm knows A has ended
pid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$w/run/mntrain.lock") ||
  fail "the lock does not name a pid"
kill -9 "$pid" || fail "kill -9 $pid (rank 0 of job A)"
for _ in $(seq 1 300); do
  st=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
  case $st in JobState=RUNNING | JobState=COMPLETING | JobState=PENDING) sleep 0.1 ;; *) break ;; esac
done
[ -e "$w/run/mntrain.lock" ] || fail "job A's lock was released (the test needs a lock left behind)"
a=$job
job=""
"$here/srun_test.sh" 180 -N2 -n2 -- "$m" "${args[@]}" --stop-after 5 >"$w/c.log" 2>&1
rc=$?
[ $rc -eq 3 ] || fail "job C after A was killed: exit $rc, expected 3 (stopped after 5 steps)"
grep -q "took over the lock of Slurm job $a, .*: Slurm job $a has ended (scontrol: [A-Z_]*)\|took over the lock of Slurm job $a, .*unknown to Slurm" \
  "$w/c.log" || fail "job C did not say it took over A's lock and why"
grep -q "resuming from $w/run/ckpt/step-" "$w/c.log" || fail "job C did not resume A's run"
echo "ok: job C took over: $(grep -o 'took over.*' "$w/c.log" | head -n1)"
echo "two_jobs: ok"
