"""The PostgreSQL store's in-process BM25 index: the SQLite store's postings
(:mod:`vancetope_rag.store.inprocess.bm25_index`), fed from the chunks' stored ``tsvector``\\ s.

Why: BM25 in SQL scores every row that holds a query lexeme through ``unnest`` of its
``tsvector``; at 100k chunks a hybrid turn spent ~150 ms there against SQLite's 15 ms
(docs/benchmarks.md). Ranking over postings held in numpy takes a few milliseconds.

Same meaning as the SQL path (:mod:`.postgres.lexical`): the postings are the rows' own
``tsvector``\\ s (the server's ``vtr_english`` lexemes, each as often as it has positions),
a row's length is its ``n_tokens`` (the same count), and the statistics are the ones the
triggers keep (the caller passes them). So a ranking from here is the SQL path's, up to the
order in which a score's terms are added (float rounding of near-ties).

Coherence: every chunk write of a RAG moves its epoch (``rag_text_stats.epoch``, schema step
8) in the writing transaction; the caller reads it in its snapshot with the statistics, and
an entry answers only at that epoch. A stale entry is refreshed from the rows added since
(rows never change: a replacement deletes and inserts), unless it was refreshed a moment ago
(the SQL path answers then, so a busy writer never makes every query pay for a reload). A
first load of a large RAG runs on a background thread while SQL answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from vancetope_rag.store.inprocess.bm25_index import CollectionStats, LexicalCache
from vancetope_rag.store.port.types import RagScope
from vancetope_rag.store.postgres.db import PostgresDatabase

__all__ = ["PostgresLexicalIndex", "tsvector_tokens"]

#: One lexeme of a ``tsvector``'s text form and its positions: ``'word':1,5B,9``. Quotes in
#: a lexeme are doubled and backslashes escaped (PostgreSQL's tsvectorout).
_LEXEME = re.compile(r"'((?:[^'\\]|''|\\.)*)'(?::([0-9A-D,]+))?")
_UNESCAPE = re.compile(r"''|\\(.)")

#: Rows read per statement when an entry loads the ``tsvector``\\ s of rows it lacks.
_LOAD_BATCH = 5_000


def tsvector_tokens(text: str) -> list[str]:
    """A ``tsvector``'s lexemes, each repeated once per position (its term frequency, as
    ``cardinality(positions)`` counts it in SQL; a lexeme without positions counts once)."""
    tokens: list[str] = []
    for match in _LEXEME.finditer(text):
        lexeme = match.group(1)
        if "'" in lexeme or "\\" in lexeme:
            lexeme = _UNESCAPE.sub(lambda m: m.group(1) or "'", lexeme)
        positions = match.group(2)
        tokens.extend([lexeme] * (positions.count(",") + 1 if positions else 1))
    return tokens


class PostgresLexicalIndex:
    """Per-RAG postings of one chunk table family, answering BM25 top-k queries."""

    def __init__(self, db: PostgresDatabase, cache: LexicalCache | None = None) -> None:
        self.db = db
        self.cache = cache if cache is not None else LexicalCache(length_offset=0.0)

    def search(
        self,
        scope: RagScope,
        table: str,
        epoch: int,
        lexemes: Sequence[str],
        stats: CollectionStats,
        top_k: int,
    ) -> list[tuple[int, float]] | None:
        """(rowid, BM25 score) of the ``top_k`` best chunks of the scope, best first (ties:
        older row first), or None when the SQL path should answer (no entry at ``epoch``
        yet). Call it inside the snapshot ``epoch`` was read in: a refresh reads the rows
        there."""
        key = (scope.tenant_id, scope.project_id, scope.rag_id)
        found = self.cache.search(
            key,
            epoch,
            lexemes,
            stats,
            top_k,
            load_rowids=lambda: self._rowids(scope, table),
            load_texts=lambda rowids: self._tsvectors(table, rowids),
            tokenize=tsvector_tokens,
        )
        if found is None:
            return None
        rowids, scores = found
        return list(zip(rowids.tolist(), scores.tolist(), strict=True))

    def _rowids(self, scope: RagScope, table: str) -> Iterable[int]:
        rows = self.db.query(
            f"SELECT rowid FROM {table} WHERE tenant_id = %s AND project_id = %s AND rag_id = %s",
            (scope.tenant_id, scope.project_id, scope.rag_id),
        )
        return [int(r[0]) for r in rows]

    def _tsvectors(self, table: str, rowids: Sequence[int]) -> Iterable[tuple[int, str]]:
        for start in range(0, len(rowids), _LOAD_BATCH):
            batch = list(rowids[start : start + _LOAD_BATCH])
            rows = self.db.query(
                f"SELECT rowid, tsv::text FROM {table} WHERE rowid = ANY(%s::bigint[]) "
                "ORDER BY rowid",
                (batch,),
            )
            yield from ((int(r[0]), str(r[1])) for r in rows)
