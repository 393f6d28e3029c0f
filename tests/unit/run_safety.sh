#!/usr/bin/env bash
# run_safety.sh — nothing lost, no one in (one process, no cluster; a real second user, so root):
# - a run directory (--out, --ckpt-dir), a convert output or the directory of an --export or report
#   output that another user owns, or that others may write without the sticky bit, or a symbolic
#   link another user owns, is refused (exit 2) naming it, its owner and mode, and nothing is
#   written through it (the probe's attack: a user pre-creates the next job's run directory and
#   plants a link where the job writes); a refused --trace directory gets no trace;
# - a --ckpt-dir that is a regular file: exit 2 naming it;
# - a checkpoint directory gone missing (an unmounted filesystem) for a run whose metrics.jsonl
#   records committed checkpoints: exit 1 naming both, metrics.jsonl untouched, nothing created;
#   --resume PATH and --force are the ways on;
# - two runs on one --out (or one --ckpt-dir): the second is refused (exit 2) naming the holder,
#   the first runs on intact; a holder that is gone (its pid, its heartbeat, Slurm when it answers)
#   is taken over with a warning; the same Slurm job id (a requeue) is the holder itself;
# - a normal user trains in a directory of their own, the lock included.
#   run_safety.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to create a second user (useradd)"; exit 77; }
if ! command -v useradd >/dev/null || ! command -v runuser >/dev/null; then echo "SKIP: no useradd/runuser"; exit 77; fi
probe=mntprobe
made_user=0
if ! id "$probe" >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin "$probe" || { echo "FAIL: useradd $probe"; exit 1; }
  made_user=1
fi
w=$(mktemp -d)
chmod 755 "$w"
pids=()
# shellcheck disable=SC2317
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$w"
  if [ "$made_user" -eq 1 ]; then userdel "$probe" 2>/dev/null; fi
}
trap cleanup EXIT
fail=0
# the binary where the probe user can run it too (a CI clone lives in a root-only mktemp directory)
mkdir "$w/bin" && cp "$1" "$w/bin/mntrain" && chmod 755 "$w/bin/mntrain"
m=$w/bin/mntrain
as_probe() { runuser -u "$probe" -- "$@"; }
"$m" convert synth "$w/data" --classes 4 --images 64 --size 16 --shards 1 >/dev/null || exit 1
chmod -R a+rX "$w/data"
base=(train --data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --loader-threads 1 --log-every 5)
mkdir -m 1777 "$w/shared" # like a cluster's /shared or /scratch
echo precious >"$w/victim" && chmod 600 "$w/victim"

# expect RC LOG PATTERN WHAT: the run's exit status and a line of its log
expect() {
  if [ "$rc" -ne "$1" ] || ! grep -q -- "$3" "$2"; then
    bad "$4: exit $rc (expected $1), log:"
    cat "$2"
    return 1
  fi
  echo "ok: $4"
}

# 1. another user's directories and links -----------------------------------------------------------
as_probe mkdir -m 777 "$w/shared/run-a"
"$m" "${base[@]}" --steps 2 --out "$w/shared/run-a" >"$w/a.log" 2>&1
rc=$?
expect 2 "$w/a.log" "run-a is owned by $probe (uid [0-9]*) with mode 0777" "--out owned by another user (0777)"
as_probe ln -s "$w/victim" "$w/shared/run-a/summary.json.tmp" # the probe's link, where summary.json once went
as_probe ln -s "$w/victim" "$w/shared/run-a/config.json"
"$m" "${base[@]}" --steps 2 --out "$w/shared/run-a" --force >"$w/a2.log" 2>&1
rc=$?
expect 2 "$w/a2.log" "owned by $probe" "--out owned by another user, with --force and planted links"
[ "$(cat "$w/victim")" = precious ] || bad "the victim file was written through a link: $(head -c 80 "$w/victim")"
[ -e "$w/shared/run-a/metrics.jsonl" ] && bad "metrics.jsonl was written into another user's directory"

# a refused --trace directory gets nothing: not the trace, not through the probe's link at the name
# the trace's temporary file once had, nor at the trace's own name
as_probe mkdir -m 777 "$w/shared/probe-trace"
as_probe ln -s "$w/victim" "$w/shared/probe-trace/trace-rank-00000.json.tmp"
as_probe ln -s "$w/victim" "$w/shared/probe-trace/trace-rank-00000.json"
"$m" "${base[@]}" --steps 2 --out "$w/t" --trace "$w/shared/probe-trace" >"$w/t.log" 2>&1
rc=$?
expect 2 "$w/t.log" "--trace .*probe-trace is owned by $probe" "--trace into another user's directory"
grep -q "timeline of steps" "$w/t.log" && bad "a refused --trace directory was said to hold the timeline"
[ "$(cat "$w/victim")" = precious ] || bad "the trace was written through the probe's link: $(head -c 80 "$w/victim")"
[ "$(find "$w/shared/probe-trace" -newer "$w/t.log" -o -name '.trace*' | wc -l)" -eq 0 ] ||
  bad "files written into the refused --trace directory: $(ls -A "$w/shared/probe-trace")"

mkdir -m 777 "$w/shared/run-b" && chmod 777 "$w/shared/run-b" # ours, but anybody may write: no sticky bit
"$m" "${base[@]}" --steps 2 --out "$w/shared/run-b" >"$w/b.log" 2>&1
rc=$?
expect 2 "$w/b.log" "run-b is owned by root (uid 0) with mode 0777: refused, others may write to it" "--out writable by others"
chmod 1777 "$w/shared/run-b" # with the sticky bit nobody can replace our files
"$m" "${base[@]}" --steps 2 --out "$w/shared/run-b" >"$w/b2.log" 2>&1 || { bad "--out mode 1777 of our own"; cat "$w/b2.log"; }

mkdir "$w/mine"
as_probe ln -s "$w/mine" "$w/shared/run-c" # another user's link to a directory of ours
"$m" "${base[@]}" --steps 2 --out "$w/shared/run-c" >"$w/c.log" 2>&1
rc=$?
expect 2 "$w/c.log" "run-c is a symbolic link owned by $probe" "--out a symbolic link another user owns"
[ -e "$w/mine/config.json" ] && bad "config.json was written through another user's link"

as_probe mkdir -m 755 "$w/shared/probe-ck"
"$m" "${base[@]}" --steps 2 --out "$w/d" --ckpt-dir "$w/shared/probe-ck" >"$w/d.log" 2>&1
rc=$?
expect 2 "$w/d.log" "--ckpt-dir .*probe-ck is owned by $probe" "--ckpt-dir owned by another user"
as_probe mkdir -m 777 "$w/shared/probe-out"
"$m" "${base[@]}" --steps 2 --out "$w/e" --export "$w/shared/probe-out/w.h5" >"$w/e.log" 2>&1
rc=$?
expect 2 "$w/e.log" "--export .*probe-out is owned by $probe" "--export into another user's directory"
[ -e "$w/e/config.json" ] && bad "a refused --export left config.json"
as_probe mkdir -m 777 "$w/shared/probe-ds"
"$m" convert synth "$w/shared/probe-ds" --classes 2 --images 8 --size 8 --shards 1 >"$w/f.log" 2>&1
rc=$?
expect 2 "$w/f.log" "probe-ds is owned by $probe" "convert into another user's directory"
"$m" report "$w/shared/run-b" --out "$w/shared/probe-out" >"$w/g.log" 2>&1
rc=$?
expect 2 "$w/g.log" "probe-out is owned by $probe" "report --out another user's directory"
touch "$w/afile"
"$m" "${base[@]}" --steps 2 --out "$w/h" --ckpt-dir "$w/afile" >"$w/h.log" 2>&1
rc=$?
expect 2 "$w/h.log" "--ckpt-dir .*afile is not a directory" "--ckpt-dir a regular file"

# a normal user in a directory of their own: trains, checkpoints, resumes, lock and all
as_probe mkdir "$w/shared/probe-run"
as_probe "$m" "${base[@]}" --steps 20 --ckpt-every-steps 5 --stop-after 10 --out "$w/shared/probe-run" >"$w/p.log" 2>&1
rc=$?
[ $rc -eq 3 ] || { bad "a normal user's run with checkpoints: exit $rc"; cat "$w/p.log"; }
if ! as_probe "$m" "${base[@]}" --steps 20 --ckpt-every-steps 5 --out "$w/shared/probe-run" >"$w/p2.log" 2>&1 ||
   ! grep -q "resuming from" "$w/p2.log"; then
  bad "a normal user's resume"; cat "$w/p2.log"
fi
[ -e "$w/shared/probe-run/mntrain.lock" ] && bad "the lock was left behind after a normal end"

# 2. a checkpoint directory gone missing ---------------------------------------------------------------
ck=(--steps 40 --ckpt-every-steps 5)
"$m" "${base[@]}" "${ck[@]}" --stop-after 12 --out "$w/m7" --ckpt-dir "$w/X" >"$w/m1.log" 2>&1
rc=$?
[ $rc -eq 3 ] || { bad "the first part of m7: exit $rc"; cat "$w/m1.log"; }
lines=$(wc -l <"$w/m7/metrics.jsonl")
mv "$w/X" "$w/X.away"
"$m" "${base[@]}" "${ck[@]}" --out "$w/m7" --ckpt-dir "$w/X" >"$w/m2.log" 2>&1
rc=$?
expect 1 "$w/m2.log" "metrics.jsonl records checkpoint .*X/step-00000012 (step 12) as committed, but --ckpt-dir .*X does not exist" \
  "a missing --ckpt-dir of a run with checkpoints"
[ "$(wc -l <"$w/m7/metrics.jsonl")" -eq "$lines" ] || bad "metrics.jsonl changed: $lines -> $(wc -l <"$w/m7/metrics.jsonl") lines"
[ -e "$w/X" ] && bad "the missing --ckpt-dir was created"
grep -q "): starting over" "$w/m2.log" && bad "it said it was starting over"
mkdir "$w/X" # an empty mount point
"$m" "${base[@]}" "${ck[@]}" --out "$w/m7" --ckpt-dir "$w/X" >"$w/m3.log" 2>&1
rc=$?
expect 1 "$w/m3.log" "but --ckpt-dir .*X holds no checkpoint" "an empty --ckpt-dir of a run with checkpoints"
"$m" "${base[@]}" "${ck[@]}" --out "$w/m7" --ckpt-dir "$w/X" --resume "$w/X.away" >"$w/m4.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "resuming from .*X.away/step-00000012" "$w/m4.log"; then bad "--resume PATH: exit $rc"; cat "$w/m4.log"; fi
# a run that provably never committed one (killed before its first) starts over, saying what it found
never=(--steps 100000 --ckpt-every-steps 100000 --log-every 1)
"$m" "${base[@]}" "${never[@]}" --out "$w/n1" >"$w/n1.log" 2>&1 &
p=$!
for _ in $(seq 1 100); do grep -q "^epoch" "$w/n1.log" 2>/dev/null && break; sleep 0.1; done
{ kill -9 $p; wait $p; } 2>/dev/null
wait $p 2>/dev/null
"$m" "${base[@]}" "${never[@]}" --stop-after 2 --out "$w/n1" >"$w/n2.log" 2>&1
rc=$?
expect 3 "$w/n2.log" "n1 holds an attempt of this run (config.json, metrics.jsonl) that committed no checkpoint ([0-9]* lines of metrics.jsonl record none; --ckpt-dir .*n1/ckpt holds none): starting over" \
  "a run killed before its first checkpoint starts over"

# 4. two runs on one directory ---------------------------------------------------------------------
long=(--steps 100000 --ckpt-every-steps 1000 --log-every 1)
"$m" "${base[@]}" "${long[@]}" --out "$w/two" >"$w/two-a.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q "^epoch" "$w/two-a.log" 2>/dev/null && break; sleep 0.1; done
"$m" "${base[@]}" "${long[@]}" --out "$w/two" >"$w/two-b.log" 2>&1
rc=$?
expect 2 "$w/two-b.log" "--out .*two is in use by another run: .*two/mntrain.lock is held by host $(hostname), pid ${pids[0]}" \
  "a second run on the same --out"
"$m" "${base[@]}" "${long[@]}" --out "$w/two-other" --ckpt-dir "$w/two/ckpt" >"$w/two-c.log" 2>&1
rc=$?
expect 2 "$w/two-c.log" "--ckpt-dir .*two/ckpt is in use by another run" "a second run on the same --ckpt-dir"
kill -0 "${pids[0]}" 2>/dev/null || bad "the first run died: $(tail -3 "$w/two-a.log")"
if [ ! -s "$w/two/config.json" ] || [ ! -s "$w/two/metrics.jsonl" ]; then bad "the first run's outputs were removed"; fi
# the holder dies without a word: its lock is taken over, and the run resumes
{ kill -9 "${pids[0]}"; wait "${pids[0]}"; } 2>/dev/null
wait "${pids[0]}" 2>/dev/null
pids=()
"$m" "${base[@]}" "${long[@]}" --stop-after 3 --out "$w/two" >"$w/two-d.log" 2>&1
rc=$?
expect 3 "$w/two-d.log" "took over the lock of host $(hostname), pid [0-9]*, .*: its process [0-9]* on this host .* is gone" \
  "a dead holder's lock taken over"
# locks of other hosts: by their heartbeat
mkdir -p "$w/hb"
echo '{"job_id":"","host":"elsewhere","pid":1,"user":"x","started":"then","token":"0123456789abcdef"}' >"$w/hb/mntrain.lock"
"$m" "${base[@]}" --steps 2 --out "$w/hb" >"$w/hb1.log" 2>&1
rc=$?
expect 2 "$w/hb1.log" "held by host elsewhere, pid 1, user x, since then (its heartbeat was [0-9]* s ago; a lock is stale after MNT_LOCK_STALE_S=300 s" \
  "a fresh lock of another host"
touch -d '10 minutes ago' "$w/hb/mntrain.lock"
"$m" "${base[@]}" --steps 2 --out "$w/hb" >"$w/hb2.log" 2>&1
rc=$?
expect 0 "$w/hb2.log" "took over the lock of host elsewhere.*heartbeat is 6[0-9][0-9] s old, more than MNT_LOCK_STALE_S=300 s" \
  "a stale lock of another host"
# the same Slurm job id (a requeued job) is the holder itself, without a warning
mkdir -p "$w/rq"
echo '{"job_id":"4242","host":"elsewhere","pid":1,"user":"x","started":"then","token":"0123456789abcdef"}' >"$w/rq/mntrain.lock"
SLURM_JOB_ID=4242 "$m" "${base[@]}" --steps 2 --out "$w/rq" >"$w/rq.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || grep -q "took over" "$w/rq.log"; then bad "a requeued job's own lock: exit $rc"; cat "$w/rq.log"; else echo "ok: a requeued job's own lock"; fi
# a Slurm job that Slurm does not know (any more): gone
if command -v scontrol >/dev/null && timeout 10 scontrol ping >/dev/null 2>&1; then
  mkdir -p "$w/sl"
  echo '{"job_id":"999999","host":"elsewhere","pid":1,"user":"x","started":"then","token":"0123456789abcdef"}' >"$w/sl/mntrain.lock"
  "$m" "${base[@]}" --steps 2 --out "$w/sl" >"$w/sl.log" 2>&1
  rc=$?
  expect 0 "$w/sl.log" "took over the lock of Slurm job 999999.*unknown to Slurm" "the lock of a job Slurm does not know"
else
  echo "note: no Slurm answers: the scontrol case is left out"
fi
[ $fail -eq 0 ] && echo "run_safety: ok"
exit $fail
