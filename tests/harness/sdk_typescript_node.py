"""The TypeScript SDK's contract runner with its Node-only transport (``edgekit-sdk/node``: ``node:http`` with a
kept-alive pool) instead of the global fetch: the same build as ``sdk_typescript``."""

from pathlib import Path
from typing import List

from .sdk_typescript import command as fetch_command


def command(build_dir: Path) -> List[str]:
    node, runner = fetch_command(build_dir)
    return [node, runner, "--transport", "node"]
