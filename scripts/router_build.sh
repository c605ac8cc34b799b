#!/usr/bin/env bash
# What a router builds (`pd-stitch = "0.4"`, the default features): the merge alone.
#   - it links nothing of `std::fs` (no file reader reaches a router);
#   - it depends on no crate beyond the library's four (memchr is serde_json's too);
#   - a crate depending on it lists at most 17 crates in `cargo tree -e normal`
#     (distinct crates, the dependent included);
#   - it prints the source lines that build compiles (from rustc's dep-info).
# Each probe is checked against a build that must trip it, so a probe that
# can no longer see fails instead of passing: the `verify` build must show
# `std::fs`, and a dependent with `testing` (proptest) must count more than 17.
# `-p pd-stitch` everywhere: built with the workspace's default members, the
# library would get `verify` from the command's crate (cargo unifies features).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-target}/router-build
limit=17
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
CARGO_TARGET_DIR=$target cargo build --quiet --lib -p pd-stitch --features verify --locked
with_verify=$(fs_symbols)
if [ "$with_verify" -eq 0 ]; then
    echo "the probe finds no std::fs symbol even in the verify build: it cannot see them" >&2
    exit 1
fi

rm -rf "$target"
CARGO_TARGET_DIR=$target cargo build --quiet --lib -p pd-stitch --locked
router=$(fs_symbols)
if [ "$router" -ne 0 ]; then
    echo "the router build (default features) links std::fs:" >&2
    nm -C "$target"/debug/libpd_stitch.rlib | grep 'std::fs::' >&2
    exit 1
fi
deps=$(cargo tree -p pd-stitch --edges normal --depth 1 --prefix none --locked | tail -n +2 | sort -u | tr '\n' ' ')
for dep in $deps; do
    case "$dep" in
        serde_json|thiserror|base64-simd|memchr|v*|"(*)") ;;
        *) echo "the router build depends on $dep" >&2; exit 1 ;;
    esac
done

# A router's crate: a scratch crate depending on the library by path with
# default features, outside the workspace, resolved with the repository's
# Cargo.lock (the versions CI builds).
dependent=$(mktemp -d)
trap 'rm -rf "$dependent"' EXIT
mkdir "$dependent/src"
: > "$dependent/src/lib.rs"
cat > "$dependent/Cargo.toml" <<EOF
[package]
name = "router"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
pd-stitch = { path = "$repo" }

# A workspace of its own, wherever the temporary directory is.
[workspace]
EOF
crates() {
    # Each line of the tree is a crate, `name vVERSION` then more words
    # (a path, `(*)` when shown before, `(proc-macro)`).
    cp Cargo.lock "$dependent/Cargo.lock"
    (cd "$dependent" && cargo tree --quiet --edges normal --prefix none "$@") | awk '{print $1, $2}' | sort -u | wc -l
}
with_testing=$(crates --features pd-stitch/testing)
if [ "$with_testing" -le "$limit" ]; then
    echo "the count finds $with_testing crates even with testing (proptest): it cannot see them" >&2
    exit 1
fi
count=$(crates)
if [ "$count" -gt "$limit" ]; then
    echo "a crate depending on pd-stitch lists $count crates in cargo tree, more than $limit:" >&2
    (cd "$dependent" && cargo tree --quiet --edges normal) >&2
    exit 1
fi
echo "router build: no std::fs symbol (the verify build has $with_verify); $(lines) source lines compiled; depends on: $deps"
echo "a crate depending on pd-stitch lists $count crates in cargo tree -e normal, at most $limit (with testing: $with_testing)"
