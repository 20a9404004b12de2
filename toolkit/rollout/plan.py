"""A rollout's plan: waves as a share or a count of the group's devices, and which devices each wave takes.

Devices are ranked by a stable hash of the rollout id and the device name, so the same rollout always picks the
same devices in the same order (after a restart of the host side too), and two rollouts spread over different ones.
Waves are cumulative: ``1%,10%,50%,100%`` means the first wave takes 1 % of the group (at least one device), the
second brings it to 10 %, and so on.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import EdgekitError

_WAVE = re.compile(r"^(\d+(?:\.\d+)?)(%?)$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class WaveSpec:
    """One wave's size: ``value`` percent of the group (``percent``) or ``value`` devices in all so far."""

    value: float
    percent: bool

    def size(self, total: int) -> int:
        """How many of ``total`` devices the rollout has reached once this wave is in (at least 1)."""
        n = math.ceil(total * self.value / 100.0 - 1e-9) if self.percent else int(self.value)
        return max(1, min(total, n))

    def __str__(self) -> str:
        return f"{self.value:g}%" if self.percent else f"{int(self.value)}"


def parse_waves(text: str) -> list[WaveSpec]:
    """``"1%,10%,50%,100%"`` or ``"1,5,100%"`` -> wave sizes; an error says what is wrong and what to write."""
    parts = [p.strip() for p in text.split(",")] if text and text.strip() else []
    if not parts:
        raise EdgekitError("--waves is empty: give wave sizes such as 1%,10%,50%,100% or device counts 1,5,20")
    waves = []
    for p in parts:
        m = _WAVE.match(p)
        if not m:
            raise EdgekitError(f"bad wave size {p!r} in --waves {text!r}: use a percentage (10%) or a device count (5)")
        value, percent = float(m.group(1)), bool(m.group(2))
        if value <= 0 or (percent and value > 100) or (not percent and value != int(value)):
            raise EdgekitError(
                f"bad wave size {p!r} in --waves {text!r}: a percentage is above 0 and at most 100%, "
                "a count a positive whole number"
            )
        waves.append(WaveSpec(value, percent))
    return waves


def parse_duration(text: str, flag: str = "--min-soak") -> float:
    """``30m``, ``1h``, ``90s``, ``1.5s``, ``500ms`` (a bare number is seconds) -> seconds."""
    m = _DURATION.match(text.strip()) if isinstance(text, str) else None
    if not m:
        raise EdgekitError(f"bad {flag} {text!r}: use a number with ms, s, m, h or d (e.g. 30m)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_fraction(text: str, flag: str) -> float:
    """``10%`` -> 0.10, ``0.5%`` -> 0.005; a bare number is a percentage too."""
    t = text.strip().rstrip("%") if isinstance(text, str) else ""
    try:
        value = float(t)
    except ValueError:
        raise EdgekitError(f"bad {flag} {text!r}: give a percentage such as 10%") from None
    if value < 0 or math.isnan(value):
        raise EdgekitError(f"bad {flag} {text!r}: a percentage cannot be negative")
    return value / 100.0


def rank(names: Sequence[str], rollout_id: str) -> list[str]:
    """``names`` in the rollout's stable order: by sha256 of the rollout id and the name."""
    return sorted(names, key=lambda n: (hashlib.sha256(f"{rollout_id}\0{n}".encode()).hexdigest(), n))


def assign(names: Sequence[str], rollout_id: str, waves: Sequence[WaveSpec]) -> list[list[str]]:
    """The devices each wave adds, in wave order. A wave that would add no device (3 devices, waves 1%,10%) adds
    none and is judged on nothing new: such waves are dropped by :func:`effective_waves` before a rollout starts."""
    if not names:
        raise EdgekitError("the rollout's group has no devices")
    order = rank(names, rollout_id)
    out, reached = [], 0
    for w in waves:
        upto = max(reached, w.size(len(order)))
        out.append(order[reached:upto])
        reached = upto
    if reached < len(order):
        out[-1].extend(order[reached:])  # the last wave takes everyone: a rollout ends on the whole group
    return out


def effective_waves(names: Sequence[str], rollout_id: str, waves: Sequence[WaveSpec]) -> list[list[str]]:
    """:func:`assign` less the waves that add no device."""
    return [w for w in assign(names, rollout_id, waves) if w]


__all__ = ["WaveSpec", "assign", "effective_waves", "parse_duration", "parse_fraction", "parse_waves", "rank"]
