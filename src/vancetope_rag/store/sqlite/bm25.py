"""SQLite's FTS5 rules of lexical (BM25) retrieval: the tokenizer, the FTS5 expression, the
scope token and the BM25 formula as FTS5 computes it (the engine-neutral term rule and
constants are :mod:`vancetope_rag.store.inprocess.bm25`'s).

Pure functions (no I/O). The tokenizer is SQLite FTS5's own (``porter unicode61
remove_diacritics 2 tokenchars '_'``), reached from Python through apsw, so the terms a query
is split into here are the ones FTS5 itself sees: English stemming (``cells`` finds ``cell``),
accents folded, and ``snake_case`` identifiers kept whole for code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from vancetope_rag.store.inprocess.bm25 import BM25_B, BM25_K1, QueryTerm

__all__ = [
    "FTS5_BM25_FUNCTION",
    "FTS5_TOKENIZE",
    "TOKENIZER_ARGS",
    "fts5_bm25",
    "match_expression",
    "scope_token",
    "sqlite_varints",
]

#: The ``tokenize=`` option of the FTS5 table (schema v3). Changing it needs a new schema
#: upgrade that rebuilds the table; the in-process index must then follow (tests compare them).
FTS5_TOKENIZE = "porter unicode61 remove_diacritics 2 tokenchars '_'"
#: The same tokenizer as apsw's ``Connection.fts5_tokenizer(name, args)`` takes it.
TOKENIZER_ARGS: tuple[str, list[str]] = (
    "porter",
    ["unicode61", "remove_diacritics", "2", "tokenchars", "_"],
)


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def match_expression(scope: str, terms: Sequence[QueryTerm]) -> str:
    """The FTS5 ``MATCH`` expression: the scope token AND any of the terms in the text column.

    Every term is a quoted string, so nothing in user text is FTS5 syntax (``NEAR``, ``*``,
    ``:``, ``^``, ``AND`` are all plain words inside quotes). Putting the scope in the
    expression lets FTS5 intersect posting lists instead of ranking every tenant's matches.

    Args:
        scope: :func:`scope_token` of the RAG.
        terms: At least one term (see :func:`query_terms`).
    """
    if not terms:
        raise ValueError("a lexical query needs at least one term")
    ors = " OR ".join(_quoted(t.span) for t in terms)
    return f"scope : {_quoted(scope)} AND text : ({ors})"


def scope_token(tenant_id: str, project_id: str, rag_id: str) -> str:
    """The token that marks a chunk's tenant, project and RAG in the FTS5 index.

    Digits only: every tokenizer keeps a digit string whole and the stemmer leaves it alone.
    64 bits of SHA-256; a collision could only add another scope's rows as candidates, which
    the join back to ``chunks`` (tenant, project and RAG re-checked) drops.
    """
    key = "\x1f".join((tenant_id, project_id, rag_id)).encode("utf-8", errors="surrogatepass")
    return str(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


#: The name :func:`fts5_bm25` is registered under on every connection of the store.
FTS5_BM25_FUNCTION = "vtr_bm25"


def fts5_bm25(api: Any, avgdl: float, *idfs: float) -> float:
    """FTS5's ``bm25()`` with the caller's statistics: an FTS5 auxiliary function.

    ``bm25()`` counts the row count, average length and document frequencies over the whole
    table, every tenant's rows included; this one takes the RAG's own (``avgdl`` and one IDF
    per phrase of the expression, the scope phrase's first) and computes the rest as
    ``fts5_aux.c`` does, with the same operations in the same order as the in-process index
    (:func:`.inprocess.bm25.rank`), so the two paths give the same bits. The scope
    column has weight 0 (its phrase never adds to the score); the row length counts every
    column, as FTS5 does. Returns the score itself (higher is better), not its negation.
    """
    length = float(api.column_size(-1))
    score = 0.0
    for i, idf in enumerate(idfs):
        columns = api.phrase_locations(i)
        freq = float(len(columns[1])) if len(columns) > 1 else 0.0  # the text column only
        score += idf * (
            (freq * (BM25_K1 + 1.0)) / (freq + BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl))
        )
    return score


def sqlite_varints(blob: bytes) -> list[int]:
    """Decode a run of SQLite varints (1-9 bytes, big-endian 7-bit groups; the 9th byte
    carries 8 bits), as FTS5 writes its averages record: row count, then tokens per column."""
    values: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for j in range(9):
            if i >= n:
                raise ValueError("truncated varint")
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values
