#!/usr/bin/env bash
# bench_allreduce.sh — `mntrain bench allreduce` across the two nodes prints a complete,
# correct nccl-tests style table, for each type and topology (small sizes: this is a test).
#   bench_allreduce.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0
for args in "-d float" "-d bf16 -o avg --topology hier" "-d half --topology hier"; do
  # shellcheck disable=SC2086
  "$here/srun_test.sh" 120 -N2 -n4 --ntasks-per-node=2 -- "$m" bench allreduce -b 1K -e 4M -f 4 -n 3 -w 1 $args >"$out" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$out"; exit 77; }
  cat "$out"
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +(float|bf16|half) +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$out")
  if [ $rc -ne 0 ] || [ "$rows" -ne 7 ] || ! grep -q '# Out of bounds values : 0 OK' "$out" ||
     ! grep -qE '# Avg bus bandwidth +: [0-9.]+ GB/s' "$out"; then
    echo "FAIL: bench allreduce $args: exit $rc, $rows correct rows of 7"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "bench_allreduce: ok"
exit $fail
