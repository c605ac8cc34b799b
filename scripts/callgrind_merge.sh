#!/usr/bin/env bash
# Instructions and D1 misses per merge, from callgrind (deterministic, unlike
# timings on a shared machine): N merges on N clones made before the first
# (examples/merge_count.rs), only the merges counted (--toggle-collect).
#
#   scripts/callgrind_merge.sh [what] [choices] [segments] [N]
#   scripts/callgrind_merge.sh value 8 32 100     # the Value by-handle merge
#   scripts/callgrind_merge.sh bytes 8 32 100     # the bytes path
#   scripts/callgrind_merge.sh inline 8 4096 20   # an inline compact bytes merge
#   scripts/callgrind_merge.sh npy 8 4096 20      # an inline .npy bytes merge
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-value}" choices="${2:-8}" segments="${3:-32}" n="${4:-100}"
cargo build --quiet --release --example merge_count
bin="${CARGO_TARGET_DIR:-target}/release/examples/merge_count"
out="$(mktemp /tmp/callgrind.XXXXXX)"
valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
    --toggle-collect="*merge_count::timed_*" --callgrind-out-file="$out" \
    "$bin" "$what" "$choices" "$segments" "$n" >/dev/null 2>&1
# The totals of the counted functions, by the event names callgrind wrote.
awk -v n="$n" -v what="$what" -v size="${choices}x${segments}" '
    /^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
    /^totals:/ {
        for (i = 2; i <= NF; i++) v[name[i + 0]] = $i
        printf "%s %s, per merge (N=%d): %d instructions, %d D1 misses (%d read, %d write)\n",
            what, size, n, v["Ir"] / n, (v["D1mr"] + v["D1mw"]) / n, v["D1mr"] / n, v["D1mw"] / n
    }' "$out"
rm -f "$out"
