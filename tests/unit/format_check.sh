#!/usr/bin/env bash
# format_check.sh — the C and CUDA lines changed since BASE are laid out as .clang-format says
# (clang-format-diff over `git diff -U0 BASE`, the working tree included): the tree was not
# mass-reformatted when .clang-format came, so what is checked is what each change writes.
#   tests/unit/format_check.sh [BASE]     BASE: a commit (default: the one that added .clang-format)
# Exit 0 when every changed line is formatted, 1 with clang-format's diff otherwise (apply it with
# `git diff -U0 BASE | clang-format-diff -p1 -i`), 77 without git history or clang-format-diff.
set -u
cd "$(dirname "$0")/../.." || exit 1
fmt=$(command -v clang-format-diff || command -v clang-format-diff-14 || true)
[ -n "$fmt" ] || { echo "SKIP: no clang-format-diff (apt-get install clang-format)"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: not a git checkout"; exit 77; }
base=${1:-$(git log --diff-filter=A --format=%H -- .clang-format | tail -n 1)}
if [ -z "$base" ] || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "SKIP: no base commit (the commit that added .clang-format is not in this history)"
  exit 77
fi
out=$(git diff -U0 --no-color "$base" -- '*.c' '*.h' '*.cu' '*.cuh' | "$fmt" -p1 2>&1)
if [ -n "$out" ]; then
  printf '%s\n' "$out"
  echo "FAIL: the lines above, changed since $(git rev-parse --short "$base"), are not laid out as .clang-format says"
  exit 1
fi
echo "ok: every C/CUDA line changed since $(git rev-parse --short "$base") is formatted (.clang-format)"
