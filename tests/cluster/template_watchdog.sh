#!/usr/bin/env bash
# template_watchdog.sh — the job templates never wait forever on `srun --no-kill`: once every rank of
# the step has exited, the job ends with the run's own outcome, even when srun never returns.
#   template_watchdog.sh MNTRAIN [TEMPLATE]
# A lost node's task-exit messages (srun still waiting minutes after the last rank exited, the job
# RUNNING) are simulated with MNTRAIN pointing at a wrapper that runs the real mntrain with its
# arguments and then sleeps for an hour, so the Slurm task outlives mntrain. train.sbatch
# (TEMPLATE: another copy of it, e.g. an older one) trains a tiny synthetic run with
# ON_RANK_LOSS=shrink and MNT_SRUN_GRACE=10, and:
#   finished  the run finishes (summary.json): the job ends within 180 s, its log says the watchdog
#             ended the step, and its exit status is the run's (0)
#   requeue   --min-ranks 2 and rank 1's mntrain killed after its first steps (the wrapper does it
#             in the first attempt): rank 0 commits a checkpoint, writes the requeue line and exits
#             3; the watchdog ends the step, the template requeues the job, and the second attempt
#             (the wrapper sleeps after it too) resumes and finishes: exit 0, summary.json
# Exit 77 (CTest: skipped) without a cluster.
set -u
m=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
tmpl=${2:-$here/../../job_templates/train.sbatch}
tmpl=$(cd "$(dirname "$tmpl")" && pwd)/$(basename "$tmpl")
# shellcheck source=/dev/null
. "$here/lib.sh" # slurm_or_skip, await_requeued, fail, ok, finish (tests/lib.sh)

slurm_or_skip
w=$(mktemp -d)
job=""
cleanup() {
  [ -n "$job" ] && scancel "$job" 2>/dev/null
  rm -rf "$w"
}
trap cleanup EXIT
"$m" convert synth "$w/data" --classes 10 --images 256 --size 16 --shards 2 >/dev/null || fail "convert synth"
tiny=(--data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --log-every 2)

# the wrapper: the real mntrain, then (its status kept) an hour of sleep, so that srun never hears
# that the task ended; with KILL_RANK1=1 in the first attempt rank 1's mntrain is killed once the run
# has written its third metrics line (the ranks left PMIx after their first step: a shrink)
cat >"$w/mntrain" <<EOF
#!/usr/bin/env bash
if [ "\${KILL_RANK1:-0}" = 1 ] && [ "\${SLURM_PROCID:-0}" = 1 ] && [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  "$m" "\$@" &
  p=\$!
  for _ in \$(seq 600); do
    [ "\$(cat "\$OUT/metrics.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.1
  done
  kill -KILL \$p
  wait \$p
else
  "$m" "\$@"
fi
rc=\$?
echo "wrapper: rank \${SLURM_PROCID:-?}: mntrain exited \$rc; now sleeping (the task outlives it)"
exec sleep 3600
EOF
chmod +x "$w/mntrain"

# submit NAME DEADLINE [VAR=VALUE...] -- TEMPLATE ARGS: the job, followed with scontrol (no accounting
# here: sacct is off; slurmctld keeps an ended job MinJobAge seconds) until it has ended, every attempt
# (it fails if that takes more than DEADLINE seconds); a requeued job is started a second after its
# first attempt's step daemons are gone (as await_requeued, lib.sh). Sets t_end (seconds) and
# exit_code (Slurm's ExitCode, status:signal).
submit() {
  local name=$1 deadline=$2 t0 info state="" reason hurried=0
  shift 2
  local env=()
  while [ "$1" != -- ]; do env+=("$1"); shift; done
  shift
  t0=$(date +%s)
  job=$(cd "$w" && env MNTRAIN="$w/mntrain" OUT="$w/$name" ON_RANK_LOSS=shrink MNT_SRUN_GRACE=10 "${env[@]}" \
    sbatch --parsable --time=10 --output="$w/job.out" "$@") || fail "sbatch failed"
  job=${job%%;*}
  echo "$name: job $job submitted"
  while :; do
    info=$(scontrol show job -o "$job" 2>/dev/null)
    state=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$info")
    reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<<"$info")
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | PREEMPTED | DEADLINE | BOOT_FAIL) break ;; esac
    if [ $hurried -eq 0 ] && [ "$state $reason" = "PENDING BeginTime" ] &&
      ! pgrep --ns $$ --nslist pid -f "slurmstepd: \[$job\." >/dev/null; then
      sleep 1
      scontrol update JobId="$job" StartTime=now && hurried=1 && echo "$name: job $job requeued: started a second later"
    fi
    if [ $(($(date +%s) - t0)) -ge "$deadline" ]; then
      echo "--- the job's output:"
      cat "$w/job.out"
      scancel "$job"
      job=""
      fail "$name: the job is still ${state:-?} $deadline s after it was submitted (srun waits for a task that never ends)"
    fi
    sleep 1
  done
  t_end=$(($(date +%s) - t0))
  exit_code=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$info")
  echo "$name: job $job $state after $t_end s, ExitCode $exit_code; its output:"
  sed 's/^/  | /' "$w/job.out"
  job=""
}

fail=0
# finished: the run ends, the task does not
submit finished 180 -- "$tmpl" "${tiny[@]}" --steps 8
grep -q "mntrain train: done: 8 steps" "$w/job.out" || bad "finished: the run did not finish its 8 steps"
grep -q "every rank has exited but srun has not returned after [0-9]* s: ending the step" "$w/job.out" ||
  bad "finished: the log does not say that the watchdog ended the step"
grep -q "the run finished (summary.json)" "$w/job.out" || bad "finished: the log does not take summary.json as the outcome"
[ -f "$w/finished/summary.json" ] || bad "finished: no summary.json"
[ "$exit_code" = 0:0 ] || bad "finished: the job's exit is $exit_code, not the run's (0:0)"
[ "$fail" -eq 0 ] && ok "finished: the job ended $t_end s after it was submitted, with the run's exit 0"

# requeue: the run stops for a requeue (exit 3 on rank 0, rank 1 killed), its task does not end
if [ "$fail" -eq 0 ]; then
  rm -f "$w/job.out"
  submit requeue 300 KILL_RANK1=1 -- "$tmpl" "${tiny[@]}" --steps 16 --min-ranks 2
  n=$(grep -c "every rank has exited but srun has not returned after [0-9]* s: ending the step" "$w/job.out")
  [ "$n" -eq 2 ] || bad "requeue: the watchdog ended $n steps, want 2 (the stopped attempt's and the requeued one's)"
  grep -q "the run stopped with a checkpoint to resume at full size" "$w/job.out" ||
    bad "requeue: the first attempt's outcome is not the requeue line"
  grep -q "requeueing" "$w/job.out" || bad "requeue: the template did not requeue the job"
  grep -q "(attempt 2)" "$w/job.out" || bad "requeue: no second attempt"
  grep -q "mntrain train: done: 16 steps" "$w/job.out" || bad "requeue: the second attempt did not finish the run"
  [ -f "$w/requeue/summary.json" ] || bad "requeue: no summary.json"
  [ "$exit_code" = 0:0 ] || bad "requeue: the job's exit is $exit_code, not the run's (0:0)"
  [ "$fail" -eq 0 ] && ok "requeue: stopped, requeued and finished in $t_end s, exit 0"
fi
finish template_watchdog "$fail"
