#!/usr/bin/env bash
# auto_choice.sh — an "auto" of train's --device, --comm and --precision and of bench step's
# --device and --precision is said once at set-up, with what it became and why, and that is what the
# run then uses (the set-up line naming the device and precision); a value given is not said (one
# process, a PMIx singleton, no Slurm).
#   auto_choice.sh MNTRAIN
# shellcheck disable=SC2015  # ok() always succeeds: "A && ok ... || bad ..." is an if-else here
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$(realpath "$1")
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail=0
"$m" convert synth data --classes 4 --images 32 --size 16 --shards 1 >/dev/null 2>&1 || fail "convert synth"
run=(train --data data --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --steps 1)
show() { sed 's/^/    /' "$1"; }
# once NAME FILE PATTERN: exactly one line of FILE matches PATTERN (an extended regex)
once() {
  local n
  n=$(grep -cE -- "$3" "$2")
  [ "$n" -eq 1 ] && ok "$1: $(grep -E -- "$3" "$2")" || { bad "$1: $n lines match '$3', want 1"; show "$2"; }
}

"$m" "${run[@]}" --out a --precision auto >a.log 2>&1 || { show a.log; fail "train with the autos"; }
# what the run used: "mntrain train: resnet8, ..., cpu fp32 on avx2"
read -r dev prec < <(sed -nE 's/^mntrain train: resnet8, .* parameters, ([a-z]+) (fp32|bf16)( on .*)?$/\1 \2/p' a.log)
[ -n "${dev:-}" ] || { show a.log; fail "no set-up line naming the device and precision"; }
once "train --device auto" a.log "^mntrain train: --device auto: $dev \(.+\)$"
once "train --comm auto" a.log "^mntrain train: --comm auto: $([ "$dev" = cuda ] && echo nccl || echo cpu) \(device $dev\)$"
once "train --precision auto" a.log "^mntrain train: --precision auto: $prec \(.+\)$"
"$m" "${run[@]}" --out b --device cpu --comm cpu --precision fp32 >b.log 2>&1 || { show b.log; fail "train without autos"; }
grep -q -- ' auto: ' b.log && { bad "a run without auto says an auto choice"; show b.log; } || ok "no auto, nothing said"

"$m" bench step --arch resnet8 --size 16 --batch 4 --steps 1 --warmup 0 --device auto --precision auto >c.log 2>&1 ||
  { show c.log; fail "bench step with the autos"; }
read -r dev prec < <(sed -nE 's/^# mntrain bench step: .* classes, ([a-z]+) (fp32|bf16), .*/\1 \2/p' c.log)
[ -n "${dev:-}" ] || { show c.log; fail "bench step: no line naming the device and precision"; }
once "bench step --device auto" c.log "^# --device auto: $dev \(.+\)$"
once "bench step --precision auto" c.log "^# --precision auto: $prec \(.+\)$"
exit $fail
