"""Stopping the agents that tests start, so none outlives its test."""

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple, Union


def stop_agent(python: str, root: Union[str, Path]) -> None:
    """Stop the agent serving ``root`` (whichever zipapp started it: the state file names its pid)."""
    pyz = Path(root) / "agent" / "edgekit-agent.pyz"
    if not pyz.exists():
        from edgekit import agent_package

        pyz, _ = agent_package.build(Path(os.environ["EDGEKIT_CACHE_DIR"]) / "agent")
    subprocess.run([python, str(pyz), "stop", "--root", str(root)], capture_output=True, timeout=30)


class AgentRoots:
    """Device roots handed to one test: ``roots("dev")`` is ``base/dev``; :meth:`stop_all` stops every agent
    serving one of them (with the interpreter that runs it on that device)."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self._given: List[Tuple[str, Path]] = []

    def __call__(self, name: str = "device", python: str = sys.executable) -> Path:
        root = self.base / name
        self._given.append((str(python), root))
        return root

    def stop_all(self) -> None:
        for python, root in reversed(self._given):
            stop_agent(python, root)
        self._given.clear()


def options_it_takes(python: str, pyz: Union[str, Path], options: List[str]) -> List[str]:
    """``options`` (``--flag VALUE`` pairs) less the ones the agent in ``pyz`` does not take.

    Only when ``EDGEKIT_AGENT_TREE`` builds the agent from another checkout (an older agent, attacked by
    ``scripts/attacks_vs_old_agent.py``): an agent without a bound runs with what it has. Otherwise every
    option is passed, so a wrong one still fails the test.
    """
    if not os.environ.get("EDGEKIT_AGENT_TREE"):
        return list(options)
    usage = subprocess.run([python, str(pyz), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    pairs = [options[i : i + 2] for i in range(0, len(options), 2)]
    return [x for flag, value in pairs if flag in usage for x in (flag, value)]
