"""An arm64 Debian userland to run the agent on, under qemu user-mode emulation.

``ensure_rootfs()`` builds it once into ``~/.cache/edgekit-tests/arm64-rootfs`` (or
``$EDGEKIT_ARM64_ROOTFS``) and reuses it after (a marker file says it is complete):

* ``mmdebstrap --variant=extract --architectures=arm64`` unpacks Debian's python3,
  python3-numpy and libstdc++6 without running any arm64 maintainer script, so no
  binfmt_misc registration is needed (nothing machine-wide changes); the two
  library links that update-alternatives would have made (libblas/liblapack) are made
  here;
* ONNX Runtime's aarch64 wheel for the rootfs Python (``pip download --platform
  manylinux2014_aarch64 --only-binary=:all:``) is unzipped into its
  /usr/local/lib/python3.X/dist-packages.

``python_wrapper(path)`` writes a script that runs the rootfs Python under
``qemu-aarch64-static -L ROOTFS``. qemu's ``-0`` sets argv[0] to the script itself, so
the agent's ``sys.executable`` is the script and the children it starts (its
supervisor, server and fresh benchmark processes) are emulated too.

Needs: mmdebstrap and qemu-user-static (Debian packages), network access to a Debian
mirror and to PyPI, once.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ["python3", "python3-numpy", "libstdc++6"]
MARKER = ".edgekit-rootfs-complete"
QEMU = "qemu-aarch64-static"


class RootfsUnavailable(RuntimeError):
    """The arm64 userland is not there and cannot be built here; the message says why."""


def rootfs_dir():
    return Path(os.environ.get("EDGEKIT_ARM64_ROOTFS") or Path.home() / ".cache" / "edgekit-tests" / "arm64-rootfs")


def _marker(root):
    try:
        return json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _run(cmd, what, timeout=1800, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RootfsUnavailable(f"{what} failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-1500:]}")
    return p


def _emulated(root, *args, timeout=300):
    return subprocess.run(
        [QEMU, "-L", str(root), str(root / "usr/bin/python3"), *args], capture_output=True, text=True, timeout=timeout
    )


def ensure_rootfs(log=None):
    """The ready rootfs directory and what it holds (built if missing); raise RootfsUnavailable."""
    log = log or (lambda m: None)
    root = rootfs_dir()
    info = _marker(root)
    if info:
        return root, info
    missing = [t for t in ("mmdebstrap", QEMU) if not shutil.which(t)]
    if missing:
        raise RootfsUnavailable(f"{', '.join(missing)} not installed: apt-get install mmdebstrap qemu-user-static")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / (root.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait for that one
        info = _marker(root)
        if info:
            return root, info
        work = root.parent / (root.name + ".building")
        shutil.rmtree(work, ignore_errors=True)
        try:
            info = _build(work, log)
            shutil.rmtree(root, ignore_errors=True)
            work.rename(root)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return root, info


def _build(work, log):
    log(f"mmdebstrap {SUITE} arm64 ({', '.join(PACKAGES)}) -> {work}")
    _run(
        [
            "mmdebstrap",
            "--variant=extract",
            "--architectures=arm64",
            "--include=" + ",".join(PACKAGES),
            SUITE,
            str(work),
        ],
        "mmdebstrap (needs a reachable Debian mirror)",
    )
    libdir = work / "usr/lib/aarch64-linux-gnu"
    for lib in ("blas/libblas.so.3", "lapack/liblapack.so.3"):
        if (libdir / lib).exists() and not (libdir / Path(lib).name).exists():
            (libdir / Path(lib).name).symlink_to(lib)
    p = _emulated(work, "-c", "import sys, numpy; print('%d.%d' % sys.version_info[:2], numpy.__version__)")
    if p.returncode != 0:
        raise RootfsUnavailable(f"the arm64 python3 does not run under {QEMU}: {p.stderr.strip()[-800:]}")
    pyver, numpy_version = p.stdout.split()
    wheels = work.parent / (work.name + "-wheels")
    shutil.rmtree(wheels, ignore_errors=True)
    log(f"pip download onnxruntime for manylinux2014_aarch64, Python {pyver}")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux2014_aarch64",
            "--python-version",
            pyver,
            "-d",
            str(wheels),
            "onnxruntime",
        ],
        "pip download of the aarch64 onnxruntime wheel (needs PyPI)",
    )
    try:
        wheel = next(wheels.glob("onnxruntime-*.whl"))
        site = work / f"usr/local/lib/python{pyver}/dist-packages"
        site.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
    p = _emulated(work, "-c", "import platform, onnxruntime; print(platform.machine(), onnxruntime.__version__)")
    if p.returncode != 0:
        raise RootfsUnavailable(f"onnxruntime does not import in the arm64 rootfs: {p.stderr.strip()[-800:]}")
    machine, ort_version = p.stdout.split()
    info = {
        "suite": SUITE,
        "python": pyver,
        "numpy": numpy_version,
        "onnxruntime": ort_version,
        "machine": machine,
        "wheel": wheel.name,
    }
    (work / MARKER).write_text(json.dumps(info) + "\n")
    log(f"arm64 rootfs ready: {info}")
    return info


def python_wrapper(path, root=None, bare=False):
    """Write an executable script at ``path`` that runs the arm64 rootfs Python; return its path.

    ``bare``: the Python runs with ``-S`` (no site-packages or dist-packages), so neither numpy nor
    onnxruntime imports: a device Python with nothing installed."""
    root = Path(root or rootfs_dir())
    qemu = shutil.which(QEMU)
    path = Path(path)
    flags = " -S" if bare else ""
    path.write_text(f'#!/bin/sh\nexec {qemu} -L {root} -0 "$0" {root}/usr/bin/python3{flags} "$@"\n')
    path.chmod(0o755)
    return path
