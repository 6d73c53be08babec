"""Chunk store on MongoDB: one ``chunks`` collection, Atlas Vector Search or exact ranking.

Every chunk document carries its scope (``tenantId``, ``projectId``, ``ragId``) and every
read, query and delete filters on all three, so a RAG id leaked from another tenant or project
finds nothing. Vectors of dimension ``d`` are stored in ``embedding_<d>`` (see
:mod:`.mongo_indexes`). A thin I/O class: filters, pipelines, ranking and codecs come from
:mod:`.mongo_queries`.

Queries run in one of two modes:

* ``atlas`` — ``$vectorSearch`` on the dimension's vector index, pre-filtered by tenant,
  project and RAG (plus any chunk filter); scores turned back into cosine similarity.
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

import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.errors import StoreError
from vancetope_rag.store import mongo_indexes as ix
from vancetope_rag.store import mongo_queries as mq
from vancetope_rag.store.shared import check_top_k, checked_vector, chunk_id_taken_error
from vancetope_rag.store.types import ChunkFilter, RagScope

log = logging.getLogger(__name__)

VectorSearchMode = Literal["atlas", "exact", "auto"]


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
        found = ix.upsert_racing(
            lambda: self.counters.find_one_and_update(
                {"_id": "chunkWrites"},
                {"$inc": {"seq": 1}},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        )
        return int(found["seq"])

    def _written(self, scope: RagScope) -> None:
        if self.uses_atlas():
            self.ensure_vector_index(scope.dimension, wait=False)

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        docs = mq.chunk_documents(scope, chunks, seq=0, live=True)
        if not docs:
            return []
        seq = self._next_seq()
        for doc in docs:
            doc["seq"] = seq
        try:
            self.collection.insert_many(docs, ordered=True)
        except (BulkWriteError, DuplicateKeyError) as exc:
            # all or nothing, as in one SQL transaction: remove what this call inserted
            self.collection.delete_many({**mq.scope_match(scope), "seq": seq})
            errors = ix.write_errors(exc)
            if not ix.all_duplicate_keys(errors):
                raise
            detail = errors[0].get("keyValue") if errors else exc
            raise chunk_id_taken_error(scope, detail) from exc
        self._written(scope)
        return [c.id for c in chunks]

    def replace_source(self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk]) -> None:
        docs = mq.chunk_documents(scope, chunks, seq=0, live=False)
        source = {**mq.scope_match(scope), "sourceRef": source_ref}
        if docs:
            taken = self.collection.find_one(
                {
                    **mq.scope_match(scope),
                    "chunkId": {"$in": [d["chunkId"] for d in docs]},
                    "sourceRef": {"$ne": source_ref},
                    "live": True,
                },
                {"chunkId": 1},
            )
            if taken is not None:
                raise chunk_id_taken_error(scope, taken["chunkId"])
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
                raise chunk_id_taken_error(scope, exc) from exc
            self._written(scope)

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        result = self.collection.delete_many({**mq.scope_match(scope), "sourceRef": source_ref})
        return int(result.deleted_count)

    def remove_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> int:
        flt = mq.chunk_match(scope, chunk_ids, filters)
        if chunk_ids is not None and not chunk_ids:
            return 0
        return int(self.collection.delete_many(flt).deleted_count)

    def drop_rag(self, scope: RagScope) -> int:
        return int(self.collection.delete_many(mq.scope_match(scope)).deleted_count)

    # -- reads -------------------------------------------------------------------------

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        if filters is None:
            return int(self.collection.count_documents(mq.scope_match(scope)))
        return int(self.collection.count_documents(mq.chunk_match(scope, None, filters)))

    def get_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        flt = mq.chunk_match(scope, chunk_ids, filters)
        if chunk_ids is not None and not chunk_ids:
            return []
        rows = self.collection.find(flt, {name: 1 for name in mq.HIT_FIELDS}).sort(
            [("sourceRef", 1), ("seq", 1), ("ord", 1)]
        )
        return [mq.hit_from_bson(row, 0.0) for row in mq.latest_per_chunk_id(rows)]

    def query(
        self,
        scope: RagScope,
        vector: Sequence[float],
        top_k: int,
        *,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        check_top_k(top_k)
        query = checked_vector(vector, scope.dimension)
        mq.translate_filters(filters)  # unknown keys fail the same way in both modes
        if top_k <= mq.MAX_NUM_CANDIDATES and self.uses_atlas():
            return self._atlas_query(scope, query, top_k, filters)
        return self._exact_query(scope, query, top_k, filters)

    def _atlas_query(
        self, scope: RagScope, query: np.ndarray, top_k: int, filters: ChunkFilter | None
    ) -> list[Hit]:
        self.ensure_vector_index(scope.dimension, wait=True)
        pipeline = mq.build_vector_search_pipeline(
            scope,
            query.tolist(),
            top_k,
            filters,
            self.index_name(scope.dimension),
            mq.num_candidates_for(top_k, factor=self.candidate_factor),
        )
        return mq.atlas_hits(self.collection.aggregate(pipeline), scope)

    def _exact_query(
        self, scope: RagScope, query: np.ndarray, top_k: int, filters: ChunkFilter | None
    ) -> list[Hit]:
        path = ix.vector_path(scope.dimension)
        flt = {**mq.chunk_match(scope, None, filters), "dim": scope.dimension}
        rows = list(self.collection.find(flt, {"_id": 1, "chunkId": 1, path: 1}))
        chosen = mq.rank_rows_exact(rows, path, query, top_k)
        if not chosen:
            return []
        found = {
            row["_id"]: row
            for row in self.collection.find(
                {**mq.scope_match(scope), "_id": {"$in": [oid for oid, _ in chosen]}},
                {name: 1 for name in mq.HIT_FIELDS},
            )
        }
        return [mq.hit_from_bson(found[oid], score) for oid, score in chosen if oid in found]
