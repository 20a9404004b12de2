"""Creating a tool environment (in a temporary sibling, renamed into place under a lock) and removing one."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import progress
from ..errors import BackendUnavailable
from .interpreters import _probe, find_python
from .lock import _Lock
from .packages import _adopt, _relocate, _unpinned, installed
from .spec import MARKER, ToolEnvSpec, _env_python, env_dir, root
from .status import state


def _stderr(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove_stale_tmp(env_name: str) -> list[str]:
    """Delete ``.ENV.tmp-PID`` directories whose creator is gone (killed creations). Call with ENV's lock held."""
    removed = []
    for x in glob.glob(str(root() / f".{env_name}.tmp-*")):
        pid = x.rsplit("-", 1)[-1]
        if pid.isdigit() and (int(pid) == os.getpid() or not _pid_alive(int(pid))):
            shutil.rmtree(x, ignore_errors=True)
            removed.append(x)
    return removed


_PROGRESS = re.compile(
    r"^(Collecting|Downloading|Using cached|Installing collected|Successfully installed|Building wheel)"
)


def _run_logged(
    cmd: list[str],
    log: Callable[[str], Any] | progress.Progress | None,
    tail: deque[str],
    env: dict[str, str] | None = None,
    step: progress.Step | None = None,
) -> int:
    """Run ``cmd``, keeping the last lines in ``tail``. Every line is a detail of ``log`` (shown with --verbose);
    pip's progress-like lines advance ``step`` (one per package collected) on a display that shows steps, and are
    logged as lines otherwise."""
    prog = progress.of(log)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL
    ) as proc:
        for line in proc.stdout:  # type: ignore[union-attr]
            line = line.rstrip()
            tail.append(line)
            prog.detail(line)
            what = _PROGRESS.match(line.strip())
            if not what:
                continue
            if step is not None and prog.shows_steps:
                if what.group(1) == "Collecting":
                    step.advance()
                elif what.group(1) == "Installing collected":
                    step.update(name=f"{step.name.split(':')[0]}: installing")
            elif log:
                log(f"  {line.strip()}")
        return proc.wait()


def ensure(spec: ToolEnvSpec, log: Callable[[str], Any] | None = print) -> str:
    """The environment's python executable; creates the environment first if missing or its spec changed.

    ``log=None`` still reports creation (minutes, once) and waiting for another process's creation on stderr.
    """
    log = log or _stderr
    d = env_dir(spec)
    py = _env_python(d)
    if state(spec)["ready"]:
        return str(py)
    with _Lock(root() / f".{d.name}.lock", waiting=log, what=f"the {spec.name} tool environment"):
        if state(spec)["ready"]:  # another process made it while we waited
            return str(py)
        for x in _remove_stale_tmp(d.name):
            log(f"removed {x}, left by an interrupted creation")
        if _adopt(spec, d, log):
            return str(py)
        base = find_python(spec)
        version = _probe(base)[1]  # type: ignore[index]  # find_python returned one that runs
        tmp = root() / f".{d.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log(f"creating the {spec.name} tool environment (Python {version}): {spec.purpose}")
        retry = f"edgekit backends install {spec.name}"
        t0 = time.monotonic()
        try:
            tail: deque[str] = deque(maxlen=25)
            if _run_logged([base, "-m", "venv", str(tmp)], None, tail) != 0:
                raise BackendUnavailable(
                    f"could not create a virtual environment with {base} (is its venv/ensurepip "
                    f"module installed?):\n  " + "\n  ".join(tail) + f"\nretry: {retry}"
                )
            tpy = str(_env_python(tmp))
            unpinned = []
            if spec.requirements:
                cmd = [
                    tpy,
                    "-m",
                    "pip",
                    "install",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--only-binary=:all:",
                    *spec.requirements,
                ]
                env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
                with progress.of(log).step(
                    f"{spec.name} tool environment: downloading", total=len(spec.requirements)
                ) as step:
                    rc = _run_logged(cmd, log, tail, env=env, step=step)
                if rc != 0:
                    raise BackendUnavailable(
                        f"installing the {spec.name} tool environment failed; pip said:\n  "
                        + "\n  ".join(tail)
                        + f"\nnothing was kept. Retry with `{retry}` (pip command: "
                        + " ".join(
                            ["python -m pip install --only-binary=:all:"] + [f"'{r}'" for r in spec.requirements]
                        )
                        + ")"
                    )
                unpinned = _unpinned(spec, installed(tpy) or {})
            tail.clear()
            r = subprocess.run(
                [tpy, "-I", "-c", spec.check], capture_output=True, text=True, env=dict(os.environ, **dict(spec.env))
            )
            if r.returncode != 0:
                lines = (r.stderr or r.stdout).strip().splitlines()[-15:]
                raise BackendUnavailable(
                    f"the {spec.name} tool environment installed but its check failed "
                    f"({spec.check!r}):\n  " + "\n  ".join(lines) + f"\nnothing was kept; retry: {retry}"
                )
            marker = {
                "name": spec.name,
                "digest": spec.digest(),
                "spec": asdict(spec),
                "python_version": version,
                "base_python": base,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "install_seconds": round(time.monotonic() - t0, 1),
                "unpinned": unpinned,
            }
            (tmp / MARKER).write_text(json.dumps(marker, indent=2, default=list))
            if d.exists():  # a leftover without a valid marker
                shutil.rmtree(d)
            os.rename(tmp, d)
            _relocate(d)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if unpinned:
            log(f"note: pip also installed packages the {spec.name} spec does not pin: {', '.join(unpinned)}")
        log(f"{spec.name} tool environment ready in {time.monotonic() - t0:.0f} s: {d}")
    return str(py)


def remove(spec: ToolEnvSpec) -> list[str]:
    """Delete every environment of ``spec.name`` (this spec's and older ones) and the temporary directories of killed
    creations. Returns the removed paths."""
    removed = []
    for x in sorted(glob.glob(str(root() / f"{spec.name}-*"))):
        p = Path(x)
        if p.is_dir() and re.fullmatch(re.escape(spec.name) + r"-[0-9a-f]{12}", p.name):
            with _Lock(root() / f".{p.name}.lock"):
                shutil.rmtree(p, ignore_errors=True)
            removed.append(str(p))
    names = {
        m.group(1)
        for m in (
            re.fullmatch(r"\.(" + re.escape(spec.name) + r"-[0-9a-f]{12})\.tmp-\d+", Path(x).name)
            for x in glob.glob(str(root() / f".{spec.name}-*.tmp-*"))
        )
        if m
    }
    for name in sorted(names):
        with _Lock(root() / f".{name}.lock"):
            removed += _remove_stale_tmp(name)
    return removed
