#!/usr/bin/env bash
# readme_paths.sh — every path README.md and benchmarks/README.md name in the repository exists:
# a `code span` or a link target that starts with one of the repository's folders (src/ io/
# kernels/ tests/ job_templates/ benchmarks/ cmake/ modules/ .ci/), its first word, globs allowed
# (`src/world.*`). A file moved or removed without its documentation fails here, naming the line.
# Nothing may point outside the repository (../).
#   readme_paths.sh [REPO_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
fail=0
checked=0
for doc in README.md benchmarks/README.md; do
  [ -f "$doc" ] || { echo "FAIL: $doc is missing"; fail=1; continue; }
  base=$(dirname "$doc")
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    # code spans and link targets, one per line
    # shellcheck disable=SC2016 # backquotes are the markdown's, not the shell's
    spans=$(printf '%s\n' "$line" | grep -oE '`[^`]+`|\]\([^)#]+' | sed -E 's/^`//; s/`$//; s/^\]\(//')
    while IFS= read -r s; do
      [ -n "$s" ] || continue
      p=${s%% *}          # the first word: `tests/cluster/ckpt.sh elastic`
      p=${p%[,.:;]}
      case $p in
        ../*) echo "FAIL: $doc:$n names $p, outside the repository"; fail=1; continue ;;
        src/* | io/* | kernels/* | tests/* | job_templates/* | benchmarks/* | cmake/* | modules/* | .ci/*) ;;
        *) continue ;; # a word, a command, a flag: not a path in the repository
      esac
      checked=$((checked + 1))
      if ! compgen -G "$p" >/dev/null && ! compgen -G "$base/$p" >/dev/null; then
        echo "FAIL: $doc:$n names $p, which does not exist"
        fail=1
      fi
    done <<<"$spans"
  done <"$doc"
done
[ $checked -ge 20 ] || { echo "FAIL: only $checked paths found: is the extraction broken?"; fail=1; }
[ $fail -eq 0 ] && echo "readme_paths: ok ($checked paths named, all present)"
exit $fail
