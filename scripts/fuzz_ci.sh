#!/usr/bin/env bash
# The fuzzing step of .ci/run: every target under fuzz/fuzz_targets/ for a
# fixed, short budget, one job, from the committed seeds (and any committed
# regressions), with the machine's nightly toolchain. docs/VERIFICATION.md
# ("Fuzzing in CI") records the budget and what it found.
#
#   scripts/fuzz_ci.sh [SECONDS_PER_TARGET]     # default FUZZ_CI_SECONDS or 30
#
# - No nightly toolchain: says so on stdout and stderr, and exits 0 (skipped,
#   never silently).
# - cargo-fuzz missing: installs it from crates.io (`cargo install --locked`).
# - Prints each target's execution count, and fails CI when any target finds
#   a crash, after printing the reproducer: the input in base64 and hex, and
#   the end of libFuzzer's log, which holds the failing assertion.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_CI_SECONDS:-30}}

if ! cargo +nightly --version >/dev/null 2>&1; then
    message="FUZZING SKIPPED: no nightly toolchain (rustup toolchain install nightly); libFuzzer needs one"
    echo "$message"
    echo "$message" >&2
    exit 0
fi
if ! command -v cargo-fuzz >/dev/null; then
    echo "installing cargo-fuzz from crates.io"
    start=$SECONDS
    cargo install cargo-fuzz --locked --quiet
    echo "cargo-fuzz installed in $((SECONDS - start))s"
fi
echo "$(cargo +nightly --version), $(cargo fuzz --version)"

targets=()
for file in fuzz/fuzz_targets/*.rs; do
    targets+=("$(basename "$file" .rs)")
done
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets under fuzz/fuzz_targets/" >&2; exit 1; }

# Build every target once, before the clock of any starts. No sanitizer: the
# crate forbids unsafe code; debug assertions and overflow checks stay on.
start=$SECONDS
cargo +nightly fuzz build --sanitizer none
echo "fuzz targets built in $((SECONDS - start))s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for target in "${targets[@]}"; do
    # A fresh corpus from the committed inputs, so nothing is written into
    # fuzz/seeds/; crashes are copied to fuzz/artifacts/<target>/ and printed.
    corpus=$work/corpus/$target
    mkdir -p "$corpus"
    for dir in "fuzz/seeds/$target" "fuzz/regressions/$target"; do
        if [ -d "$dir" ]; then
            find "$dir" -maxdepth 1 -type f -exec cp {} "$corpus/" \;
        fi
    done
    # Only this run's findings: earlier local crashes are not reported again.
    artifacts=$work/artifacts/$target
    mkdir -p "$artifacts"
    log=$work/$target.log
    # -timeout: one input running 20 s is a hang, reported as a crash.
    if cargo +nightly fuzz run --sanitizer none "$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout=20 -dict=fuzz/json.dict \
        -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed+=("$target")
    fi
    # A crash while the seeds load leaves no stats and no coverage line: the
    # searches may find nothing, which must not end the script here.
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1 || true)
    cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -n1 || true)
    echo "fuzz $target: ${execs:-?} executions, budget ${seconds}s (${cov:-no coverage line}): $status"
    if [ "$status" = FAILED ]; then
        echo "---- $target: the end of libFuzzer's log"
        tail -n 60 "$log"
        mkdir -p "fuzz/artifacts/$target"
        for input in "$artifacts"/*; do
            [ -f "$input" ] || continue
            kept=fuzz/artifacts/$target/$(basename "$input")
            cp "$input" "$kept"
            echo "---- $target: reproducer $kept ($(wc -c <"$input") bytes)"
            echo "base64: $(base64 -w0 "$input")"
            echo "hex: $(od -An -v -tx1 "$input" | tr -d ' \n')"
            echo "replay: cargo +nightly fuzz run --sanitizer none $target $kept"
        done
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzzing found crashes in: ${failed[*]} (keep each input under fuzz/regressions/<target>/ with its fix)" >&2
    exit 1
fi
