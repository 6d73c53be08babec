"""Pure builders for full-text (BM25) search on MongoDB: Atlas ``$search`` and a client-side
fallback for servers without Atlas Search.

The ``$search`` stage puts the scope (tenant, project, RAG) and the chunk filters in the
``compound.filter`` clauses — inside the search, so they select before ranking and limiting —
never in a ``$match`` after it (which would filter an already-truncated answer and could leak
nothing but lose everything). The text goes in a ``must`` ``text`` clause over the chunk text.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from vancetope_rag.store.mongo_indexes import TEXT_FIELD, TEXT_INDEX, VECTOR_FIELD
from vancetope_rag.store.mongo_queries import HIT_FIELDS
from vancetope_rag.store.shared import iter_filter
from vancetope_rag.store.types import ChunkFilter, RagScope

_WORD = re.compile(r"\w+", re.UNICODE)


def scope_clauses(scope: RagScope) -> list[dict[str, Any]]:
    return [
        {"equals": {"path": "tenantId", "value": scope.tenant_id}},
        {"equals": {"path": "projectId", "value": scope.project_id}},
        {"equals": {"path": "ragId", "value": scope.rag_id}},
    ]


def filter_clauses(filters: ChunkFilter | None) -> list[dict[str, Any]]:
    """A ChunkFilter as ``$search`` operators on ``token`` fields (unknown keys raise)."""
    clauses: list[dict[str, Any]] = []
    for key, negated, values in iter_filter(filters):
        if len(values) == 1:
            op: dict[str, Any] = {"equals": {"path": key, "value": values[0]}}
        else:
            op = {"in": {"path": key, "value": values}}
        clauses.append({"compound": {"mustNot": [op]}} if negated else op)
    return clauses


def build_text_search_pipeline(
    scope: RagScope, text: str, limit: int, filters: ChunkFilter | None
) -> list[dict[str, Any]]:
    """``$search`` (scope and filters inside ``compound.filter``) → ``$limit`` → ``$project``
    with the stored vector (the caller computes each hit's cosine) and ``searchScore``."""
    return [
        {
            "$search": {
                "index": TEXT_INDEX,
                "compound": {
                    "filter": [*scope_clauses(scope), *filter_clauses(filters)],
                    "must": [{"text": {"query": text, "path": TEXT_FIELD}}],
                },
            }
        },
        {"$limit": limit},
        {
            "$project": {
                **{name: 1 for name in HIT_FIELDS},
                VECTOR_FIELD: 1,
                "lexical": {"$meta": "searchScore"},
            }
        },
    ]


def build_text_probe_pipeline(
    scope: RagScope, source_ref: str, gen: int, count: int
) -> list[dict[str, Any]]:
    """Which chunks of one generation of one source does ``$search`` see yet?"""
    clauses = [
        *scope_clauses(scope),
        {"equals": {"path": "sourceRef", "value": source_ref}},
        {"equals": {"path": "gen", "value": gen}},
    ]
    return [
        {"$search": {"index": TEXT_INDEX, "compound": {"filter": clauses}}},
        {"$limit": max(1, count)},
        {"$project": {"_id": 1}},
    ]


def words(text: object) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore), like the standard analyzer."""
    return _WORD.findall(text.lower()) if isinstance(text, str) else []


def rank_bm25(
    rows: Sequence[Mapping[str, Any]], query: str, top_k: int, *, k1: float = 1.2, b: float = 0.75
) -> list[tuple[Mapping[str, Any], float]]:
    """``(row, BM25 score)`` of the ``top_k`` rows whose ``text`` shares a word with ``query``,
    best first: the fallback when the server has no Atlas Search (statistics over ``rows``)."""
    terms = set(words(query))
    if not rows or not terms:
        return []
    counts = [Counter(words(r.get(TEXT_FIELD))) for r in rows]
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
