#!/usr/bin/env bash
# The whole test suite, set-up included: bash tests/run.sh [pytest args]
#
# A run writes only under .cache/ in this checkout (ignored by git): its own HOME, XDG directories, TMPDIR and
# pytest's temporary directory live in .cache/tests/runs/PID and go when the run passes (tests/conftest.py,
# tests/harness/isolation.py); what takes minutes to make (tool environments, the arm64 userland, the Python 3.7
# agent environment) is kept in .cache/tests/keep; pip's cache for the set-up is .cache/pip.
# `bash tests/leaves_nothing.sh` proves that nothing lands in HOME or /tmp.
# Before the tests: ruff (lint and format) and mypy, configured in pyproject.toml (caches in .cache/ruff and
# .cache/mypy); any finding fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/.cache/pip}"
tmp="$PWD/.cache/tests/setup-tmp-$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
TMPDIR="$tmp" bash scripts/bootstrap.sh --test

export RUFF_CACHE_DIR="$PWD/.cache/ruff" MYPY_CACHE_DIR="$PWD/.cache/mypy"
check() {
    local name="$1"
    shift
    if ! "$@"; then
        echo "tests/run.sh: $name failed ($*); fix its findings before the tests run" >&2
        exit 1
    fi
}
check "ruff check" .venv/bin/ruff check .
check "ruff format --check" .venv/bin/ruff format --check .
check "mypy" .venv/bin/python -m mypy toolkit converters on_device_agent sdk_bindings/python

.venv/bin/python -m pytest --durations=25 "$@"
