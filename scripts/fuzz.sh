#!/usr/bin/env bash
# Fuzz one JSON entry point of pd-stitch with cargo-fuzz (libFuzzer). It needs
# a nightly toolchain, so it is not part of .ci/run; docs/VERIFICATION.md
# ("Fuzzing") records the last runs.
#
#   scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...]
#   scripts/fuzz.sh merge_routed_payload_in_json 600
#
# Targets: merge_routed_payload_in_json, merge_routed_experts_in_json,
# merge_routed_experts_for_pd. An input is the prefill's JSON, a NUL byte, and
# the decode's JSON (fuzz/src/lib.rs). The working corpus grows in
# fuzz/corpus/TARGET (not committed), seeded from fuzz/seeds/TARGET and
# fuzz/regressions/TARGET; crashes land in fuzz/artifacts/TARGET.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS] [libFuzzer flags...]}
seconds=${2:-600}
shift $(($# < 2 ? $# : 2))

cargo +nightly --version >/dev/null || { echo "needs a nightly toolchain: rustup toolchain install nightly" >&2; exit 1; }
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

corpus=fuzz/corpus/$target
mkdir -p "$corpus"
for dir in "fuzz/seeds/$target" "fuzz/regressions/$target"; do
    [ -d "$dir" ] || continue
    for file in "$dir"/*; do
        [ -e "$corpus/$(basename "$file")" ] || cp "$file" "$corpus/"
    done
done

# The crate forbids unsafe code, so no sanitizer (about twice the executions);
# cargo-fuzz still builds with debug assertions and overflow checks. One job:
# add -jobs/-workers in the flags on a bigger machine.
exec nice -n 10 cargo +nightly fuzz run --sanitizer none "$target" "$corpus" -- \
    -max_total_time="$seconds" -dict=fuzz/json.dict -print_final_stats=1 "$@"
