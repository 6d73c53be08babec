"""BM25 as every store ranks lexical hits, engine-neutral and pure (no I/O): the query terms
(stopwords, folding), FTS5's formula and constants (the SQLite, PostgreSQL and in-process
paths compute the same scores), and the postings of the in-process index
(:mod:`.inprocess.bm25_index`): building them from chunk texts and ranking rows with the
RAG's own statistics.

The tokens come from the engine's analyzer through the caller (FTS5's own tokenizer on
SQLite, ``tsvector`` lexemes on PostgreSQL, the Atlas analyzer's twin on MongoDB), the RAG's
collection statistics from the engine's tables through the caller.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vancetope_rag.domain.retrieval.terms import MAX_QUERY_TERMS, STOPWORDS

# -- full text ---------------------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: object) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore), like the standard analyzer."""
    return _WORD.findall(text.lower()) if isinstance(text, str) else []


# -- BM25 (the SQL stores rank lexical hits alike) -----------------------------------------

#: FTS5's ``bm25()`` constants (SQLite's ``fts5_aux.c``; the PostgreSQL store computes the same).
BM25_K1 = 1.2
BM25_B = 0.75

#: ``tokenize(text)`` → ``(start, end, token)`` per token, offsets in UTF-8 bytes of ``text``.
Tokenize = Callable[[str], Sequence[tuple[int, int, str]]]


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One term of a lexical query: the query text it came from and the token the store's
    analyzer makes of it."""

    #: The exact substring of the query (one token span): what the store's search receives.
    span: str
    #: The token the analyzer produces for it (stemmed, folded): what an index looks up.
    token: str


def query_terms(
    text: str, tokenize: Tokenize, *, max_terms: int = MAX_QUERY_TERMS
) -> list[QueryTerm]:
    """The distinct terms of a query, in order of first appearance, stopwords dropped.

    The one term rule of the stores' lexical search (SQLite's FTS5 and Atlas's ``$search``
    receive the terms it keeps). Stopwords are recognised on the lower-cased span, and dropped
    only when something else remains. Each term keeps the query's own span rather than the
    token: a Porter stemmer is not idempotent (``agreed`` → ``agre``, but ``agre`` →
    ``agr``), so sending the span makes the search derive the very token listed here.

    Args:
        text: The user's query.
        tokenize: The store's analyzer (FTS5's tokenizer in query mode on SQLite; the Atlas
            text analyzer's twin on MongoDB), see :data:`Tokenize`.
        max_terms: Keep at most this many distinct terms (the first ones).

    Returns:
        The terms; empty when the text has no token at all (punctuation only).
    """
    raw = text.encode("utf-8", errors="replace")
    terms: list[QueryTerm] = []
    seen: set[str] = set()
    for start, end, token in tokenize(text):
        if not token or token in seen:
            continue
        seen.add(token)
        terms.append(QueryTerm(raw[start:end].decode("utf-8", errors="replace"), token))
    content = [t for t in terms if t.span.lower() not in STOPWORDS]
    return (content or terms)[:max_terms]


def bm25_idf(n_rows: int, n_hit: int) -> float:
    """FTS5's IDF of a term found in ``n_hit`` of ``n_rows`` rows (at least 1e-6)."""
    idf = math.log((n_rows - n_hit + 0.5) / (n_hit + 0.5))
    return idf if idf > 0.0 else 1e-6


# -- postings of the in-process index ----------------------------------------

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
RowArray = npt.NDArray[np.int32]

#: ``tokenize(text)``: the FTS5 tokens of a chunk text (document mode), in order.
TokenizeDocument = Callable[[str], Sequence[str]]


@dataclass(frozen=True, slots=True)
class CollectionStats:
    """A RAG's statistics for one query: its rows and their tokens (every column, as
    ``bm25()`` counts a row's length) and each term's document frequency in the text column
    among those rows. Never the whole table's: other tenants' rows must not move a RAG's
    scores."""

    n_rows: int
    total_tokens: int
    doc_freq: Mapping[str, int]

    @property
    def avgdl(self) -> float:
        return self.total_tokens / self.n_rows if self.n_rows else 0.0


@dataclass
class Segment:
    """Column-major postings of some rows: term id → (row positions, frequencies)."""

    ptr: IntArray  # one past each term's last posting; len(vocab) + 1 entries
    rows: RowArray  # positions in the index's row arrays
    tf: FloatArray

    @classmethod
    def build(cls, rows: RowArray, terms: IntArray, tf: FloatArray, n_terms: int) -> Segment:
        order = np.argsort(terms, kind="stable")
        ptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=n_terms), out=ptr[1:])
        return cls(ptr, rows[order], tf[order])

    def postings(self, term: int) -> tuple[RowArray, FloatArray]:
        if term + 1 >= len(self.ptr):
            return np.zeros(0, dtype=np.int32), np.zeros(0)
        a, b = int(self.ptr[term]), int(self.ptr[term + 1])
        return self.rows[a:b], self.tf[a:b]

    def coo(self) -> tuple[RowArray, IntArray, FloatArray]:
        """(rows, terms, frequencies) of every posting."""
        terms = np.repeat(np.arange(len(self.ptr) - 1, dtype=np.int64), np.diff(self.ptr))
        return self.rows, terms, self.tf


def postings_of(
    texts: Iterable[tuple[int, str]],
    tokenize: TokenizeDocument,
    vocab: dict[str, int],
    first_row: int,
    length_offset: float = 1.0,
) -> tuple[list[int], FloatArray, RowArray, IntArray, FloatArray]:
    """Tokenize chunk texts: their rowids and lengths, and their postings in COO form
    (rows numbered from ``first_row``; new terms added to ``vocab``). A row's length is its
    token count plus ``length_offset``: FTS5 counts the scope column's one token too."""
    rowids: list[int] = []
    lengths: list[float] = []
    rows: list[int] = []
    terms: list[int] = []
    freqs: list[int] = []
    for rowid, text in texts:
        tokens = tokenize(text)
        row = first_row + len(rowids)
        rowids.append(rowid)
        lengths.append(len(tokens) + length_offset)
        for token, n in Counter(tokens).items():
            terms.append(vocab.setdefault(token, len(vocab)))
            rows.append(row)
            freqs.append(n)
    return (
        rowids,
        np.asarray(lengths, dtype=np.float64),
        np.asarray(rows, dtype=np.int32),
        np.asarray(terms, dtype=np.int64),
        np.asarray(freqs, dtype=np.float64),
    )


def length_norm(lengths: FloatArray, avgdl: float) -> FloatArray:
    """Each row's BM25 length normalisation, ``k1 * (1 - b + b * length / avgdl)``: the
    same for every query at one ``avgdl``, so a caller may keep it (at a million rows it
    is ~2 ms of a query)."""
    norm: FloatArray = BM25_K1 * (1 - BM25_B + BM25_B * lengths / avgdl)
    return norm


class TermWeights:
    """The rows' :func:`length_norm` at one average length, and the per-posting BM25
    weights ``(tf * (k1 + 1)) / (tf + norm)`` of a segment's long postings at it, kept for
    the next queries: a query's score is then ``idf * weight`` per posting, the same bits as
    computing it whole. At a million rows a common term has hundreds of thousands of
    postings, and the gather of their rows' norms and the arithmetic were a third of a
    ranking. Lists shorter than ``min_postings`` are computed each time; past ``budget``
    weights held, the oldest terms are dropped (``budget`` 0: none kept)."""

    def __init__(
        self, lengths: FloatArray, avgdl: float, *, budget: int, min_postings: int = 4_096
    ) -> None:
        self.avgdl = avgdl
        # avgdl 0: no row holds a token, and :func:`rank` returns before reading any norm
        self.norm = length_norm(lengths, avgdl) if avgdl else np.zeros(0)
        self.budget = budget
        self.min_postings = min_postings
        self._held: dict[int, FloatArray] = {}
        self._size = 0
        self._lock = threading.Lock()

    def get(self, term: int, rows: RowArray, tf: FloatArray) -> FloatArray | None:
        """The weights of ``term``'s postings (``rows``, ``tf``), or None for a short list."""
        if len(rows) < self.min_postings or len(rows) > self.budget:
            return None
        held = self._held.get(term)
        if held is not None:
            return held
        weights = np.take(self.norm, rows, mode="clip")
        np.add(tf, weights, out=weights)
        weights = np.divide(tf * (BM25_K1 + 1.0), weights, out=weights)
        with self._lock:
            if term not in self._held:
                self._held[term] = weights
                self._size += len(weights)
                while self._size > self.budget:
                    self._size -= len(self._held.pop(next(iter(self._held))))
        return weights


def rank(
    segments: Sequence[Segment | None],
    rowids: IntArray,
    weights: TermWeights,
    alive: npt.NDArray[np.bool_],
    vocab: Mapping[str, int],
    terms: Sequence[str],
    stats: CollectionStats,
    top_k: int,
) -> tuple[IntArray, FloatArray]:
    """(rowids, BM25 scores) of the ``top_k`` best live rows, best first (ties: lower rowid
    first), scored with FTS5's ``bm25()`` formula, ``stats`` and ``weights`` (the rows'
    norms at ``stats.avgdl``, and the first segment's kept weights)."""
    if not stats.avgdl:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    query = [
        (term, bm25_idf(stats.n_rows, stats.doc_freq.get(token, 0)))
        for token in terms
        if (term := vocab.get(token)) is not None
    ]
    postings = [
        [
            (segment is segments[0], *segment.postings(term))
            for segment in segments
            if segment is not None
        ]
        for term, _ in query
    ]
    longest = max((len(rows) for lists in postings for _, rows, _ in lists), default=0)
    # Two scratch arrays for every term's arithmetic: at a million rows a common term has
    # hundreds of thousands of postings, and fresh temporaries of that size cost page faults.
    upper, lower = np.empty(longest), np.empty(longest)
    scores = np.zeros(len(rowids), dtype=np.float64)
    # FTS5 adds the phrases' terms in expression order; so does this loop, with the same
    # operations in the same order (idf * ((tf * (k1 + 1)) / (tf + norm)), in place), so the
    # float results are the same bits.
    for (term, idf), lists in zip(query, postings, strict=True):
        for first, rows, tf in lists:
            n = len(rows)
            if not n:
                continue
            den, num = lower[:n], upper[:n]
            kept = weights.get(term, rows, tf) if first else None
            if kept is not None:
                np.multiply(idf, kept, out=num)
            else:
                np.take(weights.norm, rows, out=den, mode="clip")  # rows are in range: no copy
                np.add(tf, den, out=den)
                np.multiply(tf, BM25_K1 + 1.0, out=num)
                np.divide(num, den, out=num)
                np.multiply(idf, num, out=num)
            # add.at: a row once per term, as ``+=`` would, in a tighter loop
            np.add.at(scores, rows, num)
    scores[~alive] = 0.0
    found = np.flatnonzero(scores > 0.0)
    if len(found) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    held = scores[found]
    k = min(top_k, len(found))
    if k < len(found):
        # the k-th best score, then every row at least that good (ties kept for the sort)
        kth = np.partition(held, len(found) - k)[len(found) - k]
        keep = held >= kth
        found, held = found[keep], held[keep]
    ids = rowids[found]
    order = np.lexsort((ids, -held))[:k]
    return ids[order], held[order]
