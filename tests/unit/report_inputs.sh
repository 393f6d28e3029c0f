#!/usr/bin/env bash
# report_inputs.sh — `mntrain report` on inputs that do not belong together, made from hand-written
# runs and traces (tests/fixtures/report/ids, tests/fixtures/report/trace/job41) by moving a file
# from one to another the way a user's copy would:
# - run directories (ids/r1, r2, r2b: three runs with their run_id in config.json, summary.json and
#   every metrics.jsonl line): another run's metrics.jsonl swapped in is exit 2 naming the file and
#   the other run_id, and so is another run's summary.json (against config.json, or without it
#   against every metrics line); another run's lines appended, or lines without a run_id after the
#   run's own, are left out and named (file, count, lines, run_id): the tables and CSVs are the
#   clean run's exactly; the same run given twice is named; a summary.json whose run_id is not one
#   is exit 2; runs from before run ids (tests/fixtures/report/weak) are read as before, said once;
#   strings of the files (an optimizer with a comma, '<' and '&') quoted in learning.csv and escaped
#   in the SVGs; 2^62 ranks and an img/s of 1e300 give a table in time with a finite spread, and a
#   negative img/s is named;
# - no evaluation: the learning table is left out and the report says why;
# - traces (job41: 2 ranks of one job): a rank's file under another rank's name, two jobs or two
#   runs, sizes 2 and 4, rank 5 of 2, a negative duration or start, a version 1 file beside version
#   2 ones, a file cut short before its events are exit 2 naming the file and what is wrong; a
#   "truncated" trace and a file cut short inside its events are merged with the rank's timeline
#   named incomplete (a warning, trace.json's otherData, the SVG); a missing rank, a name train
#   never writes and version 1 files (said once) are warnings; a node and a span named with '<', '&'
#   and non-ASCII letters still give a trace.json and a trace.svg that parse; a clock offset of 2^62 ns
#   is merged in time; a job that shrank (4 ranks to 3, rank 2 lost: train --on-rank-loss shrink) is
#   merged, the shrink, the lost rank and the survivors' recovery spans said, and a file saying fewer
#   ranks than its job started with but no shrink is exit 2.
#   report_inputs.sh path/to/mntrain
# shellcheck disable=SC2015  # ok() always succeeds: "A && ok ... || bad ..." is an if-else here
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip, finish
m=$(realpath "$1")
py=/usr/bin/python3
[ -x "$py" ] || skip "no $py (the test edits JSON files and reads trace.json with it)"
fx=$(cd "$(dirname "$0")/../fixtures/report" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0 cases=0
cd "$w" || exit 1

# rep NAME ARGS...: mntrain report ARGS --out NAME.out; stdout in NAME.txt, stderr in NAME.err, status in rc
rep() {
  local name=$1
  shift
  cases=$((cases + 1))
  "$m" report "$@" --out "$name.out" >"$name.txt" 2>"$name.err"
  rc=$?
}
show() { sed 's/^/    /' "$1.err" "$1.txt"; }
# refused NAME PATTERN...: exit 2, every pattern in stderr (fixed strings), nothing written
refused() {
  local name=$1 good=1 p
  shift
  [ "$rc" -eq 2 ] || good=0
  for p in "$@"; do grep -qF -- "$p" "$name.err" || good=0; done
  ls "$name.out"/*.csv "$name.out"/trace.* >/dev/null 2>&1 && good=0
  if [ $good -eq 1 ]; then ok "$name: exit 2: $(grep -m1 'error' "$name.err" | cut -c1-220)"
  else bad "$name: exit $rc, want 2 naming: $*"; show "$name"; fi
}
# warned NAME PATTERN...: exit 0, every pattern in a warning line of stderr (fixed strings)
warned() {
  local name=$1 good=1 p
  shift
  [ "$rc" -eq 0 ] || good=0
  for p in "$@"; do grep 'warning' "$name.err" | grep -qF -- "$p" || good=0; done
  if [ $good -eq 1 ]; then ok "$name: exit 0, named: $(grep -m1 'warning' "$name.err" | cut -c1-220)"
  else bad "$name: exit $rc, want 0 with a warning naming: $*"; show "$name"; fi
}
# jedit FILE PYTHON: FILE's JSON as t, changed by PYTHON, written back
jedit() { $py -c 'import json, sys; t = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(t, open(sys.argv[1], "w"))' "$1" "$2"; }
run_copy() { rm -rf "$1" && mkdir -p "$1" && cp "$fx/ids/r1" "$fx/ids/r2" "$1"/ -r; }

r1=3c9f2a71d04be865 r2=8e41b07c5a92d3f6 r2b=b5d20e9f7c13a48e

# ---- run directories ------------------------------------------------------------------------------
run_copy clean
rep clean clean/r1 clean/r2
[ "$rc" -eq 0 ] && [ -f clean.out/scaling.csv ] && [ -f clean.out/learning.csv ] && ! grep -q warning clean.err &&
  ok "clean: r1 and r2, exit 0, no warning" || { bad "clean: exit $rc"; show clean; }
# the CSVs of a case against the clean one's (the run column names the directory: the same here)
same_csvs() {
  local name=$1 f good=1
  for f in scaling.csv learning.csv; do
    sed 's/,[^,]*$//' "clean.out/$f" >"$name.want.$f"
    sed 's/,[^,]*$//' "$name.out/$f" >"$name.have.$f" 2>/dev/null || good=0
    diff "$name.want.$f" "$name.have.$f" >/dev/null || good=0
  done
  [ $good -eq 1 ] && ok "$name: scaling.csv and learning.csv are the clean run's" ||
    { bad "$name: the CSVs differ from the clean run's"; diff clean.out/scaling.csv "$name.out/scaling.csv"; diff clean.out/learning.csv "$name.out/learning.csv"; }
}

# another run's metrics.jsonl swapped in: every line is r1's
run_copy swap && cp "$fx/ids/r1/metrics.jsonl" swap/r2/
rep swap swap/r1 swap/r2
refused swap "swap/r2/metrics.jsonl" "$r1" "$r2"

# another run's lines appended: left out, named with their count, lines and run_id
run_copy append && cat "$fx/ids/r2b/metrics.jsonl" >>append/r2/metrics.jsonl
rep append append/r1 append/r2
warned append "append/r2/metrics.jsonl" "$r2b" "6 lines" "7-12"
same_csvs append

# another run's summary.json copied in: config.json says otherwise
run_copy sumcfg && cp "$fx/ids/r2b/summary.json" sumcfg/r2/
rep sumcfg sumcfg/r1 sumcfg/r2
refused sumcfg "sumcfg/r2/summary.json" "$r2b" "sumcfg/r2/config.json" "$r2"

# the same without config.json: every metrics line is of another run than the summary
run_copy sumlines && cp "$fx/ids/r2b/summary.json" sumlines/r2/ && rm sumlines/r2/config.json
rep sumlines sumlines/r1 sumlines/r2
refused sumlines "sumlines/r2" "$r2b" "$r2" "metrics.jsonl"

# lines without a run_id after the run's own (an older mntrain's run appended): left out, named
run_copy legacyapp && cat "$fx/weak/r2/metrics.jsonl" >>legacyapp/r2/metrics.jsonl
rep legacyapp legacyapp/r1 legacyapp/r2
warned legacyapp "legacyapp/r2/metrics.jsonl" "without a run_id"
same_csvs legacyapp

# a summary.json whose run_id is not one
run_copy badid && jedit badid/r2/summary.json 't["run_id"] = 12345'
rep badid badid/r1 badid/r2
refused badid "badid/r2/summary.json" "run_id"

# the same run twice (a copied directory)
run_copy twice && cp -r twice/r1 twice/r1copy
rep twice twice/r1 twice/r2 twice/r1copy
warned twice "twice/r1" "twice/r1copy" "$r1"

# runs from before run ids: read as before, said once for all of them
rep legacy "$fx/weak/r1" "$fx/weak/r2" "$fx/weak/r4"
n=$(grep -c 'before run ids' legacy.err)
[ "$rc" -eq 0 ] && [ "$n" -eq 1 ] && grep 'before run ids' legacy.err | grep -q 'weak/r4' &&
  grep -qx "4,2,2,128,360.00,10.00,3.6000,0.9000,2.000,102.000,204.000,12.500,11.000,$fx/weak/r4" legacy.out/scaling.csv &&
  ok "legacy: runs without run_id read as before (r4's row), said once" || { bad "legacy: exit $rc, said $n times"; show legacy; }

# a run without run_id whose metrics.jsonl has another run's lines (with a run_id) appended
rm -rf legapp && cp -r "$fx/weak/r2" legapp && cat "$fx/ids/r2b/metrics.jsonl" >>legapp/metrics.jsonl
rep legapp legapp
warned legapp "legapp/metrics.jsonl" "$r2b"
grep -q '^2,2,2,64,190.00,5.00,' legapp.out/scaling.csv && ok "legapp: the spread is the run's own (5.00)" ||
  { bad "legapp: spread"; cat legapp.out/scaling.csv; }

# strings from the files reach the CSVs and SVGs as text: quoted (RFC 4180), escaped (XML)
run_copy escape && for r in r1 r2; do jedit "escape/$r/summary.json" 't["optimizer"] = "sg,d <&\"x"; t["precision"] = "fp32 <&>"'; done
rep escape escape/r1 escape/r2
$py - escape.out <<'PY' && [ "$rc" -eq 0 ] && ok "escape: learning.csv has 15 fields a row, the SVGs parse" || { bad "escape"; show escape; }
import csv, sys, xml.dom.minidom as md
rows = list(csv.reader(open(sys.argv[1] + "/learning.csv", newline="")))
bad = [r for r in rows if len(r) != 15] or [r for r in rows[1:] if r[3] != 'sg,d <&"x']
for f in ("learning.svg", "scaling.svg"):
    md.parse(sys.argv[1] + "/" + f)
sys.exit(1 if bad else 0)
PY

# numbers far past any real run end in a report, not a loop that never ends (a tick of 1 rank does
# not move 2^62); an interval's img/s that is not a throughput is named, and a huge one still has a spread
run_copy huge && jedit huge/r1/summary.json 't["ranks"] = 2**62' &&
  $py -c 'import sys; p = sys.argv[1]; L = open(p).read().split("\n"); L[3] = L[3].replace("\"img_per_s\":100.0", "\"img_per_s\":1e300"); L[1] = L[1].replace("\"img_per_s\":98.0", "\"img_per_s\":-98"); open(p, "w").write("\n".join(L))' huge/r1/metrics.jsonl
cases=$((cases + 1))
timeout 20 "$m" report huge/r1 --out huge.out >huge.txt 2>huge.err
rc=$?
[ "$rc" -eq 0 ] && grep -q 'huge/r1/metrics.jsonl:2: img_per_s is not a throughput' huge.err &&
  grep -Eq '^4611686018427387904,1,2,32,100.00,[0-9]+\.[0-9]{2},' huge.out/scaling.csv &&
  ok "huge: 2^62 ranks and 1e300 img/s: a table in time, a finite spread, the negative img/s named" ||
  { bad "huge: exit $rc (124: it hung)"; show huge; cat huge.out/scaling.csv; }

# ---- no evaluation: no learning table, said why ----------------------------------------------------
rep noval "$fx/strong/s1" "$fx/strong/s2" "$fx/strong/s4"
[ "$rc" -eq 0 ] && grep -q 'learning table: left out' noval.txt && grep -q 'train --val' noval.txt &&
  [ ! -f noval.out/learning.csv ] && ok "noval: $(grep 'learning table' noval.txt)" || { bad "noval: no reason said"; show noval; }
run_copy someval && grep -v val_top1 someval/r2/metrics.jsonl >someval/m && mv someval/m someval/r2/metrics.jsonl
rep someval someval/r1 someval/r2
[ "$rc" -eq 0 ] && grep -q 'left out of the learning table.*someval/r2' someval.txt &&
  [ "$(grep -c '' someval.out/learning.csv)" -eq 2 ] && ok "someval: the run without evaluations is named under the table" ||
  { bad "someval: the run without evaluations is not named"; show someval; }

# ---- traces -----------------------------------------------------------------------------------------
trace_copy() { rm -rf "$1" && cp -r "$fx/trace/job41" "$1"; }
t0=trace-rank-00000.json t1=trace-rank-00001.json
trace_copy tclean
rep tclean --trace tclean
$py - tclean.out/trace.json 14 14 <<'PY' && [ "$rc" -eq 0 ] && ! grep -q warning tclean.err && ok "tclean: 2 ranks, 28 spans, no warning" || { bad "tclean"; show tclean; }
import json, sys
t = json.load(open(sys.argv[1]))
n = [sum(1 for e in t["traceEvents"] if e.get("ph") == "X" and e["pid"] == r) for r in (0, 1)]
sys.exit(0 if n == [int(sys.argv[2]), int(sys.argv[3])] and not t["otherData"].get("incomplete_ranks") else 1)
PY

trace_copy tcopy && cp tcopy/$t0 tcopy/$t1
rep tcopy --trace tcopy
refused tcopy "tcopy/$t1" "rank 0"

trace_copy tjob && jedit tjob/$t1 't["job"] = "slurm.pmix.42.0"'
rep tjob --trace tjob
refused tjob "tjob/$t0" "tjob/$t1" "slurm.pmix.41.0" "slurm.pmix.42.0"

trace_copy trun && jedit trun/$t1 't["run_id"] = "b5d20e9f7c13a48e"'
rep trun --trace trun
refused trun "trun/$t1" "3c9f2a71d04be865" "b5d20e9f7c13a48e"

trace_copy tsize && jedit tsize/$t0 't["size"] = 4'
rep tsize --trace tsize
refused tsize "tsize/$t0" "tsize/$t1" "size"

trace_copy trank && cp trank/$t1 trank/trace-rank-00005.json && jedit trank/trace-rank-00005.json 't["rank"] = 5'
rep trank --trace trank
refused trank "trank/trace-rank-00005.json" "rank 5 of 2"

trace_copy tdur && jedit tdur/$t1 't["events"][2][2] = -1000'
rep tdur --trace tdur
refused tdur "tdur/$t1" "event 2" "negative"

trace_copy tstart && jedit tstart/$t0 't["events"][0][1] = -5'
rep tstart --trace tstart
refused tstart "tstart/$t0" "event 0" "negative"

trace_copy tmixv && jedit tmixv/$t1 't["version"] = 1; del t["job"]; del t["run_id"]'
rep tmixv --trace tmixv
refused tmixv "tmixv/$t1" "version 1"

trace_copy thead && head -c 150 "$fx/trace/job41/$t1" >thead/$t1
rep thead --trace thead
refused thead "thead/$t1" "cut short"

# the span cap hit: merged, the rank's timeline named incomplete (warning, trace.json, SVG)
trace_copy ttrunc && jedit ttrunc/$t1 't["truncated"] = True'
rep ttrunc --trace ttrunc
warned ttrunc "ttrunc/$t1" "rank 1" "incomplete"
$py -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["otherData"].get("incomplete_ranks") != [1])' ttrunc.out/trace.json &&
  grep -q 'incomplete' ttrunc.out/trace.svg && ok "ttrunc: trace.json and trace.svg name rank 1's timeline incomplete" ||
  bad "ttrunc: trace.json's otherData or trace.svg does not name rank 1 incomplete"

# the cap's step said where the file says it; a failed job's files said (their timelines end early)
trace_copy tcapstep && jedit tcapstep/$t1 't["truncated"] = True; t["truncated_at_step"] = 5'
rep tcapstep --trace tcapstep
warned tcapstep "tcapstep/$t1" "span cap in step 5"
trace_copy tfail && jedit tfail/$t0 't["ended"] = "failed"; t["last_step"] = 5' && jedit tfail/$t1 't["ended"] = "finished"; t["last_step"] = 5'
rep tfail --trace tfail
warned tfail "the job failed (1 of its ranks say so; rank 0 in step 5)"
trace_copy tended && jedit tended/$t0 't["ended"] = "crashed"'
rep tended --trace tended
refused tended "tended/$t0" "'ended'"

# the timeline and the tables of one run (r1 is job41's run), or said to be of different runs
rep tr1 "$fx/ids/r1" --trace "$fx/trace/job41"
[ "$rc" -eq 0 ] && ! grep -q "none of the run directories" tr1.err && ok "tr1: a run with its own trace: nothing said" ||
  { bad "tr1: a run and its own trace"; show tr1; }
rep tr2 "$fx/ids/r2" --trace "$fx/trace/job41"
warned tr2 "is of run 3c9f2a71d04be865, which none of the run directories given is"

# a file cut short inside its events: the events before the cut merged, the rank named incomplete
trace_copy tcut && head -c "$(($(grep -b -m1 '"backward", 0, 5' "$fx/trace/job41/$t1" | cut -d: -f1) + 20))" "$fx/trace/job41/$t1" >tcut/$t1
rep tcut --trace tcut
warned tcut "tcut/$t1" "cut short" "incomplete"
$py - tcut.out/trace.json <<'PY' && ok "tcut: rank 1's 8 events before the cut merged, rank 0's 14" || bad "tcut: not the events before the cut"
import json, sys
t = json.load(open(sys.argv[1]))
n = [sum(1 for e in t["traceEvents"] if e.get("ph") == "X" and e["pid"] == r) for r in (0, 1)]
print("    events per rank:", n)
sys.exit(0 if n == [14, 8] and t["otherData"].get("incomplete_ranks") == [1] else 1)
PY

# names from the files reach the SVG and trace.json as text (a node's name is a machine's, a span's the code's)
trace_copy tesc && jedit tesc/$t1 't["node"] = "n\u00f6de <&> " * 9; t["events"][-1][3] = "all<reduce & \u00e9"'
rep tesc --trace tesc
$py - tesc.out <<'PY' && [ "$rc" -eq 0 ] && ok "tesc: trace.json and trace.svg parse, the names kept" || { bad "tesc"; show tesc; }
import json, sys, xml.dom.minidom as md
t = json.load(open(sys.argv[1] + "/trace.json", encoding="utf-8"))
md.parse(sys.argv[1] + "/trace.svg")
names = {e["args"]["name"] for e in t["traceEvents"] if e.get("name") == "process_name"}
sys.exit(0 if "rank 1 (" + "n\u00f6de <&> " * 9 + ")" in names else 1)
PY

# one rank's clock 2^62 ns away (a node up for 146 years): merged in time, the SVG's axis in few ticks
trace_copy thuge && jedit thuge/$t1 't["offset_ns"] = 2**62'
cases=$((cases + 1))
timeout 20 "$m" report --trace thuge --out thuge.out >thuge.txt 2>thuge.err
rc=$?
[ "$rc" -eq 0 ] && [ "$(grep -c '<line' thuge.out/trace.svg)" -le 110 ] &&
  ok "thuge: a clock offset of 2^62 ns merged in time, $(grep -c '<line' thuge.out/trace.svg) grid lines" ||
  { bad "thuge: exit $rc (124: it hung)"; show thuge; }

# a job that shrank (train --on-rank-loss shrink): job rank 2 lost mid-run, ranks 0, 1 and 3 went on
# as 3 ranks (their files keep the job's rank and name, "size" 3, "job_size" 4, "membership_epoch" 1)
# and each has a recovery span: merged, the shrink and the rank without a file said, the recovery shown
rm -rf tshrink && mkdir tshrink && cp "$fx/trace/job41/$t0" "$fx/trace/job41/$t1" tshrink/ &&
  cp tshrink/$t1 tshrink/trace-rank-00003.json && jedit tshrink/trace-rank-00003.json 't["rank"] = 3; t["node"] = "node3"'
for f in tshrink/trace-rank-0000[013].json; do
  jedit "$f" 't.update(size=3, job_size=4, membership_epoch=1); t["events"].append([0, 5022600000, 800000000, "recovery", 4, 5, 0])'
done
rep tshrink --trace tshrink
$py - tshrink.out <<'PY' && [ "$rc" -eq 0 ] && grep -q 'shrank from 4 to 3 ranks' tshrink.txt &&
import json, sys
t = json.load(open(sys.argv[1] + "/trace.json"))
o = t["otherData"]
pids = sorted({e["pid"] for e in t["traceEvents"] if e.get("ph") == "X"})
rec = sorted(e["pid"] for e in t["traceEvents"] if e.get("ph") == "X" and e["name"] == "recovery")
print("    otherData:", o, "ranks merged:", pids, "recovery spans:", rec)
sys.exit(0 if pids == [0, 1, 3] and rec == [0, 1, 3] and o["ranks"] == 4 and o["ranks_at_end"] == 3
         and o["membership_epoch"] == 1 and o["missing_ranks"] == [2] else 1)
PY
  grep -q 'without one (lost mid-run): 2$' tshrink.txt && grep -q 'recovery' tshrink.out/trace.svg &&
  ! grep -q warning tshrink.err && ok "tshrink: ranks 0 1 3 of 4 merged, rank 2 named lost, recovery spans shown" ||
  { bad "tshrink: exit $rc"; show tshrink; }
# fewer ranks than the job's start without a shrink: not what train writes
trace_copy tshrink0 && jedit tshrink0/$t1 't.update(job_size=4, membership_epoch=0)'
rep tshrink0 --trace tshrink0
refused tshrink0 "tshrink0/$t1" "membership_epoch"

# still warnings: a missing rank, a name train never writes, version 1 files (said once)
trace_copy tmiss && rm tmiss/$t1
rep tmiss --trace tmiss
warned tmiss "1 of 2 ranks" "missing: 1"
trace_copy tname && cp tname/$t1 tname/trace-rank-+0001.json
rep tname --trace tname
warned tname "trace-rank-+0001.json"
$py -c 'import json, sys; t = json.load(open(sys.argv[1])); sys.exit(sum(e.get("ph") == "X" for e in t["traceEvents"]) != 28)' tname.out/trace.json &&
  ok "tname: the odd name left out (28 spans, not 42)" || bad "tname: the file with an odd name was merged"
trace_copy tv1 && for f in $t0 $t1; do jedit "tv1/$f" 't["version"] = 1; del t["job"]; del t["run_id"]'; done
rep tv1 --trace tv1
[ "$rc" -eq 0 ] && [ "$(grep -c 'version 1' tv1.err)" -eq 1 ] && ok "tv1: version 1 files merged, said once" ||
  { bad "tv1: exit $rc"; show tv1; }

echo "report_inputs: $cases cases run"
[ $cases -eq 38 ] || bad "$cases cases ran, not 38"
finish report_inputs "$fail"
