"""Chunk store on sqlite-vec: chunk rows in ``chunks``, vectors in a ``vec0`` table per dimension,
texts in the FTS5 lexical index (:mod:`.sqlite.fts`).

The RAG id is the ``vec0`` partition key, so a KNN query only scans that RAG's vectors; the
join back to ``chunks`` re-checks tenant and project, so a RAG id from another tenant finds
nothing even if it leaked. A chunk's row, vector and lexical entry are written and deleted in
one transaction, by one code path (``_insert_rows`` / ``_delete_where``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.domain.retrieval.ranking import (
    Candidates,
    FusedHits,
    FusedRank,
    FusionParams,
    fuse_ranks,
)
from vancetope_rag.store.inprocess.bm25 import QueryTerm
from vancetope_rag.store.inprocess.bm25_index import LexicalCache
from vancetope_rag.store.inprocess.epoch_cache import EpochCache
from vancetope_rag.store.inprocess.vector_cache import VectorCache
from vancetope_rag.store.port.chunks import ChunkSearch
from vancetope_rag.store.port.shared import (
    checked_vector,
    chunk_id_taken_error,
    foreign_chunk_error,
    unique_batches,
)
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.sql.chunks import SqlChunkCommon
from vancetope_rag.store.sql.rows import (
    HIT_COLUMNS,
    chunk_filter_sql,
    chunk_row,
    row_to_chunk,
    row_to_hit,
)
from vancetope_rag.store.sqlite.db import SqliteDatabase
from vancetope_rag.store.sqlite.dialect import SQLITE
from vancetope_rag.store.sqlite.errors import ConstraintViolation
from vancetope_rag.store.sqlite.fts import SqliteLexical

#: sqlite-vec refuses KNN queries with a larger ``k``; bigger ``top_k`` use the exact scan.
_KNN_MAX_K = 4096


@dataclass
class _Delta:
    """One scope's chunk changes within a write transaction, for the in-process indexes."""

    removed: list[int] = field(default_factory=list)
    added: list[tuple[int, str, bytes]] = field(default_factory=list)  # rowid, text, vector


@dataclass(frozen=True)
class _TextRead:
    """What a query by text and vector reads with: the vec0 table, the vector's blob, the
    filter's SQL and parameters, the query terms, how many hits are wanted."""

    table: str
    blob: bytes
    where: str
    params: list[Any]
    terms: list[QueryTerm]
    top_k: int


def _vector_blob(vector: Sequence[float], dim: int) -> bytes:
    return checked_vector(vector, dim).tobytes()


class SqliteChunkStore(SqlChunkCommon[SqliteDatabase]):
    """:class:`~vancetope_rag.store.port.ChunkStore` on sqlite-vec."""

    def __init__(
        self,
        db: SqliteDatabase,
        *,
        cache: VectorCache | None = None,
        lexical_cache: LexicalCache | None = None,
    ) -> None:
        self.db = db
        self.dialect = SQLITE
        #: In-process exact index (None: every query goes to sqlite-vec).
        self.cache = cache
        #: The lexical index; its in-process BM25 index is ``lexical_cache``.
        self.lexical = SqliteLexical(db, cache=lexical_cache)
        #: The calling thread's write being tracked: each scope's delta (None: not tracked).
        self._local = threading.local()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """A write transaction whose chunk delta the in-process indexes absorb once it has
        committed, so that a write does not make them stale (readers would fall back to FTS5
        and sqlite-vec until a reload). A write inside a caller's transaction is not tracked:
        it commits later, or not; the readers then refresh from the database as for a write
        of another process."""
        track = (self.cache is not None or self.lexical.cache is not None) and not (
            self.db.conn.in_transaction or getattr(self._local, "deltas", None) is not None
        )
        if not track:
            with self.db.transaction():
                yield
            return
        deltas: dict[tuple[str, str, str], _Delta] = {}
        epochs: dict[str, tuple[int, int]] = {}  # RAG id → its epoch before and after
        self._local.deltas, self._local.epochs = deltas, epochs
        try:
            with self.db.transaction():
                yield
            # Committed. The epoch is per RAG id: the RAG's other scopes (other tenants or
            # projects under the same id) moved to the new epoch too, with no change of theirs.
            for rag_id, (start, end) in epochs.items():
                lexical = self.lexical.cache.keys_of(rag_id) if self.lexical.cache else []
                vector = self.cache.keys_of(rag_id) if self.cache is not None else []
                for key in {*lexical, *vector, *(k for k in deltas if k[2] == rag_id)}:
                    delta = deltas.get(key, _Delta())
                    self.lexical.applied(
                        key, start, end, delta.removed, [(r, text) for r, text, _ in delta.added]
                    )
                    if self.cache is not None:
                        blobs = tuple((r, blob) for r, _, blob in delta.added)
                        self.cache.apply(key, start, end, (tuple(delta.removed), blobs))
        finally:
            self._local.deltas = self._local.epochs = None
            for rag_id, (start, _) in epochs.items():  # applied, or never committed
                for cache in self._caches():
                    cache.settle(rag_id, start)

    def _caches(self) -> list[EpochCache[Any, Any]]:
        return [c for c in (self.cache, self.lexical.cache) if c is not None]

    def _delta(self, scope: RagScope) -> _Delta | None:
        deltas: dict[tuple[str, str, str], _Delta] | None = getattr(self._local, "deltas", None)
        if deltas is None:
            return None
        return deltas.setdefault((scope.tenant_id, scope.project_id, scope.rag_id), _Delta())

    def _bump(self, rag_id: str) -> None:
        """Advance the RAG's epoch and the store-wide chunk epoch (the in-process caches'
        coherence counters; stored as ``rag_generations.generation`` and the
        ``chunk_generation`` counter, names kept)."""
        ((epoch,),) = self.db.query(
            "INSERT INTO rag_generations (rag_id, generation) VALUES (?, 1) "
            "ON CONFLICT (rag_id) DO UPDATE SET generation = generation + 1 "
            "RETURNING generation",
            (rag_id,),
        )
        self.db.execute("UPDATE counters SET value = value + 1 WHERE name = 'chunk_generation'")
        epochs: dict[str, tuple[int, int]] | None = getattr(self._local, "epochs", None)
        if epochs is not None:  # the transaction holds the write lock: no write in between
            if rag_id not in epochs:
                # readers that see the new epoch before its delta is applied wait for it
                for cache in self._caches():
                    cache.expect(rag_id, int(epoch) - 1)
            start = epochs[rag_id][0] if rag_id in epochs else int(epoch) - 1
            epochs[rag_id] = (start, int(epoch))

    def epoch(self, rag_id: str) -> int:
        rows = self.db.query("SELECT generation FROM rag_generations WHERE rag_id = ?", (rag_id,))
        return int(rows[0][0]) if rows else 0

    def _insert(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        try:
            return self._insert_rows(scope, chunks)
        except ConstraintViolation as exc:
            raise chunk_id_taken_error(scope, exc.detail) from exc

    def _insert_rows(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        table = self.db.ensure_vec_table(scope.dimension)
        if any(ch.rag_id != scope.rag_id for ch in chunks):
            raise foreign_chunk_error()
        blobs = [_vector_blob(ch.embedding, scope.dimension) for ch in chunks]
        # Rowids from a high-water mark, never reused: a rowid names one text forever, which
        # the in-process lexical index relies on when it refreshes incrementally.
        ((last,),) = self.db.query(
            "UPDATE counters SET value = value + ? WHERE name = 'chunk_rowid' RETURNING value",
            (len(chunks),),
        )
        texts: list[tuple[int, str]] = []
        for rowid, ch, blob in zip(
            range(last - len(chunks) + 1, last + 1), chunks, blobs, strict=True
        ):
            self.db.execute(*SQLITE.insert("chunks", {"rowid": rowid, **chunk_row(scope, ch)}))
            self.db.execute(
                f"INSERT INTO {table} (rowid, rag_id, embedding, kind) VALUES (?, ?, ?, ?)",
                (rowid, scope.rag_id, blob, ch.kind),
            )
            texts.append((rowid, ch.text))
        self.lexical.insert(scope, texts)
        delta = self._delta(scope)
        if delta is not None:
            delta.added += [(r, t, b) for (r, t), b in zip(texts, blobs, strict=True)]
        return [ch.id for ch in chunks]

    def _delete_where(self, scope: RagScope, where: str, params: Sequence[Any]) -> int:
        table = self.db.ensure_vec_table(scope.dimension)
        rowids = [
            r[0]
            for r in self.db.query(
                "SELECT c.rowid FROM chunks c WHERE c.tenant_id = ? AND c.project_id = ? "
                f"AND c.rag_id = ?{where}",
                (scope.tenant_id, scope.project_id, scope.rag_id, *params),
            )
        ]
        for start in range(0, len(rowids), 500):
            part = rowids[start : start + 500]
            marks = ",".join("?" * len(part))
            self.db.execute(f"DELETE FROM {table} WHERE rowid IN ({marks})", part)
            self.db.execute(f"DELETE FROM chunks WHERE rowid IN ({marks})", part)
            self.lexical.delete(part)
        delta = self._delta(scope)
        if delta is not None:
            delta.removed += [int(r) for r in rowids]
        return len(rowids)

    def _chunk_table(self, scope: RagScope) -> str:
        return "chunks"

    # -- port --------------------------------------------------------------------------

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        with self._write():
            ids = self._insert(scope, chunks)
            self._bump(scope.rag_id)
        return ids

    def _replace_source(
        self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk], chunk_version: int | None
    ) -> None:
        key = (scope.tenant_id, scope.project_id, scope.rag_id, source_ref)
        with self._write():
            version = chunk_version if chunk_version is not None else self.db.next_sequence()
            # each source's last chunk version; the stored table and column keep their old
            # names (source_generations.generation)
            rows = self.db.query(
                "SELECT generation FROM source_generations WHERE tenant_id = ? "
                "AND project_id = ? AND rag_id = ? AND source_ref = ?",
                key,
            )
            if rows and int(rows[0][0]) > version:
                return  # a newer writer already replaced this source
            self._delete_where(scope, " AND c.source_ref = ?", (source_ref,))
            self._insert(scope, chunks)
            self.db.execute(
                "INSERT INTO source_generations VALUES (?, ?, ?, ?, ?) ON CONFLICT "
                "(tenant_id, project_id, rag_id, source_ref) DO UPDATE SET generation = ?",
                (*key, version, version),
            )
            self._bump(scope.rag_id)

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        key = (scope.tenant_id, scope.project_id, scope.rag_id, source_ref)
        with self._write():
            n = self._delete_where(scope, " AND c.source_ref = ?", (source_ref,))
            # a fresh chunk version: a write under an older claim token is dropped from now on
            version = self.db.next_sequence()
            self.db.execute(
                "INSERT INTO source_generations VALUES (?, ?, ?, ?, ?) ON CONFLICT "
                "(tenant_id, project_id, rag_id, source_ref) DO UPDATE SET generation = ?",
                (*key, version, version),
            )
            if n:
                self._bump(scope.rag_id)
        return n

    def _remove_where(self, scope: RagScope, where: str, params: list[Any]) -> int:
        with self._write():
            n = self._delete_where(scope, where, params)
            if n:
                self._bump(scope.rag_id)
        return n

    def drop_rag(self, scope: RagScope) -> int:
        with self._write():
            n = self._delete_where(scope, "", ())
            self.db.execute(
                "DELETE FROM source_generations WHERE tenant_id = ? AND project_id = ? "
                "AND rag_id = ?",
                (scope.tenant_id, scope.project_id, scope.rag_id),
            )
            self._bump(scope.rag_id)  # never reset: a cache must not mistake old for new
        return n

    # -- index management: nothing to build or wait for ---------------------------------

    def prepare_dimension(self, dimension: int) -> None:
        with self.db.transaction():
            self.db.ensure_vec_table(dimension)

    def chunk_rags(self, tenant_id: str, project_id: str) -> dict[str, int]:
        rows = self.db.query(
            "SELECT rag_id, max(dim) FROM chunks WHERE tenant_id = ? AND project_id = ? "
            "GROUP BY rag_id",
            (tenant_id, project_id),
        )
        return {r[0]: int(r[1]) for r in rows}

    def export_chunks(self, scope: RagScope, source_refs: Sequence[str]) -> list[Chunk]:
        table = self.db.ensure_vec_table(scope.dimension)
        found: list[Chunk] = []
        for part in unique_batches(source_refs, 500):
            marks = ",".join("?" * len(part))
            rows = self.db.query_dicts(
                f"SELECT c.*, v.embedding AS vector FROM chunks c JOIN {table} v "
                "ON v.rowid = c.rowid WHERE c.tenant_id = ? AND c.project_id = ? "
                f"AND c.rag_id = ? AND c.source_ref IN ({marks}) ORDER BY c.source_ref, c.rowid",
                (scope.tenant_id, scope.project_id, scope.rag_id, *part),
            )
            found += [row_to_chunk(r, r["vector"]) for r in rows]
        found.sort(key=lambda ch: ch.source_ref)  # stable: each source keeps its write order
        return found

    def _vector_loader(
        self, scope: RagScope, table: str
    ) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        def load() -> tuple[np.ndarray, np.ndarray]:
            rows = self.db.query(
                f"SELECT c.rowid, v.embedding FROM chunks c JOIN {table} v ON v.rowid = c.rowid "
                "WHERE c.tenant_id = ? AND c.project_id = ? AND c.rag_id = ?",
                (scope.tenant_id, scope.project_id, scope.rag_id),
            )
            rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            return rowids, matrix.reshape(len(rows), scope.dimension)

        return load

    def _rows_by_rowid(self, scope: RagScope, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The scope's chunk rows among ``rowids`` (rows deleted meanwhile are absent)."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        rows = self.db.query_packed(  # a turn's hot read: one row, not one per chunk
            HIT_COLUMNS,
            # Unary + keeps SQLite on the rowid lookup; with the scope columns usable it picks
            # the scope index and walks the whole RAG (7 ms at 100k chunks).
            f"FROM chunks WHERE rowid IN ({marks}) AND +tenant_id = ? "
            "AND +project_id = ? AND +rag_id = ?",
            (*rowids, scope.tenant_id, scope.project_id, scope.rag_id),
        )
        return {r["rowid"]: r for r in rows}

    def _cache_search(
        self, scope: RagScope, table: str, blob: bytes, top_k: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The vector cache's row ids and scores for a query vector (None: it cannot answer)."""
        assert self.cache is not None
        return self.cache.search(
            (scope.tenant_id, scope.project_id, scope.rag_id),
            self.epoch(scope.rag_id),
            np.frombuffer(blob, dtype=np.float32),
            top_k,
            self._vector_loader(scope, table),
        )

    def _cached_query(
        self, scope: RagScope, table: str, blob: bytes, top_k: int
    ) -> list[Hit] | None:
        found = self._cache_search(scope, table, blob, top_k)
        if found is None:
            return None
        rowids, scores = found
        by_rowid = self._rows_by_rowid(scope, rowids.tolist())
        return [
            row_to_hit(by_rowid[rid], float(score))
            for rid, score in zip(rowids.tolist(), scores.tolist(), strict=True)
            if rid in by_rowid  # deleted between the epoch read and now
        ]

    def _vector_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        table = self.db.ensure_vec_table(scope.dimension)  # before the snapshot: may write
        blob = _vector_blob(search.vector, scope.dimension)
        where, params = chunk_filter_sql(search.filters, SQLITE)
        with self.db.snapshot():  # the epoch, the cache's rows and the chunk rows: one state
            return self._query(scope, table, blob, search.top_k, where, params)

    def _query(
        self, scope: RagScope, table: str, blob: bytes, top_k: int, where: str, params: list[Any]
    ) -> list[Hit]:
        if not where and self.cache is not None:
            hits = self._cached_query(scope, table, blob, top_k)
            if hits is not None:
                return hits
        if not where and top_k <= _KNN_MAX_K:
            rows = self.db.query_dicts(
                f"WITH knn AS (SELECT rowid, distance FROM {table} "
                "WHERE embedding MATCH ? AND k = ? AND rag_id = ?) "
                "SELECT c.*, knn.distance AS distance "
                "FROM knn JOIN chunks c ON c.rowid = knn.rowid ORDER BY knn.distance",
                (blob, top_k, scope.rag_id),
            )
            # The partition is the RAG id only; if chunks of another tenant or project under
            # the same id took some of the k places, rank exactly within this scope instead.
            if all(
                (r["tenant_id"], r["project_id"]) == (scope.tenant_id, scope.project_id)
                for r in rows
            ):
                return [row_to_hit(r, 1.0 - float(r["distance"])) for r in rows]
        # Filtered (or past the KNN limit): exact scan over the matching chunks, correct
        # top-k whatever the filter.
        rows = self.db.query_dicts(
            f"SELECT c.*, vec_distance_cosine(v.embedding, ?) AS distance "
            f"FROM chunks c JOIN {table} v ON v.rowid = c.rowid "
            "WHERE c.tenant_id = ? AND c.project_id = ? AND c.rag_id = ?"
            f"{where} ORDER BY distance LIMIT ?",
            (blob, scope.tenant_id, scope.project_id, scope.rag_id, *params, top_k),
        )
        return [row_to_hit(r, 1.0 - float(r["distance"])) for r in rows]

    def _text_query(self, scope: RagScope, search: ChunkSearch) -> _TextRead:
        """What the search reads with (the vec0 table made before the snapshot: it may
        write)."""
        table = self.db.ensure_vec_table(scope.dimension)
        blob = _vector_blob(search.vector, scope.dimension)
        where, params = chunk_filter_sql(search.filters, SQLITE)
        terms = self.lexical.terms(search.text)
        return _TextRead(table, blob, where, params, terms, search.top_k)

    def _hybrid_search(
        self, scope: RagScope, search: ChunkSearch, fusion: FusionParams
    ) -> Candidates:
        read = self._text_query(scope, search)
        with self.db.snapshot():
            if not read.where and self.cache is not None:
                found = self._indexed_hybrid(scope, read, fusion)
                if found is not None:
                    return found
            dense = self._query(scope, read.table, read.blob, read.top_k, read.where, read.params)
            lexical = self._lexical_query(scope, read)
        return Candidates.hybrid(dense, lexical, read.top_k, fusion)

    def _indexed_hybrid(
        self, scope: RagScope, read: _TextRead, fusion: FusionParams
    ) -> Candidates | None:
        """Both lists from the in-process indexes as row ids and scores, fused before any
        chunk row is read; a hit's row is read when the caller first looks at it (in the
        caller's snapshot). None when the vector cache cannot answer."""
        table, blob, terms, top_k = read.table, read.blob, read.terms, read.top_k
        found = self._cache_search(scope, table, blob, top_k)
        if found is None:
            return None
        dense = list(zip(found[0].tolist(), found[1].tolist(), strict=True))
        ranked = self.lexical.search(scope, terms, top_k)
        cosines = self._cosines(scope, table, blob, [r for r, _ in ranked])
        lexical = [(r, cosines[r], bm25) for r, bm25 in ranked if r in cosines]
        ranks = fuse_ranks(dense, lexical, fusion, tie_break=self._chunk_ids)

        def hits_of(batch: Sequence[FusedRank[int]]) -> list[Hit]:
            rows = self._rows_by_rowid(scope, [r.key for r in batch])
            return [
                row_to_hit(
                    rows[r.key],
                    r.score,
                    r.lexical_score,
                    dense_rank=r.dense_rank,
                    lexical_rank=r.lexical_rank,
                    fused_score=r.fused_score,
                )
                for r in batch
                if r.key in rows
            ]

        floor = dense[-1][1] if dense else None
        return Candidates(FusedHits(ranks, hits_of), len(dense) < top_k, floor)

    def _chunk_ids(self, rowids: Sequence[int]) -> dict[int, str]:
        marks = ",".join("?" * len(rowids))
        rows = self.db.query(f"SELECT rowid, id FROM chunks WHERE rowid IN ({marks})", rowids)
        return {int(r[0]): str(r[1]) for r in rows}

    def _lexical_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        """The chunks by BM25 relevance to the text, best first; ``score`` is each chunk's
        cosine similarity to the vector, ``lexical_score`` its BM25 score."""
        read = self._text_query(scope, search)
        # Candidates, their rows and their cosines from one committed state: a source replaced
        # between two of these reads would otherwise lose its rows or its vectors.
        with self.db.snapshot():
            return self._lexical_query(scope, read)

    def _lexical_query(self, scope: RagScope, read: _TextRead) -> list[Hit]:
        table, blob, terms, top_k, where = read.table, read.blob, read.terms, read.top_k, read.where
        params = read.params
        ranked = self.lexical.search(scope, terms, top_k, where=where, params=params)
        rows = self._rows_by_rowid(scope, [r for r, _ in ranked])
        if len(rows) < len(ranked) and not where:
            # A row was deleted meanwhile, or (2^-64) another scope shares the scope token:
            # ask FTS5 again with the scope checked on every candidate.
            ranked = self.lexical.search(scope, terms, top_k, checked=True)
            rows = self._rows_by_rowid(scope, [r for r, _ in ranked])
        ranked = [(r, s) for r, s in ranked if r in rows]
        cosines = self._cosines(scope, table, blob, [r for r, _ in ranked])
        # In one snapshot every row has its vector; a row without one is dropped, not a
        # KeyError, should that ever not hold.
        return [row_to_hit(rows[r], cosines[r], bm25) for r, bm25 in ranked if r in cosines]

    def _cosines(
        self, scope: RagScope, table: str, blob: bytes, rowids: Sequence[int]
    ) -> dict[int, float]:
        """Cosine similarity of the query vector to each chunk, from the vector cache when it
        holds the RAG (a ``vec0`` point lookup costs ~0.2 ms per row at 100k chunks)."""
        if not rowids:
            return {}
        if self.cache is not None:
            key = (scope.tenant_id, scope.project_id, scope.rag_id)
            found = self.cache.cosines(
                key,
                self.epoch(scope.rag_id),
                np.asarray(rowids, dtype=np.int64),
                np.frombuffer(blob, dtype=np.float32),
                self._vector_loader(scope, table),
            )
            if found is not None and not np.isnan(found).any():
                return dict(zip(rowids, found.tolist(), strict=True))
        marks = ",".join("?" * len(rowids))
        rows = self.db.query(
            f"SELECT rowid, vec_distance_cosine(embedding, ?) FROM {table} "
            f"WHERE rowid IN ({marks})",
            (blob, *rowids),
        )
        return {int(r[0]): 1.0 - float(r[1]) for r in rows}
