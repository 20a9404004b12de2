#!/usr/bin/env bash
# Run the test suite (or a command given after --) and list every file it left in HOME or the system's temporary
# directory; exit 1 if there is one. Usage: bash tests/leaves_nothing.sh [-- COMMAND...]   (default: the fast
# suite, `.venv/bin/python -m pytest -m "not e2e" -q`). Other programs writing there at the same time show up too.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
sys_tmp=/tmp
[[ "${1:-}" == "--" ]] && shift
[[ $# -gt 0 ]] || set -- .venv/bin/python -m pytest -m "not e2e" -q
listing() {  # every path under HOME and /tmp, this checkout excluded
    find "$HOME" "$sys_tmp" -xdev -path "$repo" -prune -o -print 2>/dev/null | LC_ALL=C sort
}
mkdir -p .cache
before=$(mktemp -p .cache leaves-before.XXXXXX)
after=$(mktemp -p .cache leaves-after.XXXXXX)
trap 'rm -f "$before" "$after"' EXIT
listing >"$before"
rc=0
"$@" || rc=$?
listing >"$after"
new=$(LC_ALL=C comm -13 "$before" "$after")
if [[ -n "$new" ]]; then
    echo "left behind in HOME ($HOME) or $sys_tmp:" >&2
    echo "$new" >&2
    exit 1
fi
echo "nothing left in $HOME or $sys_tmp (the command exited $rc)"
exit "$rc"
