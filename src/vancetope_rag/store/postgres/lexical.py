"""Lexical (BM25) search on PostgreSQL with each RAG's own statistics.

A chunk's text is folded here (accents removed, NUL dropped: the server has no
``unaccent``) and turned into a ``tsvector`` by the store's ``vtr_english`` configuration
(:mod:`.postgres.schema`: English snowball stemming, no stopwords), stored with the chunk and
its token count; a GIN index finds the rows holding a query's lexemes. ``ts_rank`` has no
IDF, so the ranking is BM25 computed in SQL from each matching row's term frequencies, with
the document count, the average length and each term's document frequency counted over the
RAG's own chunks only (never the table's, which every tenant writes into), read from the
statistics that triggers keep in the writing transaction (schema step 3). The constants and
the IDF are FTS5's, as on the SQLite store (:mod:`vancetope_rag.store.inprocess.bm25`), so a
score means the same on both; queries drop the same English stopwords.

A common lexeme matches a large part of a RAG, and scoring every row that holds it would
cost a query seconds at a million chunks; so the rarest lexemes select the rows first and a
pass is kept only when no row without them could reach the top ``top_k`` (MaxScore:
:class:`MatchPlan`); otherwise the next pass matches more lexemes. The result is the one
scoring every matching row would give.

Pure functions (no I/O); :mod:`.postgres.chunks` runs what they build.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vancetope_rag.domain.retrieval.terms import MAX_QUERY_TERMS, STOPWORDS, fold
from vancetope_rag.store.inprocess.bm25 import BM25_B, BM25_K1, bm25_idf, words

__all__ = [
    "MATCH_BUDGET",
    "TS_CONFIG",
    "MatchPlan",
    "bm25_params",
    "bm25_sql",
    "fold",
    "idfs",
    "n_tokens_sql",
    "query_text",
    "terms_params",
    "terms_sql",
    "tsquery",
    "tsvector_sql",
]

#: The text search configuration of the chunk ``tsvector``\\ s (schema step 1).
TS_CONFIG = "vtr_english"


def tsvector_sql(folded: str) -> str:
    """The SQL expression of a chunk's ``tsvector``, from its text as :func:`fold` leaves it
    (the SQL expression ``folded``)."""
    return f"to_tsvector('{TS_CONFIG}', {folded})"


def n_tokens_sql(tsv: str) -> str:
    """The SQL expression of a chunk's BM25 length: the positions its ``tsvector`` (the SQL
    expression ``tsv``) holds."""
    return f"(SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest({tsv}))"


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


def terms_sql() -> str:
    """The query's lexemes in query order, each with its document frequency in the RAG, and
    the RAG's chunk count, token total and lexical epoch (parameters: the configuration, the
    query words, tenant, project, RAG twice), all read from the statistics the chunk tables'
    triggers keep (schema steps 3, 8): a few index probes, whatever the RAG's size."""
    return (
        "WITH q AS (SELECT lexeme, positions[1] AS pos "
        "  FROM unnest(to_tsvector(%s::regconfig, %s))), "
        "s AS (SELECT n_rows, n_tokens, epoch FROM rag_text_stats "
        "  WHERE tenant_id = %s AND project_id = %s AND rag_id = %s) "
        "SELECT q.lexeme, coalesce(t.df, 0), "
        "  coalesce((SELECT n_rows FROM s), 0), coalesce((SELECT n_tokens FROM s), 0), "
        "  coalesce((SELECT epoch FROM s), 0) "
        "FROM q LEFT JOIN rag_terms t ON t.tenant_id = %s AND t.project_id = %s "
        "  AND t.rag_id = %s AND t.lexeme = q.lexeme "
        "ORDER BY q.pos"
    )


def terms_params(words: str, scope: tuple[str, str, str]) -> list[Any]:
    return [TS_CONFIG, words, *scope, *scope]


def idfs(n_rows: int, doc_freq: Mapping[str, int], lexemes: Sequence[str]) -> list[float]:
    return [bm25_idf(n_rows, doc_freq.get(lex, 0)) for lex in lexemes]


#: How many rows the first BM25 pass may match: the rarest lexemes up to this total
#: document frequency select the candidates (every lexeme still scores them).
MATCH_BUDGET = 5_000


@dataclass(frozen=True)
class MatchPlan:
    """Which lexemes select a BM25 pass's candidates (``match``), and the most a row that
    holds none of them can score (``rest_bound``: the other lexemes' BM25 maxima summed).
    When the pass's ``top_k``-th score beats ``rest_bound`` no unmatched row could enter
    the top ``top_k``, and the pass is exact (MaxScore); otherwise :meth:`widen`."""

    order: tuple[str, ...]  # the lexemes, rarest first
    bounds: tuple[float, ...]  # each one's BM25 maximum, idf * (k1 + 1)
    n_match: int

    @classmethod
    def first(
        cls, lexemes: Sequence[str], weights: Sequence[float], doc_freq: Mapping[str, int]
    ) -> MatchPlan:
        ranked = sorted(zip(lexemes, weights, strict=True), key=lambda t: doc_freq.get(t[0], 0))
        n, total = 1, doc_freq.get(ranked[0][0], 0)
        while n < len(ranked) and total + doc_freq.get(ranked[n][0], 0) <= MATCH_BUDGET:
            total += doc_freq.get(ranked[n][0], 0)
            n += 1
        return cls(
            tuple(lex for lex, _ in ranked), tuple(w * (BM25_K1 + 1.0) for _, w in ranked), n
        )

    @property
    def match(self) -> tuple[str, ...]:
        return self.order[: self.n_match]

    @property
    def complete(self) -> bool:
        return self.n_match == len(self.order)

    @property
    def rest_bound(self) -> float:
        return sum(self.bounds[self.n_match :])

    def exact(self, scores: Sequence[float], top_k: int) -> bool:
        return self.complete or (len(scores) >= top_k and scores[top_k - 1] > self.rest_bound)

    def widen(self, scores: Sequence[float], top_k: int) -> MatchPlan:
        """The next pass: enough further lexemes (rarest first) that the rest's bound falls
        below the ``top_k``-th score found so far (a lower bound of the final one), or all
        of them when fewer than ``top_k`` rows matched."""
        n = self.n_match + 1
        if len(scores) < top_k:
            n = len(self.order)
        else:
            while n < len(self.order) and sum(self.bounds[n:]) >= scores[top_k - 1]:
                n += 1
        return MatchPlan(self.order, self.bounds, n)


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
    match: Sequence[str],
    filter_params: Sequence[Any],
    top_k: int,
) -> list[Any]:
    """``bm25_sql``'s parameters: every lexeme scores a row, ``match`` selects the rows."""
    return [
        list(lexemes),
        list(weights),
        avgdl,
        list(lexemes),
        *scope,
        tsquery(match),
        *filter_params,
        top_k,
    ]
