"""Other Python interpreters the agent is tested on, found where edgekit's tool environments look for them:
``pythonX.Y`` on PATH, then ``$PYENV_ROOT`` (or ``~/.pyenv``), then uv's installs (``$UV_PYTHON_INSTALL_DIR``)."""

from typing import Optional

from edgekit import toolenvs
from edgekit.errors import BackendUnavailable


def find_python(version: str) -> Optional[str]:
    """The real executable of a Python ``version`` ("3.7") that runs here, or None."""
    spec = toolenvs.ToolEnvSpec(
        name=f"python{version}", pythons=(version,), requirements=(), check="", purpose="the agent's tests"
    )
    try:
        return toolenvs.find_python(spec)
    except BackendUnavailable:
        return None


def missing(version: str) -> str:
    """Why a test that needs Python ``version`` cannot run."""
    return (
        f"needs a Python {version} interpreter: none on PATH (python{version}), under $PYENV_ROOT or ~/.pyenv, "
        f"or uv's installs (`pyenv install {version}` provides one)"
    )
