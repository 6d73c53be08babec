"""BM25 ranking in process, for MongoDB without Atlas Search (mongomock, a plain server): the
lexical query reads the scope's chunks and ranks them here, with the tokens of the Atlas text
analyzer's twin (:func:`vancetope_rag.store.mongo.builders.analysis.analyze`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from vancetope_rag.store.mongo.builders.analysis import analyze


def rank_bm25(
    rows: Sequence[Mapping[str, Any]],
    tokens: Sequence[str],
    top_k: int,
    *,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[tuple[Mapping[str, Any], float]]:
    """``(row, BM25 score)`` of the ``top_k`` rows whose ``text`` holds one of the query's
    ``tokens``, best first, with the statistics of ``rows`` (a scope's chunks): full-text
    ranking where the store has no index for it (MongoDB without Atlas Search)."""
    terms = set(tokens)
    if not rows or not terms:
        return []
    counts = [Counter(analyze(r.get("text"))) for r in rows]
    lengths = [sum(c.values()) for c in counts]
    avg = (sum(lengths) / len(lengths)) or 1.0
    df = {t: sum(1 for c in counts if c[t]) for t in terms}
    n = len(rows)
    scored: list[tuple[Mapping[str, Any], float]] = []
    for row, tf, length in zip(rows, counts, lengths, strict=True):
        score = 0.0
        for t in terms:
            if tf[t]:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * length / avg))
        if score > 0:
            scored.append((row, score))
    scored.sort(key=lambda t: -t[1])
    return scored[:top_k]
