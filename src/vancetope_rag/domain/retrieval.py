"""Which hits a query returns: argument checks, the ``minScore`` threshold, the per-document
cap and the over-fetch that keeps ``topK`` filled when the cap drops hits.

Pure rules, no I/O: the store's ranked answer comes in through a ``fetch`` callable, so the
whole policy is unit-tested without a store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vancetope_rag.domain.records import Hit
from vancetope_rag.errors import InvalidInputError

__all__ = ["MAX_TOP_K", "check_query_args", "collect_hits", "first_fetch", "select_hits"]

#: The largest ``topK`` a caller may ask for.
MAX_TOP_K = 1000

#: The store is never asked for more than ``20 * top_k + 1000`` candidates (see
#: :func:`collect_hits`): past that, a per-document cap is starving on a few huge documents
#: and returning fewer hits beats scanning the whole RAG.
_FETCH_FACTOR, _FETCH_SLACK = 20, 1000

Fetch = Callable[[int], Sequence[Hit]]


def check_query_args(top_k: object, min_score: object, max_per_doc: object) -> None:
    """Refuse query arguments that cannot be used, with a message naming the wire field.

    Raises:
        InvalidInputError: ``top_k`` is not an integer from 1 to :data:`MAX_TOP_K`,
            ``min_score`` is outside ``[-1, 1]`` or ``max_per_doc`` is not a positive integer.
    """
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"topK must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    if min_score is not None:
        if not isinstance(min_score, int | float) or isinstance(min_score, bool):
            raise InvalidInputError(f"minScore must be a number, got {min_score!r}")
        if not -1.0 <= float(min_score) <= 1.0:
            raise InvalidInputError(f"minScore must be between -1 and 1, got {min_score!r}")
    if max_per_doc is not None and (
        not isinstance(max_per_doc, int) or isinstance(max_per_doc, bool) or max_per_doc < 1
    ):
        raise InvalidInputError(f"maxPerDocument must be a positive integer, got {max_per_doc!r}")


def first_fetch(top_k: int, max_per_doc: int | None) -> int:
    """How many candidates to ask the store for first.

    Without a cap, exactly ``top_k``. With one, more: the cap drops a document's extra hits,
    and a tight cap (1) drops the most.
    """
    if max_per_doc is None:
        return top_k
    return top_k * max(2, 4 // max_per_doc) + 8


def select_hits(
    ranked: Sequence[Hit], top_k: int, min_score: float | None, max_per_doc: int | None
) -> list[Hit]:
    """The hits to return from candidates ranked best first.

    Stops at the first hit scoring below ``min_score`` (the rest score lower still), skips
    hits of a document that already has ``max_per_doc`` of them, and keeps at most ``top_k``.
    """
    hits: list[Hit] = []
    per_doc: dict[str, int] = {}
    for hit in ranked:
        if min_score is not None and hit.score < min_score:
            break
        if max_per_doc is not None:
            seen = per_doc.get(hit.source_ref, 0)
            if seen >= max_per_doc:
                continue
            per_doc[hit.source_ref] = seen + 1
        hits.append(hit)
        if len(hits) == top_k:
            break
    return hits


def _exhausted(
    ranked: Sequence[Hit], fetched: int, top_k: int, min_score: float | None, found: int
) -> bool:
    """Whether asking the store for more candidates cannot add a hit (or is not worth it)."""
    if found == top_k or len(ranked) < fetched:  # full, or the RAG has no more chunks
        return True
    if ranked and min_score is not None and ranked[-1].score < min_score:
        return True  # everything further down scores lower still
    return fetched >= _FETCH_FACTOR * top_k + _FETCH_SLACK


def collect_hits(
    fetch: Fetch, *, top_k: int, min_score: float | None = None, max_per_doc: int | None = None
) -> list[Hit]:
    """Up to ``top_k`` hits, best first, scoring at least ``min_score``, at most
    ``max_per_doc`` per source; over-fetches (4x per round) while the cap leaves ``top_k``
    unfilled and more candidates may help.

    Args:
        fetch: ``fetch(n)`` returns the store's ``n`` best candidates, best first.
        top_k: How many hits to return at most (checked by :func:`check_query_args`).
        min_score: Cosine threshold; ``None`` keeps every hit.
        max_per_doc: Cap per ``source_ref``; ``None`` for no cap.

    Returns:
        The selected hits, best first.
    """
    check_query_args(top_k, min_score, max_per_doc)
    fetched = first_fetch(top_k, max_per_doc)
    while True:
        ranked = fetch(fetched)
        hits = select_hits(ranked, top_k, min_score, max_per_doc)
        if _exhausted(ranked, fetched, top_k, min_score, len(hits)):
            return hits
        fetched *= 4
