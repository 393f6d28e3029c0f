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
set -u
stop=()
if [ "${1:-}" = "--stop" ]; then stop=(--stop); export MNT_COMM_TIMEOUT=3; shift; fi
prog=$1
victim=${2:-2}
if [ $# -gt 2 ]; then shift 2; srun_args=("$@"); else srun_args=(-N2 -n4 --ntasks-per-node=2); fi
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
# no --kill-on-bad-exit: the job must come down through mntrain's own detection and PMIx_Abort
"$here/srun_test.sh" 90 "${srun_args[@]}" -- "$prog" --kill-rank "$victim" --kill-after 1.0 "${stop[@]}" >"$out" 2>&1
rc=$?
end=$(date +%s.%N)
cat "$out"
[ $rc -eq 77 ] && exit 77
elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
echo "kill_rank: srun exit status $rc after ${elapsed}s"
fail=0
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0 although rank $victim was killed"; fail=1; fi
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "FAIL: the job hung (killed by timeout)"; fail=1; fi
# the victim kills itself 1 s in; start-up takes a few seconds more
if awk -v e="$elapsed" 'BEGIN { exit !(e > 30) }'; then echo "FAIL: took ${elapsed}s (> 30 s)"; fail=1; fi
if ! grep -qE "rank $victim on node[0-9]+ (died|closed its connection|does not answer)|lost rank $victim on" "$out"; then
  echo "FAIL: no message names the dead rank $victim"; fail=1
fi
if [ ${#stop[@]} -gt 0 ]; then
  if ! grep -E "warning: .*no progress for [0-9]+ s" "$out" | grep -qE "rank $victim on node[0-9]+ does not answer"; then
    echo "FAIL: no early warning names the stopped rank $victim"; fail=1
  fi
  if grep "aborting the job" "$out" | grep -vqE "rank $victim on node[0-9]+ does not answer"; then
    echo "FAIL: the job was aborted blaming another rank than $victim"; fail=1
  fi
fi
sleep 1
if pgrep -f "$prog --kill-rank" >/dev/null; then
  echo "FAIL: processes are left:"; pgrep -af "$prog --kill-rank"; fail=1
fi
if ls /dev/shm/mntrain-* >/dev/null 2>&1; then
  echo "FAIL: shared memory left behind:"; ls -l /dev/shm/mntrain-*; fail=1
fi
[ $fail -eq 0 ] && echo "kill_rank: ok (the job failed in ${elapsed}s and named rank $victim)"
exit $fail
