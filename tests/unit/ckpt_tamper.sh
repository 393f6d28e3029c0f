#!/usr/bin/env bash
# ckpt_tamper.sh — a checkpoint whose manifest disagrees with it is a damaged checkpoint (one process,
# a PMIx singleton, no Slurm).
#   ckpt_tamper.sh MNTRAIN
# A run of 12 steps stopped after 8 (checkpoints at steps 4 and 8) is copied once per case; the copy's
# step 8 is tampered with and the same command resumes it. Each case must either fall back to step 4
# with a warning naming step-00000008 (or the planted directory), or resume from step 8, and in both
# ways end with weights and BN statistics bit-identical to an uninterrupted run's:
#   state-step     "state": {"step": 4} in the manifest (the weights are step 8's)
#   dup-key        a second "step": 2 appended to the manifest's state (duplicate keys)
#   no-shares      "shares": [] and a weight zeroed in state.h5 (no share left to hash)
#   huge-bytes     a dataset's "bytes" 2^40 (an allocation of a terabyte)
#   huge-step      state.step 10^18 (a negative count of steps to do)
#   huge-batch     state.global_batch 2^62 (an int overflow)
#   off-grid       state.cursor 3 (not on the batch grid)
#   state-list     "state": [] (not an object)
#   config         the manifest's "config" edited (its warmup_epochs; the file's copy is not)
#   wrong-step     the manifest's step 4 in directory step-00000008
#   dir-renamed    step-00000008 copied as step-00000010 (its manifest says 8)
#   noverify-state --no-ckpt-verify with /train_state and the manifest's state agreeing, cursor 3:
#                  the training state is checked even where the checksums are not
#   nonfinite      --no-ckpt-verify with an infinity in /bn/bn1.running_var: so are the tensors' values
#   link-file      state.h5 a symbolic link to a good copy elsewhere (not followed)
#   link-manifest  MANIFEST.json a symbolic link to a good copy elsewhere (not followed)
#   link-dir       step-00000010 a symbolic link to a good copy of step 8 elsewhere (not followed)
# And a finished run whose summary.json is gone: the same command rebuilds it from metrics.jsonl
# ("rebuilt_from"), and `mntrain report` reads the run.
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$1
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null || skip "python3-h5py is not installed (install-deps.sh)"
cd "$w" || exit 1
"$m" convert synth data --classes 4 --images 64 --size 16 --shards 1 >/dev/null || fail "convert synth"
cmd=("$m" train --data data --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --steps 12
  --ckpt-every-steps 4 --keep 3 --log-every 1)
"${cmd[@]}" --out ref --export ref.h5 >ref.log 2>&1 || { cat ref.log; fail "the uninterrupted run"; }
"${cmd[@]}" --out base --stop-after 8 >base.log 2>&1
rc=$?
[ $rc -eq 3 ] || { cat base.log; fail "the run stopped after 8 steps exited $rc, expected 3"; }
if [ ! -f base/ckpt/step-00000008/MANIFEST.json ] || [ ! -f base/ckpt/step-00000004/MANIFEST.json ]; then
  ls -R base
  fail "no checkpoints at steps 4 and 8"
fi

# same A.h5 B.h5: every dataset of A in B, bit for bit
same() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if n not in b or not np.array_equal(a[n][()], b[n][()])]
if bad: print(f"{len(bad)} of {len(names)} datasets differ: {bad[:4]}")
sys.exit(1 if bad or not names else 0)
PY
}
# edit MANIFEST PYTHON: m (the manifest, parsed) changed by PYTHON, written back
edit() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
p, code = sys.argv[1], sys.argv[2]
m = json.load(open(p))
exec(code)
json.dump(m, open(p, "w"), indent=1, sort_keys=True)
PY
}
# dataset_at MANIFEST NAME: "OFFSET BYTES" of dataset NAME
dataset_at() {
  /usr/bin/python3 -c 'import json, sys
d = [d for d in json.load(open(sys.argv[1]))["datasets"] if d["name"] == sys.argv[2]][0]
print(d["offset"], d["bytes"])' "$1" "$2"
}

# check NAME EXPECT WHAT [TRAIN FLAGS...]: resume the copy NAME (already tampered with); EXPECT is
# fallback (a warning matching WHAT, resumed from step 4) or resume (from step 8; WHAT "")
check() {
  local name=$1 expect=$2 what=$3 log=$1.out
  shift 3
  checked=$((checked + 1))
  "${cmd[@]}" --out "$name" --export "$name.h5" "$@" >"$log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { cat "$log"; fail "$name: the resume exited $rc, expected 0"; }
  if [ "$expect" = fallback ]; then
    grep -q "resuming from $name/ckpt/step-00000004 " "$log" || { cat "$log"; fail "$name: did not fall back to step 4"; }
    grep -q "$what" "$log" || { cat "$log"; fail "$name: no warning naming $what"; }
    # metrics.jsonl records step 8: the warning says what became of it (damaged and kept, not gone)
    if [ -d "$name/ckpt/step-00000008" ] && ! grep -q "records a newer checkpoint.*it is damaged (said above) and kept" "$log"; then
      cat "$log"; fail "$name: the warning about step 8 does not say it is damaged and kept"
    fi
  else
    grep -q "resuming from $name/ckpt/step-00000008 " "$log" || { cat "$log"; fail "$name: did not resume from step 8"; }
  fi
  same ref.h5 "$name.h5" || { cat "$log"; fail "$name: the final weights are not the uninterrupted run's"; }
  ok "$name: $(grep -m1 -oE "(checkpoint [^ ]* is damaged: .{0,110}|[^ ]*: a symbolic link, not followed.{0,40})" "$log" ||
    echo resumed from step 8), then weights identical to the uninterrupted run's"
}
fresh() { rm -rf "$1" && cp -a base "$1" && man=$1/ckpt/step-00000008/MANIFEST.json && h5=$1/ckpt/step-00000008/state.h5; }
damaged8='step-00000008 is damaged'
checked=0 # cases that reached check (a case whose set-up failed must not pass unseen)

fresh state-step && edit "$man" 'm["state"]["step"] = 4' && check state-step fallback "$damaged8"
fresh dup-key && /usr/bin/python3 - "$man" <<'PY' && check dup-key fallback "$damaged8.*duplicate"
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index('"state": {')
j = s.index("}", i)
open(p, "w").write(s[:j] + ', "step": 2' + s[j:])
PY
fresh no-shares && edit "$man" 'm["shares"] = []' &&
  read -r off n < <(dataset_at "$man" /model/conv1.weight) &&
  dd if=/dev/zero of="$h5" bs=1 seek="$off" count="$n" conv=notrunc status=none &&
  check no-shares fallback "$damaged8.*shares"
fresh huge-bytes && edit "$man" 'm["datasets"][0]["bytes"] = 2**40' && check huge-bytes fallback "$damaged8"
fresh huge-step && edit "$man" 'm["state"]["step"] = 10**18' && check huge-step fallback "$damaged8"
fresh huge-batch && edit "$man" 'm["state"]["global_batch"] = 2**62' && check huge-batch fallback "$damaged8"
fresh off-grid && edit "$man" 'm["state"]["cursor"] = 3' && check off-grid fallback "$damaged8"
fresh state-list && edit "$man" 'm["state"] = []' && check state-list fallback "$damaged8"
fresh config && edit "$man" 'm["config"]["warmup_epochs"] = 1.0' && check config fallback "$damaged8.*config"
fresh wrong-step && edit "$man" 'm["step"] = 4' && check wrong-step fallback "$damaged8.*says step 4"
fresh dir-renamed && cp -a dir-renamed/ckpt/step-00000008 dir-renamed/ckpt/step-00000010 &&
  check dir-renamed resume ""
grep -q "step-00000010 is damaged: .*says step 8" dir-renamed.out ||
  { cat dir-renamed.out; fail "dir-renamed: no warning naming step-00000010"; }
# the state in the file and in the manifest agree (both edited), the checksums are not checked
fresh noverify-state && read -r off n < <(dataset_at "$man" /train_state) && /usr/bin/python3 - "$man" "$h5" "$off" <<'PY' &&
import json, sys
p, h5, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = json.load(open(p))
m["state"]["cursor"] = 3
txt = json.dumps(m["state"], separators=(",", ":"), sort_keys=True).encode().ljust(4096, b" ")
with open(h5, "r+b") as f:
    f.seek(off)
    f.write(txt)
json.dump(m, open(p, "w"), indent=1, sort_keys=True)
PY
  check noverify-state fallback "$damaged8.*out of range" --no-ckpt-verify
# an infinity in a BN statistic, unverified: the finiteness of every tensor is checked even where the
# checksums are not (a diverged run's state is no state to resume)
fresh nonfinite && read -r off n < <(dataset_at "$man" /bn/bn1.running_var) &&
  printf '\000\000\200\177' | dd of="$h5" bs=1 seek="$off" count=4 conv=notrunc status=none &&
  check nonfinite fallback "$damaged8.*/bn/bn1.running_var holds NaN or Inf" --no-ckpt-verify
mkdir elsewhere
fresh link-file && mv "$h5" elsewhere/state.h5 && ln -s "$w/elsewhere/state.h5" "$h5" &&
  check link-file fallback "$damaged8.*symbolic link"
fresh link-manifest && mv "$man" elsewhere/MANIFEST.json && ln -s "$w/elsewhere/MANIFEST.json" "$man" &&
  check link-manifest fallback "$damaged8.*symbolic link"
fresh link-dir && cp -a link-dir/ckpt/step-00000008 elsewhere/step8 && ln -s "$w/elsewhere/step8" link-dir/ckpt/step-00000010 &&
  check link-dir resume ""
grep -q "step-00000010: a symbolic link, not followed" link-dir.out ||
  { cat link-dir.out; fail "link-dir: no warning naming step-00000010"; }
if [ ! -e elsewhere/step8/MANIFEST.json ] || [ ! -e elsewhere/state.h5 ]; then
  fail "a file a link pointed to was removed"
fi

[ $checked -eq 16 ] || fail "$checked of the 16 cases ran (the set-up of the others failed: above)"

# inspect names a damaged checkpoint in a root (exit 1)
fresh inspect && edit "$man" 'm["state"]["step"] = 4'
"$m" inspect inspect/ckpt >inspect.log 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "step-00000008: DAMAGED: .*state" inspect.log; then
  cat inspect.log
  fail "inspect exited $rc"
fi
ok "inspect: exit 1, $(grep -m1 -o 'step-00000008: DAMAGED: .\{0,80\}' inspect.log)"

# a finished run whose summary.json is gone
rm ref/summary.json
"${cmd[@]}" --out ref >rebuild.log 2>&1 || { cat rebuild.log; fail "the finished run rerun exited $?"; }
grep -q "summary.json was missing: rebuilt" rebuild.log || { cat rebuild.log; fail "no word of the rebuilt summary.json"; }
/usr/bin/python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
assert s["rebuilt_from"] == "metrics.jsonl" and s["steps"] == 12 and s["img_per_s"] > 0, s' ref/summary.json ||
  fail "ref/summary.json is not the rebuilt summary"
"$m" report ref --out report >report.log 2>&1 || { cat report.log; fail "mntrain report of the rebuilt run"; }
ok "summary.json rebuilt from metrics.jsonl, and mntrain report reads the run"
