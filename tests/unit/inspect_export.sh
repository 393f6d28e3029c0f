#!/usr/bin/env bash
# inspect_export.sh — `mntrain inspect` of what train writes besides checkpoints and datasets (one
# process, a PMIx singleton, no Slurm):
# - a model train --export wrote (io/ckpt/export.c): exit 0, said to be an export, with its arch, its
#   tensor count and parameters as h5py counts them, the mntrain that wrote it, and that train --init
#   takes it (which a run then does); cut short, or with a NaN in a tensor: exit 1 naming the file
#   (and the tensor), no HDF5 error stack;
# - a checkpoint's batch split as its writer had it: the run's step 4 (1 rank, global batch 8)
#   says "8 per rank"; its manifest made a 3-rank writer's (world_size 3, two empty shares, as after a
#   shrink from 1 rank's --batch-per-rank 8 would be) says "2 or 3 per rank, 8 per rank at the start".
#   inspect_export.sh MNTRAIN
# shellcheck disable=SC2015  # ok() always succeeds: "A && ok ... || bad ..." is an if-else here
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$(realpath "$1")
py=/usr/bin/python3
$py -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py is not installed (install-deps.sh)"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
cd "$w" || exit 1
fail=0
"$m" convert synth data --classes 4 --images 64 --size 16 --shards 1 >/dev/null 2>&1 || fail "convert synth"
run=(train --data data --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --log-every 1)
"$m" "${run[@]}" --steps 4 --ckpt-every-steps 4 --out run --export ex.h5 >run.log 2>&1 || { cat run.log; fail "the run"; }

# ---- the export ----------------------------------------------------------------------------------
read -r nt np < <($py - ex.h5 <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
t = [f["model"][k] for k in f["model"]] + [f["bn"][k] for k in f["bn"]]
print(len(t), sum(f["model"][k].size for k in f["model"]))
PY
)
"$m" inspect ex.h5 >ex.out 2>&1
rc=$?
sed 's/^/    /' ex.out
[ $rc -eq 0 ] && grep -q '^model ex.h5: exported by mntrain train --export' ex.out && grep -q 'arch resnet8' ex.out &&
  grep -q "written by mntrain [0-9]" ex.out && grep -q "  $nt tensors: .*($np parameters" ex.out &&
  grep -q 'train --init ex.h5' ex.out && ok "the export: said to be one, resnet8, $nt tensors, $np parameters, --init" ||
  bad "inspect of an export: exit $rc, want 0 with arch resnet8, $nt tensors and $np parameters"
"$m" "${run[@]}" --steps 1 --out init --init ex.h5 >init.log 2>&1 && ok "train --init ex.h5 takes it" ||
  { bad "train --init ex.h5 failed"; sed 's/^/    /' init.log; }

# refused NAME PATTERN...: exit 1, the patterns in the error, no HDF5 diagnostics
refused() {
  local name=$1 good=1 p
  shift
  "$m" inspect "$name.h5" >"$name.out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || good=0
  for p in "$@"; do grep 'error' "$name.out" | grep -qF -- "$p" || good=0; done
  grep -q 'HDF5-DIAG' "$name.out" && good=0
  if [ $good -eq 1 ]; then ok "$name: exit 1: $(grep -m1 error "$name.out" | cut -c1-200)"
  else bad "$name: exit $rc, want 1 naming: $*"; sed 's/^/    /' "$name.out"; fi
}
head -c $(($(stat -c %s ex.h5) / 2)) ex.h5 >cut.h5
refused cut "cut.h5"
cp ex.h5 nan.h5 && $py -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f["model"]["fc.weight"][0, 1] = float("nan")' nan.h5
refused nan "nan.h5" "/model/fc.weight" "NaN"

# ---- a checkpoint's batch split ----------------------------------------------------------------------
"$m" inspect run/ckpt/step-00000004 >one.out 2>&1
grep -q 'global batch 8 (8 per rank)' one.out && ok "1 rank: global batch 8 (8 per rank)" ||
  { bad "1 rank: not 'global batch 8 (8 per rank)'"; sed 's/^/    /' one.out; }
cp -r run/ckpt three && $py - three/step-00000004/MANIFEST.json <<'PY'
import json, sys
p = sys.argv[1]
m = json.load(open(p))
s0 = m["shares"][0]
empty = "2d06800538d394c2"  # XXH3-64 of no bytes
m["world_size"] = 3
m["shares"] = [s0] + [{"rank": r, "lo": s0["hi"], "hi": s0["hi"], "packed": 0, "bytes": 0, "xxh3": empty} for r in (1, 2)]
json.dump(m, open(p, "w"))
PY
"$m" inspect three/step-00000004 >three.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q 'written by 3 ranks' three.out &&
  grep -q 'global batch 8 (2 or 3 per rank, 8 per rank at the start)' three.out &&
  ok "3 ranks: global batch 8 (2 or 3 per rank, 8 per rank at the start)" ||
  { bad "3 ranks: exit $rc, not the writer's split"; sed 's/^/    /' three.out; }
exit $fail
