""" "Did you mean" for names a user types: commands, flags, profiles, backends, models."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(str(word), [str(c) for c in choices], n=n, cutoff=0.7)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a choice is close to ``word``, else an empty string."""
    found = close_matches(word, choices)
    if not found:
        return ""
    return " (did you mean " + " or ".join(repr(f) for f in found) + "?)"
