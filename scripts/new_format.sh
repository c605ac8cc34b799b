#!/usr/bin/env bash
# The standing proof that a new convention of rows is one file and one row of
# the table (issue 44): in a scratch copy of the repository's tracked files,
# add a format at a key that shares nothing with today's (`moe_routing` on
# each choice, compact rows with a start, as a TensorRT-LLM-style engine might
# return them) as ONE new file, src/format/moe_routing.rs, plus its row in
# src/format/mod.rs (its `mod` line and its entry of `All`), and run the tests
# that stitch and verify it through every path:
#
#   - Rust (tests/it/places.rs, which builds a pair at every place of the
#     table): prefill_has_routed_experts by both paths, the `Value` merge, the
#     bytes merge (the scanner), the stream (prefilter and slots), and the
#     verifiers gather (choice_rows, gather_from), check and compare; and
#     the README's map of files, which names a format's file by its row;
#   - the shape checks: scripts/layering.py (the new file in format/'s own
#     layers, no arrow back up), import_cycles.py, literals.py;
#   - Python (python/tests/test_places.py, through pd_stitch.places()): the
#     merge on every input type, the dict's skeleton, the stream, gather,
#     check; the extension built into a venv as python/ci.sh builds it;
#   - the fuzz oracle (fuzz/src/lib.rs, whose places are the table's).
#
# It fails when any of them does: a path that ignores the new format, or
# needs another file edited to see it. (SPEC's table of places, section 1a,
# does need the new row, on purpose: a convention is specified there, and
# tests/it/spec_table.rs, not run here, holds the SPEC to the table.)
#
# Cheap enough for CI: the scratch copy sits at a fixed place, and the builds
# use the repository's own target directories (target/, python/target/,
# fuzz/target/), so the dependencies compiled by CI's earlier steps are
# reused and only the crates of the copy are built; only the walking tests
# run. The Python venv (maturin, numpy, pytest from PyPI) is made once under
# target/new-format/venv, or is $PD_STITCH_PY_VENV when that names one.
#
#   scripts/new_format.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$repo/target/new-format"
copy="$work/repo"
say() { echo "== new_format.sh: $* (at ${SECONDS}s)"; }

say "a copy of the tracked files in $copy"
rm -rf "$copy"
mkdir -p "$copy"
(cd "$repo" && git ls-files -z --cached | while IFS= read -r -d '' file; do
    # A tracked file deleted in the working tree is not copied.
    [ -e "$file" ] && printf '%s\0' "$file"
done | tar --null -T - -cf - | tar -xf - -C "$copy")

say "the new format: src/format/moe_routing.rs and its row in src/format/mod.rs"
cat > "$copy/src/format/moe_routing.rs" <<'EOF'
//! A TensorRT-LLM-style convention: compact rows with their start at each
//! choice's `moe_routing` (`scripts/new_format.sh` adds it to a copy of the
//! crate, to show that a new convention is this file and its row of the
//! table). Read and merged as every inline convention is (`inline.rs`).

use super::inline::InlinePlace;
use super::places::Holder;

/// `choices[i].moe_routing`.
pub(crate) struct MoeRouting;

impl InlinePlace for MoeRouting {
    const HOLDER: Holder = Holder::Choice;
    const KEY: &'static str = "moe_routing";
}
EOF
python3 - "$copy/src/format/mod.rs" <<'EOF'
import sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
# The mod line, beside the others; the row, last of All's.
mod = "pub(crate) mod inline;\n"
row = "    InlineAt<nvext::Nvext>,\n];"
for anchor in (mod, row):
    if text.count(anchor) != 1:
        sys.exit(f"new_format.sh: {anchor!r} is not once in src/format/mod.rs: the table changed shape")
text = text.replace(mod, mod + "pub(crate) mod moe_routing;\n")
text = text.replace(row, "    InlineAt<nvext::Nvext>,\n    InlineAt<moe_routing::MoeRouting>,\n];")
open(path, "w", encoding="utf-8").write(text)
EOF
# The copy differs from the repository by exactly that: one new file, and two
# lines added to the table.
differ="$(diff -rq "$repo/src" "$copy/src" || true)"
added="$(diff "$repo/src/format/mod.rs" "$copy/src/format/mod.rs" | grep -c '^>' || true)"
removed="$(diff "$repo/src/format/mod.rs" "$copy/src/format/mod.rs" | grep -c '^<' || true)"
expected="Files $repo/src/format/mod.rs and $copy/src/format/mod.rs differ
Only in $copy/src/format: moe_routing.rs"
if [ "$(echo "$differ" | sort)" != "$(echo "$expected" | sort)" ] || [ "$added" != 2 ] || [ "$removed" != 0 ]; then
    echo "new_format.sh: the copy must differ by one new file and two lines of the table:" >&2
    echo "$differ" >&2
    exit 1
fi

cd "$copy"
say "the shape checks"
python3 scripts/layering.py
python3 scripts/import_cycles.py
python3 scripts/literals.py >/dev/null

say "Rust: the table walk through every path, and the README's map"
CARGO_TARGET_DIR="$repo/target" cargo test --quiet --locked -p pd-stitch --all-features \
    --test it -- places:: readme_layout::

say "the fuzz oracle"
(cd fuzz && CARGO_TARGET_DIR="$repo/fuzz/target" cargo test --quiet --locked --lib)

say "Python: the extension built into a venv, and the table walk through the binding"
venv="${PD_STITCH_PY_VENV:-$work/venv}"
if [ ! -f "$venv/.new-format-stamp" ]; then
    python3 -m venv "$venv"
    # What the build and the walk need, at python/ci.sh's versions.
    grep -E '^(maturin|numpy|pytest)' python/requirements-test.txt > "$work/requirements.txt"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$work/requirements.txt"
    touch "$venv/.new-format-stamp"
fi
# As python/ci.sh installs it (pip install ./python), with the venv's maturin
# and the repository's python/target, where CI built the binding's
# dependencies.
PATH="$venv/bin:$PATH" CARGO_TARGET_DIR="$repo/python/target" "$venv/bin/python" -m pip install \
    --quiet --disable-pip-version-check --no-build-isolation --force-reinstall --no-deps ./python
(cd python && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_places.py)
"$venv/bin/python" -c 'import pd_stitch, sys; keys = [p["key"] for p in pd_stitch.places()]; sys.exit(0 if "moe_routing" in keys else "the binding has no moe_routing")'

say "done: a format at moe_routing is one file and one row"
