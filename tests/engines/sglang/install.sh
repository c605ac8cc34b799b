#!/usr/bin/env bash
# Makes (or reuses) the venv the SGLang engine harness runs in:
# target/engines/sglang/venv. SGLang 0.5.23 from PyPI with --no-deps on PyPI's
# torch 2.14.1 (its CUDA build, which runs on the CPU), then SGLang's own
# Requires-Dist read from the wheel's METADATA less the packages that only
# work on an NVIDIA GPU (deps.py), then what the CPU path needs besides.
# A stamp file names what was installed; the same stamp means nothing to do.
# Prints the time it took and the venv's size.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$root/target/engines/sglang"
venv="$out/venv"
SGLANG_VERSION=0.5.23
TORCH_VERSION=2.14.1
stamp_want="sglang==$SGLANG_VERSION torch==$TORCH_VERSION deps.py:$(sha256sum "$here/deps.py" | cut -c1-16) install.sh:$(sha256sum "$0" | cut -c1-16)"

# mooncake's transfer engine links libibverbs even when it moves bytes over TCP.
if ! ldconfig -p | grep -q 'libibverbs\.so\.1'; then
    echo "installing Debian's libibverbs1 (mooncake links it)"
    (apt-get install -y -q libibverbs1 >/dev/null 2>&1) || { apt-get update -q >/dev/null && apt-get install -y -q libibverbs1 >/dev/null; }
fi

if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp_want" ]]; then
    echo "venv reused: $venv ($(du -sh "$venv" | cut -f1))"
    exit 0
fi

start=$SECONDS
rm -rf "$venv"
mkdir -p "$out/wheels"
# SGLang 0.5.23 needs Python >= 3.11.
py=""
for cand in python3.11 python3.12 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then py="$cand"; break; fi
done
[[ -n "$py" ]] || { echo "no Python >= 3.11 found" >&2; exit 1; }
"$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install -U pip packaging

# torch first, so that nothing after it resolves another one.
"${pip[@]}" install "torch==$TORCH_VERSION"
"${pip[@]}" download --no-deps -d "$out/wheels" "sglang==$SGLANG_VERSION"
wheel="$(ls "$out"/wheels/sglang-"$SGLANG_VERSION"-*.whl | head -1)"
"${pip[@]}" install --no-deps "$wheel"
"$venv/bin/python" "$here/deps.py" "$wheel" > "$out/requirements.txt"
echo "SGLang's Requires-Dist kept: $(wc -l < "$out/requirements.txt") (dropped: $("$venv/bin/python" "$here/deps.py" --dropped "$wheel" | tr '\n' ' '))"
# torch pinned so that nothing replaces it; the CPU path's extras:
# mooncake's engine without CUDA (P/D over TCP), IPython and torchvision
# (imported by SGLang at start-up).
"${pip[@]}" install -r "$out/requirements.txt" "torch==$TORCH_VERSION" \
    mooncake-transfer-engine-non-cuda IPython torchvision
echo "$stamp_want" > "$venv/.stamp"
echo "venv installed in $((SECONDS - start)) s: $venv ($(du -sh "$venv" | cut -f1))"
