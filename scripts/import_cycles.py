#!/usr/bin/env python3
"""Fail when the files of a crate import each other in a circle.

The crates are the library (src/) and the command (cli/src/), each read on
its own: a `crate::` path of the command's files leads into the command.

A module's file is one node; `a -> b` when a's code (outside comments and its
test module) names a path `crate::...` or `super::...` that leads into b.
A path leads into the deepest module that is a prefix of it, so
`crate::algebra::Rows` leads into `algebra` and `crate::codec::npy::header`
into `codec/npy`. A module naming itself is no edge.

    python3 scripts/import_cycles.py            # check src/ and cli/src/ (what .ci/run does)
    python3 scripts/import_cycles.py --self-test  # the check finds a known cycle
"""
import os
import re
import sys
import tempfile

# The crates' source folders.
ROOTS = ["src", "cli/src"]

# `crate::a::b`, `super::a`, and the grouped forms `crate::a::{b, c::d}`, `crate::{a, b}`,
# `super::super::{a, b}`: the segments before a group are names, so that the
# group is read rather than left behind a trailing `::`.
PATH = re.compile(r"\b(crate|super)::(\{[^;]*?\}|[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:::\{[^;]*?\})?)")
GROUP = re.compile(r"^(?:([\w:]*)::)?\{(.*)\}$", re.S)


def module_of(path, root):
    """`src/codec/npy.rs` -> ('codec', 'npy'); lib.rs and main.rs -> ()."""
    parts = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return ()
    return tuple(parts)


def code_of(text):
    """The file's code without its test module and without comment lines.

    The test module is the inline `#[cfg(test)] mod tests { ... }` that ends a
    file; a declaration `#[cfg(test)] mod tests;` of a test file is not one,
    and the code after it is read."""
    text = text.split("#[cfg(test)]\nmod tests {")[0]
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))


def named_paths(code, module):
    """Every module path the code names, as a list of segments from the root:
    `crate::` starts at the root, each `super::` one module further up."""
    for match in PATH.finditer(code):
        base, rest = match.groups()
        group = GROUP.match(rest)
        if group:
            head, items = group.groups()
            rests = [(head or "") + "::" + item.strip() for item in items.split(",") if item.strip()]
        else:
            rests = [rest]
        for one in rests:
            path = [] if base == "crate" else list(module[:-1])
            for segment in one.split("::"):
                if segment == "super":
                    path = path[:-1]
                elif segment and segment != "self":
                    path.append(segment)
            yield path


def deepest_module(path, modules):
    for end in range(len(path), 0, -1):
        if tuple(path[:end]) in modules:
            return tuple(path[:end])
    return None


def import_graph(root):
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    files[module_of(path, root)] = f.read()
    graph = {module: set() for module in files}
    for module, text in files.items():
        for path in named_paths(code_of(text), module):
            target = deepest_module(path, files)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def cycles_in(graph):
    """Each cycle a depth-first walk meets, as the list of its modules."""
    on_stack, done, found = [], set(), []

    def visit(module):
        on_stack.append(module)
        for target in sorted(graph[module]):
            if target in on_stack:
                found.append(on_stack[on_stack.index(target):] + [target])
            elif target not in done:
                visit(target)
        on_stack.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module)
    return found


def name(module):
    return "/".join(module) or "lib"


def check(root):
    graph = import_graph(root)
    cycles = cycles_in(graph)
    for cycle in cycles:
        print(f"import cycle in {root}/: " + " -> ".join(name(m) for m in cycle), file=sys.stderr)
    edges = sum(len(targets) for targets in graph.values())
    print(f"{root}/: {len(graph)} modules, {edges} imports, {len(cycles)} cycles")
    return not cycles


def self_test():
    """A tree with one cycle (a -> b/c -> a) and one clean import must give
    exactly that cycle: a check that could not fail would pass here too."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "b"))
        sources = {
            "lib.rs": "mod a; mod b;",
            "a.rs": "use crate::b::c::Thing;\n// use crate::d is only a comment\n",
            "b/mod.rs": "pub mod c;",
            "b/c.rs": "use super::super::a;\nuse crate::{a::x, b};\n",
            "d.rs": "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b::{c::Thing, self};\n",
        }
        for path, text in sources.items():
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        graph = import_graph(root)
        assert graph[("a",)] == {("b", "c")}, graph
        assert graph[("b", "c")] == {("a",), ("b",)}, graph
        assert graph[("d",)] == {("a",), ("b",), ("b", "c")}, graph
        assert cycles_in(graph) == [[("a",), ("b", "c"), ("a",)]], cycles_in(graph)
    print("self-test: the known cycle is found")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        results = [check(root) for root in ROOTS]
        sys.exit(0 if all(results) else 1)
