"""The C SDK in the contract suite: its library and runner built with make into a build folder."""

import pathlib
import shutil
import subprocess
from typing import List

from harness.paths import ROOT

SDK = ROOT / "sdk_bindings" / "c"


def make(build_dir: pathlib.Path, *targets: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``make -C sdk_bindings/c BUILD=build_dir TARGETS`` (raises RuntimeError naming a missing gcc or make)."""
    for tool in ("gcc", "make"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: the C SDK builds with gcc and make (Debian: build-essential)")
    build_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["make", "-C", str(SDK), f"BUILD={build_dir}", "CC=gcc", *targets],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def command(build_dir: pathlib.Path) -> List[str]:
    """Builds the C SDK and its contract runner into ``build_dir``; the argv prefix that runs the runner."""
    proc = make(build_dir, "runner")
    if proc.returncode != 0:
        raise RuntimeError("building the C SDK's contract runner failed:\n" + (proc.stdout + proc.stderr)[-4000:])
    return [str(build_dir / "contract_runner")]
