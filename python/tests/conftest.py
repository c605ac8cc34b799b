"""Shared fixtures: the repository's paths, its committed example pairs, and
the Rust binaries some tests run (the `pd-stitch` command and the mock
backends), built once with cargo when they are not there yet."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO = PYTHON_DIR.parent
PAIRS = REPO / "tests" / "fixtures" / "pairs"

sys.path.insert(0, str(PYTHON_DIR / "benches"))
sys.path.insert(0, str(PYTHON_DIR / "examples"))


def cargo_binary(env, name, build_args):
    """The binary named by `env`, or target/debug/`name` of the repository,
    built with `cargo build build_args` first (cargo does nothing when it is
    up to date)."""
    if os.environ.get(env):
        return Path(os.environ[env])
    subprocess.run(["cargo", "build", "--quiet", *build_args], cwd=REPO, check=True, timeout=1800)
    return REPO / "target" / "debug" / name


@pytest.fixture(scope="session")
def pd_stitch_cli():
    return cargo_binary("PD_STITCH_CLI", "pd-stitch", ["--bin", "pd-stitch", "--all-features"])


@pytest.fixture(scope="session")
def mock_backend():
    return cargo_binary("PD_STITCH_MOCK_BACKEND", "examples/mock_backend", ["--example", "mock_backend", "--all-features"])


def pair(name):
    """The committed pair `name` as (prefill bytes, decode bytes)."""
    return (PAIRS / name / "prefill.json").read_bytes(), (PAIRS / name / "decode.json").read_bytes()


def loads(body):
    return body if isinstance(body, dict) else json.loads(body)
