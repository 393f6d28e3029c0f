#!/usr/bin/env bash
# diverge.sh — a run that diverges (--lr 1000 --momentum 0.99 --wd 0 on a small set: the batch-norm
# running variances overflow within a dozen steps, the loss soon after) never ends as a success with
# NaN or Inf in what it leaves (one process, no cluster):
# - without --skip-nonfinite it stops with exit 1 naming the tensor and the step; the checkpoints
#   written before are kept and finite, no summary.json and no --export are written;
# - with --skip-nonfinite every such step is skipped whole (no update, BN statistics restored):
#   the run ends (exit 0) with skipped_steps > 0 and a finite checkpoint and export;
# - mntrain inspect passes those checkpoints (a checkpoint holding NaN or Inf fails it:
#   tests/unit/test_ckpt_finite.c), and --init refuses weights with NaN or Inf.
#   diverge.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$1
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
py=/usr/bin/python3
$py -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py is not installed (install-deps.sh)"
"$m" convert synth "$w/tr" --classes 4 --images 512 --size 16 --shards 1 >/dev/null || fail "convert synth"
run=(train --data "$w/tr" --arch resnet8 --size 16 --batch-per-rank 32 --threads 1 --loader-threads 1
  --lr 1000 --momentum 0.99 --wd 0 --steps 60 --log-every 20 --ckpt-every-steps 4 --keep 3)
# finite DIR...: every float dataset of the HDF5 files given is finite (prints the ones that are not)
finite() {
  $py - "$@" <<'PY'
import sys, h5py, numpy as np
bad = []
for f in sys.argv[1:]:
    def v(n, o):
        if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" and not np.isfinite(o[()]).all():
            bad.append(f"{f}:{n}")
    h5py.File(f, "r").visititems(v)
print(" ".join(bad[:4]))
sys.exit(1 if bad else 0)
PY
}

# stopped
"$m" "${run[@]}" --out "$w/a" --export "$w/a.h5" >"$w/a.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -qE "error: .*step [0-9]+ \(epoch [0-9.]+\): NaN or Inf in (bn|model|optim/momentum)/[a-z0-9._]+|after step [0-9]+ .*NaN or Inf in " "$w/a.log"; then
  ok "the diverged run stopped (exit 1): $(grep -oE "(step|after step) [0-9]+ [^;:]*: NaN or Inf in [^ ;]*" "$w/a.log" | head -n1)"
else
  bad "the diverged run: exit $rc, want 1 with the tensor and step named:"; tail -n 5 "$w/a.log"
fi
[ -e "$w/a.h5" ] && bad "the diverged run wrote its --export"
[ -e "$w/a/summary.json" ] && bad "the diverged run wrote summary.json"
mapfile -t cks < <(ls -d "$w"/a/ckpt/step-* 2>/dev/null)
if [ ${#cks[@]} -gt 0 ]; then
  if out=$(finite "${cks[@]/%//state.h5}"); then ok "its ${#cks[@]} checkpoints are finite"; else bad "non-finite in its checkpoints: $out"; fi
  "$m" inspect "$w/a/ckpt" >"$w/ai.log" 2>&1 || { bad "inspect of the kept checkpoints: exit $?"; cat "$w/ai.log"; }
else
  bad "no checkpoint before the divergence (every 4 steps): the test's run diverges too early to check one"
fi

# skipped
"$m" "${run[@]}" --skip-nonfinite --out "$w/b" --export "$w/b.h5" >"$w/b.log" 2>&1
rc=$?
skipped=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["skipped_steps"])' "$w/b/summary.json" 2>/dev/null)
if [ $rc -eq 0 ] && [ "${skipped:-0}" -gt 0 ]; then ok "--skip-nonfinite: the run ended, $skipped steps skipped"
else bad "--skip-nonfinite: exit $rc, skipped_steps '${skipped:-}' (want 0 and > 0):"; tail -n 5 "$w/b.log"; fi
grep -q "the step is skipped (no update, batch-norm statistics restored" "$w/b.log" || bad "no skipped step was said"
if out=$(finite "$w/b.h5" "$w"/b/ckpt/step-*/state.h5); then ok "--skip-nonfinite: the export and checkpoints are finite"
else bad "--skip-nonfinite: non-finite values in $out"; fi
"$m" inspect "$w/b/ckpt" >"$w/bi.log" 2>&1 || { bad "inspect after --skip-nonfinite: exit $?"; cat "$w/bi.log"; }

# --init with an infinity in a weight: refused, naming it
cp "$w/b.h5" "$w/inf.h5"
$py -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/fc.weight"]; a = d[()]; a.flat[3] = np.inf; d[...] = a' "$w/inf.h5"
"$m" train --data "$w/tr" --arch resnet8 --size 16 --batch-per-rank 32 --threads 1 --steps 2 --init "$w/inf.h5" \
  --out "$w/c" >"$w/c.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q -- "--init .*inf.h5: /model/fc.weight holds NaN or Inf" "$w/c.log"; then ok "--init refuses an infinity, naming it"
else bad "--init with an infinity in fc.weight: exit $rc"; cat "$w/c.log"; fi
finish diverge "$fail"
