#!/usr/bin/env bash
# Instructions per run of a stream-stitcher workload, from callgrind
# (deterministic, unlike timings on a shared machine): N runs on inputs and
# stitchers made before the first (examples/stream_count.rs), only the runs
# counted (--toggle-collect).
#
#   scripts/callgrind_stream.sh [what] [N]
#   scripts/callgrind_stream.sh tokens 10       # 20,000 token events (2.8 MB)
#   scripts/callgrind_stream.sh rows 10         # the inline rows event
#   scripts/callgrind_stream.sh rows_merge 10   # the bytes merge of its data
#   scripts/callgrind_stream.sh sglang 10       # SGLang's finished /generate event
#   scripts/callgrind_stream.sh sglang_merge 10 # the bytes merge of its data
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-tokens}" n="${2:-10}"
cargo build --quiet --release --example stream_count
bin="${CARGO_TARGET_DIR:-target}/release/examples/stream_count"
out="$(mktemp /tmp/callgrind.XXXXXX)"
valgrind --tool=callgrind --collect-atstart=no \
    --toggle-collect="*stream_count::timed_*" --callgrind-out-file="$out" \
    "$bin" "$what" "$n" >/dev/null 2>&1
awk -v n="$n" -v what="$what" '
    /^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
    /^totals:/ {
        for (i = 2; i <= NF; i++) v[name[i + 0]] = $i
        printf "%s, per run (N=%d): %d instructions\n", what, n, v["Ir"] / n
    }' "$out"
if [ -n "${KEEP:-}" ]; then echo "kept $out"; else rm -f "$out"; fi
