"""Lexical (BM25) search on PostgreSQL with each RAG's own statistics.

A chunk's text is folded here (accents removed, NUL dropped: the server has no
``unaccent``) and turned into a ``tsvector`` by the store's ``vtr_english`` configuration
(:mod:`.postgres.schema`: English snowball stemming, no stopwords), stored with the chunk and
its token count; a GIN index finds the rows holding a query's lexemes. ``ts_rank`` has no
IDF, so the ranking is BM25 computed in SQL from each matching row's term frequencies, with
the document count, the average length and each term's document frequency counted over the
RAG's own chunks only (never the table's, which every tenant writes into). The constants and
the IDF are FTS5's, as on the SQLite store (:mod:`vancetope_rag.store.shared`), so a
score means the same on both; queries drop the same English stopwords.

Pure functions (no I/O); :mod:`.postgres.chunks` runs what they build.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from vancetope_rag.store.shared import (
    BM25_B,
    BM25_K1,
    MAX_QUERY_TERMS,
    STOPWORDS,
    bm25_idf,
    words,
)

__all__ = [
    "TS_CONFIG",
    "bm25_sql",
    "fold",
    "idfs",
    "query_text",
    "stats_params",
    "stats_sql",
    "tsquery",
]

#: The text search configuration of the chunk ``tsvector``\\ s (schema step 1).
TS_CONFIG = "vtr_english"


def fold(text: str) -> str:
    """The text as it is indexed: accents removed (``café`` → ``cafe``, as SQLite's
    ``remove_diacritics 2``), compatibility forms unified, NUL characters as spaces."""
    decomposed = unicodedata.normalize("NFKD", text.replace("\x00", " "))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def query_text(text: str) -> str:
    """The query's words, folded, stopwords dropped unless nothing else remains (as the
    SQLite store does), at most :data:`MAX_QUERY_TERMS` distinct ones."""
    found = list(dict.fromkeys(words(fold(text))))
    content = [w for w in found if w not in STOPWORDS]
    return " ".join((content or found)[:MAX_QUERY_TERMS])


def tsquery(lexemes: Sequence[str]) -> str:
    """A ``tsquery`` literal matching any of ``lexemes`` (each quoted: no user text is
    tsquery syntax)."""
    return " | ".join("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)


#: A row's ``tsvector`` cut down to the query's lexemes (the ``text[]`` parameter): they
#: are weighted A (every indexed lexeme has the default D) and only A is kept, so a matching
#: row yields its few query terms, not every lexeme it holds.
_QUERY_TERMS_OF_ROW = "unnest(ts_filter(setweight(c.tsv, 'A', %s::text[]), '{a}'))"


def stats_sql(table: str, n_terms: int) -> str:
    """The RAG's chunk count and token total, and each of the ``n_terms`` query lexemes'
    document frequency (parameters: one tsquery per lexeme, then tenant, project, RAG), in
    one pass over the RAG's rows."""
    freqs = "".join(", count(*) FILTER (WHERE c.tsv @@ %s::tsquery)" for _ in range(n_terms))
    return (
        f"SELECT count(*), coalesce(sum(c.n_tokens), 0){freqs} FROM {table} c "
        "WHERE c.tenant_id = %s AND c.project_id = %s AND c.rag_id = %s"
    )


def stats_params(lexemes: Sequence[str], scope: tuple[str, str, str]) -> list[Any]:
    return [*(tsquery([lex]) for lex in lexemes), *scope]


def idfs(n_rows: int, doc_freq: dict[str, int], lexemes: Sequence[str]) -> list[float]:
    return [bm25_idf(n_rows, doc_freq.get(lex, 0)) for lex in lexemes]


def bm25_sql(table: str, where: str, columns: str) -> str:
    """The ``top_k`` chunks of the scope by BM25, best first (ties: older row first).

    Parameters, in order: the lexemes, their IDFs, the average length, the lexemes again,
    tenant, project, RAG, the tsquery, ``where``'s parameters, ``top_k``. The sum runs in a
    fixed order, so a score is the same bits whatever plan the server picks.
    """
    tf = "cardinality(u.positions)::float8"
    k1, b = f"{BM25_K1!r}::float8", f"{BM25_B!r}::float8"  # float arithmetic, not numeric
    term = (
        f"q.idf * ({tf} * {BM25_K1 + 1.0!r}::float8) / ({tf} + {k1} * "
        f"(1::float8 - {b} + {b} * c.n_tokens / p.avgdl))"
    )
    return (
        "WITH q AS (SELECT * FROM unnest(%s::text[], %s::float8[]) AS q(lexeme, idf)), "
        "p AS (SELECT %s::float8 AS avgdl), "
        "ranked AS ("
        f"  SELECT c.rowid, sum({term} ORDER BY u.lexeme) AS score "
        f"  FROM {table} c CROSS JOIN LATERAL {_QUERY_TERMS_OF_ROW} u "
        "  JOIN q ON q.lexeme = u.lexeme "
        "  CROSS JOIN p "
        "  WHERE c.tenant_id = %s AND c.project_id = %s AND c.rag_id = %s "
        f"  AND c.tsv @@ %s::tsquery{where} "
        "  GROUP BY c.rowid ORDER BY score DESC, c.rowid LIMIT %s) "
        f"SELECT {columns}, r.score AS lexical_score "
        f"FROM ranked r JOIN {table} c ON c.rowid = r.rowid "
        "ORDER BY r.score DESC, c.rowid"
    )


def bm25_params(
    lexemes: Sequence[str],
    weights: Sequence[float],
    avgdl: float,
    scope: tuple[str, str, str],
    filter_params: Sequence[Any],
    top_k: int,
) -> list[Any]:
    return [
        list(lexemes),
        list(weights),
        avgdl,
        list(lexemes),
        *scope,
        tsquery(lexemes),
        *filter_params,
        top_k,
    ]
