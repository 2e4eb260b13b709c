#!/usr/bin/env python3
"""Finds #include cycles between modules and between the files of a module.

    include-cycles.py [--enforce "MODULE ..."]

Reads the quoted #include lines of every tracked .c, .h and .cu file under
the modules below and resolves each the way the build does: first beside
the including file, then in the include directories (include/ and the
modules' folders); headers protoc-c generates at build time
(*.pb-c.h) belong to proto/.

 - Modules: a node per module (top-level folder), an edge A -> B when a file
   of A includes a file of B.  Any cycle fails.
 - Files: inside one module, a node per file, a .c and its .h (same path but
   the extension) counting as one node, and so does a part's private header
   (X_int.h, shared by X.c and the files X says it is split into); an edge
   A -> B when A includes B's header.  A cycle fails for the modules named by --enforce and is printed
   for the others.

Exit status 0 when nothing enforced is in a cycle, 1 otherwise.
"""
import os
import re
import subprocess
import sys

MODULES = ["common", "include", "planner", "kernels", "store", "profiler",
           "wire", "daemon", "client", "proto"]
# Where a quoted include is looked for after the includer's own folder
# (the build's include directories).
INCLUDE_DIRS = ["include", "planner", "kernels", "store", "profiler", "wire",
                "daemon", "client"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def tracked_files():
    out = subprocess.run(
        ["git", "ls-files", "--"] + [m + "/" for m in MODULES],
        check=True, capture_output=True, text=True).stdout
    return [f for f in out.split("\n")
            if f.endswith((".c", ".h", ".cu"))]


def resolve(includer, name, files):
    """The tracked file an include names, "proto" for a generated header,
    or None."""
    here = os.path.dirname(includer)
    for base in [here] + INCLUDE_DIRS:
        path = os.path.normpath(os.path.join(base, name))
        if path in files:
            return path
    if name.endswith(".pb-c.h"):
        return "proto"
    return None


def node(path):
    """A .c/.h/.cu file's node: its path without the extension, and without
    _int for a private header (X_int.h belongs to X)."""
    base = os.path.splitext(path)[0]
    return base[:-4] if base.endswith("_int") else base


def sccs(graph):
    """Strongly connected components of {node: set(nodes)} (Tarjan,
    iterative), in a stable order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            advanced = False
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def cycle_in(comp, graph):
    """One cycle through the first node of a component, as a path."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w in members and w not in prev:
                prev[w] = v
                queue.append(w)
    return comp + [start]


def main():
    enforce = set()
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "--enforce":
        enforce = set(args[1].split())
    elif args:
        sys.exit(__doc__)
    unknown = enforce - set(MODULES)
    if unknown:
        sys.exit("include-cycles: unknown modules: " + " ".join(sorted(unknown)))

    files = set(tracked_files())
    mod_graph = {}
    file_graph = {m: {} for m in MODULES}
    for f in sorted(files):
        mod = f.split("/")[0]
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                target = resolve(f, m.group(1), files)
                if target is None:
                    print("include-cycles: %s: \"%s\" not found (ignored)"
                          % (f, m.group(1)))
                    continue
                tmod = target.split("/")[0]
                if tmod != mod:
                    mod_graph.setdefault(mod, set()).add(tmod)
                elif node(f) != node(target):
                    file_graph[mod].setdefault(node(f), set()).add(
                        node(target))

    status = 0
    for comp in sccs(mod_graph):
        if len(comp) > 1:
            print("include-cycles: modules in a cycle: "
                  + " -> ".join(cycle_in(comp, mod_graph)))
            status = 1
    for mod in MODULES:
        for comp in sccs(file_graph[mod]):
            if len(comp) < 2:
                continue
            path = " -> ".join(cycle_in(comp, file_graph[mod]))
            if mod in enforce:
                print("include-cycles: %s: files in a cycle: %s" % (mod, path))
                status = 1
            else:
                print("include-cycles: %s: files in a cycle (not enforced): %s"
                      % (mod, path))
    return status


if __name__ == "__main__":
    sys.exit(main())
