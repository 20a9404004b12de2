"""Progress for long work: a live display on a terminal, plain lines in a log, nothing when asked.

Long steps (creating a tool environment, calibration and fidelity runs, ``--budget`` searches,
``--auto`` grids, uploads, fleets) report through a :class:`Progress`. It is also a plain
``log(message)`` callable, so it goes wherever edgekit already takes ``log=``; code that wants
steps asks :func:`of` for one, which wraps a plain callable so that the same code serves both::

    prog = progress.of(log)                      # a Progress, or a plain log(message) wrapped
    with prog.step("calibrating", total=len(samples)) as step:
        for s in samples:
            ...
            step.advance()
    prog("a line of its own")                    # printed above the live display
    prog.detail(line)                            # the underlying tool's output: only with --verbose

Modes: ``live`` (rich's display on a terminal: spinner, bar, count, elapsed; ``NO_COLOR`` and
``TERM=dumb`` honoured), ``plain`` (a line when a step starts, at most one every
:data:`PLAIN_EVERY` seconds while it advances, and one when it ends if it took more than
:data:`SHOW_DONE_AFTER` seconds; for logs and pipes), ``quiet`` (nothing: ``--json``, ``-q``).
:meth:`Progress.for_command` picks one from a command's flags and its stream. A step is
thread-safe (``--auto`` builds in parallel).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

MODES = ("live", "plain", "quiet")
PLAIN_EVERY = 10.0  # seconds between two plain progress lines of one step
SHOW_DONE_AFTER = 2.0  # a step that took longer says when it finished (and how long it took)


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class Step:
    """One unit of long work; ``advance`` as parts finish. Use as a context manager (or call :meth:`done`)."""

    def __init__(self, progress: Progress, name: str, total: float | None, unit: str = "") -> None:
        self.progress = progress
        self.name = name
        self.total = total
        self.unit = unit  # "" (a count) or "bytes"
        self.completed: float = 0
        self.started = time.monotonic()
        self.finished = False
        self._task: Any = None  # the live display's task id
        self._last_line = self.started

    def count(self) -> str:
        """``3/10``, ``1.2 MB/4.0 MB``, or ``3`` without a total (nothing before the first part)."""
        fmt = _size if self.unit == "bytes" else (lambda n: f"{n:g}")
        if self.total is None:
            return fmt(self.completed) if self.completed else ""
        return f"{fmt(self.completed)}/{fmt(self.total)}"

    def advance(self, n: float = 1) -> None:
        self.update(completed=self.completed + n)

    def update(self, completed: float | None = None, total: float | None = None, name: str | None = None) -> None:
        """Set how much is done (and, if it changed, the total or the step's description)."""
        self.progress._update(self, completed, total, name)

    def done(self) -> None:
        if not self.finished:
            self.finished = True
            self.progress._finish(self)

    def __enter__(self) -> Step:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


class Progress:
    """Where long work reports: a terminal, a log, or nowhere (see the module docstring)."""

    def __init__(self, mode: str = "plain", stream: TextIO | None = None, verbose: bool = False) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: use one of {', '.join(MODES)}")
        self.stream = stream if stream is not None else sys.stderr
        self.verbose = verbose
        self._lock = threading.RLock()
        self._open: list[Step] = []
        self._live: Any = None  # rich.progress.Progress while a step is open
        self._console: Any = None
        if mode == "live":
            try:
                from rich.console import Console
            except ImportError:  # rich is a dependency of the host package; a stripped install still works
                mode = "plain"
            else:
                self._console = Console(file=self.stream, highlight=False, soft_wrap=True)
        self.mode = mode

    @classmethod
    def for_command(
        cls, json: bool = False, quiet: bool = False, verbose: bool = False, stream: TextIO | None = None
    ) -> Progress:
        """The progress a CLI command shows: none with ``--json``/``-q``, live on a terminal, plain lines otherwise."""
        stream = stream if stream is not None else sys.stderr
        if quiet:
            return cls("quiet", stream, verbose=False)
        if json:  # stdout holds the JSON object; with --verbose the tools' output still goes to stderr
            return cls("quiet", stream, verbose=verbose)
        return cls("live" if _is_terminal(stream) else "plain", stream, verbose=verbose)

    # -- lines ---------------------------------------------------------------------
    def __call__(self, message: str) -> None:
        self.log(message)

    def log(self, message: str) -> None:
        """A line of its own (above the live display)."""
        if self.mode == "quiet":
            return
        with self._lock:
            if self._console is not None:
                self._console.print(message, markup=False, highlight=False)
            else:
                self.stream.write(message + "\n")
                self.stream.flush()

    def detail(self, line: str) -> None:
        """A line of the underlying tool's own output: shown only with ``--verbose`` (with ``--json`` too, on
        stderr: the steps stay hidden)."""
        if not self.verbose:
            return
        if self.mode != "quiet":
            self.log(line)
        else:
            with self._lock:
                self.stream.write(line + "\n")
                self.stream.flush()

    @property
    def shows_steps(self) -> bool:
        """Whether steps are displayed at all (callers may then leave out per-item log lines)."""
        return self.mode != "quiet"

    # -- steps ---------------------------------------------------------------------
    def step(self, name: str, total: float | None = None, unit: str = "") -> Step:
        s = Step(self, name, total, unit)
        if self.mode == "quiet":
            return s
        with self._lock:
            self._open.append(s)
            if self.mode == "live":
                self._start_live()
                s._task = self._live.add_task(name, total=total, count=s.count())
            else:
                self.log(f"{name} ..." if total is None else f"{name} ({s.count()}) ...")
        return s

    def advance(self, n: float = 1) -> None:
        """Advance the step opened last (for callers that hold the Progress, not the Step)."""
        with self._lock:
            step = self._open[-1] if self._open else None
        if step is not None:
            step.advance(n)

    def transfer(self, name: str, done: int, total: int) -> None:
        """Bytes of one transfer (the ``progress(name, done, total)`` callback uploads take)."""
        with self._lock:
            step = next((s for s in self._open if s.unit == "bytes" and s.name == f"uploading {name}"), None)
            if step is None:
                if done >= total and total > 0:
                    return  # finished before it was seen (nothing to show)
                step = self.step(f"uploading {name}", total=total, unit="bytes")
        step.update(completed=done)
        if done >= total:
            step.done()

    def close(self) -> None:
        """End every open step and the live display."""
        with self._lock:
            for s in list(self._open):
                s.done()
            self._stop_live()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------
    def _start_live(self) -> None:
        if self._live is None:
            from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._live = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            self._live.start()

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _update(self, step: Step, completed: float | None, total: float | None, name: str | None) -> None:
        with self._lock:
            if completed is not None:
                step.completed = completed
            if total is not None:
                step.total = total
            if name is not None:
                step.name = name
            if self.mode == "live" and step._task is not None and self._live is not None:
                self._live.update(
                    step._task, completed=step.completed, total=step.total, description=step.name, count=step.count()
                )
            elif self.mode == "plain" and not step.finished:
                if step.total is not None and step.completed >= step.total:
                    return  # the done line follows
                now = time.monotonic()
                if now - step._last_line >= PLAIN_EVERY:
                    step._last_line = now
                    self.log(f"  {step.name}: {step.count()}")

    def _finish(self, step: Step) -> None:
        if self.mode == "quiet":
            return
        with self._lock:
            if step in self._open:
                self._open.remove(step)
            seconds = time.monotonic() - step.started
            if self.mode == "live" and self._live is not None:
                if step._task is not None:
                    self._live.remove_task(step._task)
                if not self._open:
                    self._stop_live()  # the command's own output follows on a clean terminal
            if seconds >= SHOW_DONE_AFTER:
                count = f" ({step.count()})" if step.total is not None else ""
                self.log(f"{step.name}: done{count} in {seconds:.1f} s")


class _LogProgress(Progress):
    """A plain ``log(message)`` callable seen as a Progress: lines go to it, steps are not shown."""

    def __init__(self, log: Callable[[str], Any] | None) -> None:
        super().__init__("quiet")
        self._log = log

    def log(self, message: str) -> None:
        if self._log is not None:
            self._log(message)


def of(log: Callable[[str], Any] | Progress | None) -> Progress:
    """The Progress behind a ``log=`` argument: itself if it is one, else a wrapper that passes lines to ``log``
    (and shows no steps, so code written for a Progress keeps a plain log's output unchanged)."""
    return log if isinstance(log, Progress) else _LogProgress(log)


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


__all__ = ["Progress", "Step", "of", "MODES"]
