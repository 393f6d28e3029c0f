#!/usr/bin/env bash
# hang_train.sh — a training job whose rank stops (SIGSTOP, as a rank hung in the kernel or a stuck
# node does) ends, and says what every rank that can still answer was doing: 4 ranks on 2 nodes,
# MNT_COMM_TIMEOUT=8; rank 1 gets SIGUSR2 first (it writes its last events and trains on), then
# rank 2 stops. Checked: the job fails within the timeout and a margin; the messages name rank 2
# and its node, and say what the waiting ranks were doing ("step N: comm"); the job ends within
# MNT_COMM_TIMEOUT of the stop (and a second), and says so truly; ranks 0, 1 and 3 wrote
# OUT/last-events-rank-R.txt with every thread's open spans and last events, and the SIGUSR2 dump
# came before the stall's.   hang_train.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/data" --classes 10 --images 2048 --size 40 --shards 2 >/dev/null || fail "convert synth"
# each task: rank 1 sends itself SIGUSR2 after 5 s, rank 2 stops itself after 8 s (training by then)
cat >"$w/task.sh" <<'EOF'
#!/usr/bin/env bash
case $SLURM_PROCID in
  1) (sleep 5; kill -USR2 $$) & ;;
  2) (sleep 8; echo "hang_train: rank 2 stops itself at $(date +%s.%N)"; kill -STOP $$) & ;;
esac
exec "$@"
EOF
chmod +x "$w/task.sh"
start=$(date +%s)
MNT_COMM_TIMEOUT=8 "$here/srun_test.sh" 120 -N2 -n4 --ntasks-per-node=2 -- "$w/task.sh" "$m" train --data "$w/data" \
  --arch resnet8 --size 32 --batch-per-rank 16 --steps 100000 --threads 1 --loader-threads 1 --log-every 50 \
  --out "$w/out" >"$w/log" 2>&1
rc=$?
end=$(date +%s.%N)
elapsed=$(($(date +%s) - start))
cat "$w/log"
[ $rc -eq 77 ] && exit 77
if [ $rc -ne 0 ]; then ok "the job failed (exit $rc) after ${elapsed} s"; else bad "the job exited 0 although rank 2 stopped"; fi
[ $elapsed -le 60 ] || bad "the job took ${elapsed} s to end (MNT_COMM_TIMEOUT 8 s after a stop at about 8 s)"
grep -q "hang_train: rank 2 stops itself" "$w/log" || bad "rank 2 never stopped itself"
# MNT_COMM_TIMEOUT is when the wait ends: the asking who holds it up comes before the deadline, not
# after it (it once ended the job 2 s late, 10 s after the stop, its message saying "8 s")
stopped=$(sed -n 's/^hang_train: rank 2 stops itself at \([0-9.]*\)$/\1/p' "$w/log" | head -n1)
if [ -n "$stopped" ]; then
  after=$(awk -v a="$stopped" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  if awk -v x="$after" 'BEGIN { exit !(x <= 9.5) }'; then ok "the job ended ${after} s after the stop (MNT_COMM_TIMEOUT 8)"
  else bad "the job ended ${after} s after the stop: MNT_COMM_TIMEOUT is 8 s"; fi
fi
said=$(grep -oE "made no progress for [0-9.]+ s" "$w/log" | grep -oE "[0-9.]+" | sort -n | tail -n1)
if [ -n "$said" ] && awk -v x="$said" 'BEGIN { exit !(x >= 8 && x <= 8.5) }'; then ok "the failure says ${said} s of no progress"
else bad "the failure says '${said:-nothing}' s of no progress, the timeout being 8 s"; fi
if grep -qE "rank 2 on node2 does not answer" "$w/log"; then ok "the messages name rank 2 on node2"
else bad "no message names rank 2 on node2 as the one that does not answer"; fi
if grep -qE "this rank: step [0-9]+: comm" "$w/log"; then ok "a waiting rank says what it was doing (step N: comm)"
else bad "no stall message says what the waiting rank was doing (this rank: step N: comm ...)"; fi
for r in 0 1 3; do
  f=$w/out/last-events-rank-0000$r.txt
  if [ -s "$f" ] && grep -q "^thread 0 (main)" "$f" && grep -q "(comm)" "$f" && grep -qE "^ +[0-9.]+ +[0-9.]+ ms +.*step [0-9]+" "$f"; then
    ok "rank $r wrote its last events ($(head -n1 "$f" | cut -c1-110)...)"
  else
    bad "rank $r's last events: missing or without threads and events"; [ -f "$f" ] && head -n 20 "$f"
  fi
done
[ ! -e "$w/out/last-events-rank-00002.txt" ] || bad "the stopped rank 2 wrote last events?"
if grep -qE "last events of every thread of rank 1 are in .* \(SIGUSR2 asked for it\)" "$w/log"; then
  ok "SIGUSR2 wrote rank 1's last events while it trained"
else bad "no SIGUSR2 dump of rank 1"; fi
finish hang_train "$fail"
