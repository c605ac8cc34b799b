#!/usr/bin/env python3
"""Fail when a file of src/ imports from a layer above its own.

LAYERS below orders the files of src/ from the bottom up. A file may import
from its own layer or from one below it, never from one above: the codecs know
no response, the formats no plan, the plan no adapter, and only the verifiers
may use everything. Inside format/, the formats know no table (mod.rs, which
lists them), and the check says how many imports run back up there.

The command is a crate of its own on top of the library (cli/src/, the
package pd-stitch-cli): cargo keeps every file of src/ from importing it. Its
files reach the library as any crate does, by `pd_stitch::...`, and this
check holds them to what the library shows a user: each module they name
must be one lib.rs declares `pub` and does not hide from the docs
(`#[doc(hidden)]`), so that no public module exists for the command alone.

Imports are read as scripts/import_cycles.py reads them, with its functions: a
path `crate::...` or `super::...` in a file's code (outside comments and its
test module) leads into the deepest module that is a prefix of it. Two more
readings, so that no import slips past:

- a path that leads into no module names an item of the crate's root
  (`crate::Stitch`, re-exported by lib.rs): it imports the root file, lib.rs,
  which sits near the top;
- a path that starts with a child module the file declares (`mod model;` and
  then `pub use model::X`, or `self::model::X`) imports that child.

Every file of src/ must be in a layer, and every path of the table must name a
file: a new file is placed on purpose, not by default.

    python3 scripts/layering.py              # check src/ and cli/src/ (what .ci/run does)
    python3 scripts/layering.py --self-test  # the check fails on planted upward imports
"""
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_cycles import code_of, deepest_module, module_of, named_paths  # noqa: E402

# The layers, from the bottom: (name, paths under src/). A path ending in `/`
# is a folder; a file is in the layer of the longest path that names it.
LAYERS = [
    # The pure model of a merge: dtypes, position intervals, segments, the
    # merge rule, strict mode's layout rule, SGLang's position problems. No
    # JSON, no I/O.
    ("algebra", ["algebra/"]),
    # A multi-turn episode's rows, assembled from its turns' rows by one
    # rule, and compared with a full-context forward: pure, on the
    # algebra's dtypes and intervals alone (its own widening included), so
    # that the readers, the Python binding and the command above build on
    # it.
    ("episode", ["episode/"]),
    # Bytes and text of rows, not responses: strict base64, the .npy header,
    # dtype widening, decoded runs, merged rows text; what the codecs refuse
    # and the two forms of inline rows (a leaf the error layer names); and
    # the edits of a byte buffer that a merged text becomes (codec/splice.rs).
    ("codec", ["codec/"]),
    # The one error type: Error, ErrorKind, where in a response (Location),
    # offending values shortened for messages. Names the algebra's problems
    # and the codecs' errors, nothing above.
    ("error", ["error/"]),
    # A response as the formats read it and the adapters write it: the View
    # either representation offers, typed values with their locations,
    # where choices and inline rows sit, the field names, and what a merge
    # writes (response/patch.rs).
    ("view", ["response/"]),
    # format/, the kinds of rows, in four layers of its own, so that no
    # arrow runs back up inside it. At the bottom, what every format is
    # made of: what a place of rows is, Stitch (which kinds a merge
    # stitches), the token counts that place a .npy (vLLM 0.32), and the
    # Format trait with Spec and Level.
    (
        "fmt base",
        ["format/places.rs", "format/stitch.rs", "format/end_anchored.rs", "format/interface.rs"],
    ),
    # What several formats share: strict mode's check, which the by-handle
    # planner holds its planned payload against; the generic inline rows
    # at a holder and a key, which each inline convention parameterizes.
    ("fmt shared", ["format/strict.rs", "format/inline.rs"]),
    # The formats, one file each (any file of format/ not named above or
    # below, so that a new format needs no line here): rows by handle,
    # SGLang's rows with their position solver, each inline convention.
    ("formats", ["format/"]),
    # The table: the formats' mod lines, All and the questions every
    # reader asks of it. It names every format, so it sits above them.
    ("fmt table", ["format/mod.rs"]),
    # The one plan of a merge: every format run in one validating pass
    # through a View, its patches collected before anything is written.
    ("plan", ["merge/"]),
    # The adapters that apply the patches: to a serde_json::Value
    # (merge/value.rs) and to raw JSON bytes (bytes/).
    ("adapters", ["merge/value.rs", "bytes/"]),
    # Stitcher, the configured merge, and the free entry points.
    ("stitcher", ["stitcher.rs"]),
    # The streamed decode, stitched event by event by a Stitcher (which is
    # why the stream sits above it).
    ("stream", ["stream/"]),
    # The crate's root: its documentation and its public names.
    ("root", ["lib.rs"]),
    # The verifiers, which may use anything: the trainer's reading model,
    # gather and check, compare, the simulators (SGLang's model and
    # simulator among them), and the generators for routers' tests.
    (
        "verifiers",
        ["reading/", "gather/", "compare/", "sim/", "sglang.rs", "testing.rs", "testing/"],
    ),
]

# The command's crate, above every layer of the library.
COMMAND = "cli/src"

UNPLACED = "add it to LAYERS in scripts/layering.py"
# The folder whose own layers are reported apart: the formats and their table.
INSIDE = "src/format/"
TESTS = "#[cfg(test)]\nmod tests"
MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;", re.M)
# A module lib.rs declares, with the attributes and visibility before it
# (`#[doc(hidden)]\npub mod places {`, `#[cfg(feature = "verify")]\npub mod gather;`).
ROOT_MOD = re.compile(
    r"((?:^[ \t]*#\[[^\n]*\][ \t]*\n)*)^[ \t]*(pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*[;{]", re.M
)
# A path into the library from another crate: `pd_stitch::a::b`,
# `pd_stitch::{a, b::{c, d}}`.
LIBRARY_PATH = re.compile(r"\bpd_stitch::(\{|[A-Za-z_]\w*)")


def rust_files(root):
    """Every .rs file under `root`, as its path from there with `/`."""
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.relpath(os.path.join(folder, name), root)
                found.append(path.replace(os.sep, "/"))
    return sorted(found)


def layer_of(path):
    """The index in LAYERS of the longest path naming `path`, or None."""
    best = None
    for index, (_, paths) in enumerate(LAYERS):
        for prefix in paths:
            names = path.startswith(prefix) if prefix.endswith("/") else path == prefix
            if names and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def child_paths(code, module, children):
    """Paths that start with a child module declared in this file: `model::X`
    or `self::model::X` (not `crate::model`, which named_paths reads)."""
    for child in children:
        if re.search(r"(?<![\w:])(?:self::)?" + child + r"::", code):
            yield list(module) + [child]


def imports(root):
    """Each file's imports: {file: [(target file, the path as written)]}."""
    files = rust_files(root)
    texts = {}
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            texts[path] = f.read()
    modules = {module_of(os.path.join(root, path), root): path for path in files}

    found = {}
    for path in files:
        module = module_of(os.path.join(root, path), root)
        code = code_of(texts[path])
        children = MOD.findall(code)
        edges = []
        named = [(p, "crate::" + "::".join(p)) for p in named_paths(code, module)]
        named += [(p, p[-1] + "::...") for p in child_paths(code, module, children)]
        for segments, written in named:
            target = deepest_module(segments, modules)
            target = modules[target] if target is not None else "lib.rs"
            if target != path:
                edges.append((target, written))
        found[path] = edges
    return found


def root_modules(lib_rs):
    """The modules lib.rs declares, each with why another crate may not name
    it ({name: None} when it may)."""
    found = {}
    for attrs, visibility, name in ROOT_MOD.findall(code_of(lib_rs)):
        if visibility.strip() != "pub":
            found[name] = "a module private to the library"
        elif "doc(hidden)" in attrs:
            found[name] = "a module hidden from the library's docs (#[doc(hidden)])"
        else:
            found[name] = None
    return found


def library_paths(code):
    """The first segment of each path into the library that `code` names:
    `pd_stitch::a::b` gives `a`, `pd_stitch::{a, b::{c}}` gives `a` and `b`."""
    for match in LIBRARY_PATH.finditer(code):
        if match.group(1) != "{":
            yield match.group(1)
            continue
        depth, k, item_starts = 1, match.end(), True
        while k < len(code) and depth:
            c = code[k]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == "," and depth == 1:
                item_starts = True
            elif item_starts and depth == 1 and not c.isspace():
                name = re.match(r"[A-Za-z_]\w*", code[k:])
                if name and name.group() != "self":
                    yield name.group()
                item_starts = False
            k += 1


def command_problems(command, library):
    """Each module of the library that a file of the command's crate names
    and may not: one line each."""
    with open(os.path.join(library, "lib.rs"), encoding="utf-8") as f:
        modules = root_modules(f.read())
    out = []
    for path in rust_files(command):
        with open(os.path.join(command, path), encoding="utf-8") as f:
            code = code_of(f.read())
        for name in sorted(set(library_paths(code))):
            if modules.get(name):
                out.append(f"{command}/{path} names pd_stitch::{name}, {modules[name]}")
    return out


def problems(root, command=None):
    """What breaks the order, one line each (empty when the order holds):
    in the library at `root`, and in the command's crate at `command`."""
    out = command_problems(command, root) if command else []
    files = rust_files(root)
    for path in files:
        if layer_of(path) is None:
            out.append(f"src/{path} is in no layer: {UNPLACED}")
    for name, paths in LAYERS:
        for prefix in paths:
            folder = prefix.endswith("/")
            if not any(f == prefix or (folder and f.startswith(prefix)) for f in files):
                out.append(f"layer {name}: {prefix} names no file of src/")
    for path, edges in sorted(imports(root).items()):
        mine = layer_of(path)
        for target in sorted({target for target, _ in edges}):
            theirs = layer_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                written = ", ".join(sorted({w for t, w in edges if t == target}))
                out.append(
                    f"src/{path} ({LAYERS[mine][0]}) imports src/{target} "
                    f"({LAYERS[theirs][0]}), a layer above it: {written}"
                )
    return out


def check(root, command):
    found = problems(root, command)
    for line in found:
        print("layering: " + line, file=sys.stderr)
    edges = imports(root)
    count = sum(len({target for target, _ in e}) for e in edges.values())
    print(f"{len(edges)} files in {len(LAYERS)} layers, {count} imports, {len(found)} problems")
    inside = [line for line in found if line.startswith(INSIDE) and f" imports src/{INSIDE}" in line]
    print(f"  inside {INSIDE}: {len(inside)} imports back up")
    for index, (name, _) in enumerate(LAYERS):
        members = [f for f in edges if layer_of(f) == index]
        print(f"  {index:2} {name:10} {len(members):3} files")
    with open(os.path.join(root, "lib.rs"), encoding="utf-8") as f:
        modules = root_modules(f.read())
    files, named = rust_files(command), set()
    for path in files:
        with open(os.path.join(command, path), encoding="utf-8") as f:
            named.update(name for name in library_paths(code_of(f.read())) if name in modules)
    print(
        f"  {len(LAYERS):2} {'command':10} {len(files):3} files of {command}/, a crate of its own, "
        f"naming the library's modules {', '.join(sorted(named))}"
    )
    return not found


def child_files(src, path):
    """The child modules `path` declares, each with its file under `src`."""
    with open(os.path.join(src, path), encoding="utf-8") as f:
        children = MOD.findall(code_of(f.read()))
    folder = "" if path == "lib.rs" else path[: -len(".rs")] + "/"
    if path.endswith("/mod.rs"):
        folder = path[: -len("mod.rs")]
    for child in children:
        for candidate in (f"{folder}{child}.rs", f"{folder}{child}/mod.rs"):
            if os.path.exists(os.path.join(src, candidate)):
                yield child, candidate


def self_test(src="src", command=COMMAND):
    """On copies of src/: the clean copy passes; an import that a comment or
    the test module makes passes; each planted upward import fails with
    exactly that import: across every boundary of two layers, through the
    crate's root, through `super::` and a group, from a parent to its child;
    and a file in no layer fails. On copies of both crates: the command
    passes, and fails on a private module of the library it names (alone or
    in a group) and on a module it names that lib.rs hides from the docs."""
    files = rust_files(src)
    library = files
    layers = [[f for f in library if layer_of(f) == index] for index in range(len(LAYERS))]

    def item_in(path):
        """A path to an item of the module of `path`, from the crate's root."""
        return "::".join(["crate", *module_of(os.path.join(src, path), src), "Planted"])

    def planted(path, text, at_end=False):
        """The check's problems on a copy of src/ with `text` planted in
        `path` after its opening comment, where the imports go (or at its end)."""
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "src")
            shutil.copytree(src, root)
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = f.read().split("\n")
            at = next((i for i, line in enumerate(lines) if not line.startswith("//")), len(lines))
            if at_end:
                at = len(lines)
            lines[at:at] = ["", text]
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            return problems(root)

    def fails_once(found, path, target):
        assert len(found) == 1, found
        assert found[0].startswith(f"src/{path} ("), found
        assert f" imports src/{target} (" in found[0], found

    assert planted("lib.rs", "") == [], "the clean copy fails"

    bottom, top = layers[0][0], layers[-1][0]
    assert planted(bottom, f"// use {item_in(top)};") == [], "a comment is read as code"
    untested = next(
        (f for f in layers[0] if TESTS not in open(os.path.join(src, f), encoding="utf-8").read()),
        layers[0][0],
    )
    test_module = f"#[cfg(test)]\nmod tests {{\n    use {item_in(top)};\n}}"
    assert planted(untested, test_module, at_end=True) == [], "a test module is read"

    for low, high in zip(layers, layers[1:]):
        fails_once(planted(low[0], f"use {item_in(high[0])};"), low[0], high[0])
    # Through the root: an item that lib.rs re-exports.
    fails_once(planted(bottom, "use crate::Stitcher;"), bottom, "lib.rs")
    # Through `super::` from two levels down, inside a group.
    deep = next(f for f in layers[0] if len(module_of(os.path.join(src, f), src)) == 2)
    group = "use super::super::{algebra::Rows, " + item_in(top)[len("crate::") :] + "};"
    fails_once(planted(deep, group), deep, top)
    # From a parent to a child in a layer above it, by the child's bare name.
    parent, child, child_file = next(
        (path, child, child_file)
        for path in library
        for child, child_file in child_files(src, path)
        if layer_of(child_file) > layer_of(path)
    )
    fails_once(planted(parent, f"pub use {child}::Planted;"), parent, child_file)
    # Inside format/: a format that takes an item of the table (mod.rs),
    # the arrow back up that made All move out of the traits' file.
    fmt = next(f for f in library if f.startswith("format/") and layer_of(f) == layer_of("format/"))
    fails_once(planted(fmt, "use super::All;"), fmt, "format/mod.rs")
    # A file in no layer.
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "src")
        shutil.copytree(src, root)
        open(os.path.join(root, "unplaced.rs"), "w", encoding="utf-8").close()
        found = problems(root)
    assert found == [f"src/unplaced.rs is in no layer: {UNPLACED}"], found

    def command_planted(path, text, lib_rs=lambda text: text):
        """The check's problems on copies of both crates, with `text` planted
        in the command's `path` and lib.rs rewritten by `lib_rs`."""
        with tempfile.TemporaryDirectory() as tmp:
            root, top = os.path.join(tmp, "src"), os.path.join(tmp, "cli")
            shutil.copytree(src, root)
            shutil.copytree(command, top)
            with open(os.path.join(root, "lib.rs"), encoding="utf-8") as f:
                text_of_lib = f.read()
            with open(os.path.join(root, "lib.rs"), "w", encoding="utf-8") as f:
                f.write(lib_rs(text_of_lib))
            with open(os.path.join(top, path), "a", encoding="utf-8") as f:
                f.write("\n" + text + "\n")
            return problems(root, top)

    main = "main.rs"
    assert command_planted(main, "") == [], "the clean command fails"
    with open(os.path.join(src, "lib.rs"), encoding="utf-8") as f:
        modules = root_modules(f.read())
    private = next(name for name, why in modules.items() if why)
    for text in (f"use pd_stitch::{private}::Planted;", f"use pd_stitch::{{Error, {private}::{{self, X}}}};"):
        found = command_planted(main, text)
        assert len(found) == 1 and f"names pd_stitch::{private}, a module private" in found[0], found
    # Hidden from the docs: a public module the command names, hidden.
    named = set()
    for path in rust_files(command):
        with open(os.path.join(command, path), encoding="utf-8") as f:
            named.update(library_paths(code_of(f.read())))
    shown = sorted(name for name in named if name in modules and not modules[name])[0]
    hide = re.compile(r"^(pub mod " + shown + r"\b)", re.M)
    found = command_planted(main, "", lambda text: hide.sub(r"#[doc(hidden)]\n\1", text, count=1))
    assert found and all(f"names pd_stitch::{shown}, a module hidden" in line for line in found), found

    print(
        f"self-test: the clean copy passes, and so do imports in a comment or a test module; "
        f"fails on {len(layers) - 1} imports planted across each boundary, on imports "
        f"through the root, through super:: and from {parent} to its child {child}, "
        f"from {fmt} up to the table, "
        f"and on a file in no layer; the command passes, and fails on the library's private "
        f"{private} named alone or in a group, and on {shown} hidden from the docs"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif sys.argv[1:]:
        sys.exit(__doc__)
    else:
        sys.exit(0 if check("src", COMMAND) else 1)
