#!/usr/bin/env bash
# run_keys.sh — what defines a run is listed once (src/cmd/train_runkeys.h): two tiny runs (one
# process, a PMIx singleton) whose options make every key's condition hold in one of them (lars with
# --bn-eval recompute and --target-top1; rmsprop-warmup) write config.json, and test_run_keys checks
# that every key of the table is there and that a changed (or missing) value of each is refused by
# the resume's check, naming the key.
#   run_keys.sh MNTRAIN TEST_RUN_KEYS
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, finish
m=$(realpath "$1")
t=$(realpath "$2")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail=0
"$m" convert synth data --classes 4 --images 32 --size 16 --shards 1 >/dev/null 2>&1 || fail "convert synth"
run=(train --data data --val data --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --steps 2)
"$m" "${run[@]}" --out a --optimizer lars --bn-eval recompute --target-top1 0.999 >a.log 2>&1 ||
  { cat a.log; fail "the lars run"; }
"$m" "${run[@]}" --out b --optimizer rmsprop-warmup >b.log 2>&1 || { cat b.log; fail "the rmsprop-warmup run"; }
if "$t" a/config.json b/config.json >t.log 2>&1; then
  ok "$(tail -n 1 t.log)"
else
  grep -v ": error: " t.log
  bad "a key of the run table is not written or not checked"
fi
finish run_keys "$fail"
