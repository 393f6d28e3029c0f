#!/usr/bin/env bash
# signal_commit.sh — how long a stop request (SIGTERM, as Slurm sends it before its KillWait ends)
# takes to make a run's state durable, one process on the CPU (a PMIx singleton, no Slurm).
#   benchmarks/signal_commit.sh [path/to/mntrain] [runs, default 3]
# For each model, `runs` times each:
#  (a) an asynchronous checkpoint in flight whose share is on disk (a checkpoint every step; the
#      signal once INCOMING/share-00000 exists, during step 3): SIGTERM -> the checkpoint of step 2
#      committed (ROOT/step-00000002/MANIFEST.json appears; mnt_ckpt_commit_now). The process is
#      then killed: what it does next is (b)'s.
#  (b) no checkpoint in flight (none until the end): SIGTERM 0.2 s into step 4 -> the synchronous
#      checkpoint of step 4, committed at the step boundary (its MANIFEST.json appears) -> the
#      process exits 3. Both are mostly the rest of the step: what a KillWait must cover without (a).
# Times are this script's clock (date +%s.%N, polled every ~10 ms), so a few ms of resolution; the
# step time is between the --timestamps of steps 2 and 3 of (b). Prints a table (medians over the
# runs) and exits 1 when a run went wrong (no commit in (a), an exit other than 3 in (b)).
# Quiet machine only: the numbers are step-time bound, and another process's load moves them.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
m=${1:-$here/../build/mntrain}
m=$(cd "$(dirname "$m")" && pwd)/$(basename "$m")
runs=${2:-3}
w=$(mktemp -d /var/tmp/mntrain-signal-commit.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$w"' EXIT
threads=${MNT_BENCH_THREADS:-$(nproc)}
# arch size batch-per-rank
configs=("resnet50 224 32" "resnet18 128 32")

now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a - b}'; } # a - b
ts_of() { date -d "$1" +%s.%N; } # an ISO 8601 UTC time (--timestamps) as seconds
# wait_line FILE PATTERN SECONDS: the first line matching (grep -E), or 1 at the deadline / exit
wait_line() {
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do
    grep -m1 -E "$2" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
# wait_file GLOB SECONDS: 0 as soon as a file matches
wait_file() {
  local end=$((SECONDS + $2))
  while [ $SECONDS -lt $end ]; do
    compgen -G "$1" >/dev/null && return 0
    sleep 0.01
  done
  return 1
}
# median DIGITS VALUE...: "-" when there are none
median() {
  local d=$1
  shift
  [ $# -eq 0 ] && { echo -; return; }
  printf '%s\n' "$@" | sort -g |
    awk -v d="$d" '{v[NR] = $1} END {printf "%." d "f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

echo "# signal_commit: $(date -u +%FT%TZ) on $(nproc) cores ($threads compute threads), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $runs run(s), $w"
"$m" convert synth "$w/data" --classes 4 --images 256 --size 224 --shards 1 >/dev/null || { echo "convert failed"; exit 1; }
wrong=0
rows=()
for cfg in "${configs[@]}"; do
  read -r arch size batch <<<"$cfg"
  common=(train --data "$w/data" --arch "$arch" --size "$size" --batch-per-rank "$batch" --threads "$threads"
          --steps 1000 --log-every 1 --timestamps)
  a=() bc=() be=() steps=() mb=
  for ((i = 1; i <= runs; i++)); do
    # (a) a checkpoint every step: the one of step 2 in flight, its share on disk, then SIGTERM
    out="$w/a-$arch-$i"
    "$m" "${common[@]}" --ckpt-every-steps 1 --out "$out" >"$out.log" 2>&1 &
    pid=$!
    if wait_line "$out.log" ' step 2/1000 ' 600 >/dev/null && wait_file "$out/ckpt/incoming-*/share-00000" 120; then
      t_sig=$(now)
      kill -TERM "$pid"
      if wait_file "$out/ckpt/step-00000002/MANIFEST.json" 60; then
        t=$(now)
        if grep -qE ' step 3/1000 ' "$out.log"; then
          echo "# $arch run $i (a): step 3 ended first (a step boundary committed it): not counted"
        else
          a+=("$(sub "$t" "$t_sig")")
        fi
      else
        echo "# $arch run $i (a): WRONG: step-00000002 not committed within 60 s of SIGTERM"; wrong=$((wrong + 1))
      fi
      mb=$(stat -c %s "$out"/ckpt/step-00000002/state.h5 2>/dev/null | awk '{printf "%.1f", $1 / 1e6}')
    else
      echo "# $arch run $i (a): WRONG: no step 2 or no share record"; tail -n 5 "$out.log"; wrong=$((wrong + 1))
    fi
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    pid=
    rm -rf "$out"
    # (b) no checkpoint until the end: SIGTERM 0.2 s into step 4
    out="$w/b-$arch-$i"
    "$m" "${common[@]}" --ckpt-every-steps 100000 --out "$out" >"$out.log" 2>&1 &
    pid=$!
    l2=$(wait_line "$out.log" ' step 2/1000 ' 600) && l3=$(wait_line "$out.log" ' step 3/1000 ' 600)
    if [ -n "${l3:-}" ]; then
      steps+=("$(sub "$(ts_of "${l3%% *}")" "$(ts_of "${l2%% *}")")")
      sleep 0.2
      t_sig=$(now)
      kill -TERM "$pid"
      if wait_file "$out/ckpt/step-0*/MANIFEST.json" 600; then bc+=("$(sub "$(now)" "$t_sig")"); fi
      wait "$pid"
      rc=$?
      t=$(now)
      pid=
      if [ $rc -eq 3 ]; then
        be+=("$(sub "$t" "$t_sig")")
      else
        echo "# $arch run $i (b): WRONG: exit $rc, expected 3"; tail -n 5 "$out.log"; wrong=$((wrong + 1))
      fi
    else
      echo "# $arch run $i (b): WRONG: no step 3"; tail -n 5 "$out.log"; wrong=$((wrong + 1))
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      pid=
    fi
    rm -rf "$out"
  done
  rows+=("$(printf '%-16s %8s %10s %15s %15s %13s   %s' "$arch/$size b$batch" "$(median 2 "${steps[@]}")" "${mb:--}" \
    "$(median 3 "${a[@]}")" "$(median 2 "${bc[@]}")" "$(median 2 "${be[@]}")" "${a[*]:-none}")")
done
echo "#"
printf '# %-16s %8s %10s %15s %29s\n' "" "" "" "(a) in flight" "(b) none in flight"
printf '# %-16s %8s %10s %15s %15s %13s   %s\n' config "step s" "ckpt MB" "signal->commit" "signal->commit" \
  "signal->exit" "(a) each run, s"
printf '  %s\n' "${rows[@]}"
echo "# wrong: $wrong"
[ $wrong -eq 0 ]
