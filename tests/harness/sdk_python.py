"""The Python SDK's contract runner (the reference the other SDKs are compared with)."""

from __future__ import annotations

import sys
from pathlib import Path

RUNNER = Path(__file__).resolve().parent.parent / "sdk_runners" / "python_runner.py"


def command(build_dir: Path) -> list[str]:
    return [sys.executable, str(RUNNER)]
