#!/usr/bin/env bash
# cli.sh — the mntrain command line: help, version, and clear errors with exit code 2.
#   cli.sh path/to/mntrain
set -u
m=$1
fail=0
export MNT_QUIET_SINGLE=1
expect() { # expect CODE PATTERN -- ARGS...
  local code=$1 pat=$2
  shift 3
  local out rc
  out=$("$m" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pat" <<<"$out"; then
    echo "FAIL: mntrain $*: exit $rc (want $code), output:"
    printf '    %s\n' "$out"
    fail=1
  fi
}
expect 0 'usage: mntrain <command>' -- --help
expect 2 'usage: mntrain <command>' --
expect 0 '^mntrain [0-9]+\.[0-9]+\.[0-9]+' -- --version
expect 2 "unknown command 'frobnicate'" -- frobnicate
expect 0 'usage: srun --mpi=pmix .*bench allreduce' -- bench allreduce --help
expect 0 'allreduce' -- bench --help
expect 2 'unknown benchmark' -- bench nope
expect 2 "unknown option '--bogus'" -- bench allreduce --bogus
expect 2 "-b: 'lots' is not a valid size" -- bench allreduce -b lots
expect 2 'bad value for --datatype' -- bench allreduce -d int8
expect 2 'bad value for -b/-e' -- bench allreduce -b 2M -e 1M
expect 2 'bad value for --topology' -- bench allreduce --topology ring
expect 0 'rank 0 of 1 .* \(no PMIx\)' -- info
expect 0 '# Avg bus bandwidth' -- bench allreduce -b 1K -e 4K -n 2 -w 1
# bench step: bad shapes are exit 2 with a message naming the problem
expect 2 "unknown --arch 'resnet7'" -- bench step --arch resnet7
expect 2 'image size 16 is too small for resnet50' -- bench step --arch resnet50 --size 16 --batch 1
expect 2 'needs classes >= 1' -- bench step --arch resnet8 --size 32 --classes 0
expect 2 'needs classes >= 1, batch >= 1' -- bench step --arch resnet8 --size 32 --batch 0
expect 2 "'x' is not a valid integer" -- bench step --batch x
expect 0 'resnet8 32 px batch 2 threads 1: [0-9.]+ img/s .*MB per image' -- bench step --arch resnet8 --size 32 --batch 2 --steps 1 --threads 1 --classes 10
[ $fail -eq 0 ] && echo "cli: ok"
exit $fail
