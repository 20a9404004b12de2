"""Isolated tool environments for converters that cannot live in the user's Python.

Some converters need another interpreter version or dependencies that would clash with
the user's environment (onnx2tf 2.x needs Python >= 3.12; Paddle Lite's wheels stop at
3.10). A backend declares what it needs as a :class:`ToolEnvSpec`; :func:`ensure`
creates a virtual environment for it on first use, under :func:`root`, in a directory
named by the spec's name and a short hash of the spec (so a changed spec gets a new
environment). A spec pins every package the environment holds (its dependencies
included), and pip installs wheels only. Creation happens in a temporary sibling directory
that is renamed into place only after pip and the spec's ``check`` succeeded, under a file
lock, so a failed or concurrent creation never leaves a half-made environment behind (the
temporary directories of killed creations are removed by the next one). When a spec changes
but an existing environment of the same name already holds exactly the new pins, it is
adopted (renamed and re-marked) instead of being installed again.

Converter scripts run in an environment with :func:`run_tool`: a standalone file that
reads ``request.json`` and writes ``result.json`` in a work directory.

The package, one job per module: :mod:`.spec` (the spec and where environments live),
:mod:`.interpreters` (finding a Python), :mod:`.status` (what exists), :mod:`.lock`,
:mod:`.packages` (what an environment holds; adoption), :mod:`.create` (creation and removal),
:mod:`.run` (running a tool) and :mod:`.listing` (``edgekit backends``).
"""

# every name the single module had stays importable from here (tests use _run_logged, _Lock, _summary)
from .create import _run_logged, ensure, remove  # noqa: F401
from .interpreters import find_python
from .listing import backends, install_backend, remove_backend
from .lock import _Lock  # noqa: F401
from .packages import installed  # noqa: F401
from .run import run_tool
from .spec import MARKER, ToolEnvSpec, env_dir, root  # noqa: F401
from .status import _summary, state  # noqa: F401

__all__ = [
    "ToolEnvSpec",
    "root",
    "find_python",
    "state",
    "ensure",
    "run_tool",
    "remove",
    "env_dir",
    "backends",
    "install_backend",
    "remove_backend",
]
