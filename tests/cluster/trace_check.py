#!/usr/bin/python3
"""trace_check.py -- what `mntrain report --trace` merged is checked against the run itself.

  trace_check.py TRACE_JSON METRICS_JSONL SUMMARY_JSON FIRST LAST [CLOCK_MS]

Fails (exit 1, each reason on a FAIL line) unless:
  - the file loads (Python's json) and holds every rank of the run as a process named
    "rank R (NODE)", NODE the rank's node in summary.json's rank_stats, with the threads main, comm,
    loader 1 and the track buckets; after train --on-rank-loss shrink the ranks are the survivors,
    numbered as the job started them (rank_stats' ranks; trace.json's otherData "ranks" the job's size,
    "missing_ranks" the lost ones, which summary.json's "ranks", the ranks at the end, leaves out);
  - on every thread the spans nest: each starts after the previous one ended or lies inside it;
  - every rank's steps FIRST..LAST each have one step span holding data, forward, backward, comm,
    optimizer once each, in that order (a dropped span fails); a step a rank recovered in (its
    "recovery" span) may have a second, the step trained again, which is the one checked;
  - rank 0's phases agree with metrics.jsonl (logged every step) within 0.3 ms + 3%;
  - the clocks agree: a step ends in the gradient allreduce, which every rank leaves within
    microseconds, so its comm spans end together on rank 0's clock: the median over the steps of
    their spread across ranks is at most CLOCK_MS (1 ms; a rank whose offset is 5 ms off fails).
"""
import json
import statistics
import sys

PHASES = ["data", "forward", "backward", "comm", "optimizer"]
METRIC = {"data": "data", "forward": "forward", "backward": "backward", "comm": "comm_exposed",
          "optimizer": "optimizer"}


def main():
    trace_path, metrics_path, summary_path = sys.argv[1:4]
    first, last = int(sys.argv[4]), int(sys.argv[5])
    clock_ms = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    fails = []
    t = json.load(open(trace_path))
    s = json.load(open(summary_path))
    nodes = {r["rank"]: r["node"] for r in s.get("rank_stats", [])}
    # the ranks at the end, by their rank of the job's start (a shrink renumbers, rank_stats does not)
    ranks = sorted(nodes) if nodes else list(range(s["ranks"]))
    if len(ranks) != s["ranks"]:
        fails.append(f"summary.json says {s['ranks']} ranks, its rank_stats {len(ranks)}")
    other = t.get("otherData", {})
    lost = set(other.get("missing_ranks", []))
    if other.get("ranks", len(ranks)) - len(lost) < len(ranks) or lost & set(ranks):
        fails.append(f"trace.json's otherData (ranks {other.get('ranks')}, missing {sorted(lost)}) does not hold "
                     f"the run's ranks {ranks}")
    ev = t["traceEvents"]
    pname = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in ev if e.get("ph") == "X"]
    for r in ranks:
        want = f"rank {r} ({nodes.get(r, '?')})"
        if pname.get(r) != want:
            fails.append(f"process {r} is named {pname.get(r)!r}, not {want!r}")
        have = {n for (p, _), n in tname.items() if p == r}
        for th in ("main", "comm", "loader 1", "buckets"):
            if th not in have:
                fails.append(f"rank {r} has no thread or track {th!r} (has {sorted(have)})")
    # nesting, per thread (tracks excepted: a bucket's span overlaps the next one's)
    tracks = {k for k, n in tname.items() if n == "buckets"}
    by_thread = {}
    for e in spans:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for k, es in by_thread.items():
        if k in tracks:
            continue
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + 1e-3:
                fails.append(f"rank {k[0]} {tname.get(k)}: {e['name']} at {e['ts']:.3f} us crosses the end of "
                             f"{stack[-1]['name']}")
                break
            stack.append(e)
    # the steps' phases
    main_tid = {p: tid for (p, tid), n in tname.items() if n == "main"}
    phase_ms = {}
    comm_end = {}
    for r in ranks:
        mine = [e for e in spans if e["pid"] == r and e["tid"] == main_tid.get(r)]
        for st in range(first, last + 1):
            steps = sorted((e for e in mine if e["name"] == "step" and e["args"]["step"] == st), key=lambda e: e["ts"])
            recovered = any(e["name"] == "recovery" and e["args"]["step"] == st for e in mine)
            if len(steps) != 1 and not (recovered and len(steps) == 2):
                fails.append(f"rank {r}: {len(steps)} step spans for step {st}")
                continue
            sp = steps[-1]
            inside = sorted((e for e in mine if e["args"]["step"] == st and e["name"] in PHASES
                             and e["ts"] >= sp["ts"] - 1e-3 and e["ts"] + e["dur"] <= sp["ts"] + sp["dur"] + 1e-3),
                            key=lambda e: e["ts"])
            names = [e["name"] for e in inside]
            if names != PHASES:
                fails.append(f"rank {r} step {st}: phases {names}, not {PHASES}")
                continue
            for a, b in zip(inside, inside[1:]):
                if b["ts"] < a["ts"] + a["dur"] - 1e-3:
                    fails.append(f"rank {r} step {st}: {b['name']} starts before {a['name']} ends")
            if r == ranks[0]:  # the lowest rank left: rank 0 at the end, which writes metrics.jsonl
                phase_ms[st] = {e["name"]: e["dur"] / 1e3 for e in inside}
            comm_end.setdefault(st, {})[r] = (inside[3]["ts"] + inside[3]["dur"]) / 1e3
    lines = [json.loads(x) for x in open(metrics_path)]
    for st, ph in sorted(phase_ms.items()):
        line = next((x for x in lines if x.get("step") == st and "ms" in x), None)
        if line is None:
            fails.append(f"metrics.jsonl has no line of step {st}")
            continue
        for p, v in ph.items():
            m = line["ms"][METRIC[p]]
            if abs(v - m) > 0.3 + 0.03 * m:
                fails.append(f"step {st}: rank 0's {p} span is {v:.3f} ms, metrics.jsonl says {m:.3f} ms")
    spreads = [max(v.values()) - min(v.values()) for v in comm_end.values() if len(v) == len(ranks)]
    if not spreads:
        fails.append("no step's comm spans on every rank")
    else:
        med = statistics.median(spreads)
        print(f"trace_check: the comm spans of a step end within {med:.3f} ms of each other across ranks "
              f"(median over {len(spreads)} steps; each: {', '.join(f'{x:.3f}' for x in spreads)})")
        if med > clock_ms:
            fails.append(f"the ranks' clocks disagree: a step's comm spans end {med:.3f} ms apart (median), over "
                         f"{clock_ms:g} ms")
    for f in fails:
        print("FAIL:", f)
    print(f"trace_check: {len(spans)} spans of {len(ranks)} ranks, steps {first}..{last}: "
          f"{'ok' if not fails else str(len(fails)) + ' failures'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
