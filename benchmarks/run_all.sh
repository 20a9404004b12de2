#!/usr/bin/env bash
# Run every edgekit benchmark; each prints a Markdown table on stdout and writes
# benchmarks/results/NAME.json. Progress goes to stderr.
#   bash benchmarks/run_all.sh            # all but fleet, ~30 minutes on 2 cores
#   bash benchmarks/run_all.sh precision  # only the named ones
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
names=("$@")
[ ${#names[@]} -eq 0 ] && names=(agent_overhead precision rebuild api_overhead field backends paddle_mindspore prune budget shrink)
# fleet.py needs root (network namespaces): run it by name
status=0
for name in "${names[@]}"; do
    echo "## ${name}"
    echo
    start=$(date +%s)
    rc=0
    "$PY" "benchmarks/${name}.py" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "**${name} failed** (exit ${rc})"
        status=1
    fi
    echo
    echo "_${name}: $(( $(date +%s) - start )) s_"
    echo
done
exit $status
