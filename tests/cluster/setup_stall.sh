#!/usr/bin/env bash
# setup_stall.sh — a rank that stops during set-up (SIGSTOP, as a rank hung in the kernel or a stuck
# node does) ends the job within MNT_COMM_TIMEOUT and a few seconds, naming the rank and its node,
# wherever in set-up it stopped: Slurm's PMIx server does not keep the timeout asked of a fence
# (the job once sat in PMIx_Fence for 10 minutes, naming no one), so mntrain keeps its own.
# 2 ranks on 2 nodes, MNT_COMM_TIMEOUT=10; rank 1 stops before mntrain starts, and 50 ms after it
# started (somewhere in its set-up: PMIx, the resume negotiation, the communicator).
#   setup_stall.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/data" --classes 4 --images 256 --size 16 --shards 1 >/dev/null || fail "convert synth"
# each task: rank 1 stops itself after STOP_AT seconds ("now": before mntrain starts)
cat >"$w/task.sh" <<'TASK'
#!/usr/bin/env bash
if [ "$SLURM_PROCID" = 1 ]; then
  if [ "$STOP_AT" = now ]; then kill -STOP $$; else (sleep "$STOP_AT"; kill -STOP $$) & fi
fi
exec "$@"
TASK
chmod +x "$w/task.sh"
for at in now 0.05; do
  start=$(date +%s)
  STOP_AT=$at MNT_COMM_TIMEOUT=10 "$here/srun_test.sh" 90 -N2 -n2 -- "$w/task.sh" "$m" train --data "$w/data" \
    --arch resnet8 --size 16 --batch-per-rank 16 --steps 40 --threads 1 --loader-threads 1 \
    --out "$w/out-$at" >"$w/log-$at" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  [ $rc -eq 77 ] && { cat "$w/log-$at"; exit 77; }
  if [ $rc -ne 0 ] && [ $elapsed -le 40 ]; then ok "stopped $at: the job ended (exit $rc) after ${elapsed} s"
  else bad "stopped $at: exit $rc after ${elapsed} s (MNT_COMM_TIMEOUT 10 s: it should end within about 40 s)"; fi
  # the rank is named: "rank 1 on node2 did not arrive" (a PMIx exchange) or "... does not answer" (the
  # communicator), in the message the job was aborted with
  if grep "aborting the job" "$w/log-$at" | grep -qE "rank 1 on node2 (did not arrive|does not answer)"; then
    ok "stopped $at: the job's message names rank 1 on node2"
  else
    bad "stopped $at: the job's message does not name rank 1 on node2:"; cat "$w/log-$at"
  fi
done
grep -q "aborting the job: a PMIx exchange of the job (fence 0) did not complete within 10 s" "$w/log-now" ||
  bad "stopped before it started: not the first PMIx exchange that timed out"
finish setup_stall "$fail"
