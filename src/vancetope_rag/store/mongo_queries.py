"""Pure builders for the MongoDB chunk store: filters, ``$vectorSearch`` pipelines, ranking, codecs.

No I/O here; :mod:`vancetope_rag.store.mongo_chunks` sends what these functions build and
passes what the server answers back through them. Everything is tested without a database.

Scores: Atlas reports cosine similarity as ``(1 + cos) / 2``; :func:`atlas_score_to_cosine`
turns it back into the cosine similarity the port (and the SQLite adapter) returns.
Duplicates: while ``replace_source`` swaps a source, a chunk id may have a staged and a live
copy; reads keep one per chunk id (:func:`latest_per_chunk_id`, :func:`atlas_hits`,
:func:`rank_rows_exact`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.errors import InvalidInputError
from vancetope_rag.store.mongo_indexes import vector_path
from vancetope_rag.store.shared import checked_vector, foreign_chunk_error, iter_filter
from vancetope_rag.store.types import ChunkFilter, RagScope

#: Atlas caps ``numCandidates`` (and so ``limit``) at 10,000; larger ``top_k`` rank exactly.
MAX_NUM_CANDIDATES = 10_000

#: Fields a query returns besides the vector.
HIT_FIELDS = ("chunkId", "tenantId", "projectId", "ragId", "sourceRef", "kind", "path", "text",
              "metadata", "seq")  # fmt: skip


# -- filters ---------------------------------------------------------------------------------


def scope_match(scope: RagScope) -> dict[str, Any]:
    """``find`` filter of one RAG's chunks."""
    return {"tenantId": scope.tenant_id, "projectId": scope.project_id, "ragId": scope.rag_id}


def translate_filters(filters: ChunkFilter | None) -> dict[str, Any]:
    """A :data:`ChunkFilter` as an MQL filter valid in both ``find`` and ``$vectorSearch``.

    ``{"kind": "summary", "!path": ["a.md", "b.md"]}`` →
    ``{"$and": [{"kind": {"$eq": "summary"}}, {"path": {"$nin": ["a.md", "b.md"]}}]}``.
    Unknown keys raise :class:`InvalidInputError`.
    """
    clauses: list[dict[str, Any]] = []
    for key, negated, values in iter_filter(filters):
        if len(values) == 1:
            clauses.append({key: {"$ne" if negated else "$eq": values[0]}})
        else:
            clauses.append({key: {"$nin" if negated else "$in": values}})
    if not clauses:
        return {}
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def chunk_match(
    scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
) -> dict[str, Any]:
    """``find`` filter of a RAG's chunks narrowed by chunk ids and a ChunkFilter."""
    flt = {**scope_match(scope), **translate_filters(filters)}
    if chunk_ids is not None:
        flt["chunkId"] = {"$in": list(chunk_ids)}
    return flt


def vector_search_filter(scope: RagScope, filters: ChunkFilter | None) -> dict[str, Any]:
    """The ``$vectorSearch`` pre-filter: always tenant, project and RAG, then the filters."""
    clauses: list[dict[str, Any]] = [
        {"tenantId": {"$eq": scope.tenant_id}},
        {"projectId": {"$eq": scope.project_id}},
        {"ragId": {"$eq": scope.rag_id}},
    ]
    extra = translate_filters(filters)
    if "$and" in extra:
        clauses += extra["$and"]
    elif extra:
        clauses.append(extra)
    return {"$and": clauses}


# -- writes ----------------------------------------------------------------------------------


def chunk_documents(
    scope: RagScope, chunks: Sequence[Chunk], *, seq: int, live: bool
) -> list[dict[str, Any]]:
    """Validated chunk documents; raises before anything is written."""
    path = vector_path(scope.dimension)
    docs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for order, ch in enumerate(chunks):
        if ch.rag_id != scope.rag_id:
            raise foreign_chunk_error()
        if ch.id in seen:
            raise InvalidInputError(f"chunk id {ch.id!r} appears twice in one write")
        seen.add(ch.id)
        vector = checked_vector(ch.embedding, scope.dimension)
        docs.append(
            {
                **scope_match(scope),
                "chunkId": ch.id,
                "sourceRef": ch.source_ref,
                "kind": ch.kind,
                "path": ch.path,
                "text": ch.text,
                "metadata": json.loads(json.dumps(ch.metadata, default=str)),
                "dim": scope.dimension,
                path: vector.tolist(),
                "seq": seq,
                "ord": order,
                "live": live,
            }
        )
    return docs


# -- Atlas Vector Search ---------------------------------------------------------------------


def num_candidates_for(top_k: int, *, factor: int = 20, minimum: int = 100) -> int:
    """HNSW candidates to consider: ``factor`` × ``top_k`` (Atlas advises 10-20×), capped."""
    return min(MAX_NUM_CANDIDATES, max(minimum, top_k * factor, top_k))


def build_vector_search_pipeline(
    scope: RagScope,
    vector: Sequence[float],
    top_k: int,
    filters: ChunkFilter | None,
    index_name: str,
    num_candidates: int,
) -> list[dict[str, Any]]:
    """``$vectorSearch`` (pre-filtered by scope and filters) + ``$project`` with the score.

    The projected ``score`` is Atlas' ``vectorSearchScore``: ``(1 + cos) / 2`` for a cosine
    index; see :func:`atlas_score_to_cosine`.
    """
    if not 1 <= top_k <= num_candidates <= MAX_NUM_CANDIDATES:
        raise InvalidInputError(
            f"$vectorSearch needs 1 <= top_k ({top_k}) <= numCandidates ({num_candidates}) "
            f"<= {MAX_NUM_CANDIDATES}"
        )
    return [
        {
            "$vectorSearch": {
                "index": index_name,
                "path": vector_path(scope.dimension),
                "queryVector": [float(x) for x in vector],
                "numCandidates": num_candidates,
                "limit": top_k,
                "filter": vector_search_filter(scope, filters),
            }
        },
        {
            "$project": {
                **{name: 1 for name in HIT_FIELDS},
                "score": {"$meta": "vectorSearchScore"},
            }
        },
    ]


def atlas_score_to_cosine(score: float) -> float:
    """Atlas normalises cosine similarity to ``(1 + cos) / 2`` in [0, 1]; undo it."""
    return 2.0 * float(score) - 1.0


def atlas_hits(rows: Iterable[Mapping[str, Any]], scope: RagScope) -> list[Hit]:
    """Hits of a ``$vectorSearch`` answer, in its order: in scope, one per chunk id."""
    hits: list[Hit] = []
    seen: set[str] = set()
    wanted = (scope.tenant_id, scope.project_id, scope.rag_id)
    for row in rows:
        # the pre-filter already scopes; re-checking costs nothing and guards isolation
        if (row["tenantId"], row["projectId"], row["ragId"]) != wanted:
            continue
        if row["chunkId"] in seen:  # old and new copy during a replace_source
            continue
        seen.add(row["chunkId"])
        hits.append(hit_from_bson(row, atlas_score_to_cosine(row["score"])))
    return hits


# -- exact ranking ---------------------------------------------------------------------------


def rank_exact(matrix: np.ndarray, query: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of the ``top_k`` rows most cosine-similar to ``query``, best first."""
    n = matrix.shape[0]
    k = min(top_k, n)
    if k <= 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    scores = (matrix @ (query / np.linalg.norm(query))) / norms
    idx = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return idx, scores[idx]


def rank_rows_exact(
    rows: Sequence[Mapping[str, Any]], path: str, query: np.ndarray, top_k: int
) -> list[tuple[Any, float]]:
    """``(_id, cosine)`` of the ``top_k`` rows nearest ``query``, best first, one per chunk id.

    ``rows`` hold ``_id``, ``chunkId`` and the vector at ``path``.
    """
    if not rows:
        return []
    matrix = np.asarray([r[path] for r in rows], dtype=np.float32)
    duplicates = len(rows) - len({r["chunkId"] for r in rows})
    idx, scores = rank_exact(matrix, query, top_k + duplicates)
    chosen: list[tuple[Any, float]] = []
    seen: set[str] = set()
    for i, score in zip(idx.tolist(), scores.tolist(), strict=True):
        if rows[i]["chunkId"] in seen:
            continue
        seen.add(rows[i]["chunkId"])
        chosen.append((rows[i]["_id"], float(score)))
        if len(chosen) == top_k:
            break
    return chosen


# -- codecs ----------------------------------------------------------------------------------


def hit_from_bson(row: Mapping[str, Any], score: float) -> Hit:
    return Hit(
        score=score,
        text=row["text"],
        source_ref=row["sourceRef"],
        kind=row["kind"],
        path=row.get("path"),
        rag_id=row["ragId"],
        chunk_id=row["chunkId"],
        metadata=dict(row.get("metadata") or {}),
    )


def latest_per_chunk_id(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per chunk id (the newest write), in the order of first appearance."""
    best: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        seen = best.get(row["chunkId"])
        if seen is None or row.get("seq", 0) > seen.get("seq", 0):
            best[row["chunkId"]] = row
    return list(best.values())
