"""A test run writes only under the project's own ``.cache/tests`` (ignored by git), never into the user's HOME
or the system's temporary directory.

* ``.cache/tests/runs/PID`` holds what one run makes: its HOME and XDG directories (so libraries that write under
  ``~/.cache`` or ``~/.config`` write there), its TMPDIR and pytest's base temporary directory. A run removes its
  directory when it passes; after a failure it stays for inspection until the next run starts, which removes the
  directories of every run that is no longer running (runs at the same time in one checkout do not collide).
* ``.cache/tests/keep`` holds what is worth keeping between runs because it takes minutes to make: the tool
  environments (``EDGEKIT_TOOLENV_DIR``), the arm64 userland and the Python 3.7 agent environment.

``EDGEKIT_TEST_CACHE`` moves both; an ``EDGEKIT_TOOLENV_DIR`` or ``EDGEKIT_ARM64_ROOTFS`` already set is honoured.
Interpreters installed under the user's pyenv or uv stay reachable: their roots are pinned before HOME changes.
"""

import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Optional

from harness.paths import ROOT

_XDG = {"XDG_CACHE_HOME": ".cache", "XDG_CONFIG_HOME": ".config", "XDG_DATA_HOME": ".local/share"}
_XDG_STATE = ("XDG_STATE_HOME", ".local/state")


def cache_root() -> Path:
    """The project-local directory every test run writes under."""
    return Path(os.environ.get("EDGEKIT_TEST_CACHE") or ROOT / ".cache" / "tests")


def kept(name: str) -> Path:
    """A directory kept between runs (``.cache/tests/keep/NAME``) for things that take minutes to make."""
    return cache_root() / "keep" / name


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_finished_runs(runs: Path) -> None:
    """Remove what earlier runs left (they failed, or were killed); a run still going keeps its directory."""
    if not runs.is_dir():
        return
    for d in runs.iterdir():
        if not (d.name.isdigit() and _running(int(d.name))):
            shutil.rmtree(d, ignore_errors=True)


class RunDirs:
    """The environment of one test run: enter with :meth:`enter`, leave with :meth:`leave`."""

    def __init__(self, base: Optional[Path] = None) -> None:
        self.base = Path(base) if base else cache_root() / "runs" / str(os.getpid())
        self.home = self.base / "home"
        self.tmp = self.base / "tmp"
        self.basetemp = self.base / "pytest"
        self._saved: Dict[str, Optional[str]] = {}

    def _set(self, key: str, value: str) -> None:
        self._saved.setdefault(key, os.environ.get(key))
        os.environ[key] = value

    def _default(self, key: str, value: str) -> None:
        if not os.environ.get(key):
            self._set(key, value)

    def enter(self) -> None:
        real_home = Path.home()
        _remove_finished_runs(self.base.parent)
        if self.base.exists():
            shutil.rmtree(self.base)
        for d in (self.home, self.tmp):
            d.mkdir(parents=True)
        # Interpreters the tests look for stay where the user installed them.
        if (real_home / ".pyenv").is_dir():
            self._default("PYENV_ROOT", str(real_home / ".pyenv"))
        if (real_home / ".local/share/uv/python").is_dir():
            self._default("UV_PYTHON_INSTALL_DIR", str(real_home / ".local/share/uv/python"))
        self._default("EDGEKIT_TOOLENV_DIR", str(kept("toolenvs")))
        self._default("EDGEKIT_ARM64_ROOTFS", str(kept("arm64-rootfs")))
        self._set("HOME", str(self.home))
        for key, sub in (*_XDG.items(), _XDG_STATE):
            self._set(key, str(self.home / sub))
        self._set("TMPDIR", str(self.tmp))
        tempfile.tempdir = None  # recomputed from TMPDIR on next use

    def leave(self, remove: bool) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()
        tempfile.tempdir = None
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)
            try:
                self.base.parent.rmdir()  # when no other run is going
            except OSError:
                pass
