#!/usr/bin/env bash
# slow_rank.sh — mntrain report names the rank that slows a job: 4 ranks on the 2-node cluster, rank 3
# (node2) slowed as a noisy neighbour would, stopped and continued 20 ms each in turn (SIGSTOP and
# SIGCONT from a process beside it: the local nodes share two cores, so a busy loop pinned to "its"
# core would slow its neighbours as much). The report's slow-rank lines must name rank 3 on node2
# first, with backward (the largest compute phase, and so the one a uniform slowdown stretches most)
# as the phase where it loses, and an imbalance well above 1; summary.json's rank_stats must hold
# every rank. On a sanitizer build (MNT_TEST_SANITIZE, set by ctest) every rank's instrumented step
# is slow already, and the imbalance asked for is above 1.05.   slow_rank.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/data" --classes 10 --images 1024 --size 40 --shards 2 >/dev/null || fail "convert synth"
cat >"$w/task.sh" <<'EOF'
#!/usr/bin/env bash
if [ "$SLURM_PROCID" = 3 ]; then
  (while kill -STOP $$ 2>/dev/null; do sleep 0.02; kill -CONT $$; sleep 0.02; done) &
fi
exec "$@"
EOF
chmod +x "$w/task.sh"
"$here/srun_test.sh" 300 -N2 -n4 --ntasks-per-node=2 -- "$w/task.sh" "$m" train --data "$w/data" --arch resnet18 \
  --size 32 --batch-per-rank 16 --steps 40 --threads 1 --loader-threads 1 --log-every 10 --out "$w/out" >"$w/log" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { cat "$w/log"; fail "training exited $rc"; }
"$m" report "$w/out" --out "$w/rep" >"$w/report" 2>&1 || { cat "$w/report"; fail "report"; }
cat "$w/report"
first=$(grep -m1 -E '^ +rank [0-9]+ on ' "$w/report")
if [[ $first =~ rank\ 3\ on\ node2:\ compute\ [0-9.]+\ ms,\ backward\ \+ ]]; then
  ok "the report names rank 3 on node2 first, losing in backward: $first"
else
  bad "the slowest rank named is not rank 3 on node2 in backward: '$first'"
fi
imb=$(sed -nE 's/.*imbalance ([0-9.]+).*/\1/p' "$w/report" | head -n1)
want=1.3
[ -n "${MNT_TEST_SANITIZE:-}" ] && want=1.05
if awk -v i="${imb:-0}" -v w="$want" 'BEGIN { exit !(i >= w) }'; then ok "imbalance $imb"
else bad "imbalance ${imb:-none} (a rank stopped half the time should give >= $want)"; fi
if /usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
r = s.get('rank_stats', [])
assert [x['rank'] for x in r] == [0, 1, 2, 3], r
assert [x['node'] for x in r] == ['node1', 'node1', 'node2', 'node2'], r
assert all(set(x['phases_ms']) == {'data', 'forward', 'backward', 'comm_exposed', 'optimizer'} for x in r), r
assert all(x['step_ms']['p95'] >= x['step_ms']['p50'] > 0 for x in r), r
" "$w/out/summary.json"; then ok "summary.json's rank_stats"; else bad "summary.json's rank_stats"; fi
finish slow_rank "$fail"
