"""The real ``edgekit`` command, run in a subprocess."""

import json
import os
import subprocess
import sys
from typing import Any, Mapping, Optional


def run_cli(
    *args: Any, check: Optional[int] = None, env: Optional[Mapping[str, str]] = None
) -> subprocess.CompletedProcess:
    """Run ``python -m edgekit ARGS``; with ``check``, assert its exit status (the output goes into the message)."""
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run(
        [sys.executable, "-m", "edgekit", *map(str, args)], capture_output=True, text=True, env=e, timeout=600
    )
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def one_json(stdout: str) -> Any:
    """The one JSON document a ``--json`` command printed."""
    return json.loads(stdout)
