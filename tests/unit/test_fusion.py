"""Hybrid retrieval's pure rules (domain/retrieval/ranking.py): reciprocal-rank fusion, the cosine
gate on every hit, the per-document cap and the over-fetch on fused candidate lists."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.ranking import (
    Candidates,
    FusionParams,
    RetrievalMode,
    collect_hits,
    fuse,
    parse_retrieval_mode,
    select_hits,
)
from vancetope_rag.errors import InvalidInputError


def hit(cid: str, cosine: float, source: str | None = None, bm25: float | None = None) -> Hit:
    return Hit(
        score=cosine,
        text=cid,
        source_ref=source or cid,
        chunk_id=cid,
        lexical_score=bm25,
    )


class Store:
    """A RAG as two ranked lists: cosine order and a fixed lexical order."""

    def __init__(self, cosines: dict[str, float], lexical: list[str], sources: dict[str, str]):
        self.cosines, self.lexical, self.sources = cosines, lexical, sources
        self.fetches: list[int] = []

    def __call__(self, n: int) -> Candidates:
        self.fetches.append(n)
        dense = sorted(self.cosines, key=lambda c: -self.cosines[c])[:n]
        return Candidates.hybrid(
            [hit(c, self.cosines[c], self.sources.get(c)) for c in dense],
            [hit(c, self.cosines[c], self.sources.get(c), 1.0) for c in self.lexical[:n]],
            n,
            FusionParams(k=20),
        )


def test_fuse_orders_by_reciprocal_rank_and_keeps_the_cosine() -> None:
    dense = [hit("a", 0.9), hit("b", 0.8), hit("c", 0.7)]
    lexical = [hit("c", 0.7, bm25=9.0), hit("d", 0.1, bm25=5.0), hit("a", 0.9, bm25=1.0)]
    fused = fuse(dense, lexical, FusionParams(k=10))
    assert [h.chunk_id for h in fused] == ["a", "c", "b", "d"]
    a, c, b, d = fused
    assert a.fused_score == pytest.approx(1 / 11 + 1 / 13)
    assert c.fused_score == pytest.approx(1 / 13 + 1 / 11)
    assert a.score == 0.9 and a.dense_rank == 1 and a.lexical_rank == 3 and a.lexical_score == 1.0
    assert (b.dense_rank, b.lexical_rank, b.lexical_score) == (2, None, None)
    assert (d.dense_rank, d.lexical_rank, d.score) == (None, 2, 0.1)
    # a tie on the fused score falls to the cosine (a before c)
    assert a.fused_score == pytest.approx(c.fused_score)


def test_fuse_weights_and_empty_sides() -> None:
    dense, lexical = [hit("a", 0.9), hit("b", 0.5)], [hit("b", 0.5), hit("a", 0.9)]
    favour_lexical = fuse(dense, lexical, FusionParams(k=1, dense_weight=0.5, lexical_weight=2))
    assert [h.chunk_id for h in favour_lexical] == ["b", "a"]
    assert [h.chunk_id for h in fuse(dense, [], FusionParams())] == ["a", "b"]
    assert [h.chunk_id for h in fuse([], lexical, FusionParams())] == ["b", "a"]
    assert fuse([], [], FusionParams()) == []


@given(
    dense=st.lists(st.integers(0, 30), unique=True, max_size=20),
    lexical=st.lists(st.integers(0, 30), unique=True, max_size=20),
    k=st.floats(0.5, 100),
)
def test_fuse_is_a_permutation_of_the_union_sorted_by_fused_score(
    dense: list[int], lexical: list[int], k: float
) -> None:
    fused = fuse(
        [hit(str(i), i / 100) for i in dense],
        [hit(str(i), i / 100) for i in lexical],
        FusionParams(k=k),
    )
    assert sorted(h.chunk_id for h in fused) == sorted({str(i) for i in dense + lexical})
    scores = [h.fused_score for h in fused]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert all(h.score == int(h.chunk_id) / 100 for h in fused)  # the cosine is untouched


def test_every_hit_is_gated_on_its_own_cosine_in_fused_order() -> None:
    # the lexical favourite has a low cosine: it ranks first but cannot pass minScore 0.35
    fused = fuse(
        [hit("dense-good", 0.6), hit("dense-ok", 0.4)],
        [hit("lexical-only", 0.1, bm25=12.0), hit("dense-ok", 0.4, bm25=3.0)],
        FusionParams(),
    )
    assert fused[0].chunk_id == "dense-ok"
    kept = select_hits(fused, 5, 0.35, None)
    assert [h.chunk_id for h in kept] == ["dense-ok", "dense-good"]
    assert all(h.score >= 0.35 for h in kept)


def test_off_topic_turns_are_dropped_in_hybrid_exactly_as_in_dense() -> None:
    """If no chunk reaches the threshold's cosine, no hybrid hit passes either, however well
    the lexical side ranks it; if one does, the turn gets hits in both modes."""
    cosines = {f"c{i}": 0.34 - i / 100 for i in range(30)}
    lexical = [f"c{i}" for i in reversed(range(30))]
    store = Store(cosines, lexical, {})
    assert collect_hits(store, top_k=5, min_score=0.35, max_per_doc=2, min_fetch=100) == []
    dense_only = collect_hits(
        lambda n: [hit(c, s) for c, s in sorted(cosines.items(), key=lambda t: -t[1])][:n],
        top_k=5,
        min_score=0.35,
    )
    assert dense_only == []
    cosines["c29"] = 0.36  # one chunk over the threshold, last in the lexical list
    hits = collect_hits(Store(cosines, lexical, {}), top_k=5, min_score=0.35, min_fetch=100)
    assert [h.chunk_id for h in hits] == ["c29"]


def test_hybrid_overfetch_fills_the_cap_and_stops_at_the_cosine_floor() -> None:
    # one long document holds the best chunks of both lists
    cosines = {f"long-{i}": 0.9 - i / 1000 for i in range(300)}
    cosines |= {"other-1": 0.5, "other-2": 0.45}
    sources = {c: "long" if c.startswith("long") else c for c in cosines}
    lexical = [f"long-{i}" for i in range(300)] + ["other-2", "other-1"]
    store = Store(cosines, lexical, sources)
    hits = collect_hits(store, top_k=3, max_per_doc=1, min_fetch=10)
    assert [h.source_ref for h in hits] == ["long", "other-1", "other-2"]
    assert store.fetches[0] == 20 and len(store.fetches) > 1  # first_fetch(3, 1) = 20
    # a threshold above everything left out stops the rounds: the dense floor is below it
    store = Store(cosines, lexical, sources)
    hits = collect_hits(store, top_k=3, min_score=0.85, max_per_doc=1, min_fetch=10)
    assert [h.source_ref for h in hits] == ["long"]
    assert store.fetches == [20, 80]


def test_candidates_say_when_the_rag_is_exhausted() -> None:
    few = Candidates.hybrid([hit("a", 0.5)], [hit("b", 0.2)], 10, FusionParams())
    assert few.complete and few.cosine_floor == 0.5
    full = Candidates.hybrid([hit("a", 0.5), hit("b", 0.2)], [], 2, FusionParams())
    assert not full.complete and full.cosine_floor == 0.2
    assert Candidates.hybrid([], [], 5, FusionParams()).cosine_floor is None


def test_modes_and_parameters_are_validated() -> None:
    assert parse_retrieval_mode(" Hybrid ") is RetrievalMode.HYBRID
    assert parse_retrieval_mode("dense") is RetrievalMode.DENSE
    for bad in ("sparse", "", None, 1):
        with pytest.raises(InvalidInputError, match="dense, hybrid"):
            parse_retrieval_mode(bad)
    for kwargs in ({"k": 0}, {"dense_weight": -1}, {"depth": 0}):
        with pytest.raises(InvalidInputError):
            FusionParams(**kwargs)  # type: ignore[arg-type]
    assert dataclasses.replace(FusionParams(), k=60).k == 60
