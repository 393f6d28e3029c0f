#!/usr/bin/env bash
# train_outputs.sh — what `mntrain train` leaves in --out cannot be misread (one process, no cluster):
# - summary.json's img_per_s is training throughput only (evaluation apart, in eval_seconds): with a
#   validation set that takes far longer than the training steps it still matches the step times;
# - a run that fails with --force leaves no earlier summary.json beside its own outputs;
# - an --export path that cannot be written fails at the start (exit 2), before config.json;
# - a run too large for this process's memory is refused at once with the estimate and the limit;
# - a disk that fills while training stops the run loudly (exit 1, metrics.jsonl named), with no
#   "done" line and no summary.json (a 1 MiB tmpfs: root only);
# - --init starts from an --export file's weights (checked with lr 0: they come out unchanged) and
#   refuses one of another architecture naming the dataset; the export carries the model's
#   attributes (arch, classes, image_size, mean, std).
# Every case that can run here runs; one that cannot (no h5py for the export check; no tmpfs mount
# for the full disk) is named, and the test then exits 77 (skipped), not 0: it did not pass all.
#   train_outputs.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh"
m=$(realpath "$1")
fail=0
w=$(mktemp -d)
mnt=""
# shellcheck disable=SC2317
cleanup() { if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null; fi; rm -rf "$w"; }
trap cleanup EXIT
py=/usr/bin/python3
"$m" convert synth "$w/data" --classes 4 --images 64 --size 16 --shards 1 >/dev/null || exit 1
"$m" convert synth "$w/val" --classes 4 --images 3000 --size 16 --shards 1 --seed 2 >/dev/null || exit 1
base=(train --data "$w/data" --arch resnet8 --size 16 --batch-per-rank 8 --threads 1 --loader-threads 1)

# --init from an --export file
"$m" "${base[@]}" --steps 3 --out "$w/src" --export "$w/src.h5" >"$w/src.log" 2>&1 || { echo "FAIL: run src"; cat "$w/src.log"; fail=1; }
"$m" "${base[@]}" --steps 1 --lr 0 --wd 0 --out "$w/init" --init "$w/src.h5" --export "$w/init.h5" --seed 7 \
  >"$w/init.log" 2>&1 || { echo "FAIL: run init"; cat "$w/init.log"; fail=1; }
$py - "$w/src.h5" "$w/init.h5" <<'PY'
import sys
try:
    import h5py, numpy as np
except ImportError as e:
    print(f"no h5py: {e}"); sys.exit(77)
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
same = all(np.array_equal(a["model"][k][()], b["model"][k][()]) for k in a["model"])
attrs = {k: a.attrs[k] for k in ("arch", "classes", "image_size", "mean", "std")}
ok = same and attrs["arch"] in (b"resnet8", "resnet8") and int(attrs["classes"]) == 4 and len(attrs["mean"]) == 3
print(f"{'ok' if ok else 'FAIL'}: --init with lr 0 keeps the exported weights ({same}); export attributes {attrs}")
sys.exit(0 if ok else 1)
PY
case $? in
  0) ;;
  77) left_out "--init keeps the exported weights, the export's attributes (no h5py for $py: apt-get install python3-h5py)" ;;
  *) fail=1 ;;
esac
"$m" train --data "$w/data" --arch resnet20 --size 16 --batch-per-rank 8 --threads 1 --steps 1 --out "$w/bad-init" \
  --init "$w/src.h5" >"$w/bad-init.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q -- "--init .*src.h5: .*layer1.0.conv1.weight\|--init .*src.h5: no dataset" "$w/bad-init.log"; then
  echo "FAIL: --init of another architecture: exit $rc"; cat "$w/bad-init.log"; fail=1
fi

# throughput without evaluation
"$m" "${base[@]}" --steps 24 --val "$w/val" --log-every 100 --out "$w/tp" >"$w/tp.log" 2>&1 || { echo "FAIL: run tp"; cat "$w/tp.log"; fail=1; }
$py - "$w/tp/summary.json" <<'PY' || fail=1
import json, sys
s = json.load(open(sys.argv[1]))
per_step = s["global_batch"] * 1000.0 / s["step_ms"]["mean"]
ok = s["img_per_s"] > 0.5 * per_step and s["eval_seconds"] > 0 and s["train_seconds"] > 0
print(f"{'ok' if ok else 'FAIL'}: img_per_s {s['img_per_s']:.0f}, from the step times {per_step:.0f}, "
      f"evaluation {s['eval_seconds']:.2f} s apart, training {s['train_seconds']:.2f} s")
# what the figure measured: the CPU ISA, what the 9 batch norms of resnet8 ran (stem, two per block, two shortcuts), no reference implementation
bn = s.get("bn_mode", "")
said = s.get("cpu_isa", "") != "" and bn.endswith(" x9") and "bnorm" in bn and s.get("reference_layers") == 0
print(f"{'ok' if said else 'FAIL'}: cpu_isa {s.get('cpu_isa')!r}, bn_mode {bn!r}, reference_layers {s.get('reference_layers')}")
ok = ok and said
sys.exit(0 if ok else 1)
PY

# --force removes the earlier run first: a failing run leaves no stale summary
cp -r "$w/data" "$w/broken"
truncate -s 3000 "$w/broken/shard-00000-of-00001.h5"
"$m" train --data "$w/broken" --arch resnet8 --size 16 --batch-per-rank 8 --out "$w/tp" --force >"$w/f.log" 2>&1
rc=$?
if [ $rc -ne 1 ] || [ -e "$w/tp/summary.json" ]; then echo "FAIL: a failed --force run: exit $rc, $(ls "$w/tp")"; fail=1; fi

# an export path that cannot be written: exit 2 at once, nothing written
"$m" "${base[@]}" --steps 2 --export "$w/no/such/dir/w.h5" --out "$w/ex" >"$w/ex.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "no/such/dir/w.h5 cannot be written" "$w/ex.log" || [ -e "$w/ex/config.json" ]; then
  echo "FAIL: an unwritable --export: exit $rc"; cat "$w/ex.log"; fail=1
fi
if ! "$m" "${base[@]}" --steps 2 --export "$w/w.h5" --out "$w/ex2" >/dev/null 2>&1 || [ ! -s "$w/w.h5" ] ||
   [ -e "$w/w.h5.tmp" ]; then
  echo "FAIL: --export to a writable path"; fail=1
fi

# too large for this process's memory: refused at once, naming both numbers
"$m" train --data "$w/data" --arch resnet50 --size 224 --batch-per-rank 4096 --out "$w/big" >"$w/big.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -qE "needs about [0-9.]+ GiB of memory per rank, but this rank may use" "$w/big.log"; then
  echo "FAIL: resnet50 with 4096 images per rank: exit $rc"; cat "$w/big.log"; fail=1
fi
SLURM_MEM_PER_NODE=40 "$m" train --data "$w/data" --arch resnet18 --size 64 --batch-per-rank 64 --out "$w/slurm" >"$w/slurm.log" 2>&1
rc=$?
if [ $rc -ne 2 ] || ! grep -q "SLURM_MEM_PER_NODE 40.0 MiB" "$w/slurm.log"; then
  echo "FAIL: --mem 40M from Slurm: exit $rc"; cat "$w/slurm.log"; fail=1
fi

# a disk that fills while training
if [ "$(id -u)" -ne 0 ]; then
  left_out "a full disk while training (mounting a tmpfs needs root)"
elif ! { mkdir "$w/tiny" && mount -t tmpfs -o size=1m tmpfs "$w/tiny"; }; then
  left_out "a full disk while training (mount -t tmpfs failed, e.g. a container without CAP_SYS_ADMIN)"
else
  mnt="$w/tiny"
  free_kb=$(df -k --output=avail "$mnt" | tail -n1)
  fallocate -l $(( (free_kb - 12) * 1024 )) "$mnt/filler" 2>/dev/null || dd if=/dev/zero of="$mnt/filler" bs=1k count=$((free_kb - 12)) 2>/dev/null
  "$m" "${base[@]}" --steps 400 --log-every 1 --out "$mnt/run" >"$w/full.out" 2>"$w/full.err"
  rc=$?
  # it stops at the first failed write: one error, not one per step, and never step 400
  nerr=$(grep -c "metrics.jsonl: cannot write: No space left on device" "$w/full.err")
  if [ $rc -ne 1 ] || [ "$nerr" -ne 1 ] || grep -q "step 400/400" "$w/full.out" ||
     grep -q "mntrain train: done" "$w/full.out" || [ -e "$mnt/run/summary.json" ]; then
    echo "FAIL: a full disk while training: exit $rc, $nerr write errors"; tail -3 "$w/full.out"; cat "$w/full.err"; fail=1
  else
    ok "a full disk stopped the run after $(wc -l <"$mnt/run/metrics.jsonl") metrics lines"
  fi
fi
finish train_outputs "$fail"
