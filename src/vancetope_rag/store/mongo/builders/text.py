"""Pure builders for full-text (BM25) search on Atlas: the ``$search`` stages. (Servers
without Atlas Search rank with :func:`vancetope_rag.store.mongo.bm25.rank_bm25`.)

The ``$search`` stage puts the scope (tenant, project, RAG) and the chunk filters in the
``compound.filter`` clauses — inside the search, so they select before ranking and limiting —
never in a ``$match`` after it (which would filter an already-truncated answer and could leak
nothing but lose everything). The query goes in a ``must`` ``text`` clause over the chunk text,
reduced by the SQLite store's term rule first (:mod:`.mongo.builders.analysis`).
"""

from __future__ import annotations

from typing import Any

from vancetope_rag.store.inprocess.bm25 import QueryTerm
from vancetope_rag.store.mongo.builders.analysis import query_text
from vancetope_rag.store.mongo.builders.queries import HIT_FIELDS
from vancetope_rag.store.mongo.indexes import TEXT_FIELD, TEXT_INDEX
from vancetope_rag.store.port.shared import iter_filter
from vancetope_rag.store.port.types import ChunkFilter, RagScope


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
    scope: RagScope, terms: list[QueryTerm], limit: int, filters: ChunkFilter | None
) -> list[dict[str, Any]]:
    """``$search`` (scope and filters inside ``compound.filter``; the query's kept terms,
    :func:`~.analysis.text_terms`) → ``$limit`` → ``$project`` with ``searchScore``, never
    the vector: the cosines of the hits the dense search did not return come from one exact
    ``$vectorSearch`` on their ids (:func:`~.queries.build_cosine_pipeline`)."""
    return [
        {
            "$search": {
                "index": TEXT_INDEX,
                "compound": {
                    "filter": [*scope_clauses(scope), *filter_clauses(filters)],
                    "must": [{"text": {"query": query_text(terms), "path": TEXT_FIELD}}],
                },
            }
        },
        {"$limit": limit},
        {
            "$project": {
                **{name: 1 for name in HIT_FIELDS},
                "lexical": {"$meta": "searchScore"},
            }
        },
    ]


def build_text_probe_pipeline(
    scope: RagScope, source_ref: str, version: int, count: int
) -> list[dict[str, Any]]:
    """Which chunks of one chunk version of one source does ``$search`` see yet?"""
    clauses = [
        *scope_clauses(scope),
        {"equals": {"path": "sourceRef", "value": source_ref}},
        {"equals": {"path": "gen", "value": version}},
    ]
    return [
        {"$search": {"index": TEXT_INDEX, "compound": {"filter": clauses}}},
        {"$limit": max(1, count)},
        {"$project": {"_id": 1}},
    ]
