#!/usr/bin/env bash
# step_graph.sh — --cuda-graph on, on the CPU: every step after the first runs its work from the
# forward to the update as a captured graph would hold it (the backend refusing host copies, waits and
# allocations inside it; the allreduce completed by a join; the step's scalars read from backend
# memory), and the run ends with the same weights, bit for bit, as with --cuda-graph off. 4 ranks on
# 2 nodes, rmsprop-warmup with a warm-up (scalars that change every step), bf16 gradients (the
# reducer's casts after the join), an evaluation between steps and a checkpoint.
#   step_graph.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/data" --classes 4 --images 512 --size 16 --shards 2 >/dev/null || fail "convert synth"
"$m" convert synth "$w/val" --classes 4 --images 64 --size 16 --shards 1 --seed 2 >/dev/null || fail "convert synth"
for g in off on; do
  "$here/srun_test.sh" 200 -N2 -n4 --ntasks-per-node=2 -- "$m" train --data "$w/data" --val "$w/val" \
    --eval-every 0.5 --arch resnet8 --size 16 --batch-per-rank 16 --steps 20 --optimizer rmsprop-warmup \
    --warmup-epochs 1 --grad-dtype bf16 --threads 1 --loader-threads 1 --ckpt-every-steps 10 --cuda-graph "$g" \
    --out "$w/out-$g" --export "$w/w-$g.h5" >"$w/log-$g" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$w/log-$g"; exit 77; }
  if [ $rc -ne 0 ]; then
    bad "--cuda-graph $g: exit $rc"
    tail -n 20 "$w/log-$g"
  fi
done
# h5diff compares the values (the files' own bytes differ: HDF5 stamps each object's time)
if h5diff "$w/w-off.h5" "$w/w-on.h5" >"$w/diff" 2>&1; then
  ok "--cuda-graph on and off end with the same weights, bit for bit (20 steps, 4 ranks, evaluations between)"
else
  bad "--cuda-graph on and off end with different weights:"
  head -n 20 "$w/diff"
fi
grep -q "captured step" "$w/log-on" && { bad "the run with --cuda-graph on refused a step:"; grep "captured step" "$w/log-on"; }
finish step_graph "$fail"
