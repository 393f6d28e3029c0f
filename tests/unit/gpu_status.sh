#!/usr/bin/env bash
# gpu_status.sh — no GPU code goes unaccounted for: the newest commit that changed the GPU code
# (kernels/'s sources, src/backend/cuda/, src/comm/nccl/) is named by its short hash in README.md's
# GPU status and in the GPU row of benchmarks/README.md's "Where things stand", so that a reader
# sees whether the figure there is for this code or for older code, and the next lent GPU knows
# what to measure first. A GPU commit is followed by a commit that names it (measured, or "not run
# on a GPU yet"). Skips (77) without git history (an exported tree).
#   gpu_status.sh [REPO_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
if ! command -v git >/dev/null || ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "SKIP: no git history here: the newest GPU commit cannot be found"
  exit 77
fi
paths=(':(glob)kernels/*.cu' ':(glob)kernels/*.cuh' ':(glob)kernels/*.h' src/backend/cuda src/comm/nccl)
newest=$(git log -1 --format=%h --abbrev=7 -- "${paths[@]}")
[ -n "$newest" ] || { echo "SKIP: no commit changed the GPU code (a shallow clone?)"; exit 77; }
when=$(git log -1 --format=%ad --date=short "$newest")
fail=0
grep -qF "$newest" README.md ||
  { echo "FAIL: README.md's GPU status does not name $newest ($when), the newest commit that changed the GPU code"; fail=1; }
row=$(grep -E '^\| GPU step' benchmarks/README.md | head -1)
[ -n "$row" ] || { echo "FAIL: benchmarks/README.md has no '| GPU step' row in 'Where things stand'"; fail=1; }
if [ -n "$row" ] && [[ $row != *"$newest"* ]]; then
  echo "FAIL: benchmarks/README.md's GPU row does not name $newest ($when), the newest GPU commit:"
  echo "$row"
  fail=1
fi
[ $fail = 0 ] && echo "ok: the newest GPU commit $newest ($when) is named in README.md and benchmarks/README.md"
exit $fail
