"""User metrics: ``--metric module:function``, a callable (reference outputs, candidate outputs, labels) -> score.

Higher is better. The record keeps the callable's name and the sha256 of its module's source, so a report says
exactly which code judged the build.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .spec import TaskError

MetricFn = Callable[[Any, Any, Any], float]


@dataclass(frozen=True)
class UserMetric:
    """A loaded user metric: its ``module:function`` name, the sha256 of its source and the callable."""

    name: str
    sha256: str
    fn: MetricFn

    def __call__(self, reference: Any, candidate: Any, labels: Any = None) -> float:
        try:
            value = float(self.fn(reference, candidate, labels))
        except Exception as exc:  # the user's code: say whose it is
            raise TaskError(f"metric {self.name} raised {type(exc).__name__}: {exc}") from exc
        if not math.isfinite(value):
            raise TaskError(f"metric {self.name} returned {value}; it must return a finite number (higher is better)")
        return value

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "sha256": self.sha256}


def load_metric(text: str) -> UserMetric:
    """Import ``module:function`` (a module on sys.path, or ``path/to/file.py:function``)."""
    module_name, sep, func_name = text.rpartition(":")
    if not sep or not module_name or not func_name.isidentifier():
        raise TaskError(f"--metric {text!r}: expected module:function or path/to/file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise TaskError(f"--metric {text!r}: {path} does not exist")
            spec = importlib.util.spec_from_file_location(f"edgekit_user_metric_{path.stem}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except TaskError:
        raise
    except Exception as exc:
        raise TaskError(f"--metric {text!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from exc
    fn = getattr(module, func_name, None)
    if not callable(fn):
        raise TaskError(f"--metric {text!r}: {module_name} has no function {func_name}")
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        raise TaskError(
            f"--metric {text!r}: the source of {module_name} cannot be read (needed for its sha256)"
        ) from None
    return UserMetric(text, hashlib.sha256(source.encode("utf-8")).hexdigest(), fn)
