"""The hit post-filter (domain/retrieval/ranking.py): threshold, per-document cap, over-fetch."""

from __future__ import annotations

import pytest

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.ranking import (
    MAX_TOP_K,
    check_query_args,
    collect_hits,
    first_fetch,
    select_hits,
)
from vancetope_rag.errors import InvalidInputError


def hit(source: str, score: float, n: int = 0) -> Hit:
    return Hit(
        chunk_id=f"{source}-{n}",
        source_ref=source,
        text=f"{source} chunk {n}",
        score=score,
        kind="content",
        path=f"documents/{source}.md",
        metadata={},
    )


class Ranked:
    """A store's ranked answer: the best ``n`` of a fixed list; records every fetch size."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = sorted(hits, key=lambda h: -h.score)
        self.fetches: list[int] = []

    def __call__(self, n: int) -> list[Hit]:
        self.fetches.append(n)
        return self.hits[:n]


def test_no_cap_no_threshold_is_the_top_k() -> None:
    store = Ranked([hit(f"d{i}", 1 - i / 100) for i in range(20)])
    hits = collect_hits(store, top_k=5)
    assert [h.source_ref for h in hits] == ["d0", "d1", "d2", "d3", "d4"]
    assert store.fetches == [5]  # exactly top_k, one round


def test_threshold_stops_at_the_first_lower_score() -> None:
    store = Ranked([hit("a", 0.9), hit("b", 0.7), hit("c", 0.5), hit("d", 0.3)])
    hits = collect_hits(store, top_k=10, min_score=0.6)
    assert [h.source_ref for h in hits] == ["a", "b"]
    assert store.fetches == [10]  # the RAG had fewer chunks than asked: no second round


def test_cap_overfetches_until_top_k_is_filled() -> None:
    # One long document dominates the ranking; the others sit far below it.
    long_doc = [hit("long", 0.99 - i / 1000, i) for i in range(200)]
    others = [hit(f"d{i}", 0.5 - i / 100) for i in range(4)]
    store = Ranked(long_doc + others)
    hits = collect_hits(store, top_k=5, max_per_doc=1)
    assert [h.source_ref for h in hits] == ["long", "d0", "d1", "d2", "d3"]
    assert store.fetches[0] == first_fetch(5, 1) == 28
    assert store.fetches[1:] == [112, 448]  # 4x per round until the others are reached


def test_overfetch_gives_up_past_its_bound() -> None:
    """A cap starving on one huge document returns fewer hits rather than scanning it all."""
    store = Ranked([hit("huge", 0.99 - i / 100_000, i) for i in range(20_000)])
    hits = collect_hits(store, top_k=3, max_per_doc=1)
    assert [h.source_ref for h in hits] == ["huge"]
    assert store.fetches[-1] >= 20 * 3 + 1000 and len(store.fetches) < 10


def test_overfetch_stops_once_the_threshold_is_crossed() -> None:
    store = Ranked([hit("long", 0.9 - i / 1000, i) for i in range(100)] + [hit("low", 0.1)])
    hits = collect_hits(store, top_k=3, min_score=0.85, max_per_doc=2)
    assert [h.source_ref for h in hits] == ["long", "long"]
    assert len(store.fetches) <= 3


def test_select_hits_caps_each_document() -> None:
    ranked = [hit("a", 0.9, 0), hit("a", 0.8, 1), hit("a", 0.7, 2), hit("b", 0.6)]
    assert [h.chunk_id for h in select_hits(ranked, 10, None, 2)] == ["a-0", "a-1", "b-0"]
    assert [h.chunk_id for h in select_hits(ranked, 2, None, None)] == ["a-0", "a-1"]
    assert select_hits([], 5, 0.5, 1) == []


@pytest.mark.parametrize(
    ("top_k", "min_score", "max_per_doc", "message"),
    [
        (0, None, None, "topK must be an integer from 1"),
        (MAX_TOP_K + 1, None, None, "topK"),
        (True, None, None, "topK"),
        ("5", None, None, "topK"),
        (5, 1.5, None, "minScore must be between -1 and 1"),
        (5, "high", None, "minScore must be a number"),
        (5, None, 0, "maxPerDocument must be a positive integer"),
        (5, None, 1.5, "maxPerDocument"),
    ],
)
def test_bad_arguments_are_refused(
    top_k: object, min_score: object, max_per_doc: object, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_query_args(top_k, min_score, max_per_doc)
    store = Ranked([hit("a", 0.9)])
    with pytest.raises(InvalidInputError):
        collect_hits(store, top_k=top_k, min_score=min_score, max_per_doc=max_per_doc)  # type: ignore[arg-type]
    assert store.fetches == []  # refused before asking the store
