#!/usr/bin/env bash
# The real SGLang engine harness (issue 36): SGLang 0.5.23 on the CPU, a
# colocated server and a prefill/decode pair over mooncake's TCP transfer,
# the example router in front of the pair, and drive.py comparing what the
# router stitches with what the colocated server answers, bitwise.
#
#   tests/engines/sglang/run.sh            # from anywhere
#
# Environment:
#   PD_ROUTER_ARGS        extra arguments for the example router
#   SGLANG_WRITE_FIXTURES=1  also write the saved answers into
#                         tests/fixtures/engines/sglang/ (else only under
#                         target/engines/sglang/answers/)
#   SGLANG_SAVE_EPISODE=1 also rewrite the three-turn episodes of
#                         tests/fixtures/engines/sglang/episode*/ (save_episode.py)
#   SGLANG_HEALTH_TIMEOUT seconds a server may take to become healthy (300)
#   SGLANG_SKIP_BUILD=1   use the router and CLI already built
#   SGLANG_HOLD=1         start everything, write the URLs to
#                         target/engines/sglang/ports.env and wait (to try
#                         requests by hand) instead of running drive.py
#
# openai.sh beside it tries SGLang's OpenAI endpoints on a server with a
# tokenizer (not part of this run). Everything it makes is under
# target/engines/sglang: the venv (kept between
# runs, see install.sh), the model, logs/ and answers/. The servers listen on
# 127.0.0.1 on free ports picked here, each in its own process group, and are
# stopped by their ids when the script exits, whether it passed or not.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
cd "$root"
out="$root/target/engines/sglang"
logs="$out/logs"
mkdir -p "$logs"
t0=$SECONDS
say() { echo "== sglang: $* (at $((SECONDS - t0)) s)"; }

say "venv"
bash "$here/install.sh"
py="$out/venv/bin/python"

say "the model"
model="$out/model"
if [[ ! -f "$model/config.json" || ! -f "$model/model.safetensors" ]]; then
    # The same tiny random-weight Qwen3-MoE the vLLM harness serves: 3 layers,
    # 8 experts, top-2, so rows of 3 x 2 ids.
    "$py" "$root/tests/engines/vllm/make_model.py" "$model"
fi

if [[ "${SGLANG_SKIP_BUILD:-}" != 1 ]]; then
    say "building the example router and the CLI"
    cargo build --locked --quiet --example pd_router --bin pd-stitch
fi
router_bin="$root/target/debug/examples/pd_router"
cli_bin="$root/target/debug/pd-stitch"

# --- processes: each started in its own process group, stopped by its id ---
pgids=()
stop_all() {
    local rc=$?
    for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
    for g in "${pgids[@]}"; do
        # SGLang's own SIGTERM handler ends its process tree (with SIGKILL:
        # bash reports those as "Killed"); 20 s before this script does.
        for _ in $(seq 100); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$g" 2>/dev/null || true
    done
    [[ ${#pgids[@]} -gt 0 ]] && echo "== sglang: stopped ${#pgids[@]} process groups (${pgids[*]})"
    exit "$rc"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Free loopback ports, all held at once while picked so that none repeats.
read -r port_colo port_prefill port_decode port_boot port_router port_tap < <("$py" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)

export PYTHONPATH="$here/pypath${PYTHONPATH:+:$PYTHONPATH}"
export SGLANG_USE_CPU_ENGINE=1
# The address SGLang gives mooncake and the bootstrap server for this host:
# without it, SGLang looks up the machine's network interface, and the KV
# cache would move over that address instead of the loopback.
export SGLANG_HOST_IP=127.0.0.1
# With the early send of a cached prefix, a prefill whose prompt hits its radix
# cache sends from a CUDA stream, which a CPU does not have.
export SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX=0
# One thread per process: three servers and the router share 2 cores.
export OMP_NUM_THREADS=1

# Token slots of the KV pool, which also index the routed-experts host buffer
# (one row per slot). SGLang's default is what fits in memory (20 M slots,
# 14 GB of KV, on this machine); small pools keep three servers in memory and
# make the decode's pool wrap after a few dozen requests, so that its unwritten
# prompt rows are stale rows of earlier requests (drive.py checks both).
DECODE_POOL=2048
OTHER_POOL=8192
common=(--model-path "$model" --device cpu --attention-backend torch_native
    --sampling-backend pytorch --skip-tokenizer-init --enable-return-routed-experts
    --disable-cuda-graph --page-size 1 --host 127.0.0.1)

declare -A pid_of start_of
start_server() { # name port args...
    local name=$1 port=$2
    shift 2
    setsid "$py" -m sglang.launch_server "${common[@]}" --port "$port" "$@" \
        > "$logs/$name.log" 2>&1 < /dev/null &
    pid_of[$name]=$!
    pgids+=("$!")
    start_of[$name]=$SECONDS
}

say "starting the example router"
# Before the servers: the ports picked above are then bound at once, and none
# of the ports an SGLang server opens while it starts (its schedulers', the
# KV transfer's) can take one of them (a router that found its port taken
# once let drive.py's requests reach an SGLang process instead).
# The router reaches the decode through tap.py, which notes the start the
# router asks for and the rows the decode answers (drive.py checks both).
# Waits until NAME (process PID, log $logs/NAME.log) listens on PORT; its
# log and a failure when it dies first.
wait_listening() { # name pid port
    local _
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || { echo "== sglang: $1 died:" >&2; tail -n 20 "$logs/$1.log" >&2; exit 1; }
        (echo > "/dev/tcp/127.0.0.1/$3") 2>/dev/null && return
        sleep 0.1
    done
}
tap_log="$logs/tap.jsonl"
: > "$tap_log"
setsid "$py" "$here/tap.py" "$port_tap" "$port_decode" "$tap_log" > "$logs/tap.log" 2>&1 < /dev/null &
tap_pid=$!
pgids+=("$tap_pid")
wait_listening tap "$tap_pid" "$port_tap"
# shellcheck disable=SC2086 # PD_ROUTER_ARGS is a list of words on purpose
setsid "$router_bin" --prefill "http://127.0.0.1:$port_prefill" --decode "http://127.0.0.1:$port_tap" \
    --row-shape 3x2 --bootstrap-port "$port_boot" --listen "127.0.0.1:$port_router" \
    ${PD_ROUTER_ARGS:-} > "$logs/router.log" 2>&1 < /dev/null &
router_pid=$!
pgids+=("$router_pid")
wait_listening router "$router_pid" "$port_router"


say "starting three SGLang servers (logs in $logs)"
# The colocated server's radix cache is off, so that its answer is the same
# computation whatever it was sent before. With it on, a greedy request that
# hits the cache can take other tokens at a near tie: a 294-token prompt,
# sent twice, was answered [324, 416, 466, ...] fresh and [324, 102, 487, ...]
# with 293 tokens cached (the P/D pair answered the first both times, its
# prefill's cache hit or not). The prefill keeps its cache: its rows for a
# cached prefix are rows stored when that prefix was computed.
start_server colocated "$port_colo" --max-total-tokens "$OTHER_POOL" --disable-radix-cache
start_server prefill "$port_prefill" --max-total-tokens "$OTHER_POOL" \
    --disaggregation-mode prefill --disaggregation-transfer-backend mooncake_tcp \
    --disaggregation-bootstrap-port "$port_boot"
# A decode keeps the KV of a request it retracts in a host pool sized from
# the machine's free memory less a 10 GiB reserve
# (sglang/srt/mem_cache/hicache_auto_size.py), and does not start when less is
# free ("No host memory is left for HiCache"), as on a machine busy with
# builds. Without a backup, a retracted request is a 503 (drive.py would see
# it); the requests here are sequential and fit the pool, so none is.
start_server decode "$port_decode" --max-total-tokens "$DECODE_POOL" \
    --disaggregation-mode decode --disaggregation-transfer-backend mooncake_tcp \
    --disaggregation-decode-retraction-backup none

health_timeout=${SGLANG_HEALTH_TIMEOUT:-300}
declare -A ready_after
pending=(colocated prefill decode)
port_for() { case $1 in colocated) echo "$port_colo" ;; prefill) echo "$port_prefill" ;; decode) echo "$port_decode" ;; esac; }
deadline=$((SECONDS + health_timeout))
while [[ ${#pending[@]} -gt 0 ]]; do
    still=()
    for name in "${pending[@]}"; do
        if ! kill -0 "${pid_of[$name]}" 2>/dev/null; then
            echo "== sglang: the $name server died; the end of its log:" >&2
            tail -n 40 "$logs/$name.log" >&2
            exit 1
        fi
        if curl -sf -m 5 "http://127.0.0.1:$(port_for "$name")/health" > /dev/null 2>&1; then
            ready_after[$name]=$((SECONDS - start_of[$name]))
            echo "== sglang: $name healthy after ${ready_after[$name]} s (port $(port_for "$name"))"
        else
            still+=("$name")
        fi
    done
    pending=("${still[@]+"${still[@]}"}")
    if [[ ${#pending[@]} -gt 0 ]]; then
        if ((SECONDS > deadline)); then
            for name in "${pending[@]}"; do
                echo "== sglang: $name not healthy after $health_timeout s; the end of its log:" >&2
                tail -n 40 "$logs/$name.log" >&2
            done
            exit 1
        fi
        sleep 2
    fi
done

# The router and the tap were started before the servers; either one that
# died since is a failure with its log.
for name in router tap; do
    pid_var=${name}_pid
    kill -0 "${!pid_var}" 2>/dev/null || { echo "== sglang: $name died:" >&2; tail -n 20 "$logs/$name.log" >&2; exit 1; }
done

cat > "$out/ports.env" <<PORTS
COLOCATED=http://127.0.0.1:$port_colo
PREFILL=http://127.0.0.1:$port_prefill
DECODE=http://127.0.0.1:$port_decode
ROUTER=http://127.0.0.1:$port_router
BOOTSTRAP_PORT=$port_boot
PORTS
if [[ "${SGLANG_HOLD:-}" == 1 ]]; then
    say "holding the servers for requests by hand ($out/ports.env); stop with kill -- -$$"
    while sleep 5; do :; done
fi

if [[ "${SGLANG_SAVE_EPISODE:-}" == 1 ]]; then
    # A fresh episode, and probe's episode 11 of --seed 9 (its decode rows
    # differ from a fresh prefill's at one position: see the fixtures' README).
    for spec in "episode" "episode-decode-flip --from-probe 9:11"; do
        read -r dir extra <<< "$spec"
        say "saving a three-turn episode into tests/fixtures/engines/sglang/$dir"
        # The answers go, the README stays.
        rm -rf "$root/tests/fixtures/engines/sglang/$dir"/{t0,t1,t2,*.json}
        # shellcheck disable=SC2086 # extra is a list of words on purpose
        "$py" -B "$here/save_episode.py" --colocated "http://127.0.0.1:$port_colo" \
            --prefill "http://127.0.0.1:$port_prefill" --decode "http://127.0.0.1:$port_decode" \
            --router "http://127.0.0.1:$port_router" --bootstrap-port "$port_boot" \
            --out "$root/tests/fixtures/engines/sglang/$dir" $extra
    done
fi

say "drive.py"
fixture_args=()
[[ "${SGLANG_WRITE_FIXTURES:-}" == 1 ]] && fixture_args=(--fixtures "$root/tests/fixtures/engines/sglang")
"$py" "$here/drive.py" \
    --colocated "http://127.0.0.1:$port_colo" \
    --prefill "http://127.0.0.1:$port_prefill" \
    --decode "http://127.0.0.1:$port_decode" \
    --router "http://127.0.0.1:$port_router" \
    --bootstrap-port "$port_boot" \
    --decode-pool "$DECODE_POOL" \
    --pd-stitch "$cli_bin" \
    --tap-log "$tap_log" \
    --answers "$out/answers" \
    --startup "colocated=${ready_after[colocated]},prefill=${ready_after[prefill]},decode=${ready_after[decode]}" \
    "${fixture_args[@]+"${fixture_args[@]}"}"

# The seed's validation as a user runs it (issue 35): `pd-stitch probe
# --engine sglang` against the colocated server and the router, streamed and
# not, rows checked for rows no engine produces. One turn: a second turn's
# prompt hits the prefill's radix cache (its prefix's rows computed in the
# first turn's forward, another batch shape), and probe found one layer of
# one prompt position differing from the colocated server's, which runs
# without the cache (see the colocated server's flags above): numerical
# noise, which probe classified as such (scattered), not a stitch.
say "pd-stitch probe"
"$cli_bin" probe --engine sglang --colocated "http://127.0.0.1:$port_colo" --pd "http://127.0.0.1:$port_router" \
    --config "$model/config.json" --row-shape 3x2 --requests 16 --prompt-len 2..230 --max-tokens 8 \
    --turns 1 --stream both --concurrency 1 --timeout 120 --quiet

# The full-context check (issue 43): three-turn episodes, each assembled
# (pd_stitch::episode) from the colocated answers and from the router's, and
# held to the forward of its whole token sequence as one prompt to the
# colocated server (one token, its own cache_salt), position by position;
# every turn asked in full, then every turn after the first as a delta
# (routed_experts_start_len = L - 1). A boundary or prefill-sourced
# difference, a refused turn or an error fails the step; decode-sourced
# differences are counted and printed (--seed 9's episode 11 has one: the
# decode's row of a completion position differs from a fresh prefill's in
# one layer, on some machines), and so are recomputed ones: a prompt
# position whose row the colocated server gives again when asked the turn's
# prompt alone (on an AMD CPU, --seed 9's episode 2: position 155 differs in
# one layer between its 224-token first prompt and the longer prompts that
# repeat it, the forward's included). The requests' own comparison may show such a
# position as scattered noise between the two deployments (the P/D prefill recomputes it
# over its radix-cached prefix, as the decode did, where the colocated
# server computes the whole prompt), as the one-turn run above explains, so
# its line is held to no other class. Twelve episodes a run, streamed and
# not: well under a minute each here.
full_context() { # label probe-args...
    local label=$1 file="$out/probe-full-context-$1.txt" started=$SECONDS
    shift
    "$cli_bin" probe --engine sglang --colocated "http://127.0.0.1:$port_colo" --pd "http://127.0.0.1:$port_router" \
        --config "$model/config.json" --row-shape 3x2 --requests 12 --seed 9 --prompt-len 2..230 --max-tokens 8 \
        --turns 3 --full-context "$@" --stream both --concurrency 1 --timeout 120 --quiet > "$file" || true
    cat "$file"
    say "probe --full-context ($label) took $((SECONDS - started)) s; decode-sourced differences: $(sed -n 's/^full context.* decode-sourced \([0-9]*\),.*/\1/p' "$file"); recomputed: $(sed -n 's/^full context.* recomputed \([0-9]*\),.*/\1/p' "$file")"
    grep -q ' 0 with wrong rows, 0 error(s); boundary 0, whole-rows 0, scattered [0-9]*, missing 0, diverged 0;' "$file" \
        || { echo "== sglang: probe --full-context ($label): a request's difference other than scattered noise, a wrong row or an error" >&2; exit 1; }
    grep -q '^full context.*, 0 failed, 0 error(s); [0-9]* position(s) compared: boundary 0, decode-sourced [0-9]*, recomputed [0-9]*, scattered 0, refused 0, diverged 0;' "$file" \
        || { echo "== sglang: probe --full-context ($label): a boundary or prefill-sourced difference, a refused turn or an error" >&2; exit 1; }
}
say "pd-stitch probe --full-context"
full_context full
full_context delta --delta
say "passed"
