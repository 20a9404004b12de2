""" "Did you mean" for names a user types: commands, flags, profiles, backends, models."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices closest to ``word``: the best, and those nearly as close (not every loose resemblance)."""
    scored = []
    for c in {str(c) for c in choices}:
        m = difflib.SequenceMatcher(None, str(word), c)
        if m.real_quick_ratio() >= 0.6 and m.quick_ratio() >= 0.6 and m.ratio() >= 0.6:
            scored.append((m.ratio(), c))
    scored.sort(key=lambda x: (-x[0], x[1]))
    return [c for r, c in scored[:n] if r >= scored[0][0] - 0.05]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else an empty string."""
    found = close_matches(word, choices)
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
