#!/usr/bin/env bash
# trace.sh — mntrain train --trace on 4 ranks of the 2-node cluster, merged by mntrain report --trace:
# one trace that Python's json loads with every rank and thread, spans nested and ordered, the
# steps' phases as metrics.jsonl has them, the clocks aligned within 1 ms (trace_check.py), and an
# SVG naming the critical rank; the report merges the four files of one job without a warning, naming
# the job step and run in trace.json. The checker must also fail on the same trace with one rank's clock
# moved 5 ms and with one span taken out (a check that cannot fail checks nothing). On a sanitizer
# build (MNT_TEST_SANITIZE, set by ctest) the clocks are held to 4 ms and the moved clock is 20 ms:
# instrumented steps wake the ranks' threads less evenly.
#   trace.sh path/to/mntrain
set -u
m=$1
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
. "$here/lib.sh"
slurm_or_skip 2
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
clock_ms=1 moved_ns=5000000
[ -n "${MNT_TEST_SANITIZE:-}" ] && clock_ms=4 moved_ns=20000000
"$m" convert synth "$w/data" --classes 10 --images 512 --size 40 --shards 2 >/dev/null || fail "convert synth"
"$here/srun_test.sh" 300 -N2 -n4 --ntasks-per-node=2 -- "$m" train --data "$w/data" --arch resnet8 --size 32 \
  --batch-per-rank 16 --steps 12 --threads 1 --loader-threads 1 --log-every 1 --out "$w/out" \
  --trace "$w/trace" --trace-steps 4:7 >"$w/log" 2>&1
rc=$?
[ $rc -eq 77 ] && { cat "$w/log"; exit 77; }
[ $rc -eq 0 ] || { cat "$w/log"; fail "training with --trace exited $rc"; }
n=$(find "$w/trace" -name 'trace-rank-*.json' | wc -l)
if [ "$n" -eq 4 ]; then ok "4 rank files in the trace directory"; else bad "$n rank files in the trace directory, not 4"; fi
"$m" report "$w/out" --trace "$w/trace" --out "$w/rep" >"$w/report.log" 2>&1 || { cat "$w/report.log"; fail "report --trace"; }
cat "$w/report.log"
if /usr/bin/python3 "$here/trace_check.py" "$w/rep/trace.json" "$w/out/metrics.jsonl" "$w/out/summary.json" 4 7 "$clock_ms"; then
  ok "the merged trace"
else
  bad "the merged trace"
fi
# the files of one job, whole: merged without a warning, trace.json naming the job step and no incomplete rank
if ! grep -q 'warning: .*report_trace' "$w/report.log" && /usr/bin/python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))["otherData"]
sys.exit(0 if o.get("job", "").startswith("slurm.pmix.") and len(o.get("run_id", "")) == 16 and o.get("ranks") == 4
         and o.get("incomplete_ranks") == [] else 1)' "$w/rep/trace.json"; then
  ok "one job's 4 whole files: no warning, trace.json names the job step and run"
else
  bad "the real trace files were warned about, or trace.json does not name their job: $(grep -m1 warning "$w/report.log")"
fi
if grep -q "critical: rank [0-3] (node[12])" "$w/rep/trace.svg"; then ok "trace.svg names the critical rank"
else bad "trace.svg does not name a critical rank"; fi
/usr/bin/python3 -c "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])" "$w/rep/trace.svg" ||
  bad "trace.svg is not XML"
# the checker on purpose-broken traces: one rank's clock off by 5 ms, one span dropped
for how in clock span; do
  rm -rf "$w/broken" "$w/rep2" && cp -r "$w/trace" "$w/broken"
  /usr/bin/python3 - "$w/broken/trace-rank-00002.json" "$how" "$moved_ns" <<'PY'
import json, sys
p, how = sys.argv[1], sys.argv[2]
t = json.load(open(p))
if how == "clock":
    t["offset_ns"] += int(sys.argv[3])
else:
    main = next(x["id"] for x in t["threads"] if x["name"] == "main")
    i = next(i for i, e in enumerate(t["events"]) if e[0] == main and e[3] == "forward" and e[5] == 5)
    del t["events"][i]
json.dump(t, open(p, "w"))
PY
  "$m" report --trace "$w/broken" --out "$w/rep2" >/dev/null 2>&1 || { bad "report --trace on the $how-broken copy"; continue; }
  if /usr/bin/python3 "$here/trace_check.py" "$w/rep2/trace.json" "$w/out/metrics.jsonl" "$w/out/summary.json" 4 7 \
    "$clock_ms" >"$w/check.log" 2>&1; then
    bad "trace_check.py passed a trace with one rank's $how broken"
  else
    ok "trace_check.py fails a trace with one rank's $how broken: $(grep -m1 FAIL "$w/check.log")"
  fi
done
finish trace "$fail"
