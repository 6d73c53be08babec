"""The token budget of the ``<rag-context>`` block: cut it to ``maxTokens`` by dropping the
lowest-ranked excerpts whole, and only when the best excerpt alone is over the budget, by
cutting that excerpt at a sentence boundary (at a word boundary if one sentence is too long).

Pure rules, no I/O: the caller passes the renderer and the token counter, and the budget is
checked on the rendered block itself (the template's own text counts), so the result is never
over the budget whatever the template.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from vancetope_rag.domain.records import Hit

__all__ = ["ELLIPSIS", "fit_to_budget"]

#: Appended to an excerpt cut short, so the model knows the text goes on.
ELLIPSIS = " …"

#: A sentence ends at ., ! or ? (optionally followed by a quote or bracket) before whitespace,
#: or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")

Render = Callable[[Sequence[Hit]], "str | None"]
Count = Callable[[str], int]


def _largest(n: int, fits: Callable[[int], bool]) -> int:
    """The largest ``i`` in ``1..n`` with ``fits(i)`` (0 if none), by bisection: the size of a
    block grows with what it holds. Every answer is checked, so a template that breaks that
    assumption can only cost excerpts, never exceed the budget."""
    lo, hi, best = 1, n, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _pieces(text: str) -> list[str]:
    """The text's sentences, each with the whitespace that follows it."""
    pieces, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        pieces.append(text[start : m.end()])
        start = m.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def fit_to_budget(
    hits: Sequence[Hit], render: Render, count: Count, max_tokens: int
) -> tuple[str | None, list[Hit]]:
    """The block for ``hits`` within ``max_tokens``, and the hits it shows.

    Args:
        hits: The hits in rank order (best first).
        render: Renders a block for some hits (None when it renders nothing).
        count: Counts a text's tokens.
        max_tokens: The budget.

    Returns:
        ``(block, shown)``: the block of the longest prefix of ``hits`` that fits; if not even
        the first hit fits, the block of the first hit with its text cut at the last sentence
        (else word) boundary that fits, marked with :data:`ELLIPSIS`; ``(None, [])`` when not
        even a few words fit.
    """

    def fitting(shown: Sequence[Hit]) -> str | None:
        block = render(shown)
        return block if block is not None and count(block) <= max_tokens else None

    whole = fitting(hits)
    if whole is not None or not hits:
        return whole, list(hits)
    kept = _largest(len(hits) - 1, lambda k: fitting(hits[:k]) is not None)
    if kept:
        return fitting(hits[:kept]), list(hits[:kept])
    for split in (_pieces, _words):
        short = _longest_cut(hits[0], split(hits[0].text), fitting)
        if short is not None:
            return fitting([short]), [short]
    return None, []


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*", text)


def _longest_cut(
    hit: Hit, pieces: Sequence[str], fitting: Callable[[Sequence[Hit]], str | None]
) -> Hit | None:
    """``hit`` with the most leading ``pieces`` of its text whose block fits, marked as cut."""

    def cut(k: int) -> Hit:
        return dataclasses.replace(hit, text="".join(pieces[:k]).rstrip() + ELLIPSIS)

    n = _largest(len(pieces), lambda k: fitting([cut(k)]) is not None)
    return cut(n) if n else None
