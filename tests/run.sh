#!/usr/bin/env bash
# The whole test suite, set-up included: bash tests/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test
exec .venv/bin/python -m pytest "$@"
