#!/usr/bin/env bash
# CI of the Python package: from a clean clone, a fresh venv, the test
# dependencies from PyPI, `pip install ./python` exactly as a user runs it,
# then the pytest suite. Run from anywhere; .ci/run calls it.
#
# The tests build the Rust binaries they run (the `pd-stitch` command and the
# mock backends) with cargo in the repository's target/ when needed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${PD_STITCH_PY_VENV:-}" ]; then
    venv="$PD_STITCH_PY_VENV"
else
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    venv="$scratch/venv"
fi
echo "== python/ci.sh: venv $venv (at ${SECONDS}s)"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r python/requirements-test.txt

echo "== pip install ./python (at ${SECONDS}s)"
"$venv/bin/python" -m pip install --disable-pip-version-check ./python

echo "== pytest python/tests (at ${SECONDS}s)"
status=0
(cd python && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests) || status=$?
if [ "$status" -eq 5 ]; then
    echo "python/ci.sh: pytest collected no tests" >&2
    exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

# The benchmark still runs and still compares equal outputs (small inputs,
# few runs: its figures here mean nothing).
echo "== python/benches/bench.py --quick (at ${SECONDS}s)"
(cd python && "$venv/bin/python" benches/bench.py --quick)
echo "== python/ci.sh done in ${SECONDS}s"
exit "$status"
