#!/usr/bin/env python3
"""readme_layout.py — README.md's table of folders, checked against the tree.

README's "Layout" section has a table, between two marker lines, with one row per folder that
holds source files (a row per top-level file of TOP_FILES first): `| `src/comm/cpu/` | what it
holds |`. A folder holds source when a file in it has one of EXTS, is named as in NAMES, or starts
with "#!"; build trees, caches and hidden folders other than .ci/ are left out. A folder above
such a folder holds source too (io/). The descriptions are written by hand in README.

  readme_layout.py [REPO_ROOT]           compare: exit 1 naming the first folder that holds source
                                         but has no row, a row whose folder holds none or does not
                                         exist, a row out of order, or a row without a description
  readme_layout.py --write [REPO_ROOT]   rewrite the rows from the tree, keeping README's
                                         descriptions; a new folder's is the first line of its
                                         README.md, or empty (then write one: the check fails)
"""
import os
import re
import sys

BEGIN = "<!-- folders: rows made by tests/unit/readme_layout.py --write (descriptions by hand); a test compares them with the tree -->"
END = "<!-- end of folders -->"
HEADER = ["| folder | what it holds |", "| --- | --- |"]
TOP_FILES = ("CMakeLists.txt", "README.md")
EXTS = {".c", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake", ".sbatch", ".lua", ".tcl", ".in"}
NAMES = {"CMakeLists.txt"}
SKIP = {"__pycache__", "build", ".git"}  # anywhere
SKIP_TOP = re.compile(r"^(build.*|gpu-bundle)$")  # .gitignore: /build*/ /gpu-bundle/
ROW = re.compile(r"^\| `([^`]+)` \| (.*?) \|$")


def is_source(path, name):
    if name in NAMES or os.path.splitext(name)[1] in EXTS:
        return True
    if "." in name:
        return False
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"  # a script without an extension: .ci/run
    except OSError:
        return False


def folders(root):
    """The folders that hold source, 'a/b/', in the table's order (a folder before its subfolders)."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        top = rel == "."
        dirnames[:] = [
            d for d in dirnames
            if d not in SKIP and not (d.startswith(".") and not (top and d == ".ci"))
            and not (top and SKIP_TOP.match(d))
        ]
        if top:
            continue  # the top level's files are TOP_FILES' rows
        if any(is_source(os.path.join(dirpath, f), f) for f in filenames):
            parts = rel.split(os.sep)
            for i in range(1, len(parts) + 1):  # the folder, and every folder above it
                found.add("/".join(parts[:i]) + "/")
    return sorted(found, key=lambda p: p.rstrip("/").split("/"))


def readme_description(root, folder):
    """A new folder's description: the first line of its README.md, without '# ' and 'folder: '."""
    try:
        with open(os.path.join(root, folder, "README.md"), encoding="utf-8") as f:
            line = f.readline().strip()
    except OSError:
        return ""
    line = line.lstrip("#").strip()
    return re.sub(r"^`?" + re.escape(folder.rstrip("/")) + r"/?`?:\s*", "", line).replace("|", "\\|")


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read().split("\n")
    if BEGIN not in text or END not in text or text.index(BEGIN) > text.index(END):
        print(f"FAIL: README.md has no table of folders between the lines\n  {BEGIN}\n  {END}")
        return 1
    a, b = text.index(BEGIN), text.index(END)
    have, descs = [], {}
    for n, line in enumerate(text[a + 1 : b], start=a + 2):
        if line in HEADER or not line.strip():
            continue
        m = ROW.match(line)
        if not m:
            print(f"FAIL: README.md:{n} is not a row '| `FOLDER/` | what it holds |': {line}")
            return 1
        have.append((m.group(1), n))
        descs[m.group(1)] = m.group(2).strip()
    want = list(TOP_FILES) + folders(root)

    if write:
        rows = [f"| `{p}` | {descs.get(p) or readme_description(root, p)} |" for p in want]
        with open(readme, "w", encoding="utf-8") as f:
            f.write("\n".join(text[: a + 1] + HEADER + rows + text[b:]))
        empty = [p for p in want if not (descs.get(p) or readme_description(root, p))]
        print(f"readme_layout: README.md lists {len(want)} entries" +
              (f"; describe {', '.join(empty)} by hand" if empty else ""))
        return 0

    names = [p for p, _ in have]
    for p in TOP_FILES:
        if not os.path.isfile(os.path.join(root, p)):
            print(f"FAIL: {p} does not exist (readme_layout.py's TOP_FILES names it)")
            return 1
    if text[a + 1 : a + 3] != HEADER:
        print(f"FAIL: README.md:{a + 2}: the table's header is not {HEADER[0]}")
        return 1
    for p in want:
        if p not in names:
            print(f"FAIL: README.md's Layout table has no row for `{p}`, which holds source files"
                  " (add one, or run tests/unit/readme_layout.py --write)")
            return 1
    for p, n in have:
        if p not in want:
            why = "does not exist" if not os.path.exists(os.path.join(root, p)) else "holds no source files"
            print(f"FAIL: README.md:{n} lists `{p}`, which {why}")
            return 1
        if names.count(p) > 1:
            print(f"FAIL: README.md:{n} lists `{p}` twice")
            return 1
        if not descs[p]:
            print(f"FAIL: README.md:{n}: `{p}` has no description")
            return 1
    if names != want:
        i = next(i for i, (h, w) in enumerate(zip(names, want)) if h != w)
        print(f"FAIL: README.md:{have[i][1]} lists `{names[i]}` where the tree's order has `{want[i]}`"
              " (run tests/unit/readme_layout.py --write)")
        return 1
    print(f"readme_layout: ok ({len(want)} entries, every folder that holds source, as in the tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
