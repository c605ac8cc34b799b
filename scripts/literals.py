#!/usr/bin/env python3
"""Fail when a key of the wire is spelled in another file than its format's.

Issue 34, "one engine's rows, one file": the keys an engine's rows sit
under are owned by the format that reads them, and their string literals
appear in the code of that one production file of the crates (src/, the
command's cli/src/ and python/src/);
every other reader names the owner's constant or walks the owner's path
helpers. OWNERS says which file owns which key; the check fails when a
gated key is spelled in any other file (or in none). The keys of REPORTED
are listed and do not fail it.

What counts as code is what scripts/import_cycles.py reads (its `code_of`:
the file without comment lines and without the test module that ends it),
less what is still comment or test there:

- a comment after code on its line (`let x = 1; // "payload"`) and block
  comments (`/* ... */`, nested), read as Rust's lexer reads them: a `//`
  inside a string is no comment;
- any other inline module under `#[cfg(test)]` (`#[cfg(test)] mod x { ... }`);
- the files of test modules, each known by its parent's declaration
  `#[cfg(test)] mod x;`, and the files below them.

A literal spells a key when its value is the key (`"payload"`,
`b"payload"`, `r"payload"`) or holds it quoted, as JSON text does
(`r#"{"payload": []}"#`, `b"\\"payload\\":"`).

    python3 scripts/literals.py              # check (what .ci/run does)
    python3 scripts/literals.py --self-test  # the check fails on planted literals
"""
import functools
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_cycles import code_of  # noqa: E402

# Each gated key, and the one file whose code may spell it: the format that
# owns it, which names it by a constant.
OWNERS = {
    "meta_info": "src/format/sglang/mod.rs",
    "sglext": "src/format/sglang/mod.rs",
    "payload": "src/format/by_handle.rs",
}
# Keys listed, not checked: where they are spelled today.
REPORTED = ("sgl_ext", "usage", "token_ids")
# The crates, each a folder with its root files: the library, the command
# (a crate of its own) and the Python binding.
CRATES = {"src": ("lib.rs",), "cli/src": ("main.rs",), "python/src": ("lib.rs",)}

TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
DECLARATION = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_]\w*)\s*;")
CFG_TEST = re.compile(r"#\[cfg\(test\)\]")
# What the lexer stops at: a comment's start, a quote, a raw string's start
# (`r"`, `r#"`, `br"`, not inside an identifier) or an apostrophe.
SPECIAL = re.compile(r'//|/\*|(?<![\w])b?r#*"|"|\'')
RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'")
BLOCK = re.compile(r"/\*|\*/")
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


def lex(code):
    """`code` with its comments, and the contents of its string and char
    literals, blanked to spaces (newlines kept, so that offsets stay), and
    its string literals as [(offset, value)]."""
    out = list(code)
    literals = []

    def blank(start, end):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "

    i, n = 0, len(code)
    while True:
        match = SPECIAL.search(code, i)
        if not match:
            break
        i, token = match.start(), match.group()
        if token == "//":
            end = code.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
        elif token == "/*":
            depth, end = 1, i + 2
            while depth:
                inner = BLOCK.search(code, end)
                if not inner:
                    end = n
                    break
                depth += 1 if inner.group() == "/*" else -1
                end = inner.end()
            blank(i, end)
        elif token == "'":
            char = CHAR.match(code, i)
            # A char literal; else a lifetime ('a), read on.
            end = char.end() if char else i + 1
            blank(i + 1, end - 1)
        elif token.endswith('"') and token != '"':
            hashes = RAW.match(token).group(1)
            start = match.end()
            close = code.find('"' + hashes, start)
            close = n if close < 0 else close
            literals.append((i, code[start:close]))
            blank(start, close)
            end = close + 1 + len(hashes)
        else:
            value, k = [], i + 1
            while k < n and code[k] != '"':
                if code[k] == "\\" and k + 1 < n:
                    escaped = code[k + 1]
                    if escaped == "\n":  # a continued line: its indent is no part of it
                        k += 2
                        while k < n and code[k] in " \t\r\n":
                            k += 1
                        continue
                    if escaped == "u":
                        close = code.find("}", k)
                        value.append(chr(int(code[k + 3 : close], 16)))
                        k = close + 1
                        continue
                    if escaped == "x":
                        value.append(chr(int(code[k + 2 : k + 4], 16)))
                        k += 4
                        continue
                    value.append(ESCAPES.get(escaped, escaped))
                    k += 2
                else:
                    value.append(code[k])
                    k += 1
            literals.append((i, "".join(value)))
            blank(i + 1, k)
            end = k + 1
        i = end
    return "".join(out), literals


def test_spans(blanked):
    """The spans of the inline `#[cfg(test)] mod x { ... }` modules."""
    spans = []
    for match in TEST_MODULE.finditer(blanked):
        depth, k = 1, match.end()
        while k < len(blanked) and depth:
            depth += {"{": 1, "}": -1}.get(blanked[k], 0)
            k += 1
        spans.append((match.start(), k))
    return spans


def lines_of(text, code):
    """For each line of `code` (a subsequence of the lines of `text`, as
    `code_of` keeps them), its line number in `text`."""
    numbers, at = [], 0
    lines = text.splitlines()
    for line in code.splitlines():
        while at < len(lines) and lines[at] != line:
            at += 1
        at += 1
        numbers.append(at)
    return numbers


@functools.lru_cache(maxsize=None)
def read_code(text):
    """A file's code as this check reads it: (its code with comments, test
    modules and the contents of literals blanked, its string literals
    outside test modules as [(line, value)])."""
    code = code_of(text)
    blanked, literals = lex(code)
    tests = test_spans(blanked)
    for a, b in reversed(tests):
        blanked = blanked[:a] + blanked[b:]
    numbers = lines_of(text, code)
    literals = [
        (numbers[code.count("\n", 0, at)], value)
        for at, value in literals
        if not any(a <= at < b for a, b in tests)
    ]
    return blanked, literals


def literals_in(text):
    """The string literals of a file's code, as [(line, value)]."""
    return read_code(text)[1]


def declarations(text):
    """The child modules a file's code declares: [(name, under cfg(test))]."""
    blanked = read_code(text)[0]
    return [(name, bool(CFG_TEST.search(attrs))) for attrs, name in DECLARATION.findall(blanked)]


def production_files(repo):
    """{file: whether it is production code} for every .rs file of the
    crates under `repo`: walked from each crate's roots through the `mod x;`
    of each file, a file is a test module's when a declaration on its way
    is under `#[cfg(test)]`. A file no root reaches counts as production."""
    files = {}
    for crate, roots in CRATES.items():
        folder = os.path.join(repo, crate)
        roots = [os.path.join(folder, root) for root in roots]
        test_only, seen = set(), set()
        stack = [(root, False) for root in roots]
        while stack:
            path, under_test = stack.pop()
            if path in seen or not os.path.exists(path):
                continue
            seen.add(path)
            if under_test:
                test_only.add(path)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if path in roots or os.path.basename(path) == "mod.rs":
                below = os.path.dirname(path)
            else:
                below = path[: -len(".rs")]
            for child, gated in declarations(text):
                for candidate in (child + ".rs", os.path.join(child, "mod.rs")):
                    stack.append((os.path.join(below, candidate), under_test or gated))
        for path, _, names in os.walk(folder):
            for name in names:
                if name.endswith(".rs"):
                    full = os.path.join(path, name)
                    files[os.path.relpath(full, repo).replace(os.sep, "/")] = full not in test_only
    return dict(sorted(files.items()))


def spelled(value, key):
    return value == key or f'"{key}"' in value


def spellings(repo, keys):
    """{key: {file: [lines]}}: where the production code under `repo`
    spells each key."""
    found = {key: {} for key in keys}
    for name, production in production_files(repo).items():
        if not production:
            continue
        with open(os.path.join(repo, name), encoding="utf-8") as f:
            literals = literals_in(f.read())
        for key in keys:
            lines = sorted({line for line, value in literals if spelled(value, key)})
            if lines:
                found[key][name] = lines
    return found


def problems(found):
    """One line for each gated key spelled elsewhere than in its owner, or
    nowhere."""
    out = []
    for key, owner in OWNERS.items():
        files = sorted(found[key])
        if files != [owner]:
            others = [f for f in files if f != owner] or ["no file"]
            where = ", ".join(others)
            out.append(f'"{key}" is spelled in {where}: only {owner}, its format, may spell it')
    return out


def check(repo):
    found = spellings(repo, list(OWNERS) + list(REPORTED))
    for key, files in found.items():
        gate = f"owner {OWNERS[key]}" if key in OWNERS else "reported, not gated"
        print(f'"{key}" ({gate}): {len(files)} file{"" if len(files) == 1 else "s"}')
        for name, lines in files.items():
            print(f"  {name}: line{'' if len(lines) == 1 else 's'} {', '.join(map(str, lines))}")
    out = problems(found)
    for line in out:
        print("literals: " + line, file=sys.stderr)
    return not out


def self_test(repo="."):
    """On copies of the crates: a gated key planted in a file that
    does not spell it is found there, at its line, and fails the check, as
    a literal, a byte string, JSON text raw or escaped, and after a `//` or
    a quote inside a literal; planted in a comment of each kind, in a test
    module (the one ending a file, or another), or in a test module's file
    (known by its parent's `#[cfg(test)] mod x;`), it changes nothing."""
    key = "payload"
    keys = list(OWNERS)

    def read(name, root=repo):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            return f.read()

    def opening(lines):
        """Where a planted text goes: after the file's opening comment."""
        return next((i for i, line in enumerate(lines) if not line.startswith("//")), len(lines))

    def planted(path, text, at_end=False, extra=None):
        """The spellings on a copy of the crates with `text` planted in
        `path` (after its opening comment, or at its end), and the `extra`
        files {path: text} added."""
        with tempfile.TemporaryDirectory() as tmp:
            for crate in CRATES:
                shutil.copytree(os.path.join(repo, crate), os.path.join(tmp, crate))
            for name, body in (extra or {}).items():
                with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                    f.write(body)
            lines = read(path, tmp).split("\n")
            at = len(lines) if at_end else opening(lines)
            lines[at:at] = ["", text]
            with open(os.path.join(tmp, path), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
            return spellings(tmp, keys)

    clean = planted("src/lib.rs", "")
    assert clean == spellings(repo, keys), "a copy is read otherwise"
    files = production_files(repo)
    assert files["src/lib.rs"] and files["cli/src/main.rs"] and files["python/src/lib.rs"], files
    # The test modules' files are known by their parents' declarations.
    test_files = [name for name, production in files.items() if not production]
    for name in ("src/gather/tests.rs", "src/reading/tests.rs", "src/bytes/scan/tests.rs"):
        assert name not in files or name in test_files, f"{name} is not known for a test module's"
    # A file that does not spell the key and has no test module of its own.
    target = next(
        name
        for name, production in files.items()
        if production
        and name.startswith("src/")
        and name != "src/lib.rs"
        and name not in clean[key]
        and "#[cfg(test)]" not in read(name)
    )

    def others(found):
        return {k: v for k, v in found.items() if k != key}

    for text, how in [
        (f'const PLANTED: &str = "{key}";', "a literal"),
        (f'const PLANTED: &[u8] = b"{key}";', "a byte string"),
        (f'const PLANTED: &str = r#"{{"{key}": []}}"#;', "a raw string of JSON"),
        (f'const PLANTED: &[u8] = b"{{\\"{key}\\": []}}";', "an escaped string of JSON"),
        (f'const PLANTED: [&str; 2] = ["http://x/*", "{key}"];', "after `//`, `/*` in a literal"),
        (f"const PLANTED: (char, &str) = ('\"', \"{key}\");", "a literal after a quote char"),
        (f"fn planted<'a>(_: &'a str) -> &'static str {{ \"{key}\" }}", "after lifetimes"),
    ]:
        found = planted(target, text)
        assert target in found[key], f"{how} in {target} is not found: {found[key]}"
        assert problems(found), f"{how} in {target} does not fail the check"
        assert others(found) == others(clean), f"{how} changes another key's files"
    # At its line: after the opening comment and a blank line.
    found = planted(target, f'const PLANTED: &str = "{key}";')
    assert found[key][target] == [opening(read(target).split("\n")) + 2], found[key][target]

    test_module = f'#[cfg(test)]\nmod tests {{\n    const P: &str = "{key}";\n}}'
    for text, how, at_end in [
        (f'// const PLANTED: &str = "{key}";', "a comment line", False),
        (f'/// "{key}"\nconst PLANTED: u8 = 0;', "a doc comment", False),
        (f'//! "{key}"', "an inner doc comment", False),
        (f'const PLANTED: u8 = 0; // "{key}"', "a comment after code", False),
        (f'const PLANTED: u8 = /* "{key}" */ 0;', "a block comment", False),
        (f'/* one\n/* nested */ "{key}"\n*/', "a nested block comment", False),
        (f'#[cfg(test)]\nmod planted {{\n    const P: &str = "{key}";\n}}', "a test module", False),
        (test_module, "the test module ending the file", True),
    ]:
        assert planted(target, text, at_end) == clean, f"{how} in {target} is counted"
    # A test module's file, known by its parent's declaration, whatever its
    # name; declared without cfg(test), the same file counts.
    literal = {"src/planted.rs": f'pub(crate) const PLANTED: &str = "{key}";\n'}
    assert planted("src/lib.rs", "#[cfg(test)]\nmod planted;", extra=literal) == clean
    found = planted("src/lib.rs", "mod planted;", extra=literal)
    assert "src/planted.rs" in found[key] and problems(found), "a module's file is not read"
    print(
        f'self-test: "{key}" planted in {target} is found at its line and fails the check, '
        f"as a literal, a byte string, JSON text raw or escaped, after `//`, a quote char or "
        f"a lifetime; in a comment of each kind, a test module or a test module's file "
        f"({len(test_files)} known by their declarations) it is not counted"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif sys.argv[1:]:
        sys.exit(__doc__)
    else:
        sys.exit(0 if check(".") else 1)
