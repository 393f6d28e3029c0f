#!/usr/bin/env bash
# perfmodel.sh — `mntrain model` on cases with a closed form: one GPU (no communication, 100%), a
# 2-rank ring (1 GB at 1 GB/s: 1 s), the alpha term, hierarchical on one node = the ring inside
# it, hierarchical across nodes, no overlap (exposed = total), overlap (only the last bucket, or
# the pipeline's tail), bf16 (half), calibration from synthetic allreduce tables in mntrain's and
# nccl-tests' layouts (alpha and bandwidth back within 1e-6), --measured against made-up runs,
# and the chainermn-paper preset at 128 GPUs against its inputs worked by hand.
#   perfmodel.sh path/to/mntrain
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$(realpath "$1")
fail=0
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT

# near GOT WANT [REL]: |got - want| <= rel * max(|want|, 1e-12)
near() {
  [[ $1 =~ ^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]] || return 1
  awk -v g="$1" -v w="$2" -v r="${3:-1e-9}" 'BEGIN { d = g - w; if (d < 0) d = -d; a = w < 0 ? -w : w;
  if (a < 1e-12) a = 1e-12; exit !(d <= r * a) }'; }
# field NAME CSVLINE: the value of a column of `mntrain model --csv`
cols=topology,overlap,grad_dtype,gpus,nodes,step_ms,comm_ms,exposed_ms,img_per_s_per_gpu,img_per_s,efficiency
field() { awk -F, -v c="$cols" -v n="$1" 'BEGIN { k = split(c, h, ","); for (i = 1; i <= k; i++) if (h[i] == n) f = i }
  { print $f }' <<<"$2"; }
# row TOPO OVERLAP DTYPE GPUS ARGS...: the CSV row of that variant and GPU count
row() {
  local t=$1 o=$2 g=$3 p=$4
  shift 4
  "$m" model --csv --topology "$t" --overlap "$o" --grad-dtype "$g" "$@" | awk -F, -v t="$t" -v o="$o" -v g="$g" -v p="$p" '$1 == t && $2 == o && $3 == g && $4 == p'
}
check() { # check WHAT GOT WANT [REL]
  near "$2" "$3" "${4:-1e-9}" || bad "$1: got $2, want $3"
}

base=(--forward-ms 0 --backward-ms 1000 --batch 1 --alpha-us 0 --intra-alpha-us 0)

# 1. one GPU: no communication, 100.0%, step = the phases
r=$(row ring on bf16 1 --forward-ms 10 --backward-ms 20 --data-ms 3 --optimizer-ms 2 --grad-bytes 1e8 --batch 8)
check "P=1 comm" "$(field comm_ms "$r")" 0
check "P=1 exposed" "$(field exposed_ms "$r")" 0
check "P=1 step" "$(field step_ms "$r")" 35
check "P=1 efficiency" "$(field efficiency "$r")" 100
"$m" model --forward-ms 10 --backward-ms 20 --grad-bytes 1e8 --batch 8 --gpus 1 | grep -qE '^1 .* 100\.0%$' ||
  bad "P=1 table row does not start with 1 and end with 100.0%"

# 2. ring, 2 ranks on 2 nodes, alpha 0, 1 GB/s, 1 GB: 1.0 s; efficiency 1/(1+1)
r=$(row ring off fp32 2 "${base[@]}" --grad-bytes 1e9 --bw-gbs 1 --gpus-per-node 1 --gpus 2)
check "ring 2 ranks 1 GB at 1 GB/s" "$(field comm_ms "$r")" 1000
check "ring 2 ranks step" "$(field step_ms "$r")" 2000
check "ring 2 ranks efficiency" "$(field efficiency "$r")" 50
# the alpha term: 4 ranks on 4 nodes, alpha 10 us: 2*3*10 us + 2*3/4 * 1e8 B / 2e9 B/s
r=$(row ring off fp32 4 "${base[@]}" --grad-bytes 1e8 --bw-gbs 2 --alpha-us 10 --gpus-per-node 1 --gpus 4)
check "ring 4 ranks with alpha" "$(field comm_ms "$r")" "$(awk 'BEGIN { printf "%.12g", 6 * 0.010 + 1.5 * 1e8 / 2e9 * 1e3 }')"
# tree: 2 log2(8) alpha + 2 S / B
r=$(row tree off fp32 8 "${base[@]}" --grad-bytes 1e8 --bw-gbs 2 --alpha-us 10 --gpus-per-node 1 --gpus 8)
check "tree 8 ranks" "$(field comm_ms "$r")" "$(awk 'BEGIN { printf "%.12g", 6 * 0.010 + 2 * 1e8 / 2e9 * 1e3 }')"

# 3. hierarchical on one node = the ring inside the node (the network between nodes unused)
for p in 2 4 8; do
  args=("${base[@]}" --grad-bytes 1e8 --gpus-per-node 8 --intra-bw-gbs 3 --intra-alpha-us 7 --bw-gbs 0.5 \
    --alpha-us 100 --gpus "$p")
  h=$(field comm_ms "$(row hier off fp32 "$p" "${args[@]}")")
  g=$(field comm_ms "$(row ring off fp32 "$p" "${args[@]}")")
  want=$(awk -v p="$p" 'BEGIN { printf "%.12g", 2 * (p - 1) * 0.007 + 2 * (p - 1) / p * 1e8 / 3e9 * 1e3 }')
  check "hier on one node, $p ranks" "$h" "$want"
  check "ring on one node, $p ranks" "$g" "$want"
done
# hierarchical across nodes: 16 ranks, 4 per node, 2 NICs of 0.5 GB/s
r=$(row hier off fp32 16 "${base[@]}" --grad-bytes 1e8 --gpus-per-node 4 --nics-per-node 2 --intra-bw-gbs 3 \
  --intra-alpha-us 7 --bw-gbs 0.5 --alpha-us 100 --gpus 16)
check "hier 16 ranks on 4 nodes" "$(field comm_ms "$r")" \
  "$(awk 'BEGIN { printf "%.12g", 6 * 0.007 + 1.5 * 1e8 / 3e9 * 1e3 + 6 * 0.100 + 1.5 * 1e8 / 1e9 * 1e3 }')"

# 4. no overlap: exposed = total, every variant and count
"$m" model --csv "${base[@]}" --grad-bytes 1e8 --bw-gbs 1 --alpha-us 5 --gpus-per-node 4 --topology all \
  --overlap off --gpus 1,2,8,64,4096 | awk -F, 'NR > 1 && $7 != $8 { bad = 1 } END { exit bad }' ||
  bad "overlap off: exposed differs from total"

# 5. overlap: 100 MB fp32 in 10 buckets of 10 MB over 1000 ms of backward, 2 ranks at 1 GB/s:
#    each bucket 10 ms < 100 ms between buckets -> only the last is exposed; total 100 ms
ov=("${base[@]}" --grad-bytes 1e8 --bucket-mb 10 --bw-gbs 1 --gpus-per-node 1 --gpus 2)
r=$(row ring on fp32 2 "${ov[@]}")
check "overlap, short buckets: exposed" "$(field exposed_ms "$r")" 10
check "overlap, short buckets: total" "$(field comm_ms "$r")" 100
# the remainder bucket is the last: 105 MB = 10 x 10 MB + 5 MB -> 5 ms exposed
r=$(row ring on fp32 2 "${base[@]}" --grad-bytes 1.05e8 --bucket-mb 10 --bw-gbs 1 --gpus-per-node 1 --gpus 2)
check "overlap, remainder bucket last" "$(field exposed_ms "$r")" 5
# buckets longer than their share of backward: 200 ms each, ready every 100 ms -> the last ends at
# 100 + 10 * 200 = 2100 ms, 1100 ms after backward
r=$(row ring on fp32 2 "${base[@]}" --grad-bytes 1e8 --bucket-mb 10 --bw-gbs 0.05 --gpus-per-node 1 --gpus 2)
check "overlap, long buckets: exposed" "$(field exposed_ms "$r")" 1100

# 6. bf16 halves the bytes: with alpha 0 the allreduce time halves, with and without overlap
for o in on off; do
  a=$(field comm_ms "$(row hier "$o" fp32 64 "${base[@]}" --grad-bytes 1e8 --bw-gbs 2 --gpus-per-node 8 --gpus 64)")
  b=$(field comm_ms "$(row hier "$o" bf16 64 "${base[@]}" --grad-bytes 1e8 --bw-gbs 2 --gpus-per-node 8 --gpus 64)")
  check "bf16 halves (overlap $o)" "$b" "$(awk -v a="$a" 'BEGIN { printf "%.12g", a / 2 }')"
done

# 7. calibration: tables made from known alpha and bandwidth come back within 1e-6
#    inside a node (mntrain's layout): 4 ranks, alpha 5 us, 2 GB/s -> t = 30 us + 1.5 s / 2e9 B/s
{
  echo "# mntrain bench allreduce: 4 ranks on 1 nodes, comm cpu, topology flat, float sum"
  echo "#   node0            ranks 0 1 2 3"
  echo "# iterations 20, warm-up 5, check 1"
  echo "#"
  echo "#         size        count   type       time    algbw    busbw  #wrong"
  echo "#          (B)   (elements)              (us)   (GB/s)   (GB/s)"
  for e in 10 12 14 16 18 20 22 24 26; do
    awk -v s=$((1 << e)) 'BEGIN { t = 30 + 1.5 * s / 2e9 * 1e6; a = s / t / 1e3;
      printf "  %12d %12d %6s %10.4f %8.3f %8.3f %7d\n", s, s / 4, "float", t, a, a * 1.5, 0 }'
  done
  echo "# Out of bounds values : 0 OK"
} >"$d/intra.txt"
#    between nodes (nccl-tests' layout): 8 ranks on 2 hosts, alpha 10 us, 4 GB/s per node
{
  echo "# nThread 1 nGpus 1 minBytes 1024 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
  echo "#"
  echo "# Using devices"
  for r in 0 1 2 3 4 5 6 7; do
    printf "#  Rank %2d Group  0 Pid %6d on %10s device  %d [0x%02x] NVIDIA H200\n" $r $((1000 + r)) node$((r / 4)) $((r % 4)) $r
  done
  echo "#"
  echo "#                                                              out-of-place                       in-place"
  echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
  echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
  for e in 10 12 14 16 18 20 22 24 26; do
    awk -v s=$((1 << e)) 'BEGIN { t = 140 + 1.75 * s / 4e9 * 1e6; a = s / t / 1e3;
      printf "%12d  %12d     float     sum      -1  %9.4f  %6.2f  %6.2f      0  %9.4f  %6.2f  %6.2f      0\n",
        s, s / 4, t, a, a * 1.75, t * 1.01, a, a * 1.75 }'
  done
  echo "# Out of bounds values : 0 OK"
  echo "# Avg bus bandwidth    : 1.234"
} >"$d/inter.txt"
out=$("$m" model --forward-ms 10 --backward-ms 20 --grad-bytes 1e8 --batch 8 --gpus-per-node 4 \
  --calibrate "$d/intra.txt,$d/inter.txt" --gpus 1 2>&1)
ia=$(sed -nE 's/^# calibration, inside a node: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\1/p' <<<"$out")
ib=$(sed -nE 's/^# calibration, inside a node: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\2/p' <<<"$out")
ea=$(sed -nE 's/^# calibration, between nodes: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\1/p' <<<"$out")
eb=$(sed -nE 's/^# calibration, between nodes: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\2/p' <<<"$out")
check "calibrated intra alpha" "${ia:-nan}" 5 1e-6
check "calibrated intra bandwidth" "${ib:-nan}" 2 1e-6
check "calibrated inter alpha" "${ea:-nan}" 10 1e-6
check "calibrated inter bandwidth" "${eb:-nan}" 4 1e-6
[ -n "$ia" ] && [ -n "$ea" ] || printf '    %s\n' "$out"
# per NIC: the same table with 2 NICs per node gives half the bandwidth per NIC
out=$("$m" model --forward-ms 10 --backward-ms 20 --grad-bytes 1e8 --batch 8 --gpus-per-node 4 --nics-per-node 2 \
  --calibrate "$d/inter.txt" --gpus 1 2>&1)
eb=$(sed -nE 's/^# calibration, between nodes: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\2/p' <<<"$out")
check "calibrated inter bandwidth per NIC" "${eb:-nan}" 2 1e-6
# --inplace: the in-place columns (1.01 x the out-of-place times in this table)
out=$("$m" model --forward-ms 10 --backward-ms 20 --grad-bytes 1e8 --batch 8 --gpus-per-node 4 --inplace \
  --calibrate "$d/inter.txt" --gpus 1 2>&1)
ea=$(sed -nE 's/^# calibration, between nodes: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\1/p' <<<"$out")
eb=$(sed -nE 's/^# calibration, between nodes: alpha ([^ ]+) us, bus bandwidth ([^ ]+) GB.*/\2/p' <<<"$out")
check "--inplace alpha" "${ea:-nan}" 10.1 1e-6
check "--inplace bandwidth" "${eb:-nan}" "$(awk 'BEGIN { printf "%.12g", 4 / 1.01 }')" 1e-6
# a file that is not an allreduce table is a usage error
echo "hello" >"$d/junk.txt"
"$m" model --forward-ms 1 --grad-bytes 1e8 --batch 1 --calibrate "$d/junk.txt" >/dev/null 2>&1
[ $? -eq 2 ] || bad "--calibrate junk: want exit 2"

# 8. --measured: a 1-rank run and a 2-rank run; predicted 35 + 4 = 39 ms against 45 ms measured
mk() { # mk DIR RANKS RPN STEP COMM
  mkdir -p "$1"
  cat >"$1/summary.json" <<EOF
{"ranks": $2, "nodes": $(($2 / $3)), "ranks_per_node": $3, "topology": "flat", "batch_per_rank": 8,
 "step_ms": {"mean": $4, "p50": $4, "p95": $4}, "grad_bytes": 4000000,
 "phases_ms": {"data": 1, "forward": 10, "backward": 20, "comm_exposed": $5, "optimizer": 2}}
EOF
}
mk "$d/one" 1 1 35 0
mk "$d/two" 2 1 45 8
out=$("$m" model --summary "$d/one/summary.json" --measured "$d/two/summary.json" --bw-gbs 1 --alpha-us 0 2>&1)
got=$(awk '$1 == 2 { print $6 }' <<<"$out")
check "--measured prediction" "${got:-nan}" 39
grep -qE '^2 .* -13\.3%' <<<"$out" || bad "--measured error column: $out"
"$m" model --summary "$d/one/summary.json" --measured "$d/two/summary.json" --bw-gbs 1 --tolerance 10 >/dev/null 2>&1
[ $? -eq 1 ] || bad "--measured --tolerance 10: want exit 1"
"$m" model --summary "$d/one/summary.json" --measured "$d/two/summary.json" --bw-gbs 1 --tolerance 20 >/dev/null 2>&1 ||
  bad "--measured --tolerance 20: want exit 0"
# the run's config.json says bf16: half the bytes, 35 + 2 = 37 ms
mk "$d/twob" 2 1 45 8
echo '{"grad_dtype": "bf16", "bucket_mb": 25}' >"$d/twob/config.json"
out=$("$m" model --summary "$d/one/summary.json" --measured "$d/twob/summary.json" --bw-gbs 1 --alpha-us 0 2>&1)
got=$(awk '$1 == 2 { print $6 }' <<<"$out")
check "--measured with bf16 gradients" "${got:-nan}" 37
# --summary alone: T(1) = step_ms.mean - comm_exposed of that run
r=$(row ring on fp32 1 --summary "$d/two/summary.json" --gpus 1)
check "--summary T(1)" "$(field step_ms "$r")" 37

# 9. the paper's setting: the 128-GPU row, its efficiency by hand from the preset's inputs
#    (T1 231.8 ms; hier: 2*3*5 us + 1.5 * S / 10 GB/s + 2*31*10 us + 2*31/32 * S / 6 GB/s)
out=$("$m" model --preset chainermn-paper --gpus 4,8,16,32,64,128)
line=$(grep -E '^128 ' <<<"$out")
pct=$(grep -oE '[0-9]+\.[0-9]%' <<<"$line")
want=$(awk 'BEGIN { s = 102228128; c = 6 * 0.005 + 1.5 * s / 10e9 * 1e3 + 62 * 0.010 + 62 / 32 * s / 6e9 * 1e3;
  printf "%.1f%%", 100 * 231.8 / (231.8 + c) }')
[ "$pct" = "$want" ] || bad "chainermn-paper 128 GPUs: '$line', want $want"
# within ten points of the paper's 90% (the inputs and why it is not closer: benchmarks/README.md)
awk -v p="${pct%\%}" 'BEGIN { exit !(p >= 80.0 && p <= 95.0) }' || bad "chainermn-paper 128 GPUs: $pct, not 80-95%"
grep -q 'arXiv 1710.11351' <<<"$out" || bad "chainermn-paper: the sources are not printed"
[ "$(grep -cE '^[0-9]+ ' <<<"$out")" -eq 6 ] || bad "chainermn-paper: want one table of 6 rows"

# --net: a network file overrides the preset's, a flag overrides the file
echo '{"alpha_us": 0, "bw_gbs": 1, "intra_alpha_us": 0, "intra_bw_gbs": 1, "gpus_per_node": 1}' >"$d/net.json"
r=$(row hier off fp32 2 --preset chainermn-paper --net "$d/net.json" --grad-bytes 1e9 --gpus 2)
check "--net over the preset" "$(field comm_ms "$r")" 1000
r=$(row hier off fp32 2 --preset chainermn-paper --net "$d/net.json" --grad-bytes 1e9 --bw-gbs 2 --gpus 2)
check "a flag over --net" "$(field comm_ms "$r")" 500
echo '{"bw_gbs": -1}' >"$d/badnet.json"
"$m" model --preset chainermn-paper --net "$d/badnet.json" >/dev/null 2>&1; [ $? -eq 2 ] || bad "--net bad: want exit 2"

# 11. --allreduce: one allreduce by the formulas of --help, as bench allreduce reports it
#    2 GPUs on one node: 2 ai + s / Bi; 16 GPUs on 2 nodes of 8 (ring): 2*15 a + 2*15/16 s / B
ar=$("$m" model --csv --alpha-us 10 --bw-gbs 2 --intra-alpha-us 1 --intra-bw-gbs 5 --gpus-per-node 8 --gpus 2,16 \
  --allreduce 8,64M --topology ring)
arow() { awk -F, -v p="$1" -v s="$2" '$2 == p && $4 == s' <<<"$ar"; }
check "--allreduce 8 B on 2 GPUs of one node" "$(arow 2 8 | cut -d, -f5)" 2.0016
check "--allreduce 64M on 2 GPUs of one node" "$(arow 2 67108864 | cut -d, -f5)" 13423.7728
check "--allreduce 64M on 16 GPUs, 2 nodes" "$(arow 16 67108864 | cut -d, -f5)" "$(awk 'BEGIN { printf "%.9g", 300 + 30 / 16 * 67108864 / 2e9 * 1e6 }')"
check "--allreduce busbw on 16 GPUs" "$(arow 16 67108864 | cut -d, -f6)" "$(awk 'BEGIN { t = (300 + 30 / 16 * 67108864 / 2e9 * 1e6) / 1e6; printf "%.9g", 67108864 / t * 30 / 16 / 1e9 }')"
"$m" model --alpha-us 1 --bw-gbs 1 --allreduce 8,huge >/dev/null 2>&1; [ $? -eq 2 ] || bad "--allreduce huge: want exit 2"

# 10. usage errors exit 2 and name the flag; --help exits 0
"$m" model --preset nope >/dev/null 2>&1; [ $? -eq 2 ] || bad "--preset nope: want exit 2"
"$m" model --preset h200-ndr --gpus 0 2>&1 | grep -q -- --gpus || bad "--gpus 0: no message naming --gpus"
"$m" model --batch 8 >/dev/null 2>&1; [ $? -eq 2 ] || bad "no step: want exit 2"
"$m" model --preset h200-ndr --topology star >/dev/null 2>&1; [ $? -eq 2 ] || bad "--topology star: want exit 2"
"$m" model --help | grep -q 'hier: 2(L-1) ai' || bad "--help does not state the model"

[ "$fail" -eq 0 ] && echo "model: all checks passed"
exit "$fail"
