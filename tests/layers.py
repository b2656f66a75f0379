#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""layers.py - hold daemon/'s include graph to the floors of
docs/architecture.md: a module (a .c and its .h) includes only modules on
its floor or below, every module has a floor, and the only circles are
the ones the document names. Exit 0 when it holds, 1 with each arrow
that runs up, each module without a floor and each circle not named."""
import os
import re
import sys


def floors_and_circles(doc):
    floors, circles, section = {}, [], None
    for line in open(doc, encoding="utf-8"):
        if line.startswith("## "):
            section = line[3:].strip()
        if section != "Floors":
            continue
        m = re.match(r"\|\s*(\d+)\s*\|(.*)\|\s*$", line)
        if m:
            for mod in re.findall(r"`([^`]+)`", m.group(2)):
                floors[mod] = int(m.group(1))
        m = re.match(r"- `([^`]+)` and `([^`]+)`", line)
        if m:
            circles.append(frozenset(m.groups()))
    return floors, circles


def include_graph(top):
    graph = {}
    for d, _, files in os.walk(os.path.join(top, "daemon")):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(d, f)
            mod = os.path.relpath(path, os.path.join(top, "daemon"))[:-2]
            deps = graph.setdefault(mod, {})
            for line in open(path, encoding="utf-8"):
                m = re.match(r'#include "daemon/([^"]+)\.h"', line)
                if m and m.group(1) != mod:
                    deps.setdefault(m.group(1), os.path.relpath(path, top))
    return graph


def circles_of(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else "."
    doc = os.path.join(top, "docs", "architecture.md")
    floors, named = floors_and_circles(doc)
    graph = include_graph(top)
    bad = []
    for mod in sorted(graph):
        if mod not in floors:
            bad.append(f"daemon/{mod}: no floor in docs/architecture.md; "
                       "give it one in the Floors table")
    for mod in sorted(set(floors) - set(graph)):
        bad.append(f"docs/architecture.md names {mod}, which daemon/ does not have")
    for mod, deps in sorted(graph.items()):
        for dep, where in sorted(deps.items()):
            if mod in floors and dep in floors and floors[dep] > floors[mod]:
                bad.append(f"{where} includes daemon/{dep}.h: floor {floors[dep]} "
                           f"above {mod}'s {floors[mod]}; call down, or take a hook "
                           "from the module above")
    for comp in circles_of(graph):
        if comp not in named:
            bad.append("circle not named in docs/architecture.md: " +
                       " -> ".join(sorted(comp)))
    for line in bad:
        print("layers: " + line)
    if not bad:
        print(f"layers: {len(graph)} modules on {len(set(floors.values()))} floors, "
              f"{sum(len(d) for d in graph.values())} arrows, none up; "
              f"{len(named)} circles, all named")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
