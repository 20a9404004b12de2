"""An exclusive lock between processes creating, adopting or removing the same tool environment."""

import time
from pathlib import Path
from typing import Any, Callable


class _Lock:
    """An exclusive lock on ``path`` (flock; msvcrt where there is no fcntl). ``waiting(msg)`` is told when another
    process holds it."""

    def __init__(self, path: Path, waiting: Callable[[str], Any] | None = None, what: str = "") -> None:
        self.path, self.waiting, self.what = path, waiting, what

    def __enter__(self) -> "_Lock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.path, "a+")
        try:
            import fcntl
        except ImportError:  # Windows
            import msvcrt

            self._unlock = lambda: msvcrt.locking(self.f.fileno(), msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]  # Windows only
            self.f.seek(0)
            while True:
                try:
                    msvcrt.locking(self.f.fileno(), msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
                    return self
                except OSError:
                    self._tell_waiting()
                    time.sleep(1)
        self._unlock = lambda: fcntl.flock(self.f.fileno(), fcntl.LOCK_UN)
        try:
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._tell_waiting()
            fcntl.flock(self.f.fileno(), fcntl.LOCK_EX)
        return self

    def _tell_waiting(self) -> None:
        if self.waiting:
            self.waiting(
                f"waiting for another edgekit creating {self.what or 'this tool environment'} (lock {self.path})"
            )
            self.waiting = None

    def __exit__(self, *exc: object) -> None:
        self._unlock()
        self.f.close()
