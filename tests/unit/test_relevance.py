"""The per-turn relevance cut (domain/retrieval/relevance.py): what it keeps and drops on hand-made
turns, the reasons it gives, the forms ``relevanceCut`` accepts, and the calibration's
label-free pieces (pseudo-queries, spread, gap)."""

from __future__ import annotations

import time

import pytest

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.domain.retrieval.relevance import (
    DENSE_GAP_SHARE,
    FLOOR_GAP_SHARE,
    FUSED_SHARE,
    GAP_PER_SPREAD,
    RELEVANCE_AUTO,
    RELEVANCE_OFF,
    cosine,
    cut_by_relevance,
    derive_gap,
    draw_pseudo_queries,
    parse_relevance_cut,
    pick_pseudo_sources,
    pseudo_query,
    resolve_floor,
    resolve_gap,
    spread_of,
)
from vancetope_rag.errors import InvalidInputError


def _hit(
    i: int,
    score: float,
    fused: float | None = None,
    dense: int | None = None,
    lexical: int | None = None,
) -> Hit:
    return Hit(
        score=score,
        text=f"excerpt {i}",
        source_ref=f"d{i}",
        chunk_id=f"c{i}",
        fused_score=fused,
        dense_rank=dense,
        lexical_rank=lexical,
    )


def test_dense_keeps_the_hits_within_the_gap_of_the_best_in_their_order() -> None:
    hits = [_hit(0, 0.80), _hit(1, 0.70), _hit(2, 0.62), _hit(3, 0.66)]
    result = cut_by_relevance(hits, 0.15)
    assert result.kept == (hits[0], hits[1], hits[3])
    assert [(d.hit, d.reason) for d in result.dropped] == [(hits[2], "gap 0.180 > 0.150")]


def test_the_gap_is_measured_from_the_best_cosine_not_the_first_hit() -> None:
    # hybrid order is the fused one: the first hit need not have the best cosine
    hits = [
        _hit(0, 0.60, fused=0.033, dense=3, lexical=2),
        _hit(1, 0.80, fused=0.032, dense=1, lexical=4),
        _hit(2, 0.62, fused=0.030, dense=2, lexical=5),
    ]
    result = cut_by_relevance(hits, 0.15)
    assert result.kept == (hits[0], hits[1])  # the first hit stays whatever its gap
    assert result.dropped[0].reason == "gap 0.180 > 0.150"


def test_hybrid_drops_a_hit_within_the_gap_that_neither_side_ranks_well() -> None:
    hits = [
        _hit(0, 0.80, fused=0.0328, dense=1, lexical=2),
        _hit(1, 0.75, fused=0.0300, dense=2, lexical=3),
        _hit(2, 0.74, fused=0.0160, dense=5, lexical=None),
    ]
    result = cut_by_relevance(hits, 0.15)
    assert result.kept == (hits[0], hits[1])
    share = 0.0160 / 0.0328
    assert share < FUSED_SHARE
    assert [d.reason for d in result.dropped] == [f"fused {share:.2f} of best < 0.70"]


def test_the_lexical_first_stays_whatever_its_gap_and_fused_share() -> None:
    hits = [
        _hit(0, 0.80, fused=0.0328, dense=1, lexical=3),
        _hit(1, 0.40, fused=0.0160, dense=None, lexical=1),
        _hit(2, 0.41, fused=0.0150, dense=9, lexical=None),
    ]
    result = cut_by_relevance(hits, 0.15)
    assert result.kept == (hits[0], hits[1])
    assert result.dropped[0].hit is hits[2]


def test_a_hit_close_to_the_noise_floor_goes_when_the_best_stands_well_above_it() -> None:
    """e5 on a handbook: cosines crowd at 0.82-0.90 and the calibrated gap (0.047)
    keeps a whole weak turn. Above the RAG's noise floor (its calibrated minScore, 0.8217)
    the best stands 0.028 here: a hit keeps at least a quarter of that height."""
    floor = 0.8217
    hits = [_hit(0, 0.850), _hit(1, 0.836), _hit(2, 0.826)]
    assert cut_by_relevance(hits, 0.0466).kept == tuple(hits)  # the gap alone keeps all
    result = cut_by_relevance(hits, 0.0466, floor)
    assert result.kept == (hits[0], hits[1])
    height = 0.850 - floor
    assert [(d.hit, d.reason) for d in result.dropped] == [
        (
            hits[2],
            f"gap 0.024 > {FLOOR_GAP_SHARE * height:.3f} (0.75 of the best's "
            f"{height:.3f} over the floor {floor:.4f})",
        )
    ]


def test_the_floor_never_widens_the_gap_and_keeps_the_first_hit() -> None:
    hits = [_hit(0, 0.90), _hit(1, 0.86), _hit(2, 0.84)]
    # the best stands 0.08 over the floor: 0.75 of it (0.06) is wider than the gap, which binds
    result = cut_by_relevance(hits, 0.047, 0.82)
    assert result.kept == (hits[0], hits[1])
    assert [d.reason for d in result.dropped] == ["gap 0.060 > 0.047"]
    # a best at (or under) the floor: the first hit stays, the rest go
    low = [_hit(0, 0.81), _hit(1, 0.809)]
    assert cut_by_relevance(low, 0.047, 0.82).kept == (low[0],)


def test_the_cut_says_the_gap_it_used_and_whether_the_floor_narrowed_it() -> None:
    floor, hits = 0.8217, [_hit(0, 0.850), _hit(1, 0.836), _hit(2, 0.826)]
    narrowed = cut_by_relevance(hits, 0.0466, floor).cut
    assert narrowed is not None and narrowed.by == "gap"
    assert narrowed.value == pytest.approx(FLOOR_GAP_SHARE * (0.850 - floor))
    assert (narrowed.narrowed_from, narrowed.floor) == (0.0466, floor)
    assert narrowed.to_json()["narrowed"] is True
    # as given when the floor does not bind; even a one-hit turn was cut by that gap
    for some in (hits, hits[:1]):
        kept = cut_by_relevance(some, 0.0466).cut
        assert kept is not None
        assert (kept.value, kept.narrowed_from, kept.floor) == (0.0466, None, None)
    assert cut_by_relevance(hits, None).cut is None  # no cut


def test_the_floor_is_the_calibrated_min_score_for_auto_only() -> None:
    calibration = Calibration(min_score=0.8217, chunks=31, probe_set="x", scores=(0.8,), gap=0.0466)
    assert resolve_floor(RELEVANCE_AUTO, calibration) == 0.8217
    assert resolve_floor(0.05, calibration) is None  # a fixed gap is that gap
    assert resolve_floor(RELEVANCE_OFF, calibration) is None
    assert resolve_floor(None, calibration) is None
    assert resolve_floor(RELEVANCE_AUTO, None) is None
    ungapped = Calibration(min_score=0.8, chunks=31, probe_set="x", scores=(0.8,))
    assert resolve_floor(RELEVANCE_AUTO, ungapped) is None  # no gap, no cut


def test_no_gap_or_a_lone_hit_keeps_everything() -> None:
    hits = [_hit(0, 0.9), _hit(1, 0.1)]
    assert cut_by_relevance(hits, None).kept == tuple(hits)
    assert cut_by_relevance(hits[:1], 0.0).kept == (hits[0],)
    assert cut_by_relevance([], 0.1).kept == ()


def test_a_gap_of_zero_keeps_ties_with_the_best() -> None:
    hits = [_hit(0, 0.8), _hit(1, 0.8), _hit(2, 0.79)]
    assert cut_by_relevance(hits, 0.0).kept == (hits[0], hits[1])


def test_the_cut_of_a_full_turn_is_far_under_a_millisecond() -> None:
    hits = [_hit(i, 0.9 - i / 50, fused=0.03 - i / 1000, dense=i + 1) for i in range(10)]
    started = time.perf_counter()
    for _ in range(100):
        cut_by_relevance(hits, 0.15)
    # 100 cuts of a 10-hit turn: ~1 ms in all; 10x headroom over a 1 ms budget per cut
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        (None, None),
        ("auto", RELEVANCE_AUTO),
        (" AUTO ", RELEVANCE_AUTO),
        ("Off", RELEVANCE_OFF),
        (0.15, 0.15),
        ("0.2", 0.2),
        (0, 0.0),
        (2, 2.0),
    ],
)
def test_relevance_cut_forms(given: object, parsed: object) -> None:
    assert parse_relevance_cut(given) == parsed


@pytest.mark.parametrize("given", ["sometimes", -0.1, 2.5, float("nan"), True, [0.1]])
def test_relevance_cut_refuses_anything_else(given: object) -> None:
    with pytest.raises(InvalidInputError, match=r"recipe\.relevanceCut must be"):
        parse_relevance_cut(given, "recipe.relevanceCut")


def test_resolve_gap() -> None:
    assert resolve_gap(None, 0.15) is None
    assert resolve_gap(RELEVANCE_OFF, 0.15) is None
    assert resolve_gap(RELEVANCE_AUTO, 0.15) == 0.15
    assert resolve_gap(RELEVANCE_AUTO, None) is None  # not calibrated yet: no cut
    assert resolve_gap(0.05, 0.15) == 0.05
    # dense: auto cuts at a share of the gap (no fused share to drop the rest); a number stays
    assert resolve_gap(RELEVANCE_AUTO, 0.15, "dense") == round(0.15 * DENSE_GAP_SHARE, 4)
    assert resolve_gap(0.05, 0.15, "dense") == 0.05


def test_pseudo_sources_and_sentences_are_deterministic_and_order_free() -> None:
    refs = [f"doc-{i}" for i in range(200)]
    chosen = pick_pseudo_sources(refs, 48)
    assert len(chosen) == 48 and len(set(chosen)) == 48
    assert pick_pseudo_sources(list(reversed(refs)), 48) == chosen
    assert pick_pseudo_sources(refs[:10], 48) == pick_pseudo_sources(refs[:10], 10)
    text = (
        "Short one. This sentence has exactly enough words to be a pseudo query here. "
        "And another sentence that is long enough to count as a query for the rule! Tiny."
    )
    sentence = pseudo_query("c1", text)
    assert sentence in (
        "This sentence has exactly enough words to be a pseudo query here.",
        "And another sentence that is long enough to count as a query for the rule!",
    )
    assert pseudo_query("c1", text) == sentence
    assert pseudo_query("c1", "Too short. Also short.") is None
    assert pseudo_query("c1", " ".join(["word"] * 41) + ".") is None


def test_pseudo_queries_follow_the_text_not_the_chunk_ids() -> None:
    """A rebuild writes the same texts under new chunk ids: the pseudo-queries (and so the
    calibrated gap) must not move with the ids."""

    def chunks(prefix: str) -> list[Chunk]:
        return [
            Chunk(
                id=f"{prefix}-{source}-{part}",
                rag_id="r",
                source_ref=f"doc-{source}",
                text=(
                    f"Source {source} part {part} opens with a sentence long enough to count. "
                    f"Then part {part} of source {source} goes on with one more long sentence."
                ),
                embedding=[],
            )
            for source in range(20)
            for part in range(3)
        ]

    drawn = draw_pseudo_queries(chunks("first"))
    assert len(drawn) == 20
    assert draw_pseudo_queries(chunks("after-a-rebuild")) == drawn
    assert draw_pseudo_queries(list(reversed(chunks("x")))) == list(reversed(drawn))


def test_spread_and_gap() -> None:
    ranked = [0.9, *([0.5] * 8), *([0.3] * 21)]  # ranks 10-30: 0.3
    assert spread_of(0.8, ranked) == pytest.approx(0.5)
    assert spread_of(0.8, ranked[:9]) is None
    assert derive_gap([0.2, 0.3, 0.28]) == round(GAP_PER_SPREAD * 0.28, 4)
    assert derive_gap([]) is None
    assert derive_gap([-0.5]) == 0.0


def test_cosine() -> None:
    assert cosine([1.0, 0.0], [2.0, 0.0]) == pytest.approx(1.0)
    assert cosine([1.0, 0.0], [0.0, 3.0]) == pytest.approx(0.0)
    assert cosine([0.0, 0.0], [1.0, 1.0]) == 0.0
