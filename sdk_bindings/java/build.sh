#!/usr/bin/env bash
# Builds the Java SDK with the JDK alone (javac --release 8, jar): no Maven, no Gradle.
#
#   bash build.sh [--out DIR]          DIR/edgekit-sdk.jar (the SDK) and DIR/edgekit-sdk-contract.jar (the
#                                      contract runner); DIR defaults to build/ next to this script
#   bash build.sh [--out DIR] test     the same, then the unit tests (a main that exits non-zero on a failure)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/build"
run_tests=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$2"; shift 2 ;;
        test) run_tests=1; shift ;;
        *) echo "build.sh: unknown argument '$1' (use: build.sh [--out DIR] [test])" >&2; exit 2 ;;
    esac
done
for tool in javac jar java; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool not found: install a JDK (8 or newer, e.g. Debian's openjdk-17-jdk-headless)" >&2; exit 1; }
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"
# -XX:-UsePerfData: the JVM would otherwise leave /tmp/hsperfdata_USER behind.
javac() { command javac -J-XX:-UsePerfData "$@"; }
jar() { command jar -J-XX:-UsePerfData "$@"; }
# --release 8 compiles against the Java 8 API; JDKs older than 9 have no --release and take -source/-target.
if javac --release 8 -version >/dev/null 2>&1; then level=(--release 8); else level=(-source 8 -target 8); fi
flags=("${level[@]}" -encoding UTF-8 -Xlint:all -Xlint:-options -Werror)
sources() { find "$@" -name '*.java' | LC_ALL=C sort; }
mapfile -t main < <(sources "$here/src/main")
mapfile -t contract < <(sources "$here/src/contract")
mapfile -t tests < <(sources "$here/src/test")

rm -rf "$out/classes" "$out/contract-classes" "$out/test-classes" "$out/test-scratch"
mkdir -p "$out/classes" "$out/contract-classes" "$out/test-classes"
javac "${flags[@]}" -d "$out/classes" "${main[@]}"
jar cf "$out/edgekit-sdk.jar" -C "$out/classes" .
javac "${flags[@]}" -cp "$out/edgekit-sdk.jar" -d "$out/contract-classes" "${contract[@]}"
jar cfe "$out/edgekit-sdk-contract.jar" dev.edgekit.sdk.contract.ContractRunner -C "$out/contract-classes" .
if [ "$run_tests" = 1 ]; then
    # The tests are in the SDK's package (they reach its package-private parts): compiled with its sources.
    javac "${flags[@]}" -d "$out/test-classes" "${main[@]}" "${tests[@]}"
    rm -rf "$out/test-scratch"
    mkdir -p "$out/test-scratch"
    java -XX:-UsePerfData -ea -cp "$out/test-classes" dev.edgekit.sdk.SdkTest "$out/test-scratch"
fi
