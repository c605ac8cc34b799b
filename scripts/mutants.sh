#!/usr/bin/env bash
# Mutation testing with cargo-mutants (from crates.io): each mutant of src/ is
# built and the test suite run against it; a mutant that no test catches is a
# hole in the tests (or an equivalent mutant, to be explained in
# docs/VERIFICATION.md). Too slow for CI; run it by hand.
#
#   scripts/mutants.sh                     # every file under src/
#   scripts/mutants.sh -f src/algebra/rows.rs   # one file (any cargo-mutants flags)
#
# Environment: PROPTEST_CASES (default 128), MUTANTS_TIMEOUT (seconds per test
# run, default 300; a mutant that loops forever costs this much).
#
# Each mutant rebuilds every test target the run names: `-C ARG` goes to
# every cargo invocation (the build and the test run alike). The integration
# tests are one binary, `it` (tests/it/, a module per concern), so a run names
# `-C --lib -C --test=it`; the unit tests and the whole integration suite then
# run against each mutant. The runs recorded in docs/VERIFICATION.md predate
# that crate: each named the per-file binaries of the time (`--test=laws`,
# `--test=inline`, ...), which are today the modules `laws::`, `inline::`, ...
# of `it`. They were made with PROPTEST_CASES=64 and `--jobs 1`, each from a
# `git archive HEAD` snapshot in /tmp (cargo-mutants copies the tree, and a
# file written meanwhile, e.g. by a fuzzer into fuzz/corpus/, makes the copy
# fail). Today's equivalents:
#
#   scripts/mutants.sh -f src/algebra/segment.rs -f src/algebra/dtype.rs -C --lib -C --test=it
#   MUTANTS_TIMEOUT=60 scripts/mutants.sh -f src/codec/base64.rs -C --lib -C --test=it
#   MUTANTS_TIMEOUT=60 scripts/mutants.sh -f src/codec/npy.rs -f src/format/inline.rs \
#       -C --lib -C --test=it
#   MUTANTS_TIMEOUT=120 scripts/mutants.sh -f src/error.rs -C --lib -C --test=it
#   MUTANTS_TIMEOUT=60 scripts/mutants.sh -f src/gather.rs -C --lib -C --test=it
#   MUTANTS_TIMEOUT=120 scripts/mutants.sh --in-place -f src/testing.rs -C --test=it
#   MUTANTS_TIMEOUT=120 scripts/mutants.sh --in-place -f 'src/sim/*.rs' -C --lib -C --test=it
#
# (sim.rs, before it was split into src/sim/, was run in two parts, the second from line 192 on; see
# docs/VERIFICATION.md.)
#
# Add `--re REGEX` (or `-F REGEX`) to rerun only the mutants whose names match,
# e.g. the survivors of a previous run after a test was added. For such a
# rerun, `--in-place` (it excludes `--jobs`) in a snapshot already built with
# `CARGO_PROFILE_DEV_DEBUG=0 cargo test --no-run --all-features ...` skips the
# baseline's full build; the survivors of error.rs and gather.rs were rerun so:
#
#   MUTANTS_TIMEOUT=60 scripts/mutants.sh --in-place -f src/error.rs -f src/gather.rs \
#       -F 'gather.rs:(63:9|85:9|86:18|89:41|105:9|106:19|358:38|505:50|665:22|698:50|733:29|796:23|796:33):' \
#       -F 'error.rs:(108:39|307:40|328:15):' \
#       -C --lib -C --test=it
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
export PROPTEST_CASES="${PROPTEST_CASES:-128}"
# No debug info: each mutant links its test binaries much faster.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
# The command (cli/, a crate of its own) is not under test here.
cargo mutants --no-shuffle --timeout "${MUTANTS_TIMEOUT:-300}" \
    --exclude 'cli/**' --all-features \
    "$@"
