#!/usr/bin/env bash
# readme_paths.sh — every path README.md and the folders' READMEs (benchmarks/README.md,
# io/ckpt/README.md, tests/README.md, ...: every */README.md and */*/README.md) name in the
# repository exists: a `code span` or a link target that starts with one of the repository's folders
# (src/ io/ kernels/ tests/ job_templates/ benchmarks/ cmake/ modules/ .ci/), from the top or from
# the README's own folder, its first word, globs allowed (`src/world.*`); and one that starts with
# ../, from the README's own folder (`../../README.md`). A file moved or removed without its
# documentation fails here, naming the line. Nothing may point outside the repository.
#   readme_paths.sh [REPO_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 1
root=$(pwd -P)
fail=0
checked=0
docs=(README.md benchmarks/README.md)
for doc in */README.md */*/README.md; do
  case $doc in build* | gpu-bundle/* | benchmarks/README.md) continue ;; esac
  docs+=("$doc")
done
for doc in "${docs[@]}"; do
  [ -f "$doc" ] || { echo "FAIL: $doc is missing"; fail=1; continue; }
  base=$(dirname "$doc")
  # code spans and link targets, each as LINE:TEXT
  # shellcheck disable=SC2016 # backquotes are the markdown's, not the shell's
  while IFS= read -r m; do
    n=${m%%:*}
    s=${m#*:}
    case $s in
      '`'*) s=${s#\`}; s=${s%\`} ;;
      ']('*) s=${s#](} ;;
    esac
    [ -n "$s" ] || continue
    p=${s%% *}          # the first word: `tests/cluster/ckpt.sh elastic`
    p=${p%[,.:;]}
    case $p in
      ../*)
        checked=$((checked + 1))
        case $(realpath -m "$root/$base/$p")/ in
          "$root"/*) ;;
          *) echo "FAIL: $doc:$n names $p, outside the repository"; fail=1; continue ;;
        esac
        compgen -G "$base/$p" >/dev/null || { echo "FAIL: $doc:$n names $p, which does not exist"; fail=1; }
        continue ;;
      src/* | io/* | kernels/* | tests/* | job_templates/* | benchmarks/* | cmake/* | modules/* | .ci/*) ;;
      *) continue ;; # a word, a command, a flag: not a path in the repository
    esac
    checked=$((checked + 1))
    if ! compgen -G "$p" >/dev/null && ! compgen -G "$base/$p" >/dev/null; then
      echo "FAIL: $doc:$n names $p, which does not exist"
      fail=1
    fi
  done < <(grep -noE '`[^`]+`|\]\([^)#]+' "$doc")
done
[ $checked -ge 20 ] || { echo "FAIL: only $checked paths found: is the extraction broken?"; fail=1; }
[ $fail -eq 0 ] && echo "readme_paths: ok ($checked paths named in ${#docs[@]} READMEs, all present)"
exit $fail
