#!/usr/bin/env bash
# Prepare a fresh Debian/Ubuntu machine for edgekit: a virtual environment in .venv with
# edgekit and its extras, and (with --test) the Debian packages the test suite starts.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [[ "${1:-}" == "--test" ]]; then
    # The tests start their own sshd on loopback (and one per emulated device in network namespaces),
    # drive the real adb client against a device-side test daemon, run the agent on an arm64 Debian
    # userland under qemu, render the field report in headless Chromium, build each client SDK, serve pulled
    # bundles from nginx with desired state from Mosquitto (each test starts its own on a loopback port), and start
    # a throwaway PostgreSQL server for the fleet's field store.
    missing=()
    [[ -x /usr/sbin/sshd ]] || missing+=(openssh-server)
    command -v chromium >/dev/null || missing+=(chromium fonts-dejavu-core)
    command -v adb >/dev/null || missing+=(adb)
    command -v busybox >/dev/null || missing+=(busybox)
    command -v ip >/dev/null || missing+=(iproute2)
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
    # the SDKs' own builds and tests: C (gcc, make), Java (javac, jar), TypeScript (node, npm)
    command -v gcc >/dev/null || missing+=(gcc libc6-dev)
    command -v make >/dev/null || missing+=(make)
    command -v javac >/dev/null || missing+=(default-jdk-headless)
    command -v node >/dev/null || missing+=(nodejs)
    command -v npm >/dev/null || missing+=(npm)
    # pull delivery: a static store (nginx) and an MQTT broker (Mosquitto), each started by its test on loopback
    [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
    [[ -x /usr/sbin/mosquitto ]] || missing+=(mosquitto)
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql-15)
    if [[ ${#missing[@]} -gt 0 ]]; then
        echo "installing ${missing[*]} for the test suite" >&2
        SUDO=""; [[ "$(id -u)" == 0 ]] || SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi

if [[ ! -x .venv/bin/python ]]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[all,test]' 2>&1 | grep -v "^WARNING: Location" >&2 || true
.venv/bin/python -c "import edgekit, onnxruntime, paramiko" || { echo "edgekit install failed" >&2; exit 1; }
if [[ "${1:-}" == "--test" ]]; then
    # PyTorch for the framework-intake tests (edgekit[torch]), pinned to the CPU build this kind of machine
    # carries (an unpinned torch resolves to a CUDA build of several GB); the host package does not need it
    .venv/bin/python -c "import torch, onnxscript" 2>/dev/null \
        || .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" "onnxscript>=0.2" 2>&1 \
        | grep -v "^WARNING: Location" >&2 || true
    .venv/bin/python -c "import torch, onnxscript" || { echo "installing edgekit[torch] for the tests failed" >&2; exit 1; }
fi
