"""Backends and their tool environments, for ``edgekit backends`` (list, install, remove)."""

from collections.abc import Callable
from typing import Any

from ..errors import BackendUnavailable
from .create import ensure, remove
from .spec import ToolEnvSpec
from .status import state


def backends() -> list[dict[str, Any]]:
    """Every backend: usable here or not, its precisions and its tool environment's state (if it has one)."""
    from edgekit import converters

    rows = []
    for name, be in sorted(converters.all_backends().items()):
        try:
            ok, detail = be.availability()
        except Exception as e:  # report, don't crash: the listing must always answer
            ok, detail = False, f"availability check failed: {e}"
        spec = getattr(be, "toolenv", None)
        rows.append(
            {
                "name": name,
                "ok": ok,
                "detail": detail if ok else be.explain_unavailable(detail),
                "precisions": list(be.precisions),
                "refused": dict(be.row.refused),  # listed, but not built by this release (the reason)
                "toolenv": state(spec) if spec else None,
            }
        )
    return rows


def _backend_spec(name: str) -> ToolEnvSpec:
    from edgekit import converters

    if name == "tensorflow":  # not a backend: TensorFlow model intake (edgekit.intake_tf)
        from ..intake_tf import TOOLENV

        return TOOLENV
    if name == "torch":  # not a backend: PyTorch file intake without torch in this Python (edgekit.intake_torch_env)
        from ..intake_torch_env import TOOLENV as TORCH

        return TORCH
    if name == "paddle3":  # not a backend: Paddle 3 JSON (PIR) model intake (edgekit.intake_paddle)
        from ..intake_paddle import PADDLE3

        return PADDLE3
    be = converters.get(name)
    if getattr(be, "toolenv", None) is None:
        raise BackendUnavailable(
            f"backend {name!r} has no tool environment: its runtime lives in this Python "
            f"({be.install_hint or 'see edgekit doctor'})"
        )
    return be.toolenv


def install_backend(name: str, log: Callable[[str], Any] | None = print) -> dict[str, Any]:
    """Create (or verify) the tool environment of backend ``name``; returns its state."""
    ensure(_backend_spec(name), log=log)
    return state(_backend_spec(name))


def remove_backend(name: str) -> list[str]:
    """Delete the tool environments of backend ``name``; returns the removed paths."""
    return remove(_backend_spec(name))
