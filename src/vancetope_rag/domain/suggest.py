"""The "did you mean …?" of a misspelt name: a setting key, a provider, a project, a
metadata key."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name``: those that differ from it only in case, else
    difflib's close matches (none when nothing is close)."""
    known = list(dict.fromkeys(names))
    same = [k for k in known if k.lower() == name.lower() and k != name]
    if same:
        return same[:n]  # only the case differs: that is the one meant
    close = difflib.get_close_matches(name, known, n=n, cutoff=0.5)
    lowered = {k.lower(): k for k in known}
    close += [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=n)]
    return list(dict.fromkeys(same + [c for c in close if c != name]))[:n]


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """``did you mean 'x' or 'y'? `` (with its trailing blank), or ``""`` when nothing is
    close."""
    close = close_names(name, names)
    return f"did you mean {' or '.join(close)}? " if close else ""
