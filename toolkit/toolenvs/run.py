"""Running a standalone converter script in a tool environment: ``request.json`` in, ``result.json`` out."""

import json
import os
import re
import signal
import subprocess
import threading
from collections import deque
from pathlib import Path
from typing import Any

from .. import progress
from ..errors import ConversionError
from .spec import ToolEnvSpec


def run_tool(
    spec: ToolEnvSpec,
    script: str | Path,
    request: dict[str, Any],
    workdir: str | Path,
    timeout: float = 1800,
    log: Any = None,
) -> dict[str, Any]:
    """Run a standalone converter script in the environment: ``ENVPY -I script request.json result.json``.

    stderr lines stream to ``log`` (to a :class:`edgekit.progress.Progress`'s ``detail``: shown with
    ``--verbose``); stdout goes to ``<script>.stdout.log`` in ``workdir``.
    Returns the parsed result.json; a failure or timeout raises ConversionError.
    """
    # creation progress on the caller's display, or on stderr even when the tool's own chatter is not wanted
    from edgekit import toolenvs  # the package's ensure: replacing toolenvs.ensure (a test) replaces it here

    py = toolenvs.ensure(spec, log=log if isinstance(log, progress.Progress) else None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    req, res = workdir / "request.json", workdir / "result.json"
    req.write_text(json.dumps(request, indent=2, default=str))
    if res.exists():
        res.unlink()
    step = request.get("step") or Path(script).stem
    env = dict(os.environ, **dict(spec.env))
    out_path = workdir / f"{Path(script).stem}.stdout.log"
    tail: deque[str] = deque(maxlen=30)
    sink = log.detail if isinstance(log, progress.Progress) else log
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [py, "-I", str(script), str(req), str(res)],
            cwd=str(workdir),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        assert proc.stderr is not None  # stderr=PIPE

        def pump() -> None:
            for line in proc.stderr:  # type: ignore[union-attr]
                line = line.rstrip()
                tail.append(line)
                if sink:
                    sink(line)

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc, t)
            raise ConversionError(
                f"{spec.name}: step {step!r} did not finish within {timeout} s and was stopped; "
                f"last output:\n  " + "\n  ".join(list(tail)[-10:])
            ) from None
        except BaseException:  # Ctrl-C, SIGTERM turned into an exception, ...: the tool (its own session) stops too
            _killpg(proc, t)
            raise
        t.join(30)
        proc.stderr.close()

    def _said() -> str:
        lines = list(tail)
        if not lines:
            try:
                lines = out_path.read_text(errors="replace").splitlines()[-20:]
            except OSError:
                pass
        return f"{key_line(lines)}\n  last output:\n  " + "\n  ".join(lines[-20:])

    more = "\n(edgekit build --verbose shows all of it)"
    if rc < 0:  # killed by a signal: the tool crashed (a segfault in a converter's native code, the OOM killer)
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else f"signal {-rc}"
        raise ConversionError(
            f"{spec.name}: step {step!r} crashed ({name}; a fault of the converter, not of your options: another "
            f"backend or version may take the model) at: {_said()}{more}"
        )
    if rc != 0:
        raise ConversionError(f"{spec.name}: step {step!r} failed (exit {rc}): {_said()}{more}")
    try:
        return json.loads(res.read_text())
    except (OSError, ValueError) as e:
        raise ConversionError(f"{spec.name}: step {step!r} wrote no readable result ({e}): {_said()}{more}") from None


_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b:?")
_NOISE = re.compile(r"^[\s^~]*$")


def key_line(lines: list[str]) -> str:
    """The line of a tool's output that says why it failed: the last exception line of a Python traceback (a
    tool script's own ``SystemExit`` message included), else the last line that is not a caret/tilde marker."""
    text = [ln.strip() for ln in lines if not _NOISE.match(ln)]
    for line in reversed(text):
        if _EXCEPTION.match(line):
            return line
    return text[-1] if text else "no output"


def _killpg(proc: subprocess.Popen, reader: threading.Thread) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    reader.join(5)
    proc.stderr.close()  # type: ignore[union-attr]
