"""The rerank stage's own cut, without a store: the rule derived from the reranker's scores of
pseudo-queries (each scale: logits, probabilities), the cut of a turn by it (reasons say
``rerank``), the fall back to the cosine gap, when it is measured again, and how it is kept
with the RAG's calibration."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from vancetope_rag.domain.records import Hit
from vancetope_rag.domain.retrieval.calibration import PROBE_SET_ID, Calibration
from vancetope_rag.domain.retrieval.rerank_calibration import (
    RERANK_RULE_ID,
    RerankCalibration,
    RerankTurn,
    RerankUnmeasurable,
    derive_rerank_rule,
    rerank_identity,
    strip_sentence,
)
from vancetope_rag.domain.retrieval.rerank_cut import (
    cut_by_rerank,
    cut_turn,
    rerank_calibration_due,
)


def rule(kind: str = "relative", value: float = 1.5, chunks: int = 40) -> RerankCalibration:
    return RerankCalibration(
        reranker="tei:bge-reranker-base",
        identity=rerank_identity("tei", "tei", "http://rerank:8080"),
        rule=kind,  # type: ignore[arg-type]
        value=value,
        separation=0.92,
        chunks=chunks,
        rule_set=RERANK_RULE_ID,
        sources=(7.5, 6.25, 8.0),
        background=(-6.0, -1.5, 2.0),
        calibrated_at=datetime(2026, 12, 7, 5, 0, tzinfo=UTC),
    )


def hit(cosine: float, rerank: float | None, name: str) -> Hit:
    return Hit(score=cosine, text=name, source_ref=name, chunk_id=name, rerank_score=rerank)


def test_logits_get_a_relative_floor_in_their_own_scale() -> None:
    # TEI raw scores: each query's source far above its background, the level moves per query
    turns = [
        RerankTurn(8.0, (-9.0, -7.5, -3.0, 1.0)),
        RerankTurn(3.5, (-10.0, -8.0, -6.5, -2.0)),
        RerankTurn(6.0, (-8.5, -4.0, -1.0, 0.5)),
        RerankTurn(4.5, (-11.0, -9.0, -5.0, -3.5)),
    ]
    derived = derive_rerank_rule(turns)
    assert derived is not None
    kind, value, separation = derived
    assert kind == "relative" and separation == pytest.approx(1.0)
    assert 0 < value < 5.0  # below the nearest backgrounds' distance (5.5 .. 7.0)
    assert derive_rerank_rule(list(turns)) == derived  # deterministic


def test_probabilities_where_a_source_is_not_its_turns_best_get_an_absolute_threshold() -> None:
    # Cohere-style 0..1: in half the turns another relevant text outscores the source, so
    # "near the best" misses those sources; "0.5 or more" keeps them
    noise = (0.08, 0.06, 0.05, 0.04, 0.04, 0.03, 0.02, 0.02, 0.01, 0.01)
    turns = [
        RerankTurn(0.62, (0.97, *noise)),
        RerankTurn(0.91, noise),
        RerankTurn(0.55, (0.99, *noise)),
        RerankTurn(0.88, noise),
    ]
    derived = derive_rerank_rule(turns)
    assert derived is not None
    kind, value, separation = derived
    assert kind == "absolute"
    assert 0.08 < value < 0.55
    assert separation > 0.8


def test_nothing_to_separate_is_no_rule() -> None:
    assert derive_rerank_rule([]) is None
    assert derive_rerank_rule([RerankTurn(3.0, ())]) is None


def test_the_cut_keeps_the_first_and_says_rerank_for_what_it_drops() -> None:
    hits = [
        hit(0.61, 7.0, "best"),
        hit(0.83, 6.0, "near"),
        hit(0.82, 2.0, "far"),  # its cosine is close to the best cosine: the reranker decides
        hit(0.80, None, "unscored"),
    ]
    relative = cut_by_rerank(hits, rule("relative", 1.5))
    assert [h.chunk_id for h in relative.kept] == ["best", "near"]
    assert [(d.hit.chunk_id, d.reason) for d in relative.dropped] == [
        ("far", "rerank 5.000 below the best > 1.500"),
        ("unscored", "rerank: the reranker did not score it"),
    ]
    absolute = cut_by_rerank(hits, rule("absolute", 6.5))
    assert [h.chunk_id for h in absolute.kept] == ["best"]
    assert absolute.dropped[0].reason == "rerank 6.000 < 6.500"
    # a block that was going to exist still does
    assert cut_by_rerank([hit(0.2, -9.0, "only")], rule("absolute", 6.5)).kept[0].chunk_id == (
        "only"
    )


def test_without_the_rerankers_scores_or_rule_the_cosine_gap_cuts() -> None:
    reranked = [hit(0.61, 7.0, "best"), hit(0.83, 2.0, "far")]
    assert [h.chunk_id for h in cut_turn(reranked, 0.1, rule()).kept] == ["best"]
    # no rule (not measured, another reranker): the cosine gap, on the reranker's order
    by_gap = cut_turn(reranked, 0.1, None)
    assert [h.chunk_id for h in by_gap.kept] == ["best", "far"]
    # the reranker skipped this turn: no scores, the cosine gap
    plain = [hit(0.83, None, "a"), hit(0.61, None, "b")]
    skipped = cut_turn(plain, 0.1, rule())
    assert [h.chunk_id for h in skipped.kept] == ["a"]
    assert skipped.dropped[0].reason.startswith("gap ")


def test_measured_again_for_another_reranker_rule_or_a_doubled_rag() -> None:
    mine = rule(chunks=40)
    calibration = Calibration(0.3, 40, PROBE_SET_ID, (0.2,), gap=0.15, rerank=mine)
    assert not rerank_calibration_due(calibration, mine.identity, 79)
    assert rerank_calibration_due(calibration, mine.identity, 80)
    assert rerank_calibration_due(calibration, rerank_identity("tei", "other", None), 40)
    assert rerank_calibration_due(replace(calibration, rerank=None), mine.identity, 40)
    stale = replace(calibration, rerank=replace(mine, rule_set="old"))
    assert rerank_calibration_due(stale, mine.identity, 40)
    assert not rerank_calibration_due(None, mine.identity, 19)  # too small to calibrate


def test_nothing_to_measure_waits_for_the_rag_to_grow_or_another_reranker() -> None:
    mine = rule(chunks=40)
    nothing = RerankUnmeasurable(mine.identity, 30, RERANK_RULE_ID)
    bare = Calibration(0.3, 30, PROBE_SET_ID, (0.2,), gap=0.15, rerank_unmeasurable=nothing)
    assert not rerank_calibration_due(bare, mine.identity, 30)
    assert not rerank_calibration_due(bare, mine.identity, 59)
    assert rerank_calibration_due(bare, mine.identity, 60)  # grown as the gap's rule says
    assert rerank_calibration_due(bare, rerank_identity("tei", "other", None), 30)
    stale = replace(bare, rerank_unmeasurable=replace(nothing, rule_set="old"))
    assert rerank_calibration_due(stale, mine.identity, 30)
    # a rule of the same reranker measured before: the later nothing holds as well
    older = replace(bare, rerank=replace(mine, chunks=20))
    assert not rerank_calibration_due(older, mine.identity, 45)


def test_the_identity_is_provider_model_and_url_never_the_key() -> None:
    base = rerank_identity("cohere", "rerank-v3.5", "https://api.cohere.com/v1")
    assert base == rerank_identity("cohere", "rerank-v3.5", "https://api.cohere.com/v1/")
    assert base != rerank_identity("cohere", "rerank-v3.0", "https://api.cohere.com/v1")
    assert base != rerank_identity("cohere", "rerank-v3.5", "http://localhost:7997")
    assert "cohere" not in base and "api" not in base


def test_kept_with_the_calibration_and_read_back() -> None:
    calibration = Calibration(0.3, 40, PROBE_SET_ID, (0.2,), gap=0.15, rerank=rule())
    assert Calibration.from_json(calibration.to_json()) == calibration
    # a calibration stored before the rerank cut reads as one without it
    old = calibration.to_dict()
    del old["rerank"]
    assert Calibration.from_dict(old) == replace(calibration, rerank=None)
    # an unreadable rerank part is measured again, the rest kept
    broken = {**calibration.to_dict(), "rerank": {"rule": "sometimes"}}
    assert Calibration.from_dict(broken) == replace(calibration, rerank=None)


def test_nothing_to_measure_is_kept_with_the_calibration_and_read_back() -> None:
    at = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
    nothing = RerankUnmeasurable(rule().identity, 30, RERANK_RULE_ID, at)
    calibration = Calibration(0.3, 30, PROBE_SET_ID, (0.2,), rerank_unmeasurable=nothing)
    assert Calibration.from_json(calibration.to_json()) == calibration
    # stored before it existed, or unreadable: none, the reranker is asked again
    old = calibration.to_dict()
    del old["rerankUnmeasurable"]
    assert Calibration.from_dict(old) == replace(calibration, rerank_unmeasurable=None)
    broken = {**calibration.to_dict(), "rerankUnmeasurable": {"chunks": "many"}}
    assert Calibration.from_dict(broken) == replace(calibration, rerank_unmeasurable=None)


def test_the_source_is_sent_without_its_sentence() -> None:
    text = "Payroll. Salaries are paid on the last day. Payslips are in the portal."
    assert strip_sentence(text, "Salaries are paid on the last day.") == (
        "Payroll. Payslips are in the portal."
    )
