#!/usr/bin/env bash
# Run the test suite (or a command given after --) and list every file it wrote in HOME or /tmp; exit 1 if any.
#   bash tests/leaves_nothing.sh [-- COMMAND...]     (default: .venv/bin/python -m pytest -m "not e2e" -q)
# The command runs in a private mount namespace where HOME and /tmp are overlays (as root): what it writes there
# lands in the overlays' upper directories, which are listed afterwards, so files written at the same time by
# other programs on this machine are not counted, and nothing the command writes there reaches the real HOME or
# /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${1:-}" == "--" ]] && shift
[[ $# -gt 0 ]] || set -- .venv/bin/python -m pytest -m "not e2e" -q

if [[ -z "${EDGEKIT_LEAVES_WORK:-}" ]]; then
    mkdir -p .cache
    work=$(mktemp -d -p "$PWD/.cache" leaves.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    rc=0
    EDGEKIT_LEAVES_WORK=$work unshare -m --propagation private bash "$0" -- "$@" || rc=$?
    exit "$rc"
fi

work=$EDGEKIT_LEAVES_WORK
home=$(cd "$HOME" && pwd -P)
for d in home tmp; do mkdir -p "$work/$d/upper" "$work/$d/work"; done
mount -t overlay overlay -o "lowerdir=$home,upperdir=$work/home/upper,workdir=$work/home/work" "$home"
mount -t overlay overlay -o "lowerdir=/tmp,upperdir=$work/tmp/upper,workdir=$work/tmp/work" /tmp
rc=0
"$@" || rc=$?
left=$( (cd "$work/home/upper" && find . -mindepth 1 | sed "s|^\.|$home|"; cd "$work/tmp/upper" && find . -mindepth 1 | sed "s|^\.|/tmp|") | LC_ALL=C sort)
if [[ -n "$left" ]]; then
    echo "written in HOME ($home) or /tmp:" >&2
    echo "$left" >&2
    exit 1
fi
echo "nothing written in $home or /tmp (the command exited $rc)"
exit "$rc"
