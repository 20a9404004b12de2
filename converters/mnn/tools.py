"""MNN's converter and quantizer: its compiled ``_tools`` module, run in child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from types import ModuleType

# The child that runs MNN's compiled tools: _tools only, never MNN.tools (see the module docstring).
_TOOL_MAIN = (
    "import json, sys\n"
    "import _tools\n"
    "tool = {'convert': _tools.mnnconvert, 'quantize': _tools.mnnquant}[sys.argv[1]]\n"
    "tool(json.loads(sys.argv[2]))\n"
)


CONVERT_FLAGS = {
    "fp32": [],
    "fp16": ["--fp16"],
    "int8-weights": ["--weightQuantBits", "8"],
    "int4-weights": ["--weightQuantBits", "4"],
}


_PROGRESS = (
    "ComputeFeatureRange",
    "CollectFeatureDistribution",
    "ComputeADMM",
    "ProcessCalibrationFiles",
    "quantize with EMA",
    "computeDistance",
)


def _runner_module() -> ModuleType:
    from edgekit_agent.runners import mnn

    return mnn


def _tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def _start_tool(kind: str, argv: Sequence[str], cwd: str | Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", _TOOL_MAIN, kind, json.dumps([str(a) for a in argv])],
        cwd=str(cwd),
        env=_tool_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _finish_tool(proc: subprocess.Popen[bytes], timeout: float = 3600) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -9, f"timed out after {timeout} s"
    return proc.returncode, out.decode("utf-8", "replace").replace("\r", "\n")


def _tail(output: str, n: int = 8) -> str:
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith(_PROGRESS)]
    return "\n    ".join(lines[-n:]) or "(no output)"


def _run_tool(kind: str, argv: Sequence[str], cwd: str | Path, expect: str | Path) -> str:
    from edgekit.errors import ConversionError

    code, out = _finish_tool(_start_tool(kind, argv, cwd))
    # _tools returns True even when it failed (e.g. "Model File Does Not Exist!"): the file decides.
    if code != 0 or not Path(expect).is_file() or Path(expect).stat().st_size == 0:
        why = (
            f"exit {code}" + (" (killed by a signal: the tool crashed)" if code < 0 else "")
            if code != 0
            else f"it exited 0 but wrote no {Path(expect).name}"
        )
        raise ConversionError(
            f"MNN {'converter' if kind == 'convert' else 'quantization tool'} failed ({why}):\n    {_tail(out)}"
        )
    return out
