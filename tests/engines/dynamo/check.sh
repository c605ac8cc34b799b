#!/usr/bin/env bash
# Holds a fresh capture of Dynamo's answers (capture.sh --check) to pd-stitch
# and to the saved fixtures:
#
#   bash tests/engines/dynamo/check.sh FRESH SAVED
#
# - every pair a router would stitch (the token API's decode from P - 1 and
#   from 32, n = 2; the OpenAI API's nvext), merged by `pd-stitch merge`, has
#   the colocated answer's rows bitwise (`pd-stitch compare` exits 0);
# - each fresh colocated answer has the saved one's rows bitwise: the engine
#   answers what the fixtures say it answers;
# - the decode asked from S = P is still a 400, a token-API stream a 501.
# Each check prints one line; any failure fails the run, after all ran.
set -uo pipefail
FRESH=$1
SAVED=$2
BIN=${PD_STITCH:-target/debug/pd-stitch}
[ -x "$BIN" ] || cargo build --locked --quiet --bin pd-stitch || exit 1
failed=0
passed=0
ok() { passed=$((passed + 1)); echo "ok    $*"; }
bad() { failed=$((failed + 1)); echo "FAIL  $*"; }
same_rows() {  # NAME A B
    local out
    if out=$("$BIN" --quiet compare "$2" "$3" 2>&1); then
        ok "$1: $(echo "$out" | tail -n 1)"
    else
        bad "$1: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
    fi
}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for prompt in p45 p70; do
    f=$FRESH/$prompt
    for pair in prefill:decode:colocated prefill:decode-s32:colocated \
                prefill-n2:decode-n2:colocated-n2 openai-prefill:openai-colocated:openai-colocated; do
        IFS=: read -r prefill decode colocated <<< "$pair"
        merged=$scratch/$prompt-$decode.json
        if "$BIN" merge "$f/$prefill.json" "$f/$decode.json" > "$merged" 2> "$merged.err"; then
            same_rows "$prompt $prefill + $decode = $colocated" "$merged" "$f/$colocated.json"
        else
            bad "$prompt $prefill + $decode: merge failed: $(cat "$merged.err")"
        fi
    done
    for answer in colocated colocated-n2 openai-colocated prefill decode decode-s32; do
        same_rows "$prompt $answer as saved" "$f/$answer.json" "$SAVED/$prompt/$answer.json"
    done
    for refused in decode-sP-refused:400 stream-refused:501; do
        IFS=: read -r name code <<< "$refused"
        if grep -q "\"code\":$code" "$f/$name.json"; then
            ok "$prompt $name: still $code"
        else
            bad "$prompt $name: not $code: $(head -c 300 "$f/$name.json")"
        fi
    done
done
echo "== dynamo: $passed passed, $failed failed"
[ "$failed" = 0 ]
