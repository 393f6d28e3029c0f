#!/usr/bin/env bash
# kill_rank.sh — a rank killed with SIGKILL in the middle of an allreduce must take the job
# down: every other rank exits non-zero within 30 s, the output names the dead rank, and no
# process or shared-memory segment is left behind.
#   kill_rank.sh [--stop] PROGRAM [VICTIM SRUN_ARGS...]   (PROGRAM: test_comm_cluster)
# Default: rank 2 of 4 on two nodes (found through TCP); with "1 -N1 -n2" the victim shares a
# node with its peer, which finds out through the shared-memory liveness check. With --stop the
# victim hangs (SIGSTOP) instead of dying: the ranks must warn first that they wait, naming it,
# then give up after MNT_COMM_TIMEOUT (3 s here) naming it, and no rank may blame another one
# (with 4 ranks, ranks that wait for a waiting neighbour must follow the chain to the victim).
# The messages must name the victim's own node (the one it printed before the signal).
# Limits from the environment (tests/scale/scale.sh sets them; the defaults are the above):
# KILL_AFTER (1.0 s after the communicator is up the victim signals itself), KILL_LIMIT_S (30: the
# whole job, from srun's start), KILL_TIMEOUT_S (90: srun is killed after it), KILL_COMM_TIMEOUT
# (3: MNT_COMM_TIMEOUT with --stop), KILL_GONE_S (unset: not checked; else every rank must be gone,
# srun ended, within that many seconds of the victim's line "rank R on NODE kills itself").
set -u
stop=()
if [ "${1:-}" = "--stop" ]; then stop=(--stop); export MNT_COMM_TIMEOUT=${KILL_COMM_TIMEOUT:-3}; shift; fi
prog=$1
victim=${2:-2}
if [ $# -gt 2 ]; then shift 2; srun_args=("$@"); else srun_args=(-N2 -n4 --ntasks-per-node=2); fi
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
limit=${KILL_LIMIT_S:-30} timeout_s=${KILL_TIMEOUT_S:-90}
start=$(date +%s.%N)
# no --kill-on-bad-exit: the job must come down through mntrain's own detection and PMIx_Abort
"$here/srun_test.sh" "$timeout_s" "${srun_args[@]}" -- "$prog" --kill-rank "$victim" \
  --kill-after "${KILL_AFTER:-1.0}" "${stop[@]}" >"$out" 2>&1 &
job=$!
signalled="" # when the victim's line came: it signals itself right after printing it
while kill -0 $job 2>/dev/null; do
  if [ -z "$signalled" ] && grep -qE "test_comm_cluster: rank $victim on [^ ]+ (kills|stops) itself" "$out"; then
    signalled=$(date +%s.%N)
  fi
  sleep 0.05
done
wait $job
rc=$?
end=$(date +%s.%N)
cat "$out"
[ $rc -eq 77 ] && exit 77
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
gone=$(awk -v a="${signalled:-$end}" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
node=$(sed -nE "s/.*test_comm_cluster: rank $victim on ([^ ]+) (kills|stops) itself.*/\1/p" "$out" | head -n1)
echo "kill_rank: srun exit status $rc after ${elapsed}s, ${gone}s after rank $victim on ${node:-?} signalled itself"
fail=0
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0 although rank $victim was killed"; fail=1; fi
# 124: timeout stopped srun (137: it had to kill it; srun's own 137 is a task killed by SIGKILL)
if [ $rc -eq 124 ] || { [ $rc -eq 137 ] && awk -v e="$elapsed" -v t="$timeout_s" 'BEGIN { exit !(e >= t) }'; }; then
  echo "FAIL: the job hung (killed by timeout after ${timeout_s}s)"; fail=1
fi
# the victim kills itself KILL_AFTER s in; start-up takes a few seconds more
if awk -v e="$elapsed" -v l="$limit" 'BEGIN { exit !(e > l) }'; then echo "FAIL: took ${elapsed}s (> $limit s)"; fail=1; fi
if [ -z "$node" ]; then echo "FAIL: rank $victim never said it signals itself"; fail=1; node='node[0-9]+'; fi
if [ -n "${KILL_GONE_S:-}" ] && awk -v g="$gone" -v l="$KILL_GONE_S" 'BEGIN { exit !(g > l) }'; then
  echo "FAIL: rank $victim on $node was killed, but the job took ${gone}s (> $KILL_GONE_S s) to end: ranks lived on"
  fail=1
fi
if ! grep -qE "rank $victim on $node (died|closed its connection|does not answer)|lost rank $victim on $node" "$out"; then
  echo "FAIL: no message names the dead rank $victim on $node"; fail=1
fi
if [ ${#stop[@]} -gt 0 ]; then
  if ! grep -E "warning: .*no progress for [0-9.]+ s" "$out" | grep -qE "rank $victim on $node does not answer"; then
    echo "FAIL: no early warning names the stopped rank $victim on $node"; fail=1
  fi
  # a rank that aborted naming the victim exits at once (PMIx_Abort returns before Slurm kills the
  # step): a neighbour may see it gone first and abort naming its death; that follows the victim's
  # stop, and is no blame. Any other abort line blames the wrong rank.
  named=$(grep "aborting the job" "$out" | grep -E "rank $victim on $node does not answer" |
    sed -nE 's/^mntrain: (rank [0-9]+ on [^:]+): aborting.*/\1/p' | sort -u)
  others=$(grep "aborting the job" "$out" | grep -vE "rank $victim on $node does not answer")
  while IFS= read -r who; do
    [ -n "$who" ] && others=$(grep -vE "$who (died during|closed its connection)" <<<"$others")
  done <<<"$named"
  if [ -n "$others" ]; then
    echo "FAIL: the job was aborted blaming another rank than $victim on $node:"
    head -n 3 <<<"$others"
    fail=1
  fi
fi
sleep 1
if pgrep -f "$prog --kill-rank" >/dev/null; then
  echo "FAIL: processes are left:"; pgrep -af "$prog --kill-rank"; fail=1
fi
if ls /dev/shm/mntrain-* >/dev/null 2>&1; then
  echo "FAIL: shared memory left behind:"; ls -l /dev/shm/mntrain-*; fail=1
fi
[ $fail -eq 0 ] && echo "kill_rank: ok (the job failed in ${elapsed}s, ${gone}s after the signal, and named rank $victim on $node)"
exit $fail
