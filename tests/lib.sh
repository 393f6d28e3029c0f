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
#   train_set [--val VALDIR] KIND MNTRAIN DIR SYNTH_ARGS...
#                       the training set of a test that trains, by KIND: synth (format 2: convert synth DIR
#                       SYNTH_ARGS, the test's own set), jpeg or raw (format 3: tests/imagefolder.py's 120
#                       non-square JPEGs in 10 classes, kept in DIR.src, converted with convert imagenet
#                       --resize 32 --codec KIND --shards 2; --val: also VALDIR, a format 3 validation set
#                       of 3 pictures per class, by convert imagenet --val --labels). Sets train_size, the
#                       --size to train at: SYNTH_ARGS' --size for synth, 24 for format 3. Returns 77
#                       ("SKIP: ..." on stderr) without numpy or PIL, 2 for another KIND or --val with
#                       synth, 1 when converting fails (its output shown; else it is in DIR.log)

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

# shellcheck disable=SC2034 # train_size: read by the script that sources this file
train_set() {
  local val=""
  if [ "$1" = --val ]; then val=$2; shift 2; fi
  local kind=$1 m=$2 dir=$3
  shift 3
  case $kind in
    synth)
      [ -z "$val" ] || { echo "train_set: --val is for the format 3 sets" >&2; return 2; }
      train_size=16
      local prev="" a
      for a in "$@"; do
        [ "$prev" = --size ] && train_size=$a
        prev=$a
      done
      "$m" convert synth "$dir" "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
      ;;
    jpeg | raw)
      train_size=24
      local src=$dir.src more=()
      [ -n "$val" ] && more=(--val 3)
      /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/imagefolder.py" "$src" "${more[@]}" >"$dir.log" 2>&1
      case $? in
        0) ;;
        77) echo "SKIP: no format 3 training set: $(sed -n 's/^SKIP: //p' "$dir.log")" >&2; return 77 ;;
        *) cat "$dir.log"; return 1 ;;
      esac
      "$m" convert imagenet "$src/train" "$dir" --resize 32 --codec "$kind" --shards 2 >>"$dir.log" 2>&1 ||
        { cat "$dir.log"; return 1; }
      if [ -n "$val" ]; then
        "$m" convert imagenet "$src/val" "$val" --val --labels "$src/val_labels.txt" --resize 32 --codec "$kind" \
          --shards 1 >>"$dir.log" 2>&1 || { cat "$dir.log"; return 1; }
      fi
      ;;
    *) echo "train_set: unknown kind '$kind' (synth, jpeg or raw)" >&2; return 2 ;;
  esac
}
