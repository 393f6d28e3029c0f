#!/usr/bin/env bash
# scale.sh — the scale tests (ctest -L scale): mntrain at MNT_SCALE_RANKS ranks (default 32) on
# MNT_SCALE_NODES nodes (default 8, ranks/nodes on each) of a Slurm cluster; CI runs them on the
# local cluster (job_templates/tools/local-cluster.sh up --nodes 8 --gluster), a benchmark with
# MNT_SCALE_RANKS=128 MNT_SCALE_NODES=16 (nodes of 8 CPUs or more). On a cluster with fewer nodes
# every test exits 77 (CTest: skipped) saying so. Every failure names the rank, node, size or step.
#   scale.sh TEST PROGRAM [ARGS]      (PROGRAM: mntrain; test_comm_cluster for kill and hung)
# Tests:
#   info MNTRAIN        srun ... mntrain info: every rank 0..N-1 once; its node, node index, local
#                       rank and local size agree with where Slurm placed it (SLURMD_NODENAME,
#                       SLURM_LOCALID); N ranks on NODES nodes
#   allreduce MNTRAIN flat|hier float|bfloat16
#                       bench allreduce -b 8 -e 64M -f 4 -c 1: every size's row, #wrong 0 out of
#                       place and in place, "# Out of bounds values : 0 OK", the topology asked for;
#                       within MNT_SCALE_AR_TIMEOUT s (400; benchmarks/scale.sh gives 128 ranks 850,
#                       under ctest's 900)
#   equivalence MNTRAIN tests/cluster/train_equivalence.sh at N ranks x 4 images against 1 rank x 4N
#                       images in BN groups of 4 (flat and hier), at --lr 0.02: after 1 step within
#                       1e-5 of each tensor, after 10 steps within 1e-5 of each layer (at 128 ranks
#                       a BN bias near 0 differs by 3.8e-5 of itself, 4e-8 of its layer; at the
#                       4-rank test's lr 0.4, 10 steps amplify rounding to 3e-2 at 32 ranks)
#   elastic MNTRAIN     tests/cluster/ckpt.sh elastic on the GlusterFS volume: N ranks, resumed on
#                       N/8 ranks, then on 1 (skipped without the volume), at the 4-rank test's
#                       learning rate per image
#   kill TEST_COMM      tests/cluster/kill_rank.sh: rank N/2+5 SIGKILLs itself mid-allreduce: the
#                       job fails naming it and its node, every rank gone within 5 s of the kill
#   hung TEST_COMM      the same rank SIGSTOPs itself, MNT_COMM_TIMEOUT=60: the warning (after 30 s)
#                       and the abort name it and its node, no other rank blamed
#   sweep MNTRAIN       job_templates/scaling_sweep.sh on 1, 2, 4, ... NODES nodes (full nodes,
#                       N/NODES ranks each), then mntrain report over the runs: one row per node
#                       count in the table, scaling.csv and scaling.svg
#   shrink MNTRAIN      tests/cluster/shrink.sh node: N ranks, the last node's killed at step 30 of 120
#                       (--on-rank-loss shrink): it finishes on the other N - N/NODES
#   finished MNTRAIN    a finished neighbour is not a dead one (src/comm/cpu/engine.c):
#                       MNT_SCALE_BIG_RANKS ranks (128) on MNT_SCALE_BIG_NODES nodes (NODES),
#                       train --arch resnet8 --steps 6, MNT_SCALE_BIG_RUNS times (2): exit 0 and
#                       no "died during" line
set -u
what=${1:?usage: scale.sh TEST PROGRAM [ARGS]}
prog=${2:?usage: scale.sh TEST PROGRAM [ARGS]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../cluster
srun_test=$cluster/srun_test.sh
# shellcheck source=/dev/null
. "$cluster/lib.sh" # ok, bad, fail, skip, nodes_or_skip

RANKS=${MNT_SCALE_RANKS:-32}
NODES=${MNT_SCALE_NODES:-8}
if ! [[ $RANKS =~ ^[1-9][0-9]*$ && $NODES =~ ^[1-9][0-9]*$ ]] || [ $((RANKS % NODES)) -ne 0 ]; then
  echo "scale.sh: MNT_SCALE_RANKS=$RANKS on MNT_SCALE_NODES=$NODES: positive integers, the ranks a multiple of the nodes" >&2
  exit 2
fi
PER=$((RANKS / NODES))
layout=(-N"$NODES" -n"$RANKS" --ntasks-per-node="$PER")
nodes_or_skip "$NODES"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
t0=$SECONDS

# step NAME TIMEOUT SRUN_ARGS... -- CMD...: a job step, its output in $w/NAME.log, its status in $rc
step() {
  local name=$1 limit=$2
  shift 2
  "$srun_test" "$limit" "$@" >"$w/$name.log" 2>&1
  rc=$?
  [ $rc -eq 77 ] && { cat "$w/$name.log"; exit 77; }
}
# errors NAME: the error lines of a log (they name the rank and node)
errors() { grep -E 'error|FAIL|died|abort' "$w/$1.log" | head -n 5; }
# done_in NAME: the test's last line
done_in() { echo "$1: ok ($RANKS ranks on $NODES nodes, $((SECONDS - t0)) s)"; exit 0; }

case $what in
info)
  # shellcheck disable=SC2016 # expanded by the task's shell
  step info 180 "${layout[@]}" -- bash -c 'echo "slurm $SLURM_PROCID $SLURMD_NODENAME $SLURM_LOCALID"; exec "$0" info' "$prog"
  [ $rc -eq 0 ] || { cat "$w/info.log"; fail "srun ${layout[*]} mntrain info: exit $rc"; }
  awk -v n="$RANKS" -v nodes="$NODES" '
    function bad(msg) { print "FAIL: " msg; fails++ }
    /^slurm [0-9]+ / {
      if ($2 in sn) bad("rank " $2 ": Slurm started it twice (on " sn[$2] " and " $3 ")")
      sn[$2] = $3; sl[$2] = $4; next
    }
    # rank R of N on HOST: node K of M, local rank L of LS, pid ...
    /^rank [0-9]+ of [0-9]+ on / {
      r = $2; h = $6; sub(/:$/, "", h); m = $10; sub(/,$/, "", m); ls = $15; sub(/,$/, "", ls)
      if (r in mh) bad("rank " r ": mntrain info printed it twice (on " mh[r] " and " h ")")
      size[r] = $4; mh[r] = h; mk[r] = $8; mm[r] = m; ml[r] = $13; mls[r] = ls; next
    }
    END {
      for (r = 0; r < n; r++) {
        at = (r in sn) ? sprintf("rank %d (Slurm: %s, SLURM_LOCALID %s)", r, sn[r], sl[r]) : "rank " r
        if (!(r in sn)) bad(at ": Slurm started no task of this rank")
        if (!(r in mh)) { bad(at ": no line from mntrain info"); continue }
        if (size[r] != n) bad(at ": mntrain says " size[r] " ranks, not " n)
        if (mm[r] != nodes) bad(at ": mntrain says " mm[r] " nodes, not " nodes)
        if (mk[r] < 0 || mk[r] >= nodes) bad(at ": node index " mk[r] " is not one of 0.." nodes - 1)
        if (!(r in sn)) continue
        if (mh[r] != sn[r]) bad(at ": mntrain says it is on " mh[r])
        if (ml[r] != sl[r]) bad(at ": mntrain says local rank " ml[r])
        count[sn[r]]++
        if (!(sn[r] in idx)) { idx[sn[r]] = mk[r]; idx_r[sn[r]] = r }
        else if (idx[sn[r]] != mk[r])
          bad(at ": node index " mk[r] ", but rank " idx_r[sn[r]] " on the same node has " idx[sn[r]])
        if (!(mk[r] in host)) { host[mk[r]] = sn[r]; host_r[mk[r]] = r }
        else if (host[mk[r]] != sn[r])
          bad(at ": node index " mk[r] ", the same as rank " host_r[mk[r]] " on " host[mk[r]])
      }
      for (r in mh) if (r + 0 >= n) bad("rank " r ": mntrain info names a rank beyond " n - 1)
      for (r = 0; r < n; r++)
        if ((r in sn) && (r in mh) && mls[r] != count[sn[r]])
          bad("rank " r " on " sn[r] ": mntrain says local size " mls[r] ", Slurm placed " count[sn[r]] " ranks there")
      k = 0
      for (h in idx) k++
      if (k != nodes) bad("the ranks ran on " k " Slurm nodes, not " nodes)
      exit fails > 0
    }' "$w/info.log" || { sed -n '1,8p' "$w/info.log"; fail "mntrain info at $RANKS ranks disagrees with Slurm (above)"; }
  done_in "scale info"
  ;;
allreduce)
  topo=${1:?allreduce flat|hier float|bfloat16}
  dt=${2:?allreduce flat|hier float|bfloat16}
  case $dt in float) es=4 ;; bfloat16) es=2 ;; *) echo "scale.sh allreduce: type float or bfloat16" >&2; exit 2 ;; esac
  step ar "${MNT_SCALE_AR_TIMEOUT:-400}" "${layout[@]}" -- "$prog" bench allreduce -b 8 -e 64M -f 4 -c 1 -n 2 -w 1 --topology "$topo" -d "$dt"
  cat "$w/ar.log"
  fail=0
  [ $rc -eq 0 ] || { bad "bench allreduce --topology $topo -d $dt: exit $rc"; errors ar; }
  grep -q "^# mntrain: $RANKS ranks on $NODES nodes, comm cpu, topology $topo;" "$w/ar.log" ||
    bad "not $RANKS ranks on $NODES nodes with topology $topo: $(grep -m1 '^# mntrain:' "$w/ar.log")"
  sizes=""
  for ((s = 8; s <= 64 << 20; s *= 4)); do sizes+="$s "; done
  # size count type redop root | time algbw busbw #wrong (out of place) | the same in place
  awk -v sizes="$sizes" -v es="$es" -v type="$dt" '
    function bad(msg) { print "FAIL: " msg; fails++ }
    NF == 13 && $1 ~ /^[0-9]+$/ {
      s = $1; seen[s]++
      if ($2 != s / es || $3 != type || $4 != "sum" || $5 != -1)
        bad("size " s ": the row says " $2 " " $3 " " $4 " " $5 ", not " s / es " " type " sum -1")
      if ($9 != "0" || $13 != "0") bad("size " s ": #wrong " $9 " out of place, " $13 " in place")
    }
    END {
      n = split(sizes, want, " ")
      for (i = 1; i <= n; i++) {
        if (!(want[i] in seen)) bad("size " want[i] ": no row")
        else if (seen[want[i]] > 1) bad("size " want[i] ": " seen[want[i]] " rows")
        expected[want[i]] = 1
      }
      for (s in seen) if (!(s in expected)) bad("size " s ": a row for a size not asked for")
      exit fails > 0
    }' "$w/ar.log" || fail=1
  grep -qx '# Out of bounds values : 0 OK' "$w/ar.log" || bad "no '# Out of bounds values : 0 OK'"
  [ $fail -eq 0 ] || fail "bench allreduce --topology $topo -d $dt at $RANKS ranks on $NODES nodes (above)"
  done_in "scale allreduce $topo $dt"
  ;;
equivalence)
  EQ_RANKS=$RANKS EQ_NODES=$NODES EQ_BATCH=4 EQ_STEPS=10 EQ_LR=0.02 EQ_TIMEOUT=300 "$cluster/train_equivalence.sh" "$prog" || exit $?
  done_in "scale equivalence"
  ;;
elastic)
  # the 4-rank test's learning rate after the linear scaling rule (0.4 x 16/256), so that N ranks
  # stay as close to float rounding (at 0.4 x 512/256, 128 ranks differed by 1.8e-4)
  CKPT_LR=$(awk -v g=$((RANKS * 4)) 'BEGIN { printf "%g", 0.4 * 16 / g }') CKPT_RANKS=$RANKS CKPT_NODES=$NODES \
    CKPT_RESUME="$((RANKS >= 8 ? RANKS / 8 : 1)) 1" CKPT_TIMEOUT=300 "$cluster/ckpt.sh" "$prog" elastic gluster || exit $?
  done_in "scale elastic"
  ;;
shrink)
  # --on-rank-loss shrink: the last node's ranks killed at step 30 of 120: it finishes on the others
  SHRINK_NODES=$NODES SHRINK_RANKS=$RANKS SHRINK_STEPS=120 "$cluster/shrink.sh" "$prog" node || exit $?
  done_in "scale shrink"
  ;;
kill | hung)
  victim=$(((RANKS / 2 + 5) % RANKS))
  if [ "$what" = kill ]; then
    KILL_AFTER=2.0 KILL_GONE_S=5 KILL_LIMIT_S=120 KILL_TIMEOUT_S=180 "$cluster/kill_rank.sh" "$prog" "$victim" "${layout[@]}" ||
      exit $?
  else
    KILL_AFTER=2.0 KILL_COMM_TIMEOUT=60 KILL_LIMIT_S=150 KILL_TIMEOUT_S=200 \
      "$cluster/kill_rank.sh" --stop "$prog" "$victim" "${layout[@]}" || exit $?
  fi
  done_in "scale $what"
  ;;
sweep)
  list=""
  for ((n = 1; n < NODES; n *= 2)); do list+="$n "; done
  list+=$NODES
  m=$(cd "$(dirname "$prog")" && pwd)/$(basename "$prog")
  (cd "$w" && MNTRAIN=$m timeout 900 "$here/../../job_templates/scaling_sweep.sh" NODES="$list" RANKS_PER_NODE="$PER" \
    WITHIN_NODE=no CPUS_PER_TASK=1 ARCH=resnet8 SIZE=16 STEPS=12 BATCH_PER_RANK=4 OUT="$w/sweep" POLL=1 --wait) >"$w/sweep.log" 2>&1
  rc=$?
  cat "$w/sweep.log"
  fail=0
  [ $rc -eq 0 ] || bad "scaling_sweep.sh NODES=\"$list\" --wait: exit $rc"
  runs=()
  for n in $list; do
    d=$w/sweep/ranks-$((n * PER))
    if [ -f "$d/summary.json" ]; then
      runs+=("$d")
    else
      bad "the run on $n node(s), $((n * PER)) ranks: no summary.json"
      tail -n 5 "$w/sweep/logs/ranks-$((n * PER))"-*.out 2>/dev/null
    fi
  done
  [ ${#runs[@]} -gt 0 ] || fail "no run of the sweep finished"
  "$prog" report "${runs[@]}" --out "$w/report" >"$w/report.log" 2>&1 || { cat "$w/report.log"; fail "mntrain report: exit $?"; }
  cat "$w/report.log"
  for n in $list; do
    r=$((n * PER))
    grep -qE "^ *$r +$n " "$w/report.log" || bad "the report's table has no row of $r ranks on $n node(s)"
    grep -q "^$r,$n," "$w/report/scaling.csv" 2>/dev/null || bad "scaling.csv has no row of $r ranks on $n node(s)"
    grep -q "^$r,$n," "$w/sweep/scaling.csv" 2>/dev/null || bad "the sweep's own scaling.csv has no row of $r ranks on $n node(s)"
    grep -q "<title>$r ranks on $n nodes: " "$w/report/scaling.svg" 2>/dev/null || bad "scaling.svg has no point of $r ranks on $n node(s)"
  done
  rows=$(($(wc -l <"$w/report/scaling.csv") - 1))
  [ "$rows" -eq "$(wc -w <<<"$list")" ] || bad "scaling.csv has $rows rows, not one per node count ($list)"
  /usr/bin/python3 - "$w/report/scaling.svg" <<'PY' || bad "scaling.svg is not a well-formed SVG"
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
sys.exit(0 if d.documentElement.tagName == "svg" else 1)
PY
  [ $fail -eq 0 ] || fail "the scaling sweep over $list node(s)"
  done_in "scale sweep"
  ;;
finished)
  big=${MNT_SCALE_BIG_RANKS:-128}
  bign=${MNT_SCALE_BIG_NODES:-$NODES}
  tries=${MNT_SCALE_BIG_RUNS:-2}
  [ "$bign" -le "$NODES" ] || nodes_or_skip "$bign"
  "$prog" convert synth "$w/data" --classes 10 --images 512 --size 16 --shards 2 >/dev/null || fail "convert synth"
  for i in $(seq 1 "$tries"); do
    # -O: more ranks than the nodes have CPUs
    step "run$i" 400 -N"$bign" -n"$big" -O -- "$prog" train --data "$w/data" --arch resnet8 --size 16 --batch-per-rank 2 \
      --steps 6 --threads 1 --loader-threads 1 --log-every 1 --out "$w/out$i"
    died=$(grep -m3 "died during" "$w/run$i.log")
    if [ $rc -ne 0 ] || [ -n "$died" ]; then
      last=$(grep -oE '^epoch [0-9.]+ step [0-9]+/[0-9]+' "$w/run$i.log" | tail -n1)
      tail -n 20 "$w/run$i.log"
      fail "run $i of $tries, $big ranks on $bign nodes: exit $rc after ${last:-no step}: ${died:-$(errors "run$i" | head -n1)}"
    fi
    echo "ok: run $i of $tries: $big ranks on $bign nodes trained 6 steps and ended cleanly"
  done
  done_in "scale finished-neighbour ($big ranks on $bign nodes)"
  ;;
*)
  echo "usage: scale.sh info|allreduce|equivalence|elastic|kill|hung|sweep|finished PROGRAM [ARGS]" >&2
  exit 2
  ;;
esac
