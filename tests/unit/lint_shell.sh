#!/usr/bin/env bash
# lint_shell.sh — shellcheck on every shell script of the project: the job templates and the tools
# beside them, the tests, the benchmarks and CI's own script (.ci/run's lint stage runs this too).
#   tests/unit/lint_shell.sh [SOURCE_DIR]
# Exit 77 (skipped) when shellcheck is not installed.
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v shellcheck >/dev/null 2>&1 || { echo "SKIP: shellcheck not found (apt-get install shellcheck)"; exit 77; }
cd "$root" || exit 1
files=(job_templates/*.sh job_templates/*.sbatch job_templates/tools/*.sh tests/*.sh tests/unit/*.sh tests/cluster/*.sh tests/scale/*.sh
  benchmarks/*.sh .ci/run)
shellcheck "${files[@]}" || { echo "FAIL: shellcheck (above)"; exit 1; }
echo "ok: shellcheck clean: ${#files[@]} scripts"
