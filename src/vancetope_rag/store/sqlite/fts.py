"""The SQLite store's lexical index: an FTS5 table written with the chunk rows, and BM25 search
over it, answered by the in-process index (:mod:`.inprocess.bm25_index`) or by FTS5 itself.

``chunks_fts`` (schema v3) is a contentless FTS5 table (the text lives once, in ``chunks``)
whose rowid is the chunk's rowid and whose ``scope`` column holds one token naming the chunk's
tenant, project and RAG. Its rows are inserted and deleted by the same statements' transaction
as the chunk rows (:mod:`.sqlite.chunks`), so the two can never disagree, whatever crashes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from vancetope_rag.store.inprocess.bm25 import CollectionStats, QueryTerm, bm25_idf, query_terms
from vancetope_rag.store.inprocess.bm25_index import LexicalCache
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.sqlite.bm25 import (
    FTS5_BM25_FUNCTION,
    TOKENIZER_ARGS,
    match_expression,
    scope_token,
    sqlite_varints,
)
from vancetope_rag.store.sqlite.db import SqliteDatabase

#: How many RAGs' statistics are held (a few small dicts each).
_STATS_HELD = 256

Ranked = list[tuple[int, float]]  # (rowid, BM25 score), best first


class SqliteLexical:
    """Writes and searches ``chunks_fts``; every method runs on the calling thread's
    connection (inside the caller's transaction for writes)."""

    def __init__(self, db: SqliteDatabase, *, cache: LexicalCache | None = None) -> None:
        self.db = db
        #: In-process BM25 index (None: every query goes to FTS5).
        self.cache = cache
        #: Each RAG's statistics, by (tenant, project, rag): (its epoch, rows, tokens,
        #: document frequency by token), unchanged until the RAG's chunks change.
        self._rag_stats: OrderedDict[tuple[str, str, str], tuple[int, int, int, dict[str, int]]]
        self._rag_stats = OrderedDict()
        self._stats_lock = threading.Lock()

    # -- writes (inside the chunk write's transaction) -------------------------------------

    def insert(self, scope: RagScope, rows: Sequence[tuple[int, str]]) -> None:
        """Index chunk texts under their rowids."""
        token = scope_token(scope.tenant_id, scope.project_id, scope.rag_id)
        self.db.executemany(
            "INSERT INTO chunks_fts (rowid, scope, text) VALUES (?, ?, ?)",
            [(rowid, token, text) for rowid, text in rows],
        )

    def delete(self, rowids: Sequence[int]) -> None:
        marks = ",".join("?" * len(rowids))
        self.db.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", tuple(rowids))

    # -- search ------------------------------------------------------------------------------

    def terms(self, text: str) -> list[QueryTerm]:
        """The query's terms, split by the FTS5 table's own tokenizer."""
        tokenizer = self._tokenizer()
        flags = self.db.apsw.FTS5_TOKENIZE_QUERY
        return query_terms(
            text, lambda t: tokenizer(t.encode("utf-8", errors="replace"), flags, None)
        )

    def search(
        self,
        scope: RagScope,
        terms: Sequence[QueryTerm],
        top_k: int,
        *,
        where: str = "",
        params: Sequence[Any] = (),
        checked: bool = False,
    ) -> Ranked:
        """The ``top_k`` rows of the scope by BM25, best first (ties: lower rowid first).

        ``where``/``params``: extra conditions on the chunk alias ``c`` (a metadata filter).
        A filtered or ``checked`` search goes to FTS5 and checks the scope on every candidate;
        otherwise the scope token is trusted and the caller re-checks the rows it gets.
        """
        if not terms:
            return []
        if not where and not checked and self.cache is not None:
            found = self._cached(scope, terms, top_k)
            if found is not None:
                return found
        return self._fts(scope, terms, top_k, where, params, checked)

    def _fts(
        self,
        scope: RagScope,
        terms: Sequence[QueryTerm],
        top_k: int,
        where: str,
        params: Sequence[Any],
        checked: bool,
    ) -> Ranked:
        stats = self._stats(scope, terms, self._rag_epoch(scope))
        if not stats.n_rows:
            return []
        expr = match_expression(scope_token(scope.tenant_id, scope.project_id, scope.rag_id), terms)
        # the scope phrase first (it never adds to a score), then the terms in expression order
        idfs = [0.0] + [bm25_idf(stats.n_rows, stats.doc_freq[t.token]) for t in terms]
        marks = ", ".join("?" * (len(idfs) + 1))
        score = f"{FTS5_BM25_FUNCTION}(chunks_fts, {marks})"
        # The join costs a rowid lookup per match (92 ms instead of 47 at 100k chunks).
        if not where and not checked:
            rows = self.db.query(
                f"SELECT rowid, {score} AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
                "ORDER BY s DESC, rowid LIMIT ?",
                (stats.avgdl, *idfs, expr, top_k),
            )
            return [(int(r[0]), float(r[1])) for r in rows]
        rows = self.db.query(
            f"SELECT f.rowid, {score} AS s FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid "
            "WHERE chunks_fts MATCH ? AND c.tenant_id = ? AND c.project_id = ? AND c.rag_id = ?"
            f"{where} ORDER BY s DESC, f.rowid LIMIT ?",
            (
                stats.avgdl,
                *idfs,
                expr,
                scope.tenant_id,
                scope.project_id,
                scope.rag_id,
                *params,
                top_k,
            ),
        )
        return [(int(r[0]), float(r[1])) for r in rows]

    def _rag_epoch(self, scope: RagScope) -> int:
        # the RAG's epoch; the stored table keeps its old name (rag_generations)
        rows = self.db.query(
            "SELECT generation FROM rag_generations WHERE rag_id = ?", (scope.rag_id,)
        )
        return int(rows[0][0] or 0) if rows else 0

    def _cached(self, scope: RagScope, terms: Sequence[QueryTerm], top_k: int) -> Ranked | None:
        assert self.cache is not None
        rag_epoch = self._rag_epoch(scope)
        key = (scope.tenant_id, scope.project_id, scope.rag_id)
        # No statistics read here: an index entry at this epoch holds every row of the RAG,
        # so it derives the same integers FTS5's tables would give (and no write invalidates
        # them: :meth:`applied` keeps the entry at the RAG's epoch).
        found = self.cache.search(
            key,
            rag_epoch,
            [t.token for t in terms],
            None,
            top_k,
            load_rowids=lambda: self._scope_rowids(scope),
            load_texts=self._texts,
            tokenize=self._tokenize_document,
        )
        if found is None:
            return None
        rowids, scores = found
        return list(zip(rowids.tolist(), scores.tolist(), strict=True))

    def _tokenize_document(self, text: str) -> list[str]:
        # The tokenizer of the calling thread's connection: a first load may run on a
        # background thread.
        flags = self.db.apsw.FTS5_TOKENIZE_DOCUMENT
        tokens: list[str] = self._tokenizer()(
            text.encode("utf-8"), flags, None, include_offsets=False, include_colocated=False
        )
        return tokens

    def applied(
        self,
        key: tuple[str, str, str],
        from_epoch: int,
        to_epoch: int,
        removed: Sequence[int],
        added: Sequence[tuple[int, str]],
    ) -> None:
        """A chunk write of this process committed: the in-process index absorbs its delta
        (after the commit, never inside the transaction: it could still roll back)."""
        if self.cache is not None:
            delta = (tuple(removed), tuple(added), self._tokenize_document)
            self.cache.apply(key, from_epoch, to_epoch, delta)

    # -- statistics and what the in-process index reads --------------------------------

    def _stats(
        self, scope: RagScope, terms: Sequence[QueryTerm], rag_epoch: int
    ) -> CollectionStats:
        """The RAG's own BM25 statistics: its rows, their tokens (every column, as FTS5
        counts a row's length) and each term's document frequency among them.

        Never the table's: those count every tenant's rows, so another tenant's writes would
        change this RAG's scores and tell how common a word is in its data. Both lexical paths
        rank with these, so they still agree row for row and bit for bit. Cached per RAG
        until its epoch changes (every chunk write of the RAG bumps it).
        """
        key = (scope.tenant_id, scope.project_id, scope.rag_id)
        token = scope_token(*key)
        with self._stats_lock:
            held = self._rag_stats.get(key)
            if held is None or held[0] != rag_epoch:
                held = (rag_epoch, *self._sizes(scope), {})
                self._rag_stats[key] = held
            self._rag_stats.move_to_end(key)
            while len(self._rag_stats) > _STATS_HELD:
                self._rag_stats.popitem(last=False)
            _, n_rows, total_tokens, df = held
            for term in terms:
                if term.token not in df:
                    expr = f'scope : "{token}" AND text : "' + term.span.replace('"', '""') + '"'
                    df[term.token] = int(
                        self.db.query(
                            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (expr,)
                        )[0][0]
                    )
            doc_freq = {t.token: df[t.token] for t in terms}
        return CollectionStats(n_rows=n_rows, total_tokens=total_tokens, doc_freq=doc_freq)

    def _sizes(self, scope: RagScope) -> tuple[int, int]:
        """(rows, tokens in every column) of the RAG's lexical index, from FTS5's own
        per-row sizes (``chunks_fts_docsize``)."""
        rows = self.db.query(
            "SELECT d.sz FROM chunks c JOIN chunks_fts_docsize d ON d.id = c.rowid "
            "WHERE c.tenant_id = ? AND c.project_id = ? AND c.rag_id = ?",
            (scope.tenant_id, scope.project_id, scope.rag_id),
        )
        return len(rows), sum(sum(sqlite_varints(bytes(r[0]))) for r in rows)

    def _scope_rowids(self, scope: RagScope) -> list[int]:
        return [
            int(r[0])
            for r in self.db.query(
                "SELECT rowid FROM chunks WHERE tenant_id = ? AND project_id = ? AND rag_id = ?",
                (scope.tenant_id, scope.project_id, scope.rag_id),
            )
        ]

    def _texts(self, rowids: Sequence[int]) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        for start in range(0, len(rowids), 500):
            part = list(rowids[start : start + 500])
            marks = ",".join("?" * len(part))
            out += [
                (int(r[0]), str(r[1]))
                for r in self.db.query(
                    f"SELECT rowid, text FROM chunks WHERE rowid IN ({marks})", part
                )
            ]
        return out

    def _tokenizer(self) -> Any:
        return self.db.fts5_tokenizer(*TOKENIZER_ARGS)
