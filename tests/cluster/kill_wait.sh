#!/usr/bin/env bash
# kill_wait.sh — `scancel` of a job whose steps are longer than Slurm's KillWait (the local
# cluster's is 5 s): Slurm sends SIGTERM, then SIGKILL KillWait seconds later, before the step
# ends. The asynchronous checkpoint whose shares are already on disk must be committed in that
# time (rank 0 commits it on the signal, not at the step boundary). 2 ranks on 2 nodes,
# ResNet-50 at 224 px (about 11 s per step here), a checkpoint every step: once both ranks' share
# records of step 1's checkpoint are on disk (at most 4 s into step 2), scancel; afterwards that checkpoint is a committed step
# directory that `mntrain inspect` verifies, and the job log says it was committed at once.
#   kill_wait.sh MNTRAIN
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
avail_kb=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
[ "${avail_kb:-0}" -ge $((13 * 1024 * 1024)) ] || { echo "SKIP: 2 ResNet-50 ranks need about 12 GB, $((avail_kb / 1024)) MB available"; exit 77; }
kw=$(scontrol show config | awk '/^KillWait/ {print $3}')
w=$(mktemp -d)
job=""
cleanup() { [ -n "$job" ] && scancel "$job" 2>/dev/null; rm -rf "$w"; }
trap cleanup EXIT
on_fail() { [ -f "$w/job.out" ] && tail -20 "$w/job.out"; } # fail (tests/lib.sh) shows the job's output
"$m" convert synth "$w/data" --classes 4 --images 256 --size 224 --shards 2 >/dev/null || exit 1
args=(train --data "$w/data" --arch resnet50 --size 224 --batch-per-rank 32 --threads 1 --loader-threads 1
  --steps 1000 --log-every 1 --ckpt-every-steps 1 --out "$w/run")
job=$(cd "$w" && sbatch --parsable -N2 --ntasks-per-node=1 --cpus-per-task=1 --time=10 --job-name=mntrain-killwait \
  --output="$w/job.out" --wrap "srun --mpi=pmix $(printf '%q ' "$m" "${args[@]}")") || fail "sbatch failed"
echo "job $job (KillWait ${kw:-?} s)"
for _ in $(seq 1 1800); do # step 1 done: its checkpoint is being written during step 2
  grep -q "^epoch .* step 1/" "$w/job.out" 2>/dev/null && break
  sleep 0.1
done
grep -q "^epoch .* step 1/" "$w/job.out" 2>/dev/null || fail "no step within 180 s"
inc=""
for _ in $(seq 1 40); do # both ranks' shares on disk (their records), or 4 s: the signal comes then
  for d in "$w"/run/ckpt/incoming-*; do
    if [ -e "$d/share-00000" ] && [ -e "$d/share-00001" ]; then inc=$d; break 2; fi
  done
  sleep 0.1
done
echo "step 1 done; scancel $( [ -n "$inc" ] && echo "with both share records on disk" || echo "4 s later (no share records seen)")"
before=$(find "$w/run/ckpt" -maxdepth 2 -name MANIFEST.json | wc -l)
t0=$(date +%s.%N)
scancel "$job" || fail "scancel"
for _ in $(seq 1 600); do
  st=$(scontrol show job -o "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
  case $st in JobState=RUNNING | JobState=COMPLETING | JobState=PENDING) sleep 0.1 ;; *) break ;; esac
done
job=""
t1=$(date +%s.%N)
after=$(find "$w/run/ckpt" -maxdepth 2 -name MANIFEST.json | wc -l)
echo "scancel -> job ended in $(awk -v a="$t1" -v b="$t0" 'BEGIN {printf "%.1f", a - b}') s; committed checkpoints: $before before, $after after"
grep -q "stopped after step" "$w/job.out" && { tail -5 "$w/job.out"; echo "SKIP: the step ended within KillWait (steps too short on this machine to show anything)"; exit 77; }
[ "$after" -gt "$before" ] || fail "the checkpoint of step 1, written during step 2, was not committed before the SIGKILL"
grep -q "committed at once" "$w/job.out" || fail "the job log does not say the checkpoint was committed on the signal"
"$m" inspect "$w/run/ckpt" >"$w/inspect.log" 2>&1 || { cat "$w/inspect.log"; fail "inspect of the committed checkpoint"; }
echo "ok: $(grep -o 'SIGTERM: the checkpoint in flight committed at once.*' "$w/job.out" | head -n1); $(head -n2 "$w/inspect.log" | tail -n1 | sed 's/^ *//')"
echo "kill_wait: ok"
