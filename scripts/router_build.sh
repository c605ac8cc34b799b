#!/usr/bin/env bash
# What a router builds (`default-features = false`): the merge alone.
#   - it links nothing of `std::fs` (no file reader reaches a router);
#   - it depends on no crate beyond the library's four (memchr is serde_json's too);
#   - it prints the source lines that build compiles (from rustc's dep-info).
# The probe is checked against the `verify` build, which must show `std::fs`,
# so a probe that can no longer see the symbols fails instead of passing.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}/router-build
fs_symbols() {
    # The library's object files name each std::fs function they call.
    nm -C "$target"/debug/libpd_stitch.rlib 2>/dev/null | grep -c 'std::fs::' || true
}
lines() {
    local dep
    dep=$(ls "$target"/debug/deps/pd_stitch-*.d | head -n 1)
    # The first line lists the dep-info target and every source file read.
    head -n 1 "$dep" | tr ' ' '\n' | grep '\.rs$' | xargs cat | wc -l
}

rm -rf "$target"
CARGO_TARGET_DIR=$target cargo build --quiet --lib --no-default-features --features verify --locked
with_verify=$(fs_symbols)
if [ "$with_verify" -eq 0 ]; then
    echo "the probe finds no std::fs symbol even in the verify build: it cannot see them" >&2
    exit 1
fi

rm -rf "$target"
CARGO_TARGET_DIR=$target cargo build --quiet --lib --no-default-features --locked
router=$(fs_symbols)
if [ "$router" -ne 0 ]; then
    echo "the router build (default-features = false) links std::fs:" >&2
    nm -C "$target"/debug/libpd_stitch.rlib | grep 'std::fs::' >&2
    exit 1
fi
deps=$(cargo tree --no-default-features --edges normal --depth 1 --prefix none --locked | tail -n +2 | sort -u | tr '\n' ' ')
for dep in $deps; do
    case "$dep" in
        serde_json|thiserror|base64-simd|memchr|v*|"(*)") ;;
        *) echo "the router build depends on $dep" >&2; exit 1 ;;
    esac
done
echo "router build: no std::fs symbol (the verify build has $with_verify); $(lines) source lines compiled; depends on: $deps"
