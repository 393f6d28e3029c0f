#!/usr/bin/python3
"""includes.py — the project's includes keep their two rules:
  - every `#include "..."` of a C/CUDA source names its file from the repository root ("src/log.h",
    "io/ckpt/ckpt.h", "kernels/ops.h"), so an include says where the file is (the generated
    mnt_cuda_iface.h, in the build tree, is the one exception);
  - the folders under io/ do not include each other in a loop (io/rundir -> io/ckpt -> io/data is a
    chain; a header of io/data that included io/ckpt would close one).
    includes.py [REPO_ROOT]      exit 0 when both hold, 1 naming each include that breaks one
"""
import os
import re
import sys

GENERATED = {"mnt_cuda_iface.h"}


def sources(root):
    for top in ("src", "io", "kernels", "tests", "benchmarks"):
        for d, _, fs in os.walk(os.path.join(root, top)):
            for f in sorted(fs):
                if f.endswith((".c", ".h", ".cu", ".cuh", ".cpp")):
                    yield os.path.relpath(os.path.join(d, f), root)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    bad, edges = [], {}
    for p in sources(root):
        for n, line in enumerate(open(os.path.join(root, p), errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m or m.group(1) in GENERATED:
                continue
            inc = m.group(1)
            if not os.path.isfile(os.path.join(root, inc)):
                bad.append(f"{p}:{n}: #include \"{inc}\" does not name a file from the repository root")
                continue
            a, b = os.path.dirname(p), os.path.dirname(inc)
            if a != b and a.startswith("io/") and b.startswith("io/"):
                edges.setdefault(a, {}).setdefault(b, f"{p}:{n}")
    # a loop among io/ folders: a path from b back to a for an edge a -> b
    def reaches(src, dst, seen):
        if src == dst:
            return [dst]
        for nxt in edges.get(src, {}):
            if nxt not in seen:
                seen.add(nxt)
                path = reaches(nxt, dst, seen)
                if path:
                    return [src] + path
        return None
    for a in sorted(edges):
        for b, where in sorted(edges[a].items()):
            back = reaches(b, a, {b})
            if back:
                bad.append(f"{where}: {a} includes {b}, and {' -> '.join(back)} closes a loop")
    for b in bad:
        print("FAIL:", b)
    if not bad:
        print(f"ok: includes name files from the repository root; io/ folders include each other without a loop "
              f"({sum(len(v) for v in edges.values())} edges)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
