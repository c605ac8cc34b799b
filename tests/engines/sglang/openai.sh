#!/usr/bin/env bash
# SGLang's OpenAI endpoints (/v1/completions, /v1/chat/completions) with
# routed experts, whole and streamed, on one colocated server that has a
# tokenizer: where do the rows and the counts come? (The harness's servers run
# with --skip-tokenizer-init, where these endpoints answer 500: run.sh.)
# Not part of CI; run after run.sh made the venv and the model:
#
#   tests/engines/sglang/openai.sh    # SGLANG_WRITE_FIXTURES=1 to save fixtures
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$root/target/engines/sglang"
py="$out/venv/bin/python"
[[ -x "$py" && -f "$out/model/config.json" ]] || { echo "run tests/engines/sglang/run.sh first (venv, model)" >&2; exit 1; }
mkdir -p "$out/logs"
"$py" "$here/openai_probe.py" tokenizer "$out/model" "$out/model-tokenizer"

port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PYTHONPATH="$here/pypath${PYTHONPATH:+:$PYTHONPATH}" SGLANG_USE_CPU_ENGINE=1 SGLANG_HOST_IP=127.0.0.1 OMP_NUM_THREADS=1
setsid "$py" -m sglang.launch_server --model-path "$out/model-tokenizer" --device cpu \
    --attention-backend torch_native --sampling-backend pytorch --enable-return-routed-experts \
    --disable-cuda-graph --page-size 1 --host 127.0.0.1 --port "$port" --max-total-tokens 4096 \
    > "$out/logs/openai.log" 2>&1 < /dev/null &
pgid=$!
stop() {
    local rc=$? t=$SECONDS
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 -- "-$pgid" 2>/dev/null; then kill -KILL -- "-$pgid" 2>/dev/null || true; echo "== openai: the server needed SIGKILL"; fi
    echo "== openai: server stopped in $((SECONDS - t)) s"
    exit "$rc"
}
trap stop EXIT
start=$SECONDS
until curl -sf -m 5 "http://127.0.0.1:$port/health" > /dev/null 2>&1; do
    kill -0 "$pgid" 2>/dev/null || { tail -n 40 "$out/logs/openai.log" >&2; exit 1; }
    ((SECONDS - start < ${SGLANG_HEALTH_TIMEOUT:-300})) || { echo "not healthy" >&2; tail -n 40 "$out/logs/openai.log" >&2; exit 1; }
    sleep 2
done
echo "== openai: healthy after $((SECONDS - start)) s"
fixtures=()
[[ "${SGLANG_WRITE_FIXTURES:-}" == 1 ]] && fixtures=("$root/tests/fixtures/engines/sglang")
"$py" "$here/openai_probe.py" probe "http://127.0.0.1:$port" "$out/answers" "${fixtures[@]+"${fixtures[@]}"}"
