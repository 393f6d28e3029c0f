#!/usr/bin/env bash
# ckpt.sh — collective checkpoints on the local cluster, on the local disk (a directory every node
# sees) or on the GlusterFS volume (local-cluster.sh up --gluster; skipped without it).
#   ckpt.sh MNTRAIN SCENARIO [local|gluster]
# Scenarios:
#   exact    2 ranks on 2 nodes: 2K steps straight vs K, stop (--stop-after), resume, K more:
#            bit-identical weights and BN statistics, identical loss lines (and validation lines on
#            the format 3 sets, where K is an epoch: the resumed job does the validation the stop
#            left out), and it really resumed
#   elastic  a run of 4 ranks stopped after K steps resumes on 2 ranks, then on 1: per step, the
#            samples trained on (union over ranks) equal the uninterrupted 4-rank run's; the
#            weights agree to float rounding (within 1e-4 of each layer's largest value). Its shape
#            from the environment (tests/scale/scale.sh sets it): CKPT_RANKS ranks (4) on CKPT_NODES nodes (2), then each rank count of
#            CKPT_RESUME ("2 1") in turn, each on as many nodes as ranks (at most CKPT_NODES); a
#            run may take CKPT_TIMEOUT seconds (180); --lr CKPT_LR (0.4, every scenario)
#   kill     a rank killed (SIGKILL) while a checkpoint is being written (into D/incoming-*): the job
#            fails, no step directory appears for it, and a resume starts from the newest committed
#            checkpoint and completes
#   corrupt  one flipped byte in the newest state.h5: inspect names it (exit 1), resume warns naming
#            the file and falls back to the previous checkpoint, and the run completes
#   full     a full disk during a checkpoint (local: a tmpfs inside the node; gluster: a GlusterFS
#            volume of its own on a small brick, mounted in both nodes): exit 1 naming the error,
#            the previous checkpoint intact, nothing half-committed
# The data: CKPT_DATA=synth (default: convert synth, format 2, 512 images of 16 px, trained at
# --size 16), or jpeg / raw: format 3, tests/imagefolder.py's 120 non-square JPEGs of 10 classes
# converted with --resize 32 --codec jpeg|raw, trained at --size 24 and validated after every epoch
# on a format 3 set of 30 (tests/lib.sh: train_set); 120 images are 7 global batches of 16, so the
# runs cross an epoch, and elastic resumes inside the first and the second.
set -u
m=$1
scenario=$2
fs=${3:-local}
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
w=$(mktemp -d)
# the GlusterFS volume is mounted in the nodes' namespaces only: look at it from there
on_fs() { if [ "$fs" = gluster ]; then "$MNT_LOCAL_CLUSTER" nsexec node1 -- "$@"; else "$@"; fi; }
cleanup() { rm -rf "$w"; [ -n "${ck:-}" ] && [ "$fs" = gluster ] && on_fs rm -rf "$ck"; }
trap cleanup EXIT
if [ "$fs" = gluster ]; then
  mnt=$(ckpt_fs_or_skip) || exit 77
  ck="$mnt/test-$scenario-$$"
else
  ck="$w/ckpt"
fi
data=${CKPT_DATA:-synth}
val=()
[ "$data" = synth ] || val=(--val "$w/val")
train_set "${val[@]}" "$data" "$m" "$w/data" --classes 10 --images 512 --size 16 --shards 2 || exit $?
common=(train --data "$w/data" "${val[@]}" --arch resnet8 --size "$train_size" --seed 5 --threads 1
  --lr "${CKPT_LR:-0.4}" --log-every 2)
# run NAME SRUN_ARGS... -- TRAIN_ARGS...: the exit status is in $rc, the log in $w/NAME.log
run() {
  local name=$1
  shift
  local s=()
  while [ "$1" != "--" ]; do s+=("$1"); shift; done
  shift
  "$here/srun_test.sh" "${CKPT_TIMEOUT:-180}" "${s[@]}" -- "$m" "${common[@]}" "$@" >"$w/$name.log" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$w/$name.log"; exit 77; }
}
must() { # must RC NAME: the run's exit status
  [ "$rc" -eq "$1" ] || { cat "$w/$2.log"; fail "run $2 exited $rc, expected $1"; }
}
# compare A.h5 B.h5 [TOL]: /model and /bn equal bit for bit, or within TOL relative to the largest
# value of each tensor's layer (the tensors that share its name up to the last dot: a layer's weight
# and bias, a BN's running mean and variance), as train_equivalence.sh measures: a BN bias near 0
# whose rounding the steps amplify is compared on the scale it acts on, not on its own
compare() {
  /usr/bin/python3 - "$@" <<'PY'
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"SKIP: {e}"); sys.exit(77)
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
bad, worst = [], (0.0, "")
for g in ("model", "bn"):
    scale = {}
    for k in b[g]:
        layer = k.rsplit(".", 1)[0]
        scale[layer] = max(scale.get(layer, 0.0), float(np.max(np.abs(np.array(b[g][k], dtype=np.float64)))))
    for k in a[g]:
        x, y = np.array(a[g][k], dtype=np.float64), np.array(b[g][k], dtype=np.float64)
        e = float(np.max(np.abs(x - y)) / max(scale[k.rsplit(".", 1)[0]], 1e-12))
        worst = max(worst, (e, f"{g}/{k}"))
        if (tol == 0 and not np.array_equal(x, y)) or e > tol:
            bad.append(f"{g}/{k}: {e:.2e}")
print(f"{len(bad)} tensors differ (tolerance {tol:g} of their layer; worst {worst[0]:.2e} {worst[1]})" +
      ("" if not bad else ": " + ", ".join(bad[:5])))
sys.exit(1 if bad else 0)
PY
}
losses() { # the step and loss of every log line; "val", loss and top-1 of every validation
  /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "loss" in j: print(j["step"], j["loss"])
    if "val_loss" in j: print(j["step"], "val", j["val_loss"], j["val_top1"])' "$1"
}
resumed_from() { sed -n 's/.*resuming from \([^ ]*\) (step \([0-9]*\).*/\2/p' "$w/$1.log" | head -n1; }

case $scenario in
exact)
  K=6
  [ ${#val[@]} -eq 0 ] || K=7 # format 3: 7 steps are an epoch: the stop lands before its validation
  run straight -N2 -n2 -- --steps $((2 * K)) --batch-per-rank 8 --out "$w/straight" --ckpt-dir "$w/ck-straight" \
    --ckpt-every-steps $K --export "$w/straight.h5"
  must 0 straight
  run first -N2 -n2 -- --steps $((2 * K)) --batch-per-rank 8 --out "$w/resumed" --ckpt-dir "$ck" --ckpt-every-steps $K \
    --stop-after $K --export "$w/resumed.h5"
  must 3 first
  [ -f "$w/resumed.h5" ] && fail "a stopped run wrote its final weights"
  run second -N2 -n2 -- --steps $((2 * K)) --batch-per-rank 8 --out "$w/resumed" --ckpt-dir "$ck" --ckpt-every-steps $K \
    --export "$w/resumed.h5"
  must 0 second
  [ "$(resumed_from second)" = "$K" ] || { cat "$w/second.log"; fail "the second job did not resume from step $K"; }
  compare "$w/straight.h5" "$w/resumed.h5" || fail "resumed weights differ from the straight run's"
  losses "$w/straight/metrics.jsonl" >"$w/l1"
  losses "$w/resumed/metrics.jsonl" >"$w/l2"
  diff "$w/l1" "$w/l2" || fail "loss lines differ"
  # a line every 2 steps (--log-every 2) and at each epoch's end (7 steps on the format 3 sets)
  per=$(($("$m" inspect "$w/data" | sed -n '1s/.*: \([0-9]*\) samples.*/\1/p') / 16))
  want=0
  for ((i = 1; i <= 2 * K; i++)); do ((i % 2 == 0 || i % per == 0)) && want=$((want + 1)); done
  [ "$(grep -vc val "$w/l1")" -eq "$want" ] || fail "expected $want loss lines, got $(grep -vc val "$w/l1")"
  nval=$(grep -c val "$w/l1")
  [ ${#val[@]} -eq 0 ] || [ "$nval" -gt 0 ] || fail "no validation lines"
  echo "ok: $((2 * K)) steps straight = $K + resume + $K (bit-identical weights, $want identical loss lines," \
    "$nval validations)"
  ;;
elastic)
  K=4
  ranks=${CKPT_RANKS:-4} nodes=${CKPT_NODES:-2}
  read -r -a resume <<<"${CKPT_RESUME:-2 1}"
  steps=$(((${#resume[@]} + 1) * K))
  global=$((ranks * 4))
  args=(--steps "$steps" --out "$w/el" --ckpt-dir "$ck" --ckpt-every-steps "$K" --sample-log --bn-batch 4)
  many=(-N"$nodes" -n"$ranks" --ntasks-per-node=$((ranks / nodes)))
  run ref "${many[@]}" -- --steps "$steps" --batch-per-rank 4 --bn-batch 4 --out "$w/ref" \
    --sample-log --export "$w/ref.h5"
  must 0 ref
  run first "${many[@]}" -- "${args[@]}" --batch-per-rank 4 --stop-after $K
  must 3 first
  at=$K
  for i in "${!resume[@]}"; do
    r=${resume[i]}
    name=resume-$r
    if [ "$i" -lt $((${#resume[@]} - 1)) ]; then
      run "$name" -N$((r < nodes ? r : nodes)) -n"$r" -- "${args[@]}" --stop-after $K
      must 3 "$name"
    else
      run "$name" -N$((r < nodes ? r : nodes)) -n"$r" -- "${args[@]}" --export "$w/el.h5"
      must 0 "$name"
    fi
    [ "$(resumed_from "$name")" = "$at" ] || { cat "$w/$name.log"; fail "$r ranks resumed from the wrong step (not $at)"; }
    [ "$r" -eq 1 ] || grep -q "$global per global batch\|global batch $global ($((global / r)) per rank)" "$w/$name.log" ||
      { cat "$w/$name.log"; fail "$r ranks did not take $((global / r)) images each of the global batch $global"; }
    at=$((at + K))
  done
  chain="$ranks ${resume[*]}"
  chain=${chain// / -> }
  /usr/bin/python3 - "$w" "$steps" "$chain" <<'PY' || fail "the sample streams differ"
import glob, sys
w, steps, counts = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def stream(d):
    per = {}
    for f in glob.glob(f"{w}/{d}/samples-rank-*.txt"):
        for line in open(f):
            s, *ids = map(int, line.split())
            per.setdefault(s, []).extend(ids)
    return per
ref, el = stream("ref"), stream("el")
ok = sorted(ref) == sorted(el) == list(range(1, steps + 1))
for s in ref:
    if sorted(ref[s]) != sorted(el.get(s, [])) or len(set(ref[s])) != len(ref[s]):
        ok = False
        print(f"step {s}: {sorted(ref[s])[:6]}... vs {sorted(el.get(s, []))[:6]}...")
seen = [i for s in sorted(el) for i in el[s]]
print(f"{len(el)} steps, {len(seen)} samples ({len(set(seen))} distinct) over {counts} ranks; "
      f"{'the same' if ok else 'NOT the same'} as {counts.split()[0]} ranks straight")
sys.exit(0 if ok else 1)
PY
  compare "$w/ref.h5" "$w/el.h5" 1e-4 || fail "$chain ranks trained another model"
  echo "ok: $chain ranks continue the same global sample stream"
  ;;
kill)
  # resnet18 (about 90 MB of state) and a checkpoint every 2 steps: writes are long enough to be hit
  args=(--arch resnet18 --size 32 --steps 40 --batch-per-rank 4 --out "$w/k" --ckpt-dir "$ck" --ckpt-every-steps 2 --keep 2)
  ( run victim -N2 -n2 -- "${args[@]}"; echo "$rc" >"$w/victim.rc" ) &
  job=$!
  # wait for a checkpoint being written (D/incoming-*/state.h5 sized) after a committed one, or the job's end
  # shellcheck disable=SC2016
  killed=$(on_fs timeout 120 sh -c 'while ! [ -f "$2" ]; do
      if ls "$1"/step-*/MANIFEST.json >/dev/null 2>&1 && [ -n "$(find "$1" -path "*/incoming-*/state.h5" -size +0)" ]; then
        ls -d "$1"/step-* | tail -n1; exit 0
      fi
      sleep 0.01
    done' sh "$ck" "$w/victim.rc")
  [ -n "$killed" ] || { wait $job; cat "$w/victim.log"; fail "never saw a checkpoint being written"; }
  pid=$(pgrep -f -- "^$m train .*--out $w/k " | tail -n1) # a task, not srun
  kill -9 "$pid" 2>/dev/null
  wait $job
  vrc=$(cat "$w/victim.rc")
  [ "$vrc" -ne 0 ] || fail "the job exited 0 although a rank was killed"
  grep -E "rank [01].*(died|closed|dead|killed|lost)" "$w/victim.log" | head -n 3
  on_fs "$m" inspect "$ck" >"$w/inspect.log" 2>&1 || { cat "$w/inspect.log"; fail "a checkpoint is damaged"; }
  newest=$(sed -n 's/^  \(step-[0-9]*\): ok$/\1/p' "$w/inspect.log" | head -n1)
  [ -n "$newest" ] || { cat "$w/inspect.log"; fail "no valid checkpoint left"; }
  [ "$newest" = "$(basename "$killed")" ] || echo "note: $newest was committed after $(basename "$killed") as the kill landed"
  if grep -q "not a checkpoint" "$w/inspect.log"; then cat "$w/inspect.log"; fail "a step directory without a manifest"; fi
  run again -N2 -n2 -- "${args[@]}"
  must 0 again
  [ "step-$(printf %08d "$(resumed_from again)")" = "$newest" ] || { cat "$w/again.log"; fail "resume did not pick $newest"; }
  echo "ok: rank killed (exit $vrc) while writing the checkpoint after $(basename "$killed"); resumed from $newest and completed"
  ;;
corrupt)
  run first -N2 -n2 -- --steps 12 --batch-per-rank 8 --out "$w/c" --ckpt-dir "$ck" --ckpt-every-steps 4 --keep 3 \
    --stop-after 8
  must 3 first
  newest="$ck/step-00000008"
  on_fs /usr/bin/python3 - "$newest" <<'PY' || fail "could not flip a byte"
import json, sys
d = sys.argv[1]
m = json.load(open(f"{d}/MANIFEST.json"))
big = max(m["datasets"], key=lambda x: x["bytes"])
at = big["offset"] + big["bytes"] // 2
with open(f"{d}/state.h5", "r+b") as f:
    f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 0x10]))
print(f"flipped byte {at} of {d}/state.h5 (in {big['name']})")
PY
  on_fs "$m" inspect "$newest" >"$w/inspect.log" 2>&1
  irc=$?
  if [ $irc -ne 1 ] || ! grep -q "state.h5.*fails its checksum" "$w/inspect.log"; then
    cat "$w/inspect.log"
    fail "inspect exited $irc without naming the damaged share"
  fi
  run second -N2 -n2 -- --steps 12 --batch-per-rank 8 --out "$w/c" --ckpt-dir "$ck" --ckpt-every-steps 4 --keep 3
  must 0 second
  if ! grep -q "step-00000008/state.h5.*fails its checksum" "$w/second.log" ||
    ! grep -q "falling back to .*step-00000004" "$w/second.log" || [ "$(resumed_from second)" != 4 ]; then
    cat "$w/second.log"
    fail "resume did not fall back from the damaged step 8 to step 4"
  fi
  echo "ok: a flipped byte is found (inspect exit 1, resume falls back to step 4 and completes)"
  ;;
full)
  # resnet18: about 90 MB per checkpoint; the second does not fit next to the first in 150 MB
  if [ "$fs" = gluster ]; then
    # a GlusterFS volume of its own, on a 150 MB tmpfs brick, mounted in both nodes: the disk fills
    # behind a network client (the error may come from pwrite, or only from fsync)
    [ "$(id -u)" -eq 0 ] || { echo "SKIP: making a small GlusterFS volume needs root"; exit 77; }
    host=$(cat "$MNT_CLUSTER_STATE/gluster-host" 2>/dev/null) || { echo "SKIP: no GlusterFS host recorded"; exit 77; }
    vol=mntfull$$
    brick=/var/tmp/mntrain-test-brick-$$
    ck=/mnt/$vol
    small_down() {
      "$MNT_LOCAL_CLUSTER" nsexec all -- umount "$ck" >/dev/null 2>&1
      gluster --mode=script volume stop "$vol" force >/dev/null 2>&1
      gluster --mode=script volume delete "$vol" >/dev/null 2>&1
      umount "$brick" 2>/dev/null
      rm -rf "$brick" "$w"
      rmdir "$ck" 2>/dev/null
    }
    trap small_down EXIT
    if ! { mkdir -p "$brick" && mount -t tmpfs -o size=150m tmpfs "$brick" && mkdir "$brick/b"; }; then
      fail "cannot make the brick's tmpfs"
    fi
    if ! { gluster --mode=script volume create "$vol" transport tcp "$host:$brick/b" force >/dev/null &&
      gluster --mode=script volume start "$vol" >/dev/null; }; then
      fail "cannot create the GlusterFS volume $vol"
    fi
    # shellcheck disable=SC2016
    "$MNT_LOCAL_CLUSTER" nsexec all -- sh -c 'mkdir -p "$1" && mount -t glusterfs -o "log-file=/var/log/glusterfs/$3.log" "$2:/$3" "$1"' \
      sh "$ck" "$host" "$vol" || fail "cannot mount $vol in the nodes"
    layout=(-N2 -n2)
  else
    ck=/var/tmp/mntrain-test-full-$$
    node_tmpfs_mount "$ck" 150m || fail "cannot mount a tmpfs inside the nodes"
    trap 'node_tmpfs_umount "$ck" >/dev/null 2>&1; rmdir "$ck" 2>/dev/null; rm -rf "$w"' EXIT
    layout=(-N1 -n2) # one node: each node has a tmpfs of its own
  fi
  run full "${layout[@]}" -- --arch resnet18 --size 32 --steps 8 --batch-per-rank 4 --out "$w/f" --ckpt-dir "$ck" \
    --ckpt-every-steps 2 --keep 1
  must 1 full
  grep -q "state.h5: .*No space left on device" "$w/full.log" || { cat "$w/full.log"; fail "the error does not say the disk is full"; }
  grep "error" "$w/full.log" | head -n 4
  "$here/srun_test.sh" 60 -N1 -n1 -- "$m" inspect "$ck" >"$w/inspect.log" 2>&1 ||
    { cat "$w/inspect.log"; fail "the checkpoint left behind is damaged"; }
  grep -q "step-00000002: ok" "$w/inspect.log" || { cat "$w/inspect.log"; fail "the first checkpoint is not intact"; }
  [ "$(grep -c ': ok$' "$w/inspect.log")" -eq 1 ] || { cat "$w/inspect.log"; fail "a failed checkpoint was committed"; }
  echo "ok: full disk ($fs) -> exit 1 ('No space left on device'), step 2 intact, nothing half-committed"
  ;;
*)
  echo "ckpt.sh: unknown scenario '$scenario'"
  exit 2
  ;;
esac
