#!/usr/bin/env python3
"""The module graph of a crate, and a check that its modules form layers.

A module may use only modules of lower layers (or of its own layer, where the layer lists
modules that are one unit): no import runs up a layer, and so no circle. The layers are read
from the crate's `LAYERS` file: one line per layer, lowest first, module names separated by
spaces (`#` starts a comment).

    python3 scripts/layers.py crates/ringbus            # check against crates/ringbus/LAYERS
    python3 scripts/layers.py crates/ringbus --graph    # print who uses whom, and the circles

A module's dependencies are the `crate::<module>` paths in its code (comments, doc comments
and string literals are left out, and so are `#[cfg(test)] mod` blocks), in `use` lines and in expressions alike, including grouped
`use crate::{a::X, b::Y}`; `crate::Name` for a name that `lib.rs` re-exports counts as a use of
the module it comes from. Nested modules (`src/a/b.rs`, `mod b` in `a`) count as `a`.
Exits 1 when a layer is broken or a module is in no layer.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(code):
    """The code without comments, string literals and char literals."""
    out, i, n = [], 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif code.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if code.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif code.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', code[i:i + 10]) and not re.match(r"\w", code[i - 1:i]):
            hashes = re.match(r'r(#*)"', code[i:]).group(1)
            end = code.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and code[i] != '"':
                i += 2 if code[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", code[i:i + 4] + code[i + 4:i + 12]):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", code[i:])
            i += len(m.group(0)) if m else 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def group_heads(text, start):
    """The first segment of each path in the brace group that opens at `start`."""
    heads, depth, i, expect = [], 0, start, True
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            expect = depth == 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        elif c == "," and depth == 1:
            expect = True
        elif expect and depth == 1 and re.match(IDENT, text[i:]):
            heads.append(re.match(IDENT, text[i:]).group(0))
            expect = False
            i += len(heads[-1])
            continue
        elif not c.isspace():
            expect = False if depth == 1 else expect
        i += 1
    return heads


def without_tests(code):
    """The code without its `#[cfg(test)] mod name { ... }` blocks: a module's unit tests may
    drive it through the layers above it."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+" + IDENT + r"\s*\{", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)


def modules(src):
    """Each top-level module of the crate (by name) and its code, nested files included."""
    found = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)
            top = rel.split(os.sep)[0]
            name = top[:-3] if top.endswith(".rs") else top
            if name == "mod":
                continue
            with open(os.path.join(root, f)) as fh:
                found[name] = found.get(name, "") + "\n" + without_tests(strip(fh.read()))
    return found


def reexports(lib):
    """Names `lib.rs` re-exports, each with the module it comes from."""
    names = {}
    for m in re.finditer(r"pub use (?:self::|crate::)?(" + IDENT + r")::([^;]+);", lib):
        module, rest = m.group(1), m.group(2)
        for name in re.findall(IDENT, rest):
            names.setdefault(name, module)
    return names


def graph(src):
    mods = modules(src)
    lib = mods.pop("lib", "")
    exported = reexports(lib)
    edges = {m: set() for m in mods}
    for m, code in mods.items():
        heads = []
        for hit in re.finditer(r"\bcrate\s*::\s*(\{|" + IDENT + ")", code):
            if hit.group(1) == "{":
                heads += group_heads(code, hit.start(1))
            else:
                heads.append(hit.group(1))
        for h in heads:
            target = h if h in mods else exported.get(h)
            if target and target != m and target in mods:
                edges[m].add(target)
    return edges


def circles(edges):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    crate = args[0] if args else "crates/ringbus"
    edges = graph(os.path.join(crate, "src"))
    if "--graph" in sys.argv:
        for m in sorted(edges):
            print(f"{m:<12} uses {', '.join(sorted(edges[m])) or '-'}")
        for c in circles(edges):
            print("circle:", " <-> ".join(c))
        return
    layers_file = os.path.join(crate, "LAYERS")
    layer = {}
    with open(layers_file) as fh:
        lines = [line.split("#")[0].split() for line in fh]
    for number, line in enumerate(line for line in lines if line):
        for m in line:
            layer[m] = number
    broken = []
    for m in sorted(edges):
        if m not in layer:
            broken.append(f"{m}: in no layer of {layers_file}")
            continue
        for t in sorted(edges[m]):
            if t in layer and layer[t] > layer[m]:
                broken.append(f"{m} (layer {layer[m]}) uses {t} (layer {layer[t]}): up a layer")
    for c in circles(edges):
        if len({layer.get(m) for m in c}) > 1:
            broken.append("circle across layers: " + " <-> ".join(c))
    for b in broken:
        print(b)
    if broken:
        sys.exit(1)
    print(f"{crate}: {len(edges)} modules in {len(set(layer.values()))} layers, no import up a layer")


if __name__ == "__main__":
    main()
