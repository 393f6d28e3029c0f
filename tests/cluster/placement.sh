#!/usr/bin/env bash
# placement.sh — the compute threads a rank runs by default (no --threads, no OMP_NUM_THREADS): its
# share of the node's CPUs, at least 1, also where the CPUs stay shared: 3 ranks on a node of fewer
# CPUs than that run one each (they once ran 2 each on 2 CPUs, at a third of the speed), and
# MNT_CPU_BIND=none (every rank sees every CPU) divides the CPUs among the node's ranks. Read from
# config.json's "threads" (rank 0's) against the CPUs a task of this cluster sees.
#   placement.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
"$m" convert synth "$w/data" --classes 4 --images 256 --size 16 --shards 1 >/dev/null || fail "convert synth"
n=$("$here/srun_test.sh" 30 -N1 -n1 -- nproc) || fail "nproc in a task"
# threads_of RANKS [ENV=VALUE]: rank 0's compute threads in a run of RANKS ranks on one node
threads_of() {
  local ranks=$1 out=$w/run-$1-${2:-bound}
  env -u OMP_NUM_THREADS ${2:+"$2"} "$here/srun_test.sh" 120 -N1 -n"$ranks" -- "$m" train --data "$w/data" --arch resnet8 \
    --size 16 --batch-per-rank 8 --steps 2 --loader-threads 1 --out "$out" >"$out.log" 2>&1 ||
    { bad "$ranks ranks ${2:-}: exit $?"; cat "$out.log"; return; }
  /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["threads"])' "$out/config.json"
}
# 3 ranks: split when the node has 3 CPUs or more (rank 0: the first share, the larger), else 1 each
if [ "$n" -ge 3 ]; then want=$((n / 3 + (n % 3 > 0 ? 1 : 0))); else want=1; fi
got=$(threads_of 3)
if [ "$got" = "$want" ]; then ok "3 ranks on $n CPUs: $got compute thread(s) on rank 0"
else bad "3 ranks on $n CPUs: rank 0 runs '$got' compute threads, want $want"; fi
# 2 ranks left unbound (MNT_CPU_BIND=none): each its part of the shared CPUs
want=$((n / 2 > 1 ? n / 2 : 1))
got=$(threads_of 2 MNT_CPU_BIND=none)
if [ "$got" = "$want" ]; then ok "2 unbound ranks on $n CPUs: $got compute thread(s) each"
else bad "2 unbound ranks on $n CPUs: rank 0 runs '$got' compute threads, want $want"; fi
finish placement "$fail"
