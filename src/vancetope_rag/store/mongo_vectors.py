"""Chunk store on MongoDB: one ``chunks`` collection, Atlas Vector Search or exact ranking.

Every chunk document carries its scope (``tenantId``, ``projectId``, ``ragId``) and every
read, query and delete filters on all three, so a RAG id leaked from another tenant or project
finds nothing. Vectors of dimension ``d`` are stored in ``embedding_<d>`` (see
:mod:`.mongo_indexes`).

Queries run in one of two modes:

* ``atlas`` — ``$vectorSearch`` on the dimension's vector index, pre-filtered by tenant,
  project and RAG (plus any chunk filter). Atlas reports cosine similarity as
  ``(1 + cos) / 2``; :func:`atlas_score_to_cosine` turns it back into the cosine similarity
  the port (and the SQLite adapter) returns.
* ``exact`` — a scoped ``find`` of the RAG's vectors ranked in numpy: for MongoDB without
  Atlas Search, and for mongomock. Exact, but it reads every vector of the RAG per query.

``replace_source`` never leaves a source with zero visible chunks, without a transaction:
write the new chunks under a fresh write sequence number (staged: ``live: false``), delete the
source's chunks with a smaller sequence number, then flip the new chunks live. Queries see
staged and live chunks alike (deduplicated by chunk id), so the source always has either its
old or its new chunks, briefly both (``count_chunks`` may count both copies for that moment).
Two concurrent replacements of one source end with the later sequence number's chunks. A
crash between the steps leaves both copies visible until the next replacement cleans up.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.errors import InvalidInputError, StoreError
from vancetope_rag.store import mongo_indexes as ix
from vancetope_rag.store.port import ChunkFilter, RagScope, checked_vector, iter_filter

log = logging.getLogger(__name__)

VectorSearchMode = Literal["atlas", "exact", "auto"]

#: Atlas caps ``numCandidates`` (and so ``limit``) at 10,000; larger ``top_k`` rank exactly.
MAX_NUM_CANDIDATES = 10_000

_DUPLICATE_KEY = 11000

#: Fields a query returns besides the vector.
_HIT_FIELDS = ("chunkId", "tenantId", "projectId", "ragId", "sourceRef", "kind", "path", "text",
               "metadata", "seq")  # fmt: skip


# -- pure builders ---------------------------------------------------------------------------


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
                "path": ix.vector_path(scope.dimension),
                "queryVector": [float(x) for x in vector],
                "numCandidates": num_candidates,
                "limit": top_k,
                "filter": vector_search_filter(scope, filters),
            }
        },
        {
            "$project": {
                **{name: 1 for name in _HIT_FIELDS},
                "score": {"$meta": "vectorSearchScore"},
            }
        },
    ]


def atlas_score_to_cosine(score: float) -> float:
    """Atlas normalises cosine similarity to ``(1 + cos) / 2`` in [0, 1]; undo it."""
    return 2.0 * float(score) - 1.0


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


def _hit(row: Mapping[str, Any], score: float) -> Hit:
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


def _latest_per_chunk_id(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One row per chunk id (the newest write), in the order of first appearance."""
    best: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        seen = best.get(row["chunkId"])
        if seen is None or row.get("seq", 0) > seen.get("seq", 0):
            best[row["chunkId"]] = row
    return list(best.values())


# -- the store -------------------------------------------------------------------------------


class MongoChunkStore:
    """:class:`~vancetope_rag.store.port.ChunkStore` on a ``chunks`` collection.

    Args:
        database: the pymongo (or mongomock) database.
        vector_search: ``atlas``, ``exact``, or ``auto`` (Atlas when the server has search
            indexes, exact otherwise).
        index_timeout_s: how long a first query waits for a new vector index to be queryable.
        candidate_factor: ``numCandidates`` = this × ``top_k`` (capped at 10,000).
    """

    def __init__(
        self,
        database: Any,
        *,
        vector_search: VectorSearchMode = "auto",
        index_timeout_s: float = 300.0,
        candidate_factor: int = 20,
    ) -> None:
        if vector_search not in ("atlas", "exact", "auto"):
            raise StoreError(f"vector_search must be atlas, exact or auto, not {vector_search!r}")
        self.collection = database["chunks"]
        self.counters = database["counters"]
        self.vector_search: VectorSearchMode = vector_search
        self.index_timeout_s = index_timeout_s
        self.candidate_factor = candidate_factor
        self._lock = threading.Lock()
        self._created: set[int] = set()
        self._queryable: set[int] = set()

    # -- Atlas index bookkeeping -------------------------------------------------------

    def uses_atlas(self) -> bool:
        """Resolve ``auto`` once: does this server have Atlas Search?"""
        if self.vector_search == "auto":
            try:
                list(self.collection.list_search_indexes())
                mode: VectorSearchMode = "atlas"
            except (OperationFailure, NotImplementedError, TypeError, AttributeError) as exc:
                log.warning("no Atlas Search on this server (%s); ranking vectors exactly", exc)
                mode = "exact"
            self.vector_search = mode
        return self.vector_search == "atlas"

    def index_name(self, dim: int) -> str:
        return ix.vector_index_name(dim)

    def ensure_vector_index(self, dim: int, *, wait: bool = True) -> None:
        """Create the vector index of ``dim`` once per process; ``wait`` until queryable."""
        with self._lock:
            done = self._queryable if wait else self._created
            if dim in done or dim in self._queryable:
                return
        ix.ensure_vector_search_index(
            self.collection, dim, wait=wait, timeout_s=self.index_timeout_s
        )
        with self._lock:
            self._created.add(dim)
            if wait:
                self._queryable.add(dim)

    # -- writes ------------------------------------------------------------------------

    def _next_seq(self) -> int:
        """A write sequence number, increasing across every process sharing the database."""
        for attempt in range(2):
            try:
                found = self.counters.find_one_and_update(
                    {"_id": "chunkWrites"},
                    {"$inc": {"seq": 1}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
                return int(found["seq"])
            except DuplicateKeyError:  # two first upserts raced
                if attempt:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _documents(
        self, scope: RagScope, chunks: Sequence[Chunk], *, seq: int, live: bool
    ) -> list[dict[str, Any]]:
        """Validated chunk documents; raises before anything is written."""
        path = ix.vector_path(scope.dimension)
        docs: list[dict[str, Any]] = []
        seen: set[str] = set()
        for order, ch in enumerate(chunks):
            if ch.rag_id != scope.rag_id:
                raise InvalidInputError("chunk belongs to another RAG than the scope")
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

    def _taken_error(self, scope: RagScope, detail: object) -> InvalidInputError:
        return InvalidInputError(
            f"a chunk id is already taken: {detail}; chunk ids must be unique",
            tenant_id=scope.tenant_id,
            project_id=scope.project_id,
            rag_id=scope.rag_id,
        )

    def _written(self, scope: RagScope) -> None:
        if self.uses_atlas():
            self.ensure_vector_index(scope.dimension, wait=False)

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        docs = self._documents(scope, chunks, seq=0, live=True)
        if not docs:
            return []
        seq = self._next_seq()
        for doc in docs:
            doc["seq"] = seq
        try:
            self.collection.insert_many(docs, ordered=True)
        except (BulkWriteError, DuplicateKeyError) as exc:
            # all or nothing, as in one SQL transaction: remove what this call inserted
            self.collection.delete_many({**scope_match(scope), "seq": seq})
            errors = exc.details.get("writeErrors", []) if isinstance(exc, BulkWriteError) else []
            if any(e.get("code") != _DUPLICATE_KEY for e in errors):
                raise
            raise self._taken_error(scope, errors[0].get("keyValue") if errors else exc) from exc
        self._written(scope)
        return [c.id for c in chunks]

    def replace_source(self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk]) -> None:
        docs = self._documents(scope, chunks, seq=0, live=False)
        source = {**scope_match(scope), "sourceRef": source_ref}
        if docs:
            taken = self.collection.find_one(
                {
                    **scope_match(scope),
                    "chunkId": {"$in": [d["chunkId"] for d in docs]},
                    "sourceRef": {"$ne": source_ref},
                    "live": True,
                },
                {"chunkId": 1},
            )
            if taken is not None:
                raise self._taken_error(scope, taken["chunkId"])
        seq = self._next_seq()
        if docs:
            for doc in docs:
                doc["seq"] = seq
            self.collection.insert_many(docs, ordered=True)  # staged, visible to queries
        self.collection.delete_many({**source, "seq": {"$lt": seq}})
        if docs:
            try:
                self.collection.update_many({**source, "seq": seq}, {"$set": {"live": True}})
            except DuplicateKeyError as exc:  # a concurrent add_chunks took an id meanwhile
                raise self._taken_error(scope, exc) from exc
            self._written(scope)

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        result = self.collection.delete_many({**scope_match(scope), "sourceRef": source_ref})
        return int(result.deleted_count)

    def _match(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> dict[str, Any]:
        flt = {**scope_match(scope), **translate_filters(filters)}
        if chunk_ids is not None:
            flt["chunkId"] = {"$in": list(chunk_ids)}
        return flt

    def remove_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> int:
        flt = self._match(scope, chunk_ids, filters)
        if chunk_ids is not None and not chunk_ids:
            return 0
        return int(self.collection.delete_many(flt).deleted_count)

    def drop_rag(self, scope: RagScope) -> int:
        return int(self.collection.delete_many(scope_match(scope)).deleted_count)

    # -- reads -------------------------------------------------------------------------

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        if filters is None:
            return int(self.collection.count_documents(scope_match(scope)))
        return int(self.collection.count_documents(self._match(scope, None, filters)))

    def get_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        flt = self._match(scope, chunk_ids, filters)
        if chunk_ids is not None and not chunk_ids:
            return []
        rows = self.collection.find(flt, {name: 1 for name in _HIT_FIELDS}).sort(
            [("sourceRef", 1), ("seq", 1), ("ord", 1)]
        )
        return [_hit(row, 0.0) for row in _latest_per_chunk_id(rows)]

    def query(
        self,
        scope: RagScope,
        vector: Sequence[float],
        top_k: int,
        *,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        if top_k < 1:
            raise InvalidInputError("top_k must be at least 1")
        query = checked_vector(vector, scope.dimension)
        translate_filters(filters)  # unknown keys fail the same way in both modes
        if top_k <= MAX_NUM_CANDIDATES and self.uses_atlas():
            return self._atlas_query(scope, query, top_k, filters)
        return self._exact_query(scope, query, top_k, filters)

    def _atlas_query(
        self, scope: RagScope, query: np.ndarray, top_k: int, filters: ChunkFilter | None
    ) -> list[Hit]:
        self.ensure_vector_index(scope.dimension, wait=True)
        pipeline = build_vector_search_pipeline(
            scope,
            query.tolist(),
            top_k,
            filters,
            self.index_name(scope.dimension),
            num_candidates_for(top_k, factor=self.candidate_factor),
        )
        hits: list[Hit] = []
        seen: set[str] = set()
        wanted = (scope.tenant_id, scope.project_id, scope.rag_id)
        for row in self.collection.aggregate(pipeline):
            # the pre-filter already scopes; re-checking costs nothing and guards isolation
            if (row["tenantId"], row["projectId"], row["ragId"]) != wanted:
                continue
            if row["chunkId"] in seen:  # old and new copy during a replace_source
                continue
            seen.add(row["chunkId"])
            hits.append(_hit(row, atlas_score_to_cosine(row["score"])))
        return hits

    def _exact_query(
        self, scope: RagScope, query: np.ndarray, top_k: int, filters: ChunkFilter | None
    ) -> list[Hit]:
        path = ix.vector_path(scope.dimension)
        flt = {**self._match(scope, None, filters), "dim": scope.dimension}
        rows = list(self.collection.find(flt, {"_id": 1, "chunkId": 1, path: 1}))
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
        found = {
            row["_id"]: row
            for row in self.collection.find(
                {**scope_match(scope), "_id": {"$in": [oid for oid, _ in chosen]}},
                {name: 1 for name in _HIT_FIELDS},
            )
        }
        return [_hit(found[oid], score) for oid, score in chosen if oid in found]
