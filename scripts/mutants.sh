#!/usr/bin/env bash
# Mutation testing with cargo-mutants (from crates.io): each mutant of src/ is
# built and the test suite run against it; a mutant that no test catches is a
# hole in the tests (or an equivalent mutant, to be explained in
# docs/VERIFICATION.md). Too slow for CI; run it by hand.
#
#   scripts/mutants.sh                     # every file under src/
#   scripts/mutants.sh -f src/algebra/rows.rs   # one file (any cargo-mutants flags)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || cargo install cargo-mutants --locked
export PROPTEST_CASES=128
# The main binary and the simulator's report formatting are not under test here.
cargo mutants --no-shuffle --timeout 300 \
    --exclude src/main.rs \
    "$@" \
    -- --all-features
