#!/usr/bin/env python3
"""Fail when a type name is defined twice in the crates' sources.

A name that says one thing is defined once: two `struct Case`, or a
`struct Slot` beside an `enum Slot`, make a reader ask which one a file
means. This reads every `.rs` file under the source folders of the
repository's crates (the library's src/ and the command's cli/src/) and
lists every `struct`, `enum`, `union`, `trait` and `type` item by name,
wherever it stands: at a module's level, in a test module, or inside a
function. An associated type (`type Prefill<..>` inside a `trait` or an
`impl` block) is not a definition of a new name but the trait's own, and is
left out. Comments and string literals are skipped.

    python3 scripts/type_names.py              # check (what .ci/run does)
    python3 scripts/type_names.py --self-test  # the check fails on planted twins
"""
import os
import re
import shutil
import sys
import tempfile

ROOTS = ["src", "cli/src"]

ITEM = re.compile(r"\b(struct|enum|union|trait|type)\s+([A-Za-z_][A-Za-z0-9_]*)")
# What opens an impl or trait block: its header starts with the keyword,
# after attributes, visibility and `unsafe`.
ASSOC_BLOCK = re.compile(
    r"^\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?(?:unsafe\s+)?(?:auto\s+)?(impl|trait)\b"
)


def strip(text):
    """The text with comments, string and char literals blanked (newlines
    kept, so that line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i:i + 2]
        if two == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif two == "/*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text[j:j + 2] == "/*":
                    depth, j = depth + 1, j + 2
                elif text[j:j + 2] == "*/":
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'(b|c)?r#*"', text[i:i + 40]):
            m = re.match(r'(b|c)?r(#*)"', text[i:])
            close = '"' + m.group(2)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c in "bc" and text[i + 1:i + 2] == '"' and not re.match(r"\w", text[i - 1:i] or " ")):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def definitions(path):
    """(name, line) of every type item of a file, associated types left out."""
    with open(path, encoding="utf-8") as f:
        code = strip(f.read())
    found = []
    stack = []  # True for an impl or trait block
    header_start = 0
    pos = 0
    for m in re.finditer(r"[{};]|" + ITEM.pattern, code):
        token = m.group(0)
        if token == "{":
            stack.append(bool(ASSOC_BLOCK.match(code[header_start:m.start()])))
            header_start = m.end()
        elif token == "}":
            if stack:
                stack.pop()
            header_start = m.end()
        elif token == ";":
            header_start = m.end()
        else:
            kind, name = m.group(1), m.group(2)
            if kind == "type" and stack and stack[-1]:
                continue
            line = code.count("\n", 0, m.start()) + 1
            found.append((name, line))
        pos = m.end()
    return found


def twins(repo):
    seen = {}
    for root in ROOTS:
        top = os.path.join(repo, root)
        for folder, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, repo)
                for ty, line in definitions(path):
                    seen.setdefault(ty, []).append(f"{rel}:{line}")
    return {ty: places for ty, places in sorted(seen.items()) if len(places) > 1}, seen


def check(repo):
    found, seen = twins(repo)
    for ty, places in found.items():
        print(f"type name {ty} is defined {len(places)} times: {', '.join(places)}")
    count = sum(len(p) for p in seen.values())
    if found:
        print(f"{len(found)} type name(s) defined more than once, of {len(seen)} names")
        return 1
    print(f"{count} type definitions, {len(seen)} names, each defined once")
    return 0


def self_test():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base, _ = twins(repo)
    plants = {
        "a struct beside a struct": ("struct Twin;\n", "pub(crate) struct Twin { x: u8 }\n"),
        "an enum beside a struct": ("pub enum Twin { A }\n", "struct Twin;\n"),
        "a type alias beside a trait": ("pub type Twin = u8;\n", "trait Twin {}\n"),
        "one in a test module": ("struct Twin;\n", "#[cfg(test)]\nmod tests {\n    struct Twin;\n}\n"),
        "one inside a function": ("struct Twin;\n", "fn f() -> impl Iterator<Item = u8> {\n    struct Twin;\n    None.into_iter()\n}\n"),
        "a type alias in a module after an impl": ("struct Twin;\n", "impl X {\n    type Y = u8;\n}\nmod m {\n    type Twin = u8;\n}\n"),
    }
    quiet = {
        "associated types": "trait T { type Twin; }\nimpl T for u8 { type Twin = u8; }\n",
        "comments and strings": '// struct Twin;\n/* enum Twin */\nconst S: &str = "struct Twin";\nconst R: &str = r#"type Twin = u8;"#;\n',
        "a lifetime before a char": "fn f<'a>(x: &'a str) -> char { let _ = x; 'x' }\nstruct Twin;\n",
    }
    failures = []
    for what, (first, second) in plants.items():
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(src)
            with open(os.path.join(src, "a.rs"), "w") as f:
                f.write(first)
            with open(os.path.join(src, "b.rs"), "w") as f:
                f.write(second)
            found, _ = twins(tmp)
            if "Twin" not in found:
                failures.append(f"missed {what}")
    for what, text in quiet.items():
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.makedirs(src)
            with open(os.path.join(src, "a.rs"), "w") as f:
                f.write(text)
            found, seen = twins(tmp)
            if found:
                failures.append(f"counted {what} as a twin: {found}")
    # The repository's own files are read: a name found in it is found again
    # when one of its files is copied in beside it.
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(repo, "src"), os.path.join(tmp, "src"))
        shutil.copy(os.path.join(repo, "src", "lib.rs"), os.path.join(tmp, "src", "copy.rs"))
        found, _ = twins(tmp)
        lib = {ty for ty, _ in definitions(os.path.join(repo, "src", "lib.rs"))}
        if lib and not lib <= set(found):
            failures.append("a copy of lib.rs did not make its names twins")
    for failure in failures:
        print("self-test:", failure)
    print(f"self-test: {len(plants)} planted twins found, {len(quiet)} non-definitions ignored" if not failures else "self-test failed")
    return 1 if failures else 0


if __name__ == "__main__":
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(check(repo))
