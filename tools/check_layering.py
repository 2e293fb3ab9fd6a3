#!/usr/bin/env python3
"""Checks that ferry's layers depend one way.

The layer order is the table in docs/design.md (after the line
'<!-- layers: read by tests/cli/layering.sh -->'): a row's first word is a
layer (src/LAYER/, or cli: tools/), its words ending in .h its public
headers (include/ferry/).  Every #include "..." of every C/CUDA file under
src/, include/ferry/ and tools/ must name a layer at or below the file's own;
tools/ includes only public headers and its own; a public header belongs to
exactly one layer; no two source files share a name; no source file is over
MAX_LINES lines unless it is on OVERSIZE (which must stay true: a listed
file that shrank fails too, so the list only shrinks).

usage:
    check_layering.py [--root DIR]      prints each problem, exit 1 if any
    check_layering.py --self-test       the checker on trees that break it
"""
import os
import re
import sys
import tempfile

MARKER = "<!-- layers: read by tests/cli/layering.sh -->"
MAX_LINES = 1000
# Files allowed over MAX_LINES: none since issue 36 split the last ones.
OVERSIZE = set()
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def read_layers(root):
    """[(layer, [headers])] from docs/design.md's table, lowest first."""
    lines = open(os.path.join(root, "docs/design.md"), encoding="utf-8").read().split("\n")
    if MARKER not in lines:
        raise SystemExit("docs/design.md: no layer table (the line %r)" % MARKER)
    i = lines.index(MARKER) + 2  # past the marker and the opening fence
    layers = []
    while i < len(lines) and not lines[i].startswith("```"):
        words = lines[i].split()
        if words:
            layers.append((words[0], [w for w in words[1:] if w.endswith(".h")]))
        i += 1
    return layers


def source_files(root):
    out = []
    for top in ("src", "include/ferry", "tools"):
        for d, _, names in os.walk(os.path.join(root, top)):
            out += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(SOURCE_EXT)]
    return sorted(out)


def check(root):
    layers = read_layers(root)
    rank = {name: i for i, (name, _) in enumerate(layers)}
    owner = {}
    problems = []
    for name, headers in layers:
        for h in headers:
            if h in owner:
                problems.append("docs/design.md: %s is listed under %s and %s" % (h, owner[h], name))
            owner[h] = name
    for h in owner:
        if not os.path.exists(os.path.join(root, "include/ferry", h)):
            problems.append("docs/design.md: %s is listed but include/ferry/%s does not exist" % (h, h))
    files = source_files(root)
    problems += [p for f in files for p in check_file(root, f, rank, owner)]
    problems += check_names(files) + check_sizes(root, files)
    return problems, len(files)


def layer_of(path, rank, owner):
    """The file's layer, or None with the reason."""
    parts = path.split("/")
    if parts[0] == "tools":
        return "cli", None
    if parts[0] == "include":
        return owner.get(parts[-1]), "public header %s is in no layer of docs/design.md's table" % parts[-1]
    if parts[1] not in rank:
        return None, "folder src/%s is not in the layer table" % parts[1]
    return parts[1], None


def check_file(root, path, rank, owner):
    me, why = layer_of(path, rank, owner)
    if me is None:
        return ["%s: %s" % (path, why)]
    out = []
    for n, line in enumerate(open(os.path.join(root, path), encoding="utf-8", errors="replace"), 1):
        m = INCLUDE.match(line)
        if not m or "/" not in m.group(1):
            continue  # a header beside the file
        top, rest = m.group(1).split("/", 1)
        if top == "ferry":
            target = owner.get(rest)
            if target is None:
                out.append("%s:%d: includes ferry/%s, which is in no layer" % (path, n, rest))
                continue
        elif me == "cli":
            out.append("%s:%d: the CLI includes only public headers: %s" % (path, n, line.strip()))
            continue
        elif top not in rank:
            out.append("%s:%d: includes %s/, a folder not in the layer table" % (path, n, top))
            continue
        else:
            target = top
        if rank[target] > rank[me]:
            out.append("%s:%d: %s includes %s, a higher layer: %s" % (path, n, me, target, line.strip()))
    return out


def check_names(files):
    seen = {}
    for f in files:
        seen.setdefault(os.path.basename(f), []).append(f)
    return ["%s: the same name as %s" % (fs[1], fs[0]) for fs in seen.values() if len(fs) > 1]


def check_sizes(root, files):
    out = []
    for f in files:
        n = sum(1 for _ in open(os.path.join(root, f), encoding="utf-8", errors="replace"))
        if n > MAX_LINES and f not in OVERSIZE:
            out.append("%s: %d lines, over %d: split it" % (f, n, MAX_LINES))
        elif n <= MAX_LINES and f in OVERSIZE:
            out.append("%s: %d lines: take it off OVERSIZE in tools/check_layering.py" % (f, n))
    return out


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    open(full, "w").write(text)


def self_test():
    """A tree with one of each problem, and the same tree mended."""
    table = "x\n%s\n```text\ncore ferry.h  status\ntier tier.h  tiers\nplan plan.h  placement\ncli  the CLI\n```\n" % MARKER
    with tempfile.TemporaryDirectory() as root:
        write(root, "docs/design.md", table)
        write(root, "include/ferry/ferry.h", "")
        write(root, "include/ferry/plan.h", '#include "ferry/tier.h"\n')
        write(root, "include/ferry/tier.h", '#include "ferry/plan.h"\n')   # upward, planted
        write(root, "src/core/a.c", '#include "core/a.h"\n#include "ferry/ferry.h"\n')
        write(root, "src/tier/b.c", '#include "plan/t.h"\n')               # upward, planted
        write(root, "src/plan/a.c", "")                                   # name of src/core/a.c
        write(root, "src/widgets/w.c", "")                                # no layer
        write(root, "tools/x/main.c", '#include "core/a.h"\n#include "ferry/plan.h"\n')
        write(root, "src/core/big.c", "x\n" * (MAX_LINES + 1))
        got, _ = check(root)
        want = ["include/ferry/tier.h:1: tier includes plan", "src/tier/b.c:1: tier includes plan",
                "src/plan/a.c: the same name as src/core/a.c", "src/widgets/w.c: folder src/widgets",
                "tools/x/main.c:1: the CLI includes only public headers", "src/core/big.c: 1001 lines"]
        missing = [w for w in want if not any(g.startswith(w) for g in got)]
        if missing or len(got) != len(want):
            print("self-test: wanted %s\ngot %s" % (want, got))
            return 1
        for f in ("include/ferry/tier.h", "src/tier/b.c", "src/plan/a.c", "src/widgets/w.c",
                  "tools/x/main.c", "src/core/big.c"):
            os.remove(os.path.join(root, f))
        write(root, "include/ferry/tier.h", '#include "ferry/ferry.h"\n')
        got, n = check(root)
        if got or n != 4:
            print("self-test: the mended tree (%d files): %s" % (n, got))
            return 1
    print("self-test: ok (%d planted problems found, none in the mended tree)" % len(want))
    return 0


def main(argv):
    if "--help" in argv or "-h" in argv:
        print(__doc__.strip())
        return 0
    if "--self-test" in argv:
        return self_test()
    root = argv[argv.index("--root") + 1] if "--root" in argv else "."
    problems, n = check(root)
    for p in problems:
        print(p)
    print("%d problems in %d files" % (len(problems), n))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
