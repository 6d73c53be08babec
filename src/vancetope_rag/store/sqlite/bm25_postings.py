"""Postings of the in-process BM25 index (:mod:`.sqlite.bm25_index`): building them from chunk
texts, and ranking rows with FTS5's ``bm25()`` formula (and the RAG's statistics).

Pure numpy, no I/O: the tokens come from FTS5's own tokenizer through the caller, the RAG's
own collection statistics from FTS5's tables through the caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from vancetope_rag.store.sqlite.bm25 import BM25_B, BM25_K1, bm25_idf

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


def rank(
    segments: Sequence[Segment | None],
    rowids: IntArray,
    norm: FloatArray,
    alive: npt.NDArray[np.bool_],
    vocab: Mapping[str, int],
    terms: Sequence[str],
    stats: CollectionStats,
    top_k: int,
) -> tuple[IntArray, FloatArray]:
    """(rowids, BM25 scores) of the ``top_k`` best live rows, best first (ties: lower rowid
    first), scored with FTS5's ``bm25()`` formula, ``stats`` and ``norm``, the rows'
    :func:`length_norm` at ``stats.avgdl``."""
    if not stats.avgdl:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    scores = np.zeros(len(rowids), dtype=np.float64)
    # FTS5 adds the phrases' terms in expression order; so does this loop, with the same
    # operations in the same order, so the float results are the same bits.
    for token in terms:
        term = vocab.get(token)
        if term is None:
            continue
        idf = bm25_idf(stats.n_rows, stats.doc_freq.get(token, 0))
        for segment in segments:
            if segment is None:
                continue
            rows, tf = segment.postings(term)
            if len(rows):
                # add.at: a row once per term, as ``+=`` would, in a tighter loop
                np.add.at(scores, rows, idf * ((tf * (BM25_K1 + 1.0)) / (tf + norm[rows])))
    scores[~alive] = 0.0
    found = np.flatnonzero(scores > 0.0)
    if len(found) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    k = min(top_k, len(found))
    if k < len(found):
        # the k-th best score, then every row at least that good (ties kept for the sort)
        kth = np.partition(scores[found], len(found) - k)[len(found) - k]
        found = found[scores[found] >= kth]
    ids = rowids[found]
    order = np.lexsort((ids, -scores[found]))[:k]
    return ids[order], scores[found][order]
