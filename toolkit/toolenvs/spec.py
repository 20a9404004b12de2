"""What a tool environment is: its spec, and where environments live."""

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "edgekit-toolenv.json"


@dataclass(frozen=True)
class ToolEnvSpec:
    name: str  # "tflite", "paddlelite", "mindspore-lite"
    pythons: tuple  # acceptable interpreter versions, best first, e.g. ("3.12", "3.13")
    requirements: tuple  # every package of the environment, pinned ("name==version"), dependencies included
    check: str  # Python code run in the env after install; must exit 0
    purpose: str  # one line for doctor and messages
    env: tuple = ()  # extra environment variables for every run in this env: ((KEY, VALUE), ...)

    def digest(self) -> str:
        """Short hash of everything that shapes the environment (purpose excluded)."""
        d = asdict(self)
        d.pop("purpose")
        blob = json.dumps(d, sort_keys=True, default=list).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def root() -> Path:
    """Where tool environments live: ``$EDGEKIT_TOOLENV_DIR`` or ``~/.cache/edgekit/toolenvs``."""
    d = os.environ.get("EDGEKIT_TOOLENV_DIR")
    return Path(d).expanduser() if d else Path.home() / ".cache" / "edgekit" / "toolenvs"


def env_dir(spec: ToolEnvSpec) -> Path:
    return root() / f"{spec.name}-{spec.digest()}"


def _env_python(d: Path) -> Path:
    return d / "bin" / "python"
