"""Importing runtimes quietly: no telemetry, no C-level prints on stdout.

- ONNX Runtime records telemetry events (a device id and a queue of events in
  ``~/.cache/Microsoft/DeveloperTools/.onnxruntime/``) from the moment it is imported, unless
  ``ORT_DISABLE_TELEMETRY=1`` is set *before* the import; ``disable_telemetry_events()`` after the
  import comes too late for those files. :func:`no_ort_telemetry` sets the variable (children
  inherit it) and, if ONNX Runtime was already imported by someone else, still stops its events.
- MNN prints ``The device supports: i8sdot:0, ...`` with C ``printf`` when imported (LiteRT builds
  that bundle the same code print it too, without a newline). :class:`CaptureStdout` points file
  descriptor 1 at a temporary file around such calls, so a ``--json`` caller's stdout stays one
  JSON object and a command's first line is its own.

Python 3.7 syntax, stdlib only (this module ships in the agent).
"""

import os
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from typing import Literal


def no_ort_telemetry() -> None:
    """Keep ONNX Runtime's telemetry off in this process and the processes it starts; call before ``import
    onnxruntime``."""
    os.environ["ORT_DISABLE_TELEMETRY"] = "1"
    ort = sys.modules.get("onnxruntime")
    disable = getattr(ort, "disable_telemetry_events", None)
    if disable is not None:  # imported before us: its files may exist, but no further events are recorded
        try:
            disable()
        except Exception:
            pass


def _flush_c_stdio() -> None:
    """Flush C stdio buffers, so text a library printf'd lands where fd 1 points *now*."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # no libc handle (Windows): nothing buffered there to flush
        pass


_CAPTURE_LOCK = threading.RLock()  # fd 1 is process-wide: one capture at a time (nesting in a thread is fine)


class CaptureStdout(object):
    """Point file descriptor 1 at a temporary file while a runtime's C/C++ code may print, then restore it.

    ``text`` holds what was printed; with ``echo=True`` it is echoed on stderr (fallback notes a user should
    see); ``echo=False`` keeps it only in ``text`` (import banners). stdout keeps only what Python writes there.
    """

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo
        self.text = ""
        self._saved: Optional[int] = None
        self._tmp: Any = None

    def __enter__(self) -> "CaptureStdout":
        _CAPTURE_LOCK.acquire()
        try:
            sys.stdout.flush()
        except Exception:
            pass
        _flush_c_stdio()
        try:
            self._tmp = tempfile.TemporaryFile()
            self._saved = os.dup(1)
            os.dup2(self._tmp.fileno(), 1)
        except OSError:  # no usable fd 1 (a daemon without stdout): nothing to protect
            if self._saved is not None:
                os.close(self._saved)
            self._saved = None
        return self

    def __exit__(self, *exc: Any) -> "Literal[False]":
        if self._saved is not None:
            _flush_c_stdio()
            os.dup2(self._saved, 1)
            os.close(self._saved)
            self._saved = None
            self._tmp.seek(0)
            self.text = self._tmp.read().decode("utf-8", "replace")
            if self.echo and self.text.strip():
                try:
                    sys.stderr.write(self.text if self.text.endswith("\n") else self.text + "\n")
                    sys.stderr.flush()
                except Exception:
                    pass
        if self._tmp is not None:
            self._tmp.close()
            self._tmp = None
        _CAPTURE_LOCK.release()
        return False
