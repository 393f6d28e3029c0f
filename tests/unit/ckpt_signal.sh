#!/usr/bin/env bash
# ckpt_signal.sh — checkpoints and stop requests, one process (a PMIx singleton, no Slurm).
#   ckpt_signal.sh MNTRAIN
# Cases:
#   kill-wait  issue 19 part 5, "a kill shorter than a step commits nothing": resnet50 at 224 px
#              with a checkpoint every step; while the checkpoint of step 1 is in flight (its
#              share written during step 2), SIGTERM, then SIGKILL 2.5 s later, before step 2
#              ends (a Slurm KillWait shorter than a step). The checkpoint of step 1 must be
#              committed (step-00000001 with a manifest that parses, `inspect` exit 0), and the
#              same command must resume from it.
#   damaged    a run's only checkpoint with its MANIFEST.json replaced by garbage: the same command
#              fails (exit 1) naming the file, leaves metrics.jsonl as it was and writes no step
#              directory (it does not start over from step 0).
# Exit 77 (skip) when this machine cannot run it (memory), or when a step here is too short for
# the kill to fall inside it (then nothing is shown either way).
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$1
w=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$w"; }
trap cleanup EXIT
# wait_for FILE PATTERN SECONDS [PID]: 0 when a line of FILE matches (grep -E), 1 at the deadline
# or when PID has exited
wait_for() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null && { grep -qE "$2" "$1" 2>/dev/null; return; }
    sleep 0.1
  done
  return 1
}

avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if [ "${avail_kb:-0}" -lt $((7 * 1024 * 1024)) ]; then
  echo "SKIP: resnet50 at 224 px, batch 32 needs about 6 GB of memory; $((${avail_kb:-0} / 1024)) MB available"
  exit 77
fi

# ---- kill-wait -------------------------------------------------------------------------------
"$m" convert synth "$w/data" --classes 4 --images 256 --size 224 --shards 1 >/dev/null || fail "convert synth"
# a step of 5-25 s on 2 cores; the signal comes 1.5 s into step 2, the kill 2.5 s after it
cmd=("$m" train --data "$w/data" --arch resnet50 --size 224 --batch-per-rank 32 --threads 2 --steps 1000
     --ckpt-every-steps 1 --log-every 1 --out "$w/run")
t0=$SECONDS
"${cmd[@]}" >"$w/first.log" 2>&1 &
pid=$!
wait_for "$w/first.log" ' step 1/1000 ' 120 "$pid" || { cat "$w/first.log"; fail "no line for step 1"; }
sleep 1.5
kill -TERM "$pid"
sleep 2.5
cp "$w/first.log" "$w/at_kill.log"
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=
ck="$w/run/ckpt/step-00000001"
# the kill must have come before step 2 ended (else the step boundary committed it, as always)
if grep -qE ' step 2/1000 |step-00000001 committed \(' "$w/at_kill.log"; then
  cat "$w/at_kill.log"
  echo "SKIP: step 2 ended within 4 s of the line for step 1 here: the kill did not fall inside a step"
  exit 77
fi
if [ ! -f "$ck/MANIFEST.json" ]; then
  cat "$w/first.log"
  ls -la "$w/run/ckpt" "$w"/run/ckpt/* 2>&1
  fail "SIGTERM, then SIGKILL 2.5 s later (inside step 2): the checkpoint of step 1, on disk, was not committed"
fi
/usr/bin/python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); assert m["step"] == 1, m["step"]' \
  "$ck/MANIFEST.json" || fail "$ck/MANIFEST.json does not parse as the manifest of step 1"
"$m" inspect "$ck" >"$w/inspect.log" 2>&1 || { cat "$w/inspect.log"; fail "mntrain inspect $ck"; }
grep -q "committed on a stop request" "$w/first.log" || { cat "$w/first.log"; fail "no 'committed on a stop request'"; }
echo "ok: SIGTERM then SIGKILL 2.5 s later, inside step 2: step-00000001 committed ($(grep -o 'committed on a stop request.*' "$w/first.log"))"
# the same command resumes from it
"${cmd[@]}" >"$w/second.log" 2>&1 &
pid=$!
wait_for "$w/second.log" "resuming from .*step-00000001" 60 "$pid" ||
  { cat "$w/second.log"; fail "the same command did not resume from step-00000001"; }
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=
echo "ok: the same command resumes from step-00000001 ($((SECONDS - t0)) s)"

# ---- damaged ---------------------------------------------------------------------------------
t1=$SECONDS
"$m" convert synth "$w/small" --classes 4 --images 64 --size 16 --shards 1 >/dev/null || fail "convert synth (16 px)"
cmd=("$m" train --data "$w/small" --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --steps 4
     --ckpt-every-steps 4 --log-every 1 --out "$w/dmg")
"${cmd[@]}" >"$w/dmg1.log" 2>&1 || { cat "$w/dmg1.log"; fail "the run to damage exited $?"; }
man="$w/dmg/ckpt/step-00000004/MANIFEST.json"
[ -f "$man" ] || { ls -R "$w/dmg"; fail "no $man"; }
steps_before=$(cd "$w/dmg/ckpt" && echo step-*)
printf 'not a manifest {{{' >"$man"
lines=$(wc -l <"$w/dmg/metrics.jsonl")
"${cmd[@]}" >"$w/dmg2.log" 2>&1
rc=$?
steps_after=$(cd "$w/dmg/ckpt" && echo step-*)
[ $rc -eq 1 ] || { cat "$w/dmg2.log"; fail "a damaged manifest: exit $rc, expected 1"; }
grep -q "step-00000004/MANIFEST.json" "$w/dmg2.log" || { cat "$w/dmg2.log"; fail "the error does not name $man"; }
[ "$(wc -l <"$w/dmg/metrics.jsonl")" -eq "$lines" ] || fail "metrics.jsonl changed ($lines lines before)"
[ "$steps_after" = "$steps_before" ] || fail "step directories were '$steps_before', now '$steps_after'"
grep -q "^not a manifest" "$man" || fail "$man was rewritten"
echo "ok: a damaged MANIFEST.json: exit 1 naming it, metrics.jsonl and the step directories untouched ($((SECONDS - t1)) s)"
