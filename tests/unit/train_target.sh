#!/usr/bin/env bash
# train_target.sh — `mntrain train --target-top1 X --eval-every E` (time to accuracy; one process, no
# cluster), on a learnable synthetic set:
# - the run evaluates every E epochs (E = 0.5: at steps 8, 16, ... of 16 per epoch), stops after the
#   first evaluation whose top-1 reaches X, and records it: a metrics.jsonl line with "target_top1"
#   and "target_time_s" at that step, summary.json's target_reached, target_step, target_epoch,
#   target_time_s, steps_done (< steps) and best_val_top1;
# - a run that cannot reach its target (X = 1 in 4 steps) says so, and summary.json has
#   target_reached false and steps_done = steps;
# - the same command again, with checkpoints, finds the run complete at its target step and
#   trains nothing (a requeued job must not train on past its target), its summary.json kept as it
#   was; the same run with another --target-top1 is refused (a run keeps its target);
# - a run stopped between two evaluation points and resumed evaluates where the first would have
#   (--eval-every is kept across a stop), and its checkpoint keeps the best top-1 so far;
# - mntrain report of the two runs: learning.csv's target columns are summary.json's, and every
#   evaluation's metrics line carries the run's wall time (elapsed_s);
# - --target-top1 without --val, or 0, is a usage error (exit 2).
#   train_target.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$(realpath "$1")
fail=0
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
py=/usr/bin/python3
"$m" convert synth "$w/tr" --classes 4 --images 512 --size 16 --shards 1 >/dev/null || exit 1
"$m" convert synth "$w/va" --classes 4 --images 128 --size 16 --shards 1 --seed 9 >/dev/null || exit 1
base=(train --data "$w/tr" --val "$w/va" --arch resnet8 --size 16 --batch-per-rank 32 --threads 1
  --loader-threads 1 --lr 0.2 --eval-every 0.5)

# reached: 6 epochs of 16 steps, evaluated at every half epoch
"$m" "${base[@]}" --epochs 6 --target-top1 0.9 --out "$w/hit" >"$w/hit.log" 2>&1 ||
  { echo "FAIL: the run with a target exited $?"; cat "$w/hit.log"; fail=1; }
$py - "$w/hit" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
evals = [l for l in lines if "val_top1" in l]
hits = [l for l in lines if "target_time_s" in l]
bad = []
if [l["step"] for l in evals] != list(range(8, 8 * len(evals) + 1, 8)):
    bad.append(f"evaluations at steps {[l['step'] for l in evals]}, not every 8 (--eval-every 0.5)")
first = next((l for l in evals if l["val_top1"] >= 0.9), None)
if first is None:
    bad.append("no evaluation reached 0.9: the set is not learnable enough for this test")
else:
    if evals[-1] is not first:
        bad.append(f"evaluated on after the target was reached at step {first['step']}")
    if len(hits) != 1 or hits[0]["step"] != first["step"]:
        bad.append(f"the target's metrics line is {hits}, want one at step {first['step']}")
    want = {"target_reached": True, "target_step": first["step"], "steps_done": first["step"], "target_top1": 0.9}
    for k, v in want.items():
        if s.get(k) != v:
            bad.append(f"summary.json {k} = {s.get(k)!r}, want {v!r}")
    if abs(s.get("target_epoch", -1) - first["step"] / 16) > 1e-9 or not s.get("target_time_s", 0) > 0:
        bad.append(f"summary.json target_epoch/target_time_s = {s.get('target_epoch')}/{s.get('target_time_s')}")
    if s["steps"] != 96 or s["steps_done"] >= s["steps"]:
        bad.append(f"steps {s['steps']}, steps_done {s['steps_done']}: the run did not end early")
    if s.get("best_val_top1") != max(l["val_top1"] for l in evals):
        bad.append(f"best_val_top1 {s.get('best_val_top1')} is not the best evaluation")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
grep -q "target top-1 0.9000 reached at step" "$w/hit.log" || { echo "FAIL: no 'reached' line"; fail=1; }

# not reached
"$m" "${base[@]}" --steps 4 --target-top1 1 --out "$w/miss" >"$w/miss.log" 2>&1 ||
  { echo "FAIL: the run that misses its target exited $?"; cat "$w/miss.log"; fail=1; }
grep -q "target top-1 1.0000 not reached in 4 steps" "$w/miss.log" || { echo "FAIL: no 'not reached' line"; cat "$w/miss.log"; fail=1; }
$py -c 'import json,sys; s=json.load(open(sys.argv[1])); sys.exit(0 if s["target_reached"] is False and s["steps_done"] == 4 and "target_step" not in s else 1)' \
  "$w/miss/summary.json" || { echo "FAIL: summary.json of a missed target: $(cat "$w/miss/summary.json")"; fail=1; }

# mntrain report of both: the learning table and learning.csv carry the target as summary.json says;
# every evaluation line has the run's wall time (elapsed_s), growing
"$m" report "$w/hit" "$w/miss" --out "$w/rep" >"$w/rep.log" 2>&1 || { echo "FAIL: report exited $?"; cat "$w/rep.log"; fail=1; }
$py - "$w" <<'PY' || fail=1
import csv, json, sys
w = sys.argv[1]
rows = {r["run"]: r for r in csv.DictReader(open(f"{w}/rep/learning.csv"))}
s = json.load(open(f"{w}/hit/summary.json"))
bad = []
h, m = rows.get(f"{w}/hit"), rows.get(f"{w}/miss")
if not h or not m:
    bad.append(f"learning.csv rows {sorted(rows)}")
else:
    if h["target_reached"] != "true" or abs(float(h["target_time_s"]) - s["target_time_s"]) > 0.006 \
            or abs(float(h["target_epoch"]) - s["target_epoch"]) > 1e-4:
        bad.append(f"hit: {h} against summary.json {s}")
    if m["target_reached"] != "false" or m["target_time_s"] != "":
        bad.append(f"miss: {m}")
t = [json.loads(l).get("elapsed_s") for l in open(f"{w}/hit/metrics.jsonl") if "val_top1" in l]
if None in t or t != sorted(t) or not t[0] > 0:
    bad.append(f"elapsed_s of the evaluations: {t}")
for b in bad:
    print("FAIL: report:", b)
sys.exit(1 if bad else 0)
PY

# with checkpoints: reached, then the same command again trains nothing
ck=("${base[@]}" --epochs 6 --target-top1 0.9 --out "$w/ck" --ckpt-every-steps 5)
"$m" "${ck[@]}" >"$w/ck1.log" 2>&1 || { echo "FAIL: checkpointed run exited $?"; cat "$w/ck1.log"; fail=1; }
cp "$w/ck/summary.json" "$w/ck-summary.json"
"$m" "${ck[@]}" >"$w/ck2.log" 2>&1 || { echo "FAIL: the rerun exited $?"; cat "$w/ck2.log"; fail=1; }
step=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["target_step"])' "$w/ck/summary.json" 2>/dev/null)
if ! grep -q "the run is complete (step $step of 96)" "$w/ck2.log" || grep -q '^epoch' "$w/ck2.log"; then
  echo "FAIL: rerunning a run that reached its target (step $step):"; cat "$w/ck2.log"; fail=1
fi
# ... and keeps its summary.json as the run wrote it (a requeue of a finished run once deleted it and
# rebuilt a poorer one from metrics.jsonl, or none when the log lines did not cover the run)
cmp -s "$w/ck/summary.json" "$w/ck-summary.json" ||
  { echo "FAIL: rerunning a run that reached its target changed its summary.json:"; cat "$w/ck2.log"; fail=1; }
"$m" "${ck[@]}" --log-every 1000 >"$w/ck3.log" 2>&1 || { echo "FAIL: the second rerun exited $?"; cat "$w/ck3.log"; fail=1; }
cmp -s "$w/ck/summary.json" "$w/ck-summary.json" ||
  { echo "FAIL: rerunning a run that reached its target changed its summary.json:"; cat "$w/ck3.log"; fail=1; }
# another target for the same run: refused (exit 2) naming the run's, nothing changed
"$m" "${base[@]}" --epochs 6 --target-top1 0.95 --out "$w/ck" --ckpt-every-steps 5 >"$w/ck4.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q -- "--target-top1 0.95 is not the run's: .* was trained toward 0.9" "$w/ck4.log"; then
  echo "FAIL: a rerun with another --target-top1: exit $rc"; cat "$w/ck4.log"; fail=1
fi
cmp -s "$w/ck/summary.json" "$w/ck-summary.json" || { echo "FAIL: the refused rerun changed summary.json"; fail=1; }

# stopped at step 12 (between evaluations at 8 and 16) and resumed: evaluations still every 8 steps;
# the checkpoint keeps the run's best top-1 so far, and summary.json's best is over both jobs
st=("${base[@]}" --epochs 1 --out "$w/st" --ckpt-every-steps 100)
"$m" "${st[@]}" --stop-after 12 >"$w/st1.log" 2>&1
rc=$?
[ $rc -eq 3 ] || { echo "FAIL: --stop-after 12 exited $rc, want 3"; cat "$w/st1.log"; fail=1; }
v8=$($py -c 'import json,sys; print([json.loads(l)["val_top1"] for l in open(sys.argv[1]) if "val_top1" in l])' "$w/st/metrics.jsonl")
kept=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["state"].get("best_val_top1"))' "$w/st/ckpt/step-00000012/MANIFEST.json" 2>&1)
[ "[$kept]" = "$v8" ] || { echo "FAIL: the checkpoint of step 12 keeps best_val_top1 $kept, the evaluations before it: $v8"; fail=1; }
"$m" "${st[@]}" >"$w/st2.log" 2>&1 || { echo "FAIL: the resumed run exited $?"; cat "$w/st2.log"; fail=1; }
got=$($py -c 'import json,sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1]) if "val_top1" in l))' "$w/st/metrics.jsonl")
[ "$got" = "8 16" ] || { echo "FAIL: a stopped and resumed run evaluated at steps '$got', want '8 16'"; fail=1; }
$py -c 'import json,sys; v=[json.loads(l)["val_top1"] for l in open(sys.argv[1]) if "val_top1" in l]; s=json.load(open(sys.argv[2]))
sys.exit(0 if s.get("best_val_top1") == max(v) else 1)' "$w/st/metrics.jsonl" "$w/st/summary.json" ||
  { echo "FAIL: the resumed run's best_val_top1 is not the best of both jobs' evaluations"; fail=1; }

# usage errors: without --val, and 0 (which every evaluation reaches), with --val or without
"$m" train --data "$w/tr" --arch resnet8 --size 16 --target-top1 0.5 --out "$w/u" >"$w/u.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q -- "--target-top1 needs --val" "$w/u.log"; then
  echo "FAIL: --target-top1 without --val: exit $rc"; cat "$w/u.log"; fail=1
fi
for v in "" "--val $w/va"; do
  # shellcheck disable=SC2086 # $v: no flag, or the flag and its value
  "$m" train --data "$w/tr" $v --arch resnet8 --size 16 --steps 2 --target-top1 0 --out "$w/z" >"$w/z.log" 2>&1
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "--target-top1: a fraction above 0" "$w/z.log"; then
    echo "FAIL: --target-top1 0 ${v:+with --val }was accepted (exit $rc)"; cat "$w/z.log"; fail=1
  fi
done

[ $fail -eq 0 ] && echo "train_target: ok"
exit $fail
