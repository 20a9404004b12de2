"""What the tests share: the project's paths, the CLI in a subprocess, agent clean-up, and the emulated devices
and servers in the submodules (``harness.sshd``, ``harness.adbd``, ``harness.serialdev``, ``harness.netns``,
``harness.arm64``) and the small models tests build (``harness.models``, ``harness.digits``)."""

from harness.agents import AgentRoots, stop_agent
from harness.cli import one_json, run_cli
from harness.paths import EXAMPLES, PPOCR, PPOCR_SHA256, ROOT

__all__ = ["AgentRoots", "EXAMPLES", "PPOCR", "PPOCR_SHA256", "ROOT", "one_json", "run_cli", "stop_agent"]
