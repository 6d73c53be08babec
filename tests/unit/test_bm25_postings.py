"""The in-process BM25 ranking (:mod:`vancetope_rag.store.inprocess.bm25`) against a
plain per-row evaluation of FTS5's formula, with and without kept per-term weights."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vancetope_rag.store.inprocess.bm25 import (
    BM25_K1,
    CollectionStats,
    Segment,
    TermWeights,
    bm25_idf,
    length_norm,
    postings_of,
    rank,
)

WORDS = ["a", "b", "c", "d", "e", "f"]


def _reference(
    docs: list[list[str]], alive: list[bool], terms: list[str], stats: CollectionStats, k: int
) -> list[tuple[int, float]]:
    """Each live row's score, term by term in query order, one row at a time."""
    norm = length_norm(np.asarray([len(d) for d in docs], dtype=np.float64), stats.avgdl)
    scored = []
    for row, doc in enumerate(docs):
        score = 0.0
        for token in terms:
            tf = float(doc.count(token))
            if tf:
                idf = bm25_idf(stats.n_rows, stats.doc_freq.get(token, 0))
                score += idf * ((tf * (BM25_K1 + 1.0)) / (tf + norm[row]))
        if alive[row] and score > 0.0:
            scored.append((100 + row, score))
    scored.sort(key=lambda t: (-t[1], t[0]))
    return scored[:k]


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), max_size=40),
    dead=st.sets(st.integers(0, 39)),
    terms=st.lists(st.sampled_from([*WORDS, "zzz"]), min_size=1, max_size=5, unique=True),
    top_k=st.integers(1, 10),
    budget=st.integers(1, 60),
)
def test_ranking_is_the_per_row_formula_with_or_without_kept_weights(
    docs: list[list[str]], dead: set[int], terms: list[str], top_k: int, budget: int
) -> None:
    vocab: dict[str, int] = {}
    rowids, lengths, rows, term_ids, tf = postings_of(
        [(100 + i, " ".join(d)) for i, d in enumerate(docs)], str.split, vocab, 0, 0.0
    )
    main = Segment.build(rows, term_ids, tf, len(vocab))
    alive = [i not in dead for i in range(len(docs))]
    live = np.asarray(alive, dtype=np.bool_)
    stats = CollectionStats(
        n_rows=sum(alive),
        total_tokens=int(sum(len(d) for d, a in zip(docs, alive, strict=True) if a)),
        doc_freq={
            t: sum(1 for d, a in zip(docs, alive, strict=True) if a and t in d) for t in terms
        },
    )
    expected = _reference(docs, alive, terms, stats, top_k) if stats.avgdl else []
    ids = np.asarray(rowids, dtype=np.int64)
    kept = TermWeights(lengths, stats.avgdl, budget=budget, min_postings=1)
    none_kept = TermWeights(lengths, stats.avgdl, budget=0)
    for weights in (none_kept, kept, kept):  # the third pass reads the weights kept
        found, scores = rank((main, None), ids, weights, live, vocab, terms, stats, top_k)
        assert list(zip(found.tolist(), scores.tolist(), strict=True)) == expected


def test_kept_weights_stay_within_their_budget() -> None:
    vocab: dict[str, int] = {}
    texts = [(i, "common " + ("rare" if i % 2 else "other")) for i in range(8)]
    _, lengths, rows, term_ids, tf = postings_of(texts, str.split, vocab, 0, 0.0)
    main = Segment.build(rows, term_ids, tf, len(vocab))
    weights = TermWeights(lengths, 2.0, budget=9, min_postings=2)
    for token in ("common", "rare", "other"):
        term = vocab[token]
        assert weights.get(term, *main.postings(term)) is not None
    # common (8) went first, rare (4) then other (4) stay: 8 weights held
    assert set(weights._held) == {vocab["rare"], vocab["other"]}
    lone = postings_of([(9, "lone")], str.split, vocab, 8, 0.0)
    assert weights.get(vocab["lone"], lone[2], lone[4]) is None  # 1 posting: not kept
    assert vocab["lone"] not in weights._held
