"""Shared by the ONNX Runtime backend's modules."""

import contextlib
import io
import logging
from typing import Iterator


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """ORT's tools print progress to stdout; keep edgekit's stdout (and --json) clean."""
    buf = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(buf):
            yield buf
    finally:
        logging.disable(logging.NOTSET)
