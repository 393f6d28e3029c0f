#!/usr/bin/env bash
# report.sh — `mntrain report` on hand-written runs (tests/fixtures/report) with answers worked out
# by hand:
# - weak scaling, 1/2/4 ranks at 100/190/360 img/s: speedup 1.90, 3.60, efficiency 95.0%, 90.0%;
#   ± sd from metrics.jsonl (98/100/102 -> 2.0, 185/190/195 -> 5.0, 350/360/370 -> 10.0) with the
#   warm-up interval, validation and checkpoint lines left out, and r4's intervals before its resume
#   (step 10) and warm-up (steps 11-15) too; rows sorted by ranks whatever the order given;
# - the baseline is the fewest ranks: 2 and 4 ranks give speedup 360/190 = 1.8947, E 90/95 = 0.9474;
# - strong scaling (global batch 128 on 1/2/4 ranks at 200/380/640): E 95.0%, 80.0%; no spread
#   without metrics.jsonl or with one interval after warm-up (empty CSV field, '-' in the table);
# - scaling.csv exactly; scaling.svg well-formed XML (Python's minidom), SVG namespace, the ideal
#   throughput line from the baseline (above the measured 4-rank point: 400 vs 360) and the 100%
#   line, log2 axis for powers of two and a linear one otherwise;
# - learning (tests/fixtures/report/learn: a batch sweep on 2 ranks with validation points): no
#   scaling table, said; the learning table, learning.csv exactly, learning.svg checked like
#   scaling.svg (a line per run in each plot, every point on the plot's one linear scale);
# - exit 2 naming the runs: a missing directory, one without summary.json, a different arch (and
#   --group reports both configurations apart), batch_per_rank and global_batch both different;
#   nothing written then.
#   report.sh path/to/mntrain
# shellcheck disable=SC2015  # ok() always succeeds: "A && ok ... || bad ..." is an if-else here
set -u
# shellcheck source=/dev/null
. "$(dirname "$0")/../lib.sh" # ok, bad, fail, skip
m=$(realpath "$1")
py=/usr/bin/python3
[ -x "$py" ] || { echo "SKIP: no $py (the SVG is checked with its XML parser)"; exit 77; }
fx=$(cd "$(dirname "$0")/../fixtures/report" && pwd)
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
fail=0
cd "$fx" || exit 1

# ---- weak scaling: out of order, a summary.json path and a trailing slash
"$m" report weak/r4/summary.json weak/r1 weak/r2/ --out "$w/weak" >"$w/weak.txt" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "weak sweep: exit 0" || { bad "weak sweep: exit $rc"; cat "$w/weak.txt"; }
cat >"$w/weak.csv" <<'EOF'
ranks,nodes,devices_per_rank,global_batch,img_per_s,img_per_s_spread,speedup,efficiency,data_ms,forward_ms,backward_ms,comm_exposed_ms,optimizer_ms,run
1,1,2,32,100.00,2.00,1.0000,1.0000,1.500,100.000,200.000,0.000,10.000,weak/r1
2,2,2,64,190.00,5.00,1.9000,0.9500,1.750,101.000,202.000,5.250,10.500,weak/r2
4,2,2,128,360.00,10.00,3.6000,0.9000,2.000,102.000,204.000,12.500,11.000,weak/r4
EOF
diff "$w/weak.csv" "$w/weak/scaling.csv" && ok "weak sweep: scaling.csv as worked out by hand" || bad "weak sweep: scaling.csv differs (above)"
for row in '^ +1 +1 +2 +32 +100\.0 +± 2\.0 +1\.00x +100\.0% +1\.50 +100\.00 +200\.00 +0\.00 +10\.00 +weak/r1$' \
  '^ +2 +2 +2 +64 +190\.0 +± 5\.0 +1\.90x +95\.0% +1\.75 +101\.00 +202\.00 +5\.25 +10\.50 +weak/r2$' \
  '^ +4 +2 +2 +128 +360\.0 +± 10\.0 +3\.60x +90\.0% +2\.00 +102\.00 +204\.00 +12\.50 +11\.00 +weak/r4$' \
  '^== resnet8, 28 px, cpu, fp32: weak scaling, 32 images per rank; baseline 1 rank \(weak/r1\)$'; do
  grep -Eq -- "$row" "$w/weak.txt" || bad "weak sweep: no line matching $row"
done
[ "$(sed '/^== learning/,$d' "$w/weak.txt" | grep -Ec '^ +[0-9]+ +[0-9]+ ')" -eq 3 ] || bad "weak sweep: not 3 rows"
grep -Eq '^ +1 .*weak/r1$' <(grep -E '^ +[0-9]+ +[0-9]+ ' "$w/weak.txt" | head -n1) || bad "weak sweep: rows not sorted by ranks"
[ $fail -eq 0 ] && ok "weak sweep: table rows (sorted), speedup, efficiency, ± sd, phases"

$py - "$w/weak/scaling.svg" 4 <<'PY' || fail=1
import sys, xml.dom.minidom as md
path, nmax = sys.argv[1], int(sys.argv[2])
try:
    d = md.parse(path)
except Exception as e:
    print(f"FAIL: {path} is not well-formed XML: {e}"); sys.exit(1)
s = d.documentElement
lines = {p.getAttribute("id"): [tuple(map(float, q.split(","))) for q in p.getAttribute("points").split()]
         for p in d.getElementsByTagName("polyline")}
texts = [t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild]
errs = []
if s.tagName != "svg" or s.getAttribute("xmlns") != "http://www.w3.org/2000/svg" or s.getAttribute("version") != "1.1":
    errs.append("root is not an SVG 1.1 <svg> in the SVG namespace")
it, mt = lines.get("ideal-throughput"), lines.get("measured-throughput")
ie, me = lines.get("ideal-efficiency"), lines.get("measured-efficiency")
if not (it and mt and ie and me):
    errs.append(f"missing lines: {sorted(lines)}")
else:
    if len(mt) != 3 or len(me) != 3: errs.append("measured lines do not have 3 points")
    if abs(it[0][0] - mt[0][0]) > 0.2 or abs(it[0][1] - mt[0][1]) > 0.2:
        errs.append(f"ideal throughput does not start at the baseline: {it[0]} vs {mt[0]}")
    if not (abs(it[-1][0] - mt[-1][0]) <= 0.2 and it[-1][1] < mt[-1][1] - 5):
        errs.append(f"ideal throughput at {nmax} ranks not above the measured point: {it[-1]} vs {mt[-1]}")
    if len({round(y, 1) for _, y in ie}) != 1 or abs(ie[0][1] - me[0][1]) > 0.2:
        errs.append("the 100% line is not flat through the baseline's efficiency")
    if not (me[0][1] < me[1][1] < me[2][1]):
        errs.append("efficiency does not fall 100% > 95% > 90% (SVG y grows downwards)")
if "ranks (log2 scale)" not in texts: errs.append("no log2 x axis for 1, 2, 4 ranks")
for want in ("throughput", "efficiency", "images per second"):
    if want not in texts: errs.append(f"no text '{want}'")
if not any("ideal" in t for t in texts) or not any(t.startswith("measured") for t in texts): errs.append("no legend")
if len(d.getElementsByTagName("circle")) < 6: errs.append("fewer than 6 points")
print("FAIL: scaling.svg: " + "; ".join(errs) if errs else
      "ok: scaling.svg: well-formed SVG 1.1, ideal lines from the baseline, log2 axis, legend")
sys.exit(1 if errs else 0)
PY

# ---- the baseline is the fewest ranks
"$m" report weak/r4 weak/r2 --out "$w/base" >"$w/base.txt" 2>&1 || { bad "baseline 2 ranks: exit $?"; cat "$w/base.txt"; }
grep -qx '4,2,2,128,360.00,10.00,1.8947,0.9474,2.000,102.000,204.000,12.500,11.000,weak/r4' "$w/base/scaling.csv" &&
  grep -qx '2,2,2,64,190.00,5.00,1.0000,1.0000,1.750,101.000,202.000,5.250,10.500,weak/r2' "$w/base/scaling.csv" &&
  grep -Eq '^ +4 .* 1\.89x +94\.7% ' "$w/base.txt" && ok "baseline 2 ranks: speedup 1.8947, efficiency 0.9474" ||
  { bad "baseline 2 ranks"; cat "$w/base.txt" "$w/base/scaling.csv"; }

# ---- strong scaling, no spread where there is no metrics.jsonl or a single interval
"$m" report strong/s2 strong/s4 strong/s1 --out "$w/strong" >"$w/strong.txt" 2>&1 || { bad "strong: exit $?"; cat "$w/strong.txt"; }
cat >"$w/strong.csv" <<'EOF'
ranks,nodes,devices_per_rank,global_batch,img_per_s,img_per_s_spread,speedup,efficiency,data_ms,forward_ms,backward_ms,comm_exposed_ms,optimizer_ms,run
1,1,1,128,200.00,,1.0000,1.0000,3.000,80.000,160.000,0.000,2.000,strong/s1
2,1,1,128,380.00,,1.9000,0.9500,3.000,40.000,80.000,10.000,2.000,strong/s2
4,2,1,128,640.00,,3.2000,0.8000,3.000,20.000,40.000,12.000,2.000,strong/s4
EOF
diff "$w/strong.csv" "$w/strong/scaling.csv" && grep -q 'strong scaling, global batch 128' "$w/strong.txt" &&
  grep -Eq '^ +4 +2 +1 +128 +640\.0 +- +3\.20x +80\.0% ' "$w/strong.txt" &&
  ok "strong scaling: S 1.90/3.20, E 95%/80%, no spread without intervals" || { bad "strong scaling"; cat "$w/strong.txt"; }

# ---- a rank count that is not a power of two: linear axis; the default --out is the current directory
mkdir -p "$w/cwd"
(cd "$w/cwd" && "$m" report "$fx/weak/r1" "$fx/other/n6" >"$w/lin.txt" 2>&1) || { bad "1 + 6 ranks: exit $?"; cat "$w/lin.txt"; }
grep -qx "6,2,2,192,480.00,,4.8000,0.8000,2.500,103.000,206.000,20.000,11.000,$fx/other/n6" "$w/cwd/scaling.csv" &&
  grep -q '>ranks</text>' "$w/cwd/scaling.svg" && ! grep -q 'log2' "$w/cwd/scaling.svg" &&
  ok "1 + 6 ranks: E 0.8000, linear axis, files in the current directory" ||
  { bad "1 + 6 ranks (linear axis, default --out)"; ls "$w/cwd"; cat "$w/lin.txt"; }

# ---- learning: a sweep of global batches (256, 2048, 8192 on 2 ranks: neither weak nor strong scaling)
# whose runs have validation points: no scaling table (said), the learning table, learning.csv and
# learning.svg. By hand: b256 reached 0.80 at epoch 2.00 after 30.5 s (final = best = 0.81);
# b2048 (no optimizer in its summary: sgd) was resumed at step 6: its second job's evaluation at
# step 9 (0.72) replaces the stopped job's (0.99), so final 0.72, best 0.75, target missed;
# b8192 (lars, --bn-eval recompute) reached it at 2.50 after 40.3 s; its line with val_top1 1.5 is left out, warned.
"$m" report learn/b8192 learn/b256 learn/b2048 --out "$w/learn" >"$w/learn.txt" 2>"$w/learn.err"
rc=$?
[ $rc -eq 0 ] && ok "batch sweep with validation: exit 0" || { bad "batch sweep with validation: exit $rc"; cat "$w/learn.err"; }
cat >"$w/learning.csv" <<'EOF'
ranks,nodes,global_batch,optimizer,schedule,bn_eval,evaluations,epochs,final_top1,best_top1,target_top1,target_reached,target_epoch,target_time_s,run
2,2,256,sgd,step,running,2,2.0000,0.8100,0.8100,0.8000,true,2.0000,30.50,learn/b256
2,2,2048,sgd,step,running,3,3.0000,0.7200,0.7500,0.8000,false,,,learn/b2048
2,2,8192,lars,step,recompute,5,2.5000,0.8200,0.8200,0.8000,true,2.5000,40.30,learn/b8192
EOF
diff "$w/learning.csv" "$w/learn/learning.csv" && ok "learning.csv as worked out by hand" || bad "learning.csv differs (above)"
for row in '^ +2 +256 +sgd +step +running +2 +2\.00 +81\.00% +81\.00% +80\.00% +2\.00 ep +30\.5 s +learn/b256$' \
  '^ +2 +2048 +sgd +step +running +3 +3\.00 +72\.00% +75\.00% +80\.00% +missed +- +learn/b2048$' \
  '^ +2 +8192 +lars +step +recompute +5 +2\.50 +82\.00% +82\.00% +80\.00% +2\.50 ep +40\.3 s +learn/b8192$' \
  '^== resnet8, 28 px, cpu, fp32: no scaling table: .*neither weak scaling'; do
  grep -Eq -- "$row" "$w/learn.txt" || bad "learning table: no line matching $row"
done
grep -q 'learn/b8192/metrics.jsonl:5: an evaluation without a valid epoch and val_top1' "$w/learn.err" ||
  bad "the bad evaluation line of learn/b8192 is not named: $(cat "$w/learn.err")"
ls "$w/learn"/scaling* >/dev/null 2>&1 && bad "a scaling.csv/svg was written for a batch sweep"
$py - "$w/learn/learning.svg" <<'PY' || fail=1
import sys, xml.dom.minidom as md
path = sys.argv[1]
try:
    d = md.parse(path)
except Exception as e:
    print(f"FAIL: {path} is not well-formed XML: {e}"); sys.exit(1)
s = d.documentElement
lines = {p.getAttribute("id"): [tuple(map(float, q.split(","))) for q in p.getAttribute("points").split()]
         for p in d.getElementsByTagName("polyline")}
texts = [t.firstChild.data for t in d.getElementsByTagName("text") if t.firstChild]
errs = []
if s.tagName != "svg" or s.getAttribute("xmlns") != "http://www.w3.org/2000/svg" or s.getAttribute("version") != "1.1":
    errs.append("root is not an SVG 1.1 <svg> in the SVG namespace")
# rows sorted by global batch: 0 = b256, 1 = b2048 (the superseded 0.99 left out), 2 = b8192 (1.5 left out)
top1 = {0: [0.70, 0.81], 1: [0.60, 0.75, 0.72], 2: [0.50, 0.60, 0.70, 0.78, 0.82]}
epochs = {0: [1, 2], 1: [1, 2, 3], 2: [0.5, 1, 1.5, 2, 2.5]}
secs = {0: [15, 30.5], 1: [10, 20, 31], 2: [8, 16, 24, 32, 40.3]}
if sorted(lines) != sorted([f"{p}-{k}" for p in ("epochs", "time") for k in range(3)]):
    errs.append(f"lines {sorted(lines)}, want epochs-0..2 and time-0..2 (one per run per plot)")
else:
    # one linear scale for every point of a plot: pixel = a + b * value, fitted on two points
    for plot, xs in (("epochs", epochs), ("time", secs)):
        if [len(lines[f"{plot}-{k}"]) for k in range(3)] != [2, 3, 5]:
            errs.append(f"{plot}: point counts {[len(lines[f'{plot}-{k}']) for k in range(3)]}, want 2, 3, 5")
            continue
        pts = [(xs[k][i], top1[k][i], lines[f"{plot}-{k}"][i]) for k in range(3) for i in range(len(top1[k]))]
        (x0, y0, p0), (x1, y1, p1) = pts[0], pts[-1]
        bx, by = (p1[0] - p0[0]) / (x1 - x0), (p1[1] - p0[1]) / (y1 - y0)
        if not (bx > 0 and by < 0):
            errs.append(f"{plot}: x does not grow rightwards or top-1 upwards")
        for x, y, p in pts:
            if abs(p0[0] + bx * (x - x0) - p[0]) > 0.6 or abs(p0[1] + by * (y - y0) - p[1]) > 0.6:
                errs.append(f"{plot}: the point ({x}, {y}) is drawn at {p}, off the plot's scale")
                break
targets = [l for l in d.getElementsByTagName("line") if l.getAttribute("class") == "target"]
if len(targets) != 2 or any(abs(float(t.getAttribute("y1")) - float(t.getAttribute("y2"))) > 0.01 for t in targets):
    errs.append(f"{len(targets)} target lines, want one flat line per plot")
for want in ("against epochs", "against wall time", "epochs", "wall time (s)", "validation top-1"):
    if want not in texts:
        errs.append(f"no text '{want}'")
legend = [t for t in texts if t.startswith("2 ranks, global batch")]
if len(legend) != 3 or "lars" not in legend[2] or "target missed" not in legend[1]:
    errs.append(f"legend: {legend}")
print("FAIL: learning.svg: " + "; ".join(errs) if errs else
      "ok: learning.svg: well-formed SVG 1.1, a line per run in each plot on one scale, the target, a legend")
sys.exit(1 if errs else 0)
PY

# ---- errors: exit 2, naming the runs, writing nothing
err() { # err NAME 'PATTERN'... -- RUN_DIR...: exit 2, every pattern in stderr, no scaling.* written
  local name=$1 pats=()
  shift
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$m" report "$@" --out "$w/err-$name" >"$w/err-$name.out" 2>"$w/err-$name.err"
  local rc=$? good=1
  [ $rc -eq 2 ] || good=0
  for p in "${pats[@]}"; do grep -q -- "$p" "$w/err-$name.err" || good=0; done
  ls "$w/err-$name"/scaling* >/dev/null 2>&1 && good=0
  if [ $good -eq 1 ]; then ok "$name: exit 2: $(head -c 160 "$w/err-$name.err")"
  else bad "$name: exit $rc"; cat "$w/err-$name.err" "$w/err-$name.out"; fi
}
err missing-dir 'nope' 'No such file' -- weak/r1 nope
err no-summary 'unfinished: no summary.json' -- weak/r1 unfinished
err arch 'weak/r1 and arch/a2 differ in arch (resnet8 vs resnet18)' -- weak/r1 weak/r2 arch/a2
err batch 'mixed/m2' 'batch_per_rank (32 vs 64)' 'global_batch (32 vs 128)' -- weak/r1 mixed/m2
err no-run 'missing RUN_DIR' --
"$m" report weak/r1 weak/r2 arch/a2 --group --out "$w/group" >"$w/group.txt" 2>&1 &&
  grep -qx '2,2,2,64,50.00,,1.0000,1.0000,1.500,400.000,800.000,5.000,40.000,arch/a2' "$w/group/scaling-resnet18-28px-cpu-fp32.csv" &&
  grep -qx '2,2,2,64,190.00,5.00,1.9000,0.9500,1.750,101.000,202.000,5.250,10.500,weak/r2' "$w/group/scaling-resnet8-28px-cpu-fp32.csv" &&
  [ -f "$w/group/scaling-resnet18-28px-cpu-fp32.svg" ] && [ -f "$w/group/scaling-resnet8-28px-cpu-fp32.svg" ] &&
  ok "--group: one table and one CSV/SVG per configuration" || { bad "--group"; cat "$w/group.txt"; ls "$w/group"; }
"$m" report --help >"$w/help.txt" 2>&1 && grep -qF 'E_N = (img/s_N / N) / (img/s_N0 / N0)' "$w/help.txt" &&
  grep -q -- '--out DIR' "$w/help.txt" && ok "--help: the formulas and --out" || bad "--help"

[ $fail -eq 0 ] && echo "report: all passed" || echo "report: FAILED"
exit $fail
