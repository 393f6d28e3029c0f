#!/usr/bin/env bash
# bench_allreduce.sh — `mntrain bench allreduce` across the two nodes prints nccl-tests'
# all_reduce_perf table, complete and correct, for each type (float, bf16 as bfloat16, half,
# double), op and topology (small sizes: this is a test):
# - the header lines: test starting, nThread ... validation, "# Using devices" and one
#   "#  Rank  r Group  0 Pid ... on NODE device ..." line per rank, then nccl-tests' three column
#   header lines byte for byte;
# - 7 rows of size count type redop root, then time algbw busbw #wrong out of place and again in
#   place, #wrong 0 in both;
# - "# Out of bounds values : 0 OK", and `awk '/Avg bus bandwidth/{print $NF}'` prints a number > 0.
#   bench_allreduce.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
hdr=$(mktemp)
trap 'rm -f "$out" "$hdr"' EXIT
# nccl-tests 2.17's column header (src/common.cu), trailing blanks included
cat >"$hdr" <<'EOF'
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
EOF
fail=0
for args in "-d float" "-d bf16 -o avg --topology hier" "-d half --topology hier" "-d double -o avg"; do
  read -r _ dt rest <<<"$args"
  case $dt in bf16) type=bfloat16 ;; *) type=$dt ;; esac
  case $rest in *avg*) op=avg ;; *) op=sum ;; esac
  # shellcheck disable=SC2086
  "$here/srun_test.sh" 120 -N2 -n4 --ntasks-per-node=2 -- "$m" bench allreduce -b 1K -e 4M -f 4 -n 3 -w 1 $args >"$out" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$out"; exit 77; }
  cat "$out"
  why=()
  [ $rc -eq 0 ] || why+=("exit $rc")
  grep -q '^# Collective test starting: ' "$out" || why+=("no 'Collective test starting' line")
  grep -qE '^# nThread 1 nGpus 1 minBytes 1024 maxBytes 4194304 step: 4\(factor\) warmup iters: 1 iters: 3 agg iters: 1 validation: 1 graph: 0$' "$out" ||
    why+=("no nThread line")
  grep -qx '# Using devices' "$out" || why+=("no '# Using devices'")
  ranks=$(grep -cE '^#  Rank  [0-3] Group  0 Pid +[0-9]+ on +[^ ]+ device +-?[0-9]+ \[[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\] ' "$out")
  [ "$ranks" -eq 4 ] || why+=("$ranks '#  Rank' lines of 4")
  grep -F -x -f "$hdr" "$out" | cmp -s - "$hdr" || why+=("the column header differs from nccl-tests'")
  rows=$(grep -cE "^ +[0-9]+ +[0-9]+ +$type +$op +-1( +[0-9.]+){3} +0( +[0-9.]+){3} +0\$" "$out")
  [ "$rows" -eq 7 ] || why+=("$rows correct rows of 7")
  grep -qx '# Out of bounds values : 0 OK' "$out" || why+=("no '# Out of bounds values : 0 OK'")
  avg=$(awk '/Avg bus bandwidth/{print $NF}' "$out")
  awk -v a="$avg" 'BEGIN { exit !(a ~ /^[0-9][0-9.e+-]*$/ && a + 0 > 0) }' ||
    why+=("awk '/Avg bus bandwidth/{print \$NF}' gives '$avg', not a bandwidth")
  if [ ${#why[@]} -gt 0 ]; then
    msg=$(printf '%s; ' "${why[@]}")
    echo "FAIL: bench allreduce $args: ${msg%; }"
    fail=1
  fi
done
[ $fail -eq 0 ] && echo "bench_allreduce: ok"
exit $fail
