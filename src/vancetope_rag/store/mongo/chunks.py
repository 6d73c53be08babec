"""Chunk store on MongoDB: one collection per embedding dimension, Atlas Search or exact.

Every chunk document carries its scope (``tenantId``, ``projectId``, ``ragId``) and every
read, query and delete filters on all three, so a RAG id leaked from another tenant or project
finds nothing. Chunks of dimension ``d`` live in ``chunks_<d>`` with a binary float32
``embedding`` (see :mod:`.mongo.indexes`). A thin I/O class: filters, pipelines, ranking
and codecs come from :mod:`.mongo.builders.queries` and :mod:`.mongo.builders.text`; what is
known about the server's search, from :mod:`.mongo.search`.

**Chunk versions.** Atlas Search indexes lag the collection (about a second, more under load):
``$vectorSearch`` finds ids in its index, then reads those documents from the collection.
Deleting a source's old chunks right after writing new ones would show the source with zero
chunks for that window. So every chunk carries ``gen``, the chunk version of its source:

* ``replace_source`` writes the new chunk version *beside* the old one (a fresh number from the
  store's ``counters``, or the indexer's claim token) and records a pending swap; a write
  whose chunk version is older than one already written is dropped (a late writer never
  supersedes a newer one).
* A query keeps, per source, only the newest chunk version *among the rows the search
  returned*: while the new one is not yet visible, the old one answers; once it is, the new
  one does. Queries fetch more rows than ``top_k`` so dropped rows do not shorten answers.
* ``count_chunks`` / ``get_chunks`` read the collection (primary): the newest chunk version
  written, at once.
* :meth:`MongoChunkStore.sweep` (run by the indexer's ticks) works through the swap notes
  older than ``search_grace_s`` (:mod:`.mongo.builders.sweep`): per source it deletes the
  chunk versions older than the highest *due* one, once a search probe sees all of that
  one. The probe ran on one search node, and with several (Atlas Search Nodes) another may
  still lag behind it: the grace is what it is allowed to lag (or, with
  ``searchNodePreference``, queries read the node the probe read). A newer chunk version,
  written less than the grace ago, never lets an older one go. Without Atlas Search (exact
  ranking reads the collection, no lag) they are deleted at once.
* ``add_chunks`` writes into a source's newest chunk version, so adding never hides chunks.

A crash between steps leaves an extra chunk version the next write or sweep removes.

**Switching to a rebuilt generation** (:meth:`MongoChunkStore.visible`) waits the same grace:
the new generation must have been seen entirely, unchanged, for ``search_grace_s`` (first
sighting recorded in :data:`~.mongo.indexes.VISIBILITY`, shared by every worker).

**Source marks (fencing without transactions).** ``source_marks`` keeps one document per
source: ``gen``, the highest chunk version written *or removed* there. Every write and every
removal raises it with an atomic ``$max`` upsert before touching chunks; a writer whose
version is below the mark drops its write, and checks the mark again after its insert (a
removal that ran meanwhile wins: the writer deletes what it just wrote). A removal draws a
fresh chunk version (``remove_by_source``) or uses the claim token (an empty replacement), so a
stalled writer holding an older claim can never bring back chunks the user removed. The
sweep deletes a mark only once it is older than ``mark_ttl_s`` (twice the claim TTL): a writer
that old has lost its claim long since.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.domain.retrieval.ranking import Candidates, FusionParams
from vancetope_rag.errors import StoreError
from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.bm25 import rank_bm25
from vancetope_rag.store.mongo.builders import probes as mp
from vancetope_rag.store.mongo.builders import queries as mq
from vancetope_rag.store.mongo.builders import sweep as ms
from vancetope_rag.store.mongo.builders.analysis import text_terms
from vancetope_rag.store.mongo.builders.text import build_text_search_pipeline
from vancetope_rag.store.mongo.errors import guard_errors
from vancetope_rag.store.mongo.search import SearchSupport, VectorSearchMode
from vancetope_rag.store.port.chunks import ChunkSearch, ChunkStore
from vancetope_rag.store.port.shared import (
    checked_vector,
    chunk_id_taken_error,
    source_counts_of,
    unique_batches,
)
from vancetope_rag.store.port.types import ChunkFilter, Clock, RagScope

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MARK_TTL_S", "MongoChunkStore", "VectorSearchMode"]

#: Twice the default claim TTL (``VANCETOPE_RAG_CLAIM_TTL_S``, 600 s).
DEFAULT_MARK_TTL_S = 1200.0
#: A dimension's sweep lease outlives its holder's last sweep by this much (then another
#: worker takes over); longer than a tick, so the holder keeps it while it runs.
SWEEP_LEASE_S = 60.0
#: The most swap notes of one dimension one sweep handles (ten pages of 100).
SWEEP_MAX_NOTES = 1000
#: How long a search lag observed past the grace keeps lengthening it.
OBSERVED_LAG_MEMORY_S = 3600.0


@guard_errors
class MongoChunkStore(ChunkStore):
    """:class:`~vancetope_rag.store.port.ChunkStore` on ``chunks_<dim>`` collections.

    Args:
        database: the database, reads on the primary (pymongo, or mongomock in tests).
        search_database: the database search stages run on (the URI's read preference);
            defaults to ``database``.
        vector_search: ``atlas``, ``exact``, or ``auto`` (Atlas when the server has search).
        clock: when swaps are recorded and how old they are (seconds since the epoch).
        search_grace_s: how long an old chunk version outlives its replacement at least,
            and how long a rebuilt generation must have been visible before it goes live.
        node_preference: route each RAG's search stages to one search node.
        mark_ttl_s: how long a source mark outlives its last raise at least (twice the
            claim TTL: see the module docstring).
        exact_max_chunks: the largest selective scope (≤ 5 % of its collection) searched
            exactly (see :func:`~.mongo.builders.queries.prefer_exact`).
    """

    def __init__(
        self,
        database: Any,
        *,
        search_database: Any = None,
        vector_search: VectorSearchMode = "auto",
        clock: Clock = time.time,
        search_grace_s: float = 10.0,
        node_preference: bool = True,
        mark_ttl_s: float = DEFAULT_MARK_TTL_S,
        exact_max_chunks: int = mq.EXACT_MAX_SELECTIVE,
    ) -> None:
        self.db = database
        self.clock = clock
        self.search_grace_s = search_grace_s
        self.mark_ttl_s = mark_ttl_s
        search_db = search_database if search_database is not None else database
        self.search = SearchSupport(
            database,
            search_db,
            mode=vector_search,
            node_preference=node_preference,
            exact_max_chunks=exact_max_chunks,
        )
        self.counters = database["counters"]
        self.swaps = database[ix.SWAPS]
        self.visibility = database[ix.VISIBILITY]
        self.leases = database[ix.SWEEP_LEASES]
        #: Who this store is to the sweep leases (one per process and store).
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: How long a sweep lease lasts past its holder's last sweep.
        self.sweep_lease_s = SWEEP_LEASE_S
        #: The most swap notes of one dimension a sweep handles (the rest: next tick).
        self.sweep_max_notes = SWEEP_MAX_NOTES
        #: The longest lag past the grace the sweep saw, and when (store clock).
        self._observed_lag: tuple[float, float] = (0.0, 0.0)
        self._warned_lag = False
        self.marks = database[ix.SOURCE_MARKS]
        #: Set by the opener when chunks of an older layout wait for ``init`` to move them.
        self.legacy_chunks = False

    @property
    def vector_search(self) -> VectorSearchMode:
        return self.search.mode

    def uses_atlas(self) -> bool:
        return self.search.uses_atlas()

    def _collection(self, scope: RagScope) -> Any:
        if self.legacy_chunks:
            raise StoreError(
                "this store holds chunks in the layout of an older vancetope-rag; run "
                "`vancetope-rag --store <uri> init` once to move them to per-dimension "
                "collections (nothing is lost meanwhile)"
            )
        return self.search.collection(scope.dimension)

    # -- chunk versions ----------------------------------------------------------------

    def next_chunk_version(self) -> int:
        """A number greater than every chunk version and claim token handed out before."""
        return ix.next_sequence(self.counters)

    def _raise_mark(self, source: dict[str, Any], version: int) -> int:
        """Raise the source's mark to ``version`` (atomic ``$max``); the mark after it."""
        found = ix.upsert_racing(
            lambda: self.marks.find_one_and_update(
                source,
                {"$max": {"gen": version, "at": self._instant()}},
                projection={"gen": 1},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        )
        return int(found["gen"])

    def _marks(self, scope: RagScope, source_refs: Sequence[str]) -> dict[str, int]:
        flt = {**mq.scope_match(scope), "sourceRef": {"$in": list(source_refs)}}
        return {
            d["sourceRef"]: int(d["gen"]) for d in self.marks.find(flt, {"sourceRef": 1, "gen": 1})
        }

    def _expire_marks(self) -> int:
        """Delete the marks nobody raised for ``mark_ttl_s``."""
        old = {"at": {"$lt": self._instant(self.mark_ttl_s)}}
        return int(self.marks.delete_many(old).deleted_count)

    def _newest(
        self, collection: Any, scope: RagScope, filters: ChunkFilter | None = None
    ) -> dict[str, int]:
        rows = collection.aggregate(mq.newest_chunk_versions_pipeline(scope, filters))
        return {row["_id"]: int(row["gen"]) for row in rows}

    def _check_ids_free(
        self,
        collection: Any,
        scope: RagScope,
        docs: Sequence[dict[str, Any]],
        replacing: str | None,
    ) -> None:
        """Refuse chunk ids the newest chunk version of a source holds (but ``replacing``)."""
        flt = {**mq.scope_match(scope), "chunkId": {"$in": [d["chunkId"] for d in docs]}}
        if replacing is not None:
            flt["sourceRef"] = {"$ne": replacing}
        rows = list(collection.find(flt, {"chunkId": 1, "sourceRef": 1, "gen": 1}))
        if not rows:
            return
        newest = self._newest(collection, scope, {"sourceRef": [r["sourceRef"] for r in rows]})
        taken = [r for r in rows if int(r.get("gen", 0)) == newest.get(r["sourceRef"])]
        if taken:
            raise chunk_id_taken_error(scope, taken[0]["chunkId"])

    def _insert(self, collection: Any, scope: RagScope, docs: list[dict[str, Any]]) -> None:
        """Insert all or nothing (as one SQL transaction would)."""
        for doc in docs:
            doc["_id"] = ObjectId()
        try:
            collection.insert_many(docs, ordered=True)
        except (BulkWriteError, DuplicateKeyError) as exc:
            collection.delete_many({"_id": {"$in": [d["_id"] for d in docs]}})
            errors = ix.write_errors(exc)
            if not ix.all_duplicate_keys(errors):
                raise
            raise chunk_id_taken_error(scope, errors[0].get("keyValue") if errors else exc) from exc

    # -- writes ------------------------------------------------------------------------

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        docs = mq.chunk_documents(scope, chunks)
        if not docs:
            return []
        collection = self._collection(scope)
        sources = sorted({d["sourceRef"] for d in docs})
        newest = self._newest(collection, scope, {"sourceRef": sources})
        self._check_ids_free(collection, scope, docs, None)
        fresh: int | None = None
        for doc in docs:
            version = newest.get(doc["sourceRef"])
            if version is None:
                fresh = fresh if fresh is not None else self.next_chunk_version()
                version = fresh
            doc["gen"] = version
        for ref in sources:
            if ref not in newest:  # a new source: raise its mark as any write does
                assert fresh is not None
                self._raise_mark({**mq.scope_match(scope), "sourceRef": ref}, fresh)
        self._insert(collection, scope, docs)
        self._drop_orphans(collection, scope, docs, newest)
        return [c.id for c in chunks]

    def _replace_source(
        self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk], chunk_version: int | None
    ) -> None:
        docs = mq.chunk_documents(scope, chunks)
        collection = self._collection(scope)
        if docs:
            self._check_ids_free(collection, scope, docs, source_ref)
        version = chunk_version if chunk_version is not None else self.next_chunk_version()
        source = {**mq.scope_match(scope), "sourceRef": source_ref}
        written = self._newest(collection, scope, {"sourceRef": source_ref}).get(source_ref)
        # every write and removal raises the mark first: an older writer is dropped here
        newer = max(written or 0, self._raise_mark(source, version))
        if newer > version:
            log.info(
                "dropped a write of %s under chunk version %s: %s is newer",
                source_ref,
                version,
                newer,
            )
            return
        if not docs:  # a removal: meant to leave the source empty, at once
            self._remove_up_to(collection, source, version)
            return
        if written == version:  # the same writer again under its token: redo that chunk version
            collection.delete_many({**source, "gen": version})
        # the swap is recorded first: a crash after the insert still leaves the sweeper a note
        self.swaps.insert_one(
            {**source, "dim": scope.dimension, "gen": version, "at": self._instant()}
        )
        for doc in docs:
            doc["gen"] = version
        self._insert(collection, scope, docs)
        latest = self._newest(collection, scope, {"sourceRef": source_ref}).get(source_ref, version)
        latest = max(latest, self._marks(scope, [source_ref]).get(source_ref, version))
        if latest > version:  # a newer write or a removal came in meanwhile: never shown
            self.discard_chunk_version(scope, source_ref, version)
        elif not self.uses_atlas():  # no search index to lag behind: swap at once
            self._drop_older(collection, source, version)

    def _drop_older(self, collection: Any, source: dict[str, Any], version: int) -> int:
        removed = int(collection.delete_many({**source, "gen": {"$lt": version}}).deleted_count)
        self.swaps.delete_many({**source, "gen": {"$lte": version}})
        return removed

    def _instant(self, seconds_ago: float = 0.0) -> datetime:
        """The store clock's now (minus ``seconds_ago``) as BSON stores it: naive UTC ms."""
        at = datetime.fromtimestamp(self.clock(), UTC) - timedelta(seconds=seconds_ago)
        return at.replace(tzinfo=None, microsecond=at.microsecond // 1000 * 1000)

    def _drop_orphans(
        self,
        collection: Any,
        scope: RagScope,
        docs: Sequence[dict[str, Any]],
        newest: dict[str, int],
    ) -> None:
        """After an add: chunks whose source a removal (or replacement) emptied meanwhile would
        be orphans; the removal wins, as if it ran after the add. A source that had chunks
        lost them all (every other chunk of that chunk version is gone); a new one got a mark
        above the version this add drew."""
        mine = [d["_id"] for d in docs]
        marks = self._marks(scope, sorted({d["sourceRef"] for d in docs}))
        lost: list[Any] = []
        for ref in {d["sourceRef"] for d in docs}:
            part = [d for d in docs if d["sourceRef"] == ref]
            version = int(part[0]["gen"])
            if ref in newest:
                flt = {**mq.scope_match(scope), "sourceRef": ref, "gen": version}
                gone = collection.find_one({**flt, "_id": {"$nin": mine}}, {"_id": 1}) is None
            else:
                gone = marks.get(ref, version) > version
            if gone:
                lost += [d["_id"] for d in part]
        if lost:
            log.info("dropped %s added chunks: their source was removed meanwhile", len(lost))
            collection.delete_many({**mq.scope_match(scope), "_id": {"$in": lost}})

    def _remove_up_to(self, collection: Any, source: dict[str, Any], version: int) -> int:
        """Delete a source's chunk versions up to ``version`` (its mark already raised)."""
        removed = int(collection.delete_many({**source, "gen": {"$lte": version}}).deleted_count)
        self.swaps.delete_many({**source, "gen": {"$lte": version}})
        return removed

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        """Remove a source under a fresh chunk version, so no older writer brings it back."""
        collection = self._collection(scope)
        source = {**mq.scope_match(scope), "sourceRef": source_ref}
        version = self.next_chunk_version()
        self._raise_mark(source, version)
        return self._remove_up_to(collection, source, version)

    def discard_chunk_version(self, scope: RagScope, source_ref: str, chunk_version: int) -> int:
        """Undo a write of ``chunk_version``: its chunks and its swap note go (the source's
        older chunk version, not yet swept, answers again)."""
        source = {**mq.scope_match(scope), "sourceRef": source_ref}
        flt = {**source, "gen": chunk_version}
        removed = int(self._collection(scope).delete_many(flt).deleted_count)
        self.swaps.delete_many(flt)
        return removed

    def _remove_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> int:
        flt = mq.chunk_match(scope, chunk_ids, filters)
        return int(self._collection(scope).delete_many(flt).deleted_count)

    def drop_rag(self, scope: RagScope) -> int:
        removed = int(self._collection(scope).delete_many(mq.scope_match(scope)).deleted_count)
        self.swaps.delete_many(mq.scope_match(scope))
        self.visibility.delete_many(mq.scope_match(scope))
        return removed

    # -- reads (the collection as written, on the primary) -----------------------------

    def source_refs(self, scope: RagScope) -> list[str]:
        # not ``distinct``: it answers in one 16 MB document (about 350k refs); a cursor pages
        rows = self._collection(scope).aggregate(mq.source_refs_pipeline(scope))
        return sorted(str(row["_id"]) for row in rows)

    def chunk_rags(self, tenant_id: str, project_id: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for name in self.db.list_collection_names():  # one collection per dimension
            dim = ix.dimension_of(name)
            if dim is not None:
                flt = {"tenantId": tenant_id, "projectId": project_id}
                for rag_id in self.db[name].distinct("ragId", flt):
                    found[str(rag_id)] = dim
        return found

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        rows = list(self._collection(scope).aggregate(mq.count_pipeline(scope, filters)))
        return int(rows[0]["n"]) if rows else 0

    def source_counts(
        self, scope: RagScope, paths: Mapping[str, str]
    ) -> dict[str, tuple[int, int]]:
        collection = self._collection(scope)
        rows = [
            (row["_id"], path["p"], path["n"])
            for part in unique_batches(paths, 1000)
            for row in collection.aggregate(mq.source_counts_pipeline(scope, part))
            for path in row["paths"]
        ]
        return source_counts_of(paths, rows)

    def _get_chunks(
        self, scope: RagScope, chunk_ids: Sequence[str] | None, filters: ChunkFilter | None
    ) -> list[Hit]:
        flt = mq.chunk_match(scope, chunk_ids, filters)
        collection = self._collection(scope)
        written = self._newest(collection, scope, filters)  # read first: see keep_newest
        rows = collection.find(flt, {name: 1 for name in (*mq.HIT_FIELDS, "ord")}).sort(
            [("sourceRef", 1), ("gen", 1), ("ord", 1)]
        )
        return [mq.hit_from_bson(row, 0.0) for row in mq.keep_newest(rows, written)]

    def export_chunks(self, scope: RagScope, source_refs: Sequence[str]) -> list[Chunk]:
        collection = self._collection(scope)
        fields = {name: 1 for name in (*mq.HIT_FIELDS, "ord", ix.VECTOR_FIELD)}
        found: list[Chunk] = []
        for part in unique_batches(source_refs, 500):
            written = self._newest(collection, scope, {"sourceRef": part})  # as in get_chunks
            rows = collection.find({**mq.scope_match(scope), "sourceRef": {"$in": part}}, fields)
            rows = rows.sort([("sourceRef", 1), ("gen", 1), ("ord", 1)])
            found += [mq.chunk_from_bson(row) for row in mq.keep_newest(rows, written)]
        found.sort(key=lambda ch: ch.source_ref)  # stable: each source keeps its write order
        return found

    # -- queries -----------------------------------------------------------------------

    def _vector_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        query = checked_vector(search.vector, scope.dimension)
        filters = search.filters
        mq.translate_filters(filters)  # unknown keys fail the same way in both modes
        # Atlas returns at most 10,000 results: a larger top_k gets the best 10,000 (fewer
        # than asked reads as "no more", which is what the service's over-fetch expects)
        top_k = min(search.top_k, mq.MAX_NUM_CANDIDATES)
        if not self.uses_atlas():
            return self._exact_query(scope, query, top_k, filters)
        self._collection(scope)
        self.search.require_queryable(scope.dimension, ix.VECTOR_INDEX)
        exact = self.search.prefer_exact(scope)
        limit = mq.fetch_limit(top_k)
        while True:
            pipeline = mq.build_vector_search_pipeline(
                scope, query.tolist(), limit, filters, exact=exact
            )
            rows = self.search.aggregate(scope, pipeline)
            hits = mq.atlas_hits(rows, scope)
            if not rows:  # a dropped or failed index answers [] too: ask when chunks exist
                match = mq.chunk_match(scope, None, filters)
                self.search.recheck_empty(scope, ix.VECTOR_INDEX, match)
            # older chunk versions took places: ask for more, unless the search ran dry
            if len(hits) >= top_k or len(rows) < limit or limit >= mq.MAX_NUM_CANDIDATES:
                return hits[:top_k]
            limit = min(mq.MAX_NUM_CANDIDATES, limit * 4)

    def _exact_query(
        self, scope: RagScope, query: np.ndarray, top_k: int, filters: ChunkFilter | None
    ) -> list[Hit]:
        fields = {"_id": 1, "chunkId": 1, "sourceRef": 1, "gen": 1, ix.VECTOR_FIELD: 1}
        rows = list(self._collection(scope).find(mq.chunk_match(scope, None, filters), fields))
        chosen = mq.rank_rows_exact(rows, query, top_k)
        if not chosen:
            return []
        found = {
            row["_id"]: row
            for row in self._collection(scope).find(
                {**mq.scope_match(scope), "_id": {"$in": [r["_id"] for r, _ in chosen]}},
                {name: 1 for name in mq.HIT_FIELDS},
            )
        }
        return [mq.hit_from_bson(found[r["_id"]], s) for r, s in chosen if r["_id"] in found]

    def _hybrid_search(
        self, scope: RagScope, search: ChunkSearch, fusion: FusionParams
    ) -> Candidates:
        text, vector, top_k, filters = search.text, search.vector, search.top_k, search.filters
        if not self.uses_atlas():
            dense = self.query(scope, vector, top_k, filters=filters)
            lexical = self.lexical_query(scope, text, top_k, vector=vector, filters=filters)
            return Candidates.hybrid(dense, lexical, top_k, fusion)
        query = checked_vector(vector, scope.dimension)
        mq.translate_filters(filters)
        # the two searches at once (each waits on mongot), the text one in a copy of this
        # context: a turn's deadline (pymongo's timeout) holds in both threads
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="vancetope-text") as pool:
            context = contextvars.copy_context()
            pending = pool.submit(context.run, self._atlas_text_rows, scope, text, top_k, filters)
            dense = self.query(scope, vector, top_k, filters=filters)
            rows = pending.result()
        lexical = self._with_cosines(scope, rows, dense, query)
        return Candidates.hybrid(dense, lexical, top_k, fusion)

    def _with_cosines(
        self,
        scope: RagScope,
        rows: Sequence[Mapping[str, Any]],
        dense: Sequence[Hit],
        query: np.ndarray,
    ) -> list[Hit]:
        """Text hits with their cosines: from the dense answer where it has them, the others
        from ONE exact ``$vectorSearch`` on their ids (no vector crosses the network)."""
        known = {h.chunk_id: h.score for h in dense}
        missing = [r["chunkId"] for r in rows if r["chunkId"] not in known]
        if missing:
            pipeline = mq.build_cosine_pipeline(scope, query.tolist(), missing)
            try:
                found = self.search.aggregate(scope, pipeline)
            except OperationFailure as exc:
                # an index still serving a definition without chunkId as a filter (init
                # updates it): read those few vectors from the collection instead
                log.info("cosines of text hits from the collection: %s", exc)
                found = self._cosines_from_collection(scope, missing, query)
            wanted = {(r["chunkId"], int(r.get("gen", 0))) for r in rows}
            for r in found:
                if (r["chunkId"], int(r.get("gen", 0))) in wanted:
                    known[r["chunkId"]] = mq.atlas_score_to_cosine(r["score"])
        return [
            mq.hit_from_bson(r, known.get(r["chunkId"], 0.0), lexical=float(r["lexical"]))
            for r in rows
        ]

    def _cosines_from_collection(
        self, scope: RagScope, chunk_ids: Sequence[str], query: np.ndarray
    ) -> list[dict[str, Any]]:
        fields = {"chunkId": 1, "gen": 1, ix.VECTOR_FIELD: 1}
        rows = self._collection(scope).find(mq.chunk_match(scope, chunk_ids, None), fields)
        return [
            {**r, "score": (1.0 + mq.cosine(r.get(ix.VECTOR_FIELD), query)) / 2.0} for r in rows
        ]

    def _lexical_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        text, filters = search.text, search.filters
        query = checked_vector(search.vector, scope.dimension)
        mq.translate_filters(filters)
        top_k = min(search.top_k, mq.MAX_NUM_CANDIDATES)  # as in query
        terms = text_terms(text)
        if not terms:
            return []
        fields = {name: 1 for name in (*mq.HIT_FIELDS, ix.VECTOR_FIELD)}
        if not self.uses_atlas():  # BM25 over the scope's chunks as they are now
            rows = mq.newest_chunk_version(
                self._collection(scope).find(mq.chunk_match(scope, None, filters), fields)
            )
            ranked = rank_bm25(rows, [t.token for t in terms], top_k)
            return [
                mq.hit_from_bson(r, mq.cosine(r.get(ix.VECTOR_FIELD), query), lexical=s)
                for r, s in ranked
            ]
        rows = self._atlas_text_rows(scope, text, top_k, filters)
        return self._with_cosines(scope, rows, [], query)

    def _atlas_text_rows(
        self, scope: RagScope, text: str, top_k: int, filters: ChunkFilter | None
    ) -> list[Mapping[str, Any]]:
        """The ``top_k`` best rows of ``$search``, newest chunk versions only, without
        vectors."""
        terms = text_terms(text)
        if not terms:
            return []
        top_k = min(top_k, mq.MAX_NUM_CANDIDATES)
        self._collection(scope)
        self.search.require_queryable(scope.dimension, ix.TEXT_INDEX)
        limit = mq.fetch_limit(top_k)
        wanted = (scope.tenant_id, scope.project_id, scope.rag_id)
        while True:
            pipeline = build_text_search_pipeline(scope, terms, limit, filters)
            found = self.search.aggregate(scope, pipeline)
            kept = mq.newest_chunk_version(
                r for r in found if (r["tenantId"], r["projectId"], r["ragId"]) == wanted
            )
            # no recheck_empty here: a text search finding no word of the query is normal
            # (the TTL of the queryability check covers the text index)
            if len(kept) >= top_k or len(found) < limit or limit >= mq.MAX_NUM_CANDIDATES:
                return kept[:top_k]
            limit = min(mq.MAX_NUM_CANDIDATES, limit * 4)

    # -- index management (never in the query path) ------------------------------------

    def prepare_dimension(self, dimension: int) -> None:
        self.search.prepare(dimension)

    def dimension_ready(self, dimension: int) -> bool:
        return self.search.ready(dimension)

    def snapshot(self) -> AbstractContextManager[None]:
        # No read snapshot shared by several queries here, but one search node slot: every
        # search of the turn reads the node the turn drew (see SearchSupport.turn).
        return self.search.turn()

    def visible(self, scope: RagScope) -> bool:
        """Has search seen the scope's newest chunk versions, unchanged, for the grace?"""
        collection = self._collection(scope)
        if not self.uses_atlas():
            return True
        key = mq.scope_match(scope)
        rows = list(collection.aggregate(mp.chunk_version_counts_pipeline(scope)))
        if not rows:
            return True  # nothing written: nothing a search node could lack
        seen = mp.fingerprint(rows)
        if not self.search.sees_scope(scope, collection):
            self.visibility.delete_many(key)
            return False
        record = self.visibility.find_one(key)
        if record is None or record.get("seen") != seen:  # first seen now, as it is now
            since = self._instant()
            update = {"$set": {"seen": seen, "since": since}}
            ix.upsert_racing(lambda: self.visibility.update_one(key, update, upsert=True))
        else:
            since = record["since"]
        return bool(since <= self._instant(self.effective_grace_s()))

    def sweep_backlog(self) -> tuple[dict[str, int], float]:
        """Swap notes waiting (``due``: past the search grace; ``waiting``: not yet) and the
        age in seconds of the oldest (0 when none), for /metrics; both read along the
        ``swap_due_idx`` index."""
        due_at = self._instant(self.search_grace_s if self.uses_atlas() else 0.0)
        total = int(self.swaps.count_documents({}))
        due = int(self.swaps.count_documents({"at": {"$lte": due_at}}))
        oldest = self.swaps.find_one({}, {"at": 1}, sort=list(ms.DUE_SORT))
        lag = 0.0
        if oldest is not None:
            lag = max(0.0, (self._instant() - oldest["at"]).total_seconds())
        return {"due": due, "waiting": total - due}, lag

    def sweep(self, *, limit: int = 100) -> int:
        """Delete older chunk versions of sources whose highest due one search sees entirely.

        Per dimension, by the worker holding that dimension's lease (:meth:`_take_lease`):
        N workers ticking do the probes of one, not N times them. At most
        :attr:`sweep_max_notes` notes a dimension per call (pages of ``limit``): a tick stays
        bounded whatever the global backlog; the rest waits for the next tick."""
        self._expire_marks()
        removed = 0
        due = self._instant(self.effective_grace_s() if self.uses_atlas() else 0.0)
        for dim in self._swept_dimensions():
            if self._take_lease(dim):
                removed += self._sweep_dimension(dim, due, limit)
        return removed

    def effective_grace_s(self) -> float:
        """The search grace, or the lag the sweep observed past it within the last hour (a
        due chunk version search did not show yet), whichever is longer: a rebuild's switch
        and the sweep then wait as long as search was seen to lag."""
        lag, seen_at = self._observed_lag
        if lag <= self.search_grace_s or self.clock() - seen_at > OBSERVED_LAG_MEMORY_S:
            return self.search_grace_s
        return lag

    def _observe_lag(self, lag_s: float) -> None:
        if lag_s <= max(self.search_grace_s, self._observed_lag[0]):
            return
        self._observed_lag = (min(lag_s, OBSERVED_LAG_MEMORY_S), self.clock())
        if not self._warned_lag:
            self._warned_lag = True
            log.warning(
                "search lagged %.0f s, past the search grace of %.0f s: the sweep and rebuild "
                "switches wait as long as search is seen to lag (a query on a node lagging "
                "past the grace could otherwise show a source with no chunks); set "
                "VANCETOPE_RAG_MONGO_SEARCH_GRACE_S to at least that",
                lag_s,
                self.search_grace_s,
            )

    def _swept_dimensions(self) -> list[int]:
        """The dimensions with a chunk collection (each has its own notes and lease)."""
        names = self.db.list_collection_names()
        return sorted(d for d in map(ix.dimension_of, names) if d is not None)

    def _take_lease(self, dim: int) -> bool:
        """Take or renew the sweep lease of ``dim`` for :attr:`sweep_lease_s`. The holder
        keeps it while it ticks; another worker takes it once it expires (its holder died or
        stopped). Sweeping is idempotent, so clock skew between hosts only moves when a
        takeover happens; it never makes a sweep unsafe."""
        now = self._instant()
        until = now + timedelta(seconds=self.sweep_lease_s)
        try:
            self.leases.find_one_and_update(
                ms.lease_filter(f"chunks_{dim}", self.worker, now),
                {"$set": {"holder": self.worker, "until": until}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False  # held by another worker
        return True

    def _sweep_dimension(self, dim: int, due: datetime, limit: int) -> int:
        """Up to :attr:`sweep_max_notes` due notes of ``dim``, page after page (the equality
        on ``dim`` and the ``(at, _id)`` order are served by ``DIM_DUE_INDEX``)."""
        removed, left = 0, self.sweep_max_notes
        after: tuple[datetime, Any] | None = None
        while left > 0:
            size = min(limit, left)
            flt = ms.due_notes_filter(due, after, dim)
            page = list(self.swaps.find(flt).sort(ms.DUE_SORT).limit(size))
            if not page:
                break
            removed += self._sweep_page(page)
            after = (page[-1]["at"], page[-1]["_id"])
            left -= len(page)
            if len(page) < size:
                break
        return removed

    def _sweep_page(self, records: list[dict[str, Any]]) -> int:
        removed = 0
        grouped: dict[tuple[str, str, str, str, int], list[ms.Note]] = {}
        for r in records:
            key = (r["tenantId"], r["projectId"], r["ragId"], r["sourceRef"], int(r["dim"]))
            grouped.setdefault(key, []).append(ms.Note.from_bson(r))
        for (tenant, project, rag, source_ref, dim), notes in grouped.items():
            scope = RagScope(tenant, project, rag, dim)
            collection = self.search.collection(dim)
            source = {**mq.scope_match(scope), "sourceRef": source_ref}
            rows = collection.aggregate(ms.source_versions_pipeline(scope, source_ref))
            plan = ms.plan_source(notes, {int(row["_id"]) for row in rows})
            done = list(plan.superseded)
            if plan.target is not None:
                if not plan.probe:
                    done += plan.covered  # nothing older to delete
                elif self.search.visible(scope, source_ref, plan.target):
                    removed += self._drop_older(collection, source, plan.target)
                else:  # due, yet not shown: search lags more than the grace
                    written = min(n.since for n in notes if n.version == plan.target)
                    self._observe_lag((self._instant() - written).total_seconds())
            if done:
                self.swaps.delete_many({**source, "_id": {"$in": done}})
            self._reschedule(source, plan.unlanded)
        return removed

    def _reschedule(self, source: dict[str, Any], notes: list[ms.Note]) -> None:
        """Unlanded notes: due again one grace later, or gone once expired."""
        now = self._instant()
        for note in notes:
            update = ms.unlanded_update(note, now)
            if update is None:
                log.warning(
                    "dropped the swap note of chunk version %s of %s: it never landed",
                    note.version,
                    source["sourceRef"],
                )
                self.swaps.delete_one({**source, "_id": note.id})
            else:
                self.swaps.update_one({**source, "_id": note.id}, update)
