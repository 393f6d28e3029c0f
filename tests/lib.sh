# shellcheck shell=bash
# lib.sh — the helpers every shell test shares, sourced (tests/unit/X.sh: "$(dirname "$0")/../lib.sh";
# tests/cluster/lib.sh sources it for the cluster tests). defines:
#   ok MSG...           prints "ok: MSG"
#   bad MSG...          prints "FAIL: MSG" and sets fail=1; the test goes on (it ends with: exit $fail,
#                       or finish). The script sets fail=0 itself before its first check.
#   fail MSG...         prints "FAIL: MSG", then runs the script's on_fail function if it has one
#                       (e.g. to show a job's output), and exits 1 at once
#   skip MSG...         prints "SKIP: MSG" on stderr and exits 77 at once (CTest SKIP_RETURN_CODE 77:
#                       skipped, never passed)
#   left_out MSG...     a case that cannot run here: prints "note: left out: MSG" and remembers it
#   finish NAME STATUS  the end of a test that may have left cases out (STATUS: "$fail"): exit 1 when
#                       a check failed (STATUS != 0); else exit 77 naming every case left out ("SKIP: NAME: ... left
#                       out"), since a test that did not run all its cases has not passed; else prints
#                       "NAME: ok" and exits 0

ok() { echo "ok: $*"; }

bad() {
  echo "FAIL: $*"
  # shellcheck disable=SC2034 # read by the script that sources this file
  fail=1
}

fail() {
  echo "FAIL: $*"
  if declare -F on_fail >/dev/null; then on_fail; fi
  exit 1
}

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

MNT_LEFT_OUT=()
left_out() {
  echo "note: left out: $*"
  MNT_LEFT_OUT+=("$*")
}

finish() {
  if [ "${2:-1}" -ne 0 ]; then
    echo "$1: FAILED"
    exit 1
  fi
  if [ ${#MNT_LEFT_OUT[@]} -gt 0 ]; then
    local IFS=';'
    echo "SKIP: $1: every case that ran passed, but ${#MNT_LEFT_OUT[@]} left out: ${MNT_LEFT_OUT[*]}" >&2
    exit 77
  fi
  echo "$1: ok"
  exit 0
}
