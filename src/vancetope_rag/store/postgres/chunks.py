"""The chunk store on PostgreSQL + pgvector: one ``chunks_<dim>`` table per embedding
dimension holding each chunk's row, vector (HNSW, cosine) and ``tsvector`` (GIN).

Every statement names tenant, project and RAG, so a RAG id from another tenant finds and
deletes nothing. A source's replacement is one transaction (its chunk version fenced in
``source_versions``), so a reader sees its old chunks or its new ones, never none and never
a mix; nothing is ever left to sweep. Queries never create anything: a dimension without its
table has no chunks, and a write to one creates it (:func:`.postgres.schema.ensure_dimension`).

Dense search orders candidates by the half-precision cosine the HNSW index holds, then
re-ranks them on the full vectors in process (scores are exact cosines). A small scope is
scanned whole (a B-tree walk of the scope: no index to miss a hit); a large one goes
through HNSW with pgvector's iterative scans in strict order, so a filter that keeps 1% of
the table still fills ``top_k``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.domain.retrieval.ranking import Candidates, FusionParams
from vancetope_rag.store.inprocess.bm25_index import CollectionStats
from vancetope_rag.store.port.chunks import ChunkSearch
from vancetope_rag.store.port.shared import (
    checked_vector,
    chunk_id_taken_error,
    foreign_chunk_error,
    unique_batches,
)
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.postgres import lexical
from vancetope_rag.store.postgres.db import PostgresDatabase
from vancetope_rag.store.postgres.dialect import POSTGRES
from vancetope_rag.store.postgres.errors import ConstraintViolation
from vancetope_rag.store.postgres.lexical_index import PostgresLexicalIndex
from vancetope_rag.store.postgres.rows import vector_literal, vector_of
from vancetope_rag.store.postgres.schema import chunk_table, ensure_dimension, index_expression
from vancetope_rag.store.sql.chunks import (
    CHUNK_COLUMNS,
    SCOPE,
    SqlChunkCommon,
)
from vancetope_rag.store.sql.rows import chunk_filter_sql, chunk_row, row_to_hit

#: Scopes of at most this many chunks are ranked exactly (~20 ms at 384 dimensions).
EXACT_SCAN_MAX = 10_000
#: pgvector's ``hnsw.ef_search`` range; the search list is the candidates' count within it.
#: 200, not pgvector's 40 or our earlier 100: at 100k distinct vectors recall@10 against an
#: exact scan was 0.933 with 100 and 0.966 with 200 (docs/benchmarks.md).
_EF_MIN, _EF_MAX = 200, 1000
#: Candidates beyond ``top_k`` ranked by the index's half-precision distance and re-ranked
#: on the full vectors, so a near-tie that float16 rounding put out of order still makes the
#: top-k. Rounding moves a cosine by ~1e-3, so the margin need not grow with ``top_k``: on
#: 100k near-copies of 2,000 texts, the top 100 of 120 candidates and of 200 were the same
#: for 150 of 150 SciFact claims, and a hybrid turn's statement took 10.7 ms, not 13.4.
_RERANK_MARGIN = 20
#: How many index tuples an iterative scan may visit before it stops (pgvector's default is
#: 20,000: a RAG holding 0.1% of a big table would come back short).
_MAX_SCAN_TUPLES = 200_000
#: How long a scope's chunk count is reused to choose between exact scan and HNSW.
_SIZE_TTL_S = 5.0
#: What every pooled connection sets for HNSW scans (:attr:`PostgresDatabase.session_settings`):
#: iterative scans in distance order (a filtered scope still gets its top k), the search list
#: for up to ``_EF_MIN - _RERANK_MARGIN`` hits, and the iterative scan's budget.
HNSW_SESSION_SETTINGS = (
    ("hnsw.iterative_scan", "strict_order"),
    ("hnsw.ef_search", str(_EF_MIN)),
    ("hnsw.max_scan_tuples", str(_MAX_SCAN_TUPLES)),
)
#: Scopes up to this size search HNSW with ``_EF_MIN``; larger ones with a longer list.
_EF_BASE_ROWS = 100_000


def search_list(scope_size: int) -> int:
    """``hnsw.ef_search`` for a scope of ``scope_size`` chunks: ``_EF_MIN`` up to 100k, then
    growing with the square root of the size (632 at 1M, where 200 kept recall@10 at 0.84
    and 600 at 0.98 on the benchmark's graph), within pgvector's limit."""
    if scope_size <= _EF_BASE_ROWS:
        return _EF_MIN
    return min(_EF_MAX, round(_EF_MIN * math.sqrt(scope_size / _EF_BASE_ROWS)))


_SCOPE = POSTGRES.sql(SCOPE)


def _scope(scope: RagScope) -> tuple[str, str, str]:
    return scope.tenant_id, scope.project_id, scope.rag_id


#: The chunk row's own columns a write sends, in this order, one array each.
_INSERTED = (
    "id",
    "tenant_id",
    "project_id",
    "rag_id",
    "source_ref",
    "kind",
    "path",
    "text",
    "metadata",
    "dim",
)
_ARRAYS = ", ".join(
    ["%s::text[]"] * (len(_INSERTED) - 1) + ["%s::int[]", "%s::text[]", "%s::text[]"]
)


class PostgresChunkStore(SqlChunkCommon[PostgresDatabase]):
    """:class:`~vancetope_rag.store.port.ChunkStore` on PostgreSQL + pgvector."""

    def __init__(
        self,
        db: PostgresDatabase,
        *,
        exact_scan_max: int = EXACT_SCAN_MAX,
        lexical_index: PostgresLexicalIndex | None = None,
    ) -> None:
        self.db = db
        self.dialect = POSTGRES
        #: Scopes up to this size are ranked exactly; larger ones through HNSW.
        self.exact_scan_max = exact_scan_max
        #: In-process BM25 postings that answer unfiltered lexical queries (None: SQL only).
        self.lexical_index = lexical_index
        #: Scope -> (chunk count, when read): see :meth:`_scope_size`.
        self._sizes: dict[tuple[str, str, str], tuple[int, float]] = {}

    # -- writes ------------------------------------------------------------------------

    def _insert(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        if any(ch.rag_id != scope.rag_id for ch in chunks):
            raise foreign_chunk_error()
        vectors = [vector_literal(checked_vector(ch.embedding, scope.dimension)) for ch in chunks]
        if not chunks:
            return []
        ensure_dimension(self.db, scope.dimension)
        table = chunk_table(scope.dimension)
        rows = [chunk_row(scope, ch) for ch in chunks]
        columns = [[r[name] for r in rows] for name in _INSERTED]
        # One statement for the whole batch (not one per row): the term-statistics trigger
        # (schema step 3) runs once per statement, and so does the planner.
        try:
            self.db.execute(
                f"INSERT INTO {table} (id, tenant_id, project_id, rag_id, source_ref, kind, "
                "path, text, metadata, dim, tsv, n_tokens, embedding, embedding_h) "
                "SELECT r.id, r.tenant_id, r.project_id, r.rag_id, r.source_ref, r.kind, "
                f"r.path, r.text, r.metadata, r.dim, t.tsv, {lexical.n_tokens_sql('t.tsv')}, "
                f"r.vec::vector, r.vec::halfvec FROM unnest({_ARRAYS}) WITH ORDINALITY "
                f"AS r({', '.join(_INSERTED)}, folded, vec, ord) CROSS JOIN LATERAL "
                f"(SELECT {lexical.tsvector_sql('r.folded')} AS tsv) t ORDER BY r.ord",
                (*columns, [lexical.fold(ch.text) for ch in chunks], vectors),
            )
        except ConstraintViolation as exc:
            raise chunk_id_taken_error(scope, exc.detail) from exc
        return [ch.id for ch in chunks]

    def _delete(self, scope: RagScope, where: str = "", params: Sequence[Any] = ()) -> int:
        if not self.db.has_dimension(scope.dimension):
            return 0
        return self.db.execute(
            f"DELETE FROM {chunk_table(scope.dimension)} c WHERE {_SCOPE}{where}",
            (*_scope(scope), *params),
        )

    def _chunk_table(self, scope: RagScope) -> str | None:
        return chunk_table(scope.dimension) if self.db.has_dimension(scope.dimension) else None

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        if chunks and not self.db.in_transaction():
            ensure_dimension(self.db, scope.dimension)  # DDL in its own transaction
        with self.db.transaction():
            return self._insert(scope, chunks)

    def _replace_source(
        self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk], chunk_version: int | None
    ) -> None:
        for ch in chunks:  # refuse bad input before anything is written
            if ch.rag_id != scope.rag_id:
                raise foreign_chunk_error()
            checked_vector(ch.embedding, scope.dimension)
        if chunks:
            ensure_dimension(self.db, scope.dimension)  # DDL in its own transaction
        with self.db.transaction():
            version = chunk_version if chunk_version is not None else self.db.next_sequence()
            # the upsert locks the source's row: concurrent writers of one source queue here
            kept = self.db.query(
                "INSERT INTO source_versions AS s (tenant_id, project_id, rag_id, source_ref, "
                "version) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (tenant_id, project_id, rag_id, source_ref) DO UPDATE "
                "SET version = excluded.version WHERE s.version <= excluded.version "
                "RETURNING version",
                (*_scope(scope), source_ref, version),
            )
            if not kept:
                return  # a newer writer already replaced this source
            self._delete(scope, " AND c.source_ref = %s", (source_ref,))
            self._insert(scope, chunks)

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        with self.db.transaction():
            # a fresh chunk version: a write under an older claim token is dropped from now on
            self.db.execute(
                "INSERT INTO source_versions AS s (tenant_id, project_id, rag_id, source_ref, "
                "version) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (tenant_id, project_id, rag_id, source_ref) DO UPDATE "
                "SET version = greatest(s.version, excluded.version)",
                (*_scope(scope), source_ref, self.db.next_sequence()),
            )
            return self._delete(scope, " AND c.source_ref = %s", (source_ref,))

    def _remove_where(self, scope: RagScope, where: str, params: list[Any]) -> int:
        with self.db.transaction():
            return self._delete(scope, where, params)

    def drop_rag(self, scope: RagScope) -> int:
        with self.db.transaction():
            n = self._delete(scope)
            for table in ("source_versions", "rag_terms", "rag_text_stats"):
                self.db.execute(
                    f"DELETE FROM {table} WHERE tenant_id = %s AND project_id = %s AND rag_id = %s",
                    _scope(scope),
                )
        return n

    # -- index management ----------------------------------------------------------------

    def prepare_dimension(self, dimension: int) -> None:
        ensure_dimension(self.db, dimension)

    # -- reads -------------------------------------------------------------------------

    def chunk_rags(self, tenant_id: str, project_id: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for dim in self.db.known_dimensions():
            for (rag_id,) in self.db.query(
                f"SELECT DISTINCT rag_id FROM {chunk_table(dim)} WHERE tenant_id = %s "
                "AND project_id = %s",
                (tenant_id, project_id),
            ):
                found[rag_id] = max(found.get(rag_id, 0), dim)
        return found

    def export_chunks(self, scope: RagScope, source_refs: Sequence[str]) -> list[Chunk]:
        if not self.db.has_dimension(scope.dimension):
            return []
        found: list[Chunk] = []
        for part in unique_batches(source_refs, 500):
            rows = self.db.query_dicts(
                f"SELECT {CHUNK_COLUMNS}, c.embedding "
                f"FROM {chunk_table(scope.dimension)} c WHERE {_SCOPE} "
                "AND c.source_ref = ANY(%s) ORDER BY c.rowid",
                (*_scope(scope), list(part)),
                binary=True,
            )
            found += [
                Chunk(
                    id=r["id"],
                    rag_id=r["rag_id"],
                    source_ref=r["source_ref"],
                    text=r["text"],
                    # the float32 values pgvector holds, as floats
                    embedding=vector_of(r["embedding"]).tolist(),
                    kind=r["kind"],
                    path=r["path"],
                    metadata=json.loads(r["metadata"]),
                )
                for r in rows
            ]
        found.sort(key=lambda ch: ch.source_ref)  # stable: each source keeps its write order
        return found

    def _hybrid_search(
        self, scope: RagScope, search: ChunkSearch, fusion: FusionParams
    ) -> Candidates:
        with self.db.snapshot():  # both lists from one committed state
            terms = self._lexical_terms(scope, search.text)
            with self.db.pipeline():
                # the server scans for the dense list while the lexical one is ranked here
                dense = self._send_dense(scope, search)
                lexical = self._lexical_ranked(scope, terms, search)
                return Candidates.hybrid(dense(), lexical, search.top_k, fusion)

    def _vector_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        return self._send_dense(scope, search)()

    def best_scores(
        self, scope: RagScope, vectors: Sequence[Sequence[float]]
    ) -> list[float | None]:
        """One statement for all ``vectors`` (:func:`probes_sql`): each one's candidates as
        :meth:`query` with ``top_k`` 1 finds them, only their vectors read back, re-ranked
        as :func:`rerank` does. The calibrator's 60 probes were 60 round trips, each reading
        21 chunks' texts."""
        queries = [checked_vector(vector, scope.dimension) for vector in vectors]
        if not queries or not self.db.has_dimension(scope.dimension):
            return [None] * len(queries)
        dim = scope.dimension
        args = ([vector_literal(q) for q in queries], *_scope(scope), 1 + _RERANK_MARGIN)
        rows = self._send_candidates(
            scope, 1 + _RERANK_MARGIN, lambda exact: probes_sql(dim, exact=exact), args
        )()
        found: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            found.setdefault(int(row["ord"]) - 1, []).append(row)
        return [max(_cosines(found[i], q)) if i in found else None for i, q in enumerate(queries)]

    def _send_dense(self, scope: RagScope, search: ChunkSearch) -> Callable[[], list[Hit]]:
        """Start the dense query; the function returned gives its hits (inside a
        :meth:`PostgresDatabase.pipeline` the server runs it meanwhile)."""
        query = checked_vector(search.vector, scope.dimension)
        where, params = chunk_filter_sql(search.filters, POSTGRES)
        top_k = search.top_k
        if not self.db.has_dimension(scope.dimension):
            return list
        dim = scope.dimension
        wanted = top_k + _RERANK_MARGIN  # candidates for the exact re-rank
        args = (*_scope(scope), *params, vector_literal(query), wanted)
        rows = self._send_candidates(
            scope, wanted, lambda exact: dense_sql(dim, where, exact=exact), args
        )
        return lambda: rerank(rows(), query, top_k)

    def _send_candidates(
        self,
        scope: RagScope,
        wanted: int,
        statement: Callable[[bool], str],
        args: Sequence[Any],
    ) -> Callable[[], list[dict[str, Any]]]:
        """Send a statement of nearest candidates, ``statement(exact)``: an exact scan of a
        scope up to ``exact_scan_max`` chunks, else HNSW with a search list of at least
        ``wanted``; the function returned gives its rows, vectors read in binary."""
        size = self._scope_size(scope)
        exact = wanted > _EF_MAX or size <= self.exact_scan_max
        sql = statement(exact)
        ef = min(_EF_MAX, max(search_list(size), wanted))
        # Every pooled connection scans HNSW with ``_EF_MIN`` (session_settings): a longer
        # list is set for this transaction only.
        longer = not exact and ef != _EF_MIN

        def send() -> Callable[[], list[dict[str, Any]]]:
            if longer:
                self.db.send("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
            return self.db.send(sql, args, binary=True)

        if self.db.in_transaction():
            return send()  # inside a pipeline, the server runs it meanwhile
        if longer:
            with self.db.snapshot():
                found = send()()
        else:  # one round trip: a turn's query needs no transaction
            found = self.db.query_dicts(sql, args, binary=True)
        return lambda: found

    def _scope_size(self, scope: RagScope) -> int:
        """The scope's chunk count, from the statistics the chunk tables' triggers keep;
        read again at most every ``_SIZE_TTL_S`` per scope (it only decides exact scan or
        HNSW, which rank alike near the limit)."""
        key = _scope(scope)
        now = time.monotonic()
        cached = self._sizes.get(key)
        if cached is not None and now - cached[1] < _SIZE_TTL_S:
            return cached[0]
        rows = self.db.query(
            "SELECT n_rows FROM rag_text_stats WHERE tenant_id = %s AND project_id = %s "
            "AND rag_id = %s",
            key,
        )
        size = int(rows[0][0]) if rows else 0
        if len(self._sizes) > 10_000:
            self._sizes.clear()
        self._sizes[key] = (size, now)
        return size

    def _lexical_search(self, scope: RagScope, search: ChunkSearch) -> list[Hit]:
        """The chunks by BM25 relevance to the text (the RAG's own statistics), best first;
        ``score`` is each chunk's cosine to the vector, ``lexical_score`` its BM25 score."""
        with self.db.snapshot():  # statistics and ranking from one committed state
            terms = self._lexical_terms(scope, search.text)
            return self._lexical_ranked(scope, terms, search)

    def _lexical_terms(self, scope: RagScope, text: str) -> _Terms | None:
        """The query's lexemes and the RAG's statistics for them (in the caller's snapshot);
        None when nothing can match."""
        words = lexical.query_text(text)
        if not words or not self.db.has_dimension(scope.dimension):
            return None
        found = self.db.query(lexical.terms_sql(), lexical.terms_params(words, _scope(scope)))
        if not found or not int(found[0][2]):
            return None
        return _Terms(
            lexemes=[str(r[0]) for r in found],
            stats=CollectionStats(
                int(found[0][2]), int(found[0][3]), {str(r[0]): int(r[1]) for r in found}
            ),
            epoch=int(found[0][4]),
        )

    def _lexical_ranked(
        self, scope: RagScope, terms: _Terms | None, search: ChunkSearch
    ) -> list[Hit]:
        """The BM25 top ``top_k`` for ``terms`` (read in the caller's snapshot)."""
        query = checked_vector(search.vector, scope.dimension)
        where, params = chunk_filter_sql(search.filters, POSTGRES)
        top_k = search.top_k
        if terms is None:
            return []
        table = chunk_table(scope.dimension)
        columns = CHUNK_COLUMNS + ", c.embedding"
        lexemes, stats = terms.lexemes, terms.stats
        if not where and self.lexical_index is not None:
            rows = self._indexed_lexical(scope, table, terms.epoch, stats, top_k, columns)
            if rows is not None:
                return _lexical_hits(rows, query)
        weights = lexical.idfs(stats.n_rows, stats.doc_freq, lexemes)
        plan = lexical.MatchPlan.first(lexemes, weights, stats.doc_freq)
        while True:
            rows = self.db.query_dicts(
                lexical.bm25_sql(table, where, columns),
                lexical.bm25_params(
                    lexemes,
                    weights,
                    stats.avgdl or 1.0,
                    _scope(scope),
                    plan.match,
                    params,
                    top_k,
                ),
                binary=True,
            )
            scores = [float(r["lexical_score"]) for r in rows]
            if plan.exact(scores, top_k):
                break
            plan = plan.widen(scores, top_k)
        return _lexical_hits(rows, query)

    def _indexed_lexical(
        self,
        scope: RagScope,
        table: str,
        epoch: int,
        stats: CollectionStats,
        top_k: int,
        columns: str,
    ) -> list[dict[str, Any]] | None:
        """The BM25 top ``top_k`` from the in-process postings, as rows with their
        ``lexical_score`` (in the caller's snapshot, the one ``epoch`` was read in); None
        when the SQL passes must answer."""
        assert self.lexical_index is not None
        # the SQL path adds a row's term scores in lexeme order: so do the postings
        lexemes = sorted(stats.doc_freq)
        ranked = self.lexical_index.search(scope, table, epoch, lexemes, stats, top_k)
        if ranked is None:
            return None
        if not ranked:
            return []
        rows = self.db.query_dicts(
            f"SELECT {columns} FROM {table} c WHERE {_SCOPE} AND c.rowid = ANY(%s::bigint[])",
            (*_scope(scope), [rowid for rowid, _ in ranked]),
            binary=True,
        )
        by_rowid = {int(r["rowid"]): r for r in rows}
        return [
            {**by_rowid[rowid], "lexical_score": score}
            for rowid, score in ranked
            if rowid in by_rowid
        ]


@dataclass(frozen=True)
class _Terms:
    """A lexical query's lexemes (query order) and the RAG's statistics and lexical epoch."""

    lexemes: list[str]
    stats: CollectionStats
    epoch: int


def dense_sql(dim: int, where: str, *, exact: bool) -> str:
    """The candidates of a dense query, nearest first by the half-precision cosine, with
    their full vectors (parameters: tenant, project, RAG, ``where``'s, the query vector,
    how many). ``exact``: scan the scope (``+ 0`` is an expression no index serves);
    otherwise the HNSW index can give the order.

    The query vector is cast in a sub-select (an InitPlan: once per query). Cast in the sort
    key, a prepared statement's generic plan parsed it again for every row ranked (psycopg
    prepares a statement run five times on a connection)."""
    order = _nearest_first(dim, f"(SELECT %s::halfvec({int(dim)}))", exact=exact)
    table = chunk_table(dim)
    # the rows' columns (and their vectors, read in binary) only for the candidates, not
    # every row the scan ranks: a target list is computed below the sort
    return (
        f"SELECT {CHUNK_COLUMNS}, c.embedding FROM {table} c JOIN ("
        f"  SELECT c.rowid FROM {table} c WHERE {_SCOPE}{where} ORDER BY {order} LIMIT %s"
        ") AS nearest ON nearest.rowid = c.rowid"
    )


def probes_sql(dim: int, *, exact: bool) -> str:
    """:func:`dense_sql`'s candidates for many query vectors at once, without filters, as
    ``(ord, embedding)`` rows: ``ord`` numbers the vectors from 1 (parameters: the vectors as
    text, tenant, project, RAG, how many per vector). Each vector is parsed once, in a
    MATERIALIZED CTE: cast inside the lateral join, it was parsed again for every row."""
    order = _nearest_first(dim, "p.vec", exact=exact)
    table = chunk_table(dim)
    return (
        f"WITH p AS MATERIALIZED (SELECT ord, vec::halfvec({int(dim)}) AS vec "
        "FROM unnest(%s::text[]) WITH ORDINALITY AS u(vec, ord)) "
        f"SELECT p.ord, e.embedding FROM p CROSS JOIN LATERAL (SELECT c.rowid FROM {table} c "
        f"WHERE {_SCOPE} ORDER BY {order} LIMIT %s) AS nearest "
        f"JOIN {table} e ON e.rowid = nearest.rowid"
    )


def _nearest_first(dim: int, vector: str, *, exact: bool) -> str:
    """The ``ORDER BY`` of candidates nearest to ``vector`` (SQL of a ``halfvec``) by the
    half-precision cosine: for an exact scan an expression no index serves (``+ 0``), ties
    in row order; otherwise one the HNSW index gives."""
    distance = f"{index_expression(dim)} <=> {vector}"
    return f"({distance}) + 0, c.rowid" if exact else distance


def _lexical_hits(rows: Sequence[dict[str, Any]], query: npt.NDArray[np.float32]) -> list[Hit]:
    """Lexical hits: each row's cosine to ``query`` as its score, BM25 beside it."""
    return [
        row_to_hit(r, float(cos), float(r["lexical_score"]))
        for r, cos in zip(rows, _cosines(rows, query), strict=True)
    ]


def _cosines(rows: Sequence[dict[str, Any]], query: npt.NDArray[np.float32]) -> list[float]:
    """Each row's cosine similarity to ``query``, from its full-precision vector (the
    ``embedding`` column read in binary)."""
    if not rows:
        return []
    matrix = np.stack([vector_of(r["embedding"]) for r in rows]).astype(np.float64)
    q = query.astype(np.float64)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    scores: list[float] = ((matrix @ q) / np.where(norms == 0, 1.0, norms)).tolist()
    return scores


def rerank(rows: Sequence[dict[str, Any]], query: npt.NDArray[np.float32], top_k: int) -> list[Hit]:
    """The ``top_k`` best of candidates by exact cosine (ties: older row first)."""
    scored = sorted(
        zip(_cosines(rows, query), rows, strict=True), key=lambda t: (-t[0], t[1]["rowid"])
    )
    return [row_to_hit(r, float(cos)) for cos, r in scored[:top_k]]
