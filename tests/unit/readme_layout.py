#!/usr/bin/env python3
"""readme_layout.py — README.md's list of source files, made from the tree.

Every file in src/, io/ and kernels/ starts with a comment "/* NAME — WHAT IT IS ..." (or // lines). This script
lists them, one line per module (a .c and its .h together, `src/args.*`), folder by folder, with
the first clause of that comment, between the two marker lines of README.md's "Layout" section.

  readme_layout.py [REPO_ROOT]           compare: exit 1 naming the first differing line when
                                         README's list is not what the tree gives (a file added,
                                         moved, removed or re-described without README)
  readme_layout.py --write [REPO_ROOT]   rewrite README's list from the tree
"""
import os
import re
import sys

BEGIN = "<!-- files: made by tests/unit/readme_layout.py --write from each file's first comment; a test compares -->"
END = "<!-- end of files -->"
FOLDERS = ("src", "io", "kernels")
EXTS = (".c", ".h", ".cu")
WIDTH = 100  # a described line's length, at most


def first_comment(path):
    """The file's leading comment, as one line of words."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    if m:
        lines = (ln.strip().lstrip("*").strip() for ln in m.group(1).split("\n"))
    else:  # // lines (the .cu files)
        m = re.match(r"((?:\s*//[^\n]*\n)+)", text)
        if not m:
            return None
        lines = (ln.strip()[2:].strip() for ln in m.group(1).strip().split("\n"))
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def what(comment):
    """'name.c — what it is. More.' -> 'what it is' (its first clause, at most WIDTH characters)."""
    m = re.match(r"\S+\s+—\s+(.*)", comment or "")
    if not m:
        return None
    d = m.group(1)
    d = re.split(r"(?<=[\w)'\"`])\.(?:\s|$)|\sdefines:|;\s", d)[0].strip()
    colon = d.find(": ", 40)  # "`mntrain train`: the command line, ..." keeps what the colon opens
    if colon > 0:
        d = d[:colon]
    if d.lower().startswith("see "):
        return None  # "see args.h": the header says it
    if len(d) > WIDTH:
        d = d[: WIDTH - 1].rsplit(" ", 1)[0] + " …"
    if d.count("`") % 2:  # never leave a code span open
        d = d[: d.rindex("`")].rstrip() + " …"
    if d.count("(") > d.count(")"):
        d += ")"
    return d


def modules(root):
    """[(folder, [(display, description)])] in a stable order."""
    out = []
    for top in FOLDERS:
        for dirpath, dirnames, filenames in sorted(os.walk(os.path.join(root, top))):
            dirnames.sort()
            stems = {}
            for f in sorted(filenames):
                stem, ext = os.path.splitext(f)
                if ext in EXTS:
                    stems.setdefault(stem, []).append(ext)
            if not stems:
                continue
            rel = os.path.relpath(dirpath, root)
            rows = []
            for stem, exts in sorted(stems.items()):
                shown = f"{rel}/{stem}{exts[0]}" if len(exts) == 1 else f"{rel}/{stem}.*"
                desc = None
                # the header describes the interface; a .c that has none describes itself
                for ext in sorted(exts, key=lambda e: {".h": 0, ".cu": 1, ".c": 2}[e]):
                    desc = desc or what(first_comment(os.path.join(dirpath, stem + ext)))
                if not desc:
                    sys.exit(f"readme_layout: {rel}/{stem}{exts[0]} starts with no '/* NAME — WHAT IT IS' comment")
                rows.append((shown, desc))
            out.append((rel, rows))
    return out


def render(root):
    lines = [BEGIN]
    for folder, rows in modules(root):
        lines.append(f"- `{folder}/`")
        for shown, desc in rows:
            lines.append(f"  - `{shown}` — {desc}")
    lines.append(END)
    return lines


def main():
    args = sys.argv[1:]
    write = "--write" in args
    args = [a for a in args if a != "--write"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read().split("\n")
    if BEGIN not in text or END not in text:
        print(f"FAIL: README.md has no list of source files between the lines\n  {BEGIN}\n  {END}")
        return 1
    a, b = text.index(BEGIN), text.index(END)
    want = render(root)
    have = text[a : b + 1]
    if write:
        with open(readme, "w", encoding="utf-8") as f:
            f.write("\n".join(text[:a] + want + text[b + 1 :]))
        print(f"readme_layout: README.md lists {sum(1 for ln in want if ln.startswith('  - '))} modules")
        return 0
    for i in range(max(len(want), len(have))):
        w = want[i] if i < len(want) else "(nothing)"
        h = have[i] if i < len(have) else "(nothing)"
        if w != h:
            print(f"FAIL: README.md:{a + i + 1} is not what the tree gives (run tests/unit/readme_layout.py --write):")
            print(f"  README: {h}\n  tree:   {w}")
            return 1
    print(f"readme_layout: ok ({sum(1 for ln in want if ln.startswith('  - '))} modules, as in the tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
