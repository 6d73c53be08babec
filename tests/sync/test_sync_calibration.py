"""``minScore: auto`` on a real store and the real indexer: a RAG is calibrated when it first
has enough chunks and again as it grows or is rebuilt, the probes are embedded once per
model, and explicit numbers still win innermost-first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from synchelpers import chunk_count, default_rag

from fakes import CallLog, P, ProbeProvider, T, registry
from vancetope_rag.api.models import StatusResponse
from vancetope_rag.app import RagApp
from vancetope_rag.domain.retrieval.calibration import (
    AUTO,
    MIN_CALIBRATION_CHUNKS,
    PROBE_SET_ID,
    PROBE_TURNS,
    UNCALIBRATED_MIN_SCORE,
    derive_min_score,
)
from vancetope_rag.domain.retrieval.relevance import derive_gap
from vancetope_rag.domain.settings.cascade import AutoInject
from vancetope_rag.errors import SettingError
from vancetope_rag.recipes import RagParams

AppFactory = Callable[..., RagApp]

TOPICS = ("comets", "glaciers", "volcanoes", "coral reefs", "tides", "auroras", "deserts")


def note(i: int) -> str:
    """One short document (one chunk) about a natural phenomenon."""
    topic = TOPICS[i % len(TOPICS)]
    return f"Field note {i}: observations of {topic}, measured on site {i} over {i + 3} days."


def add_notes(app: RagApp, start: int, stop: int) -> None:
    for i in range(start, stop):
        app.documents.create(T, P, f"documents/notes/{i:03}.md", note(i))
    app.scheduler.run_until_idle(timeout_s=30)


@pytest.fixture
def probe() -> ProbeProvider:
    return ProbeProvider("probe", CallLog())


@pytest.fixture
def papp(make_app: AppFactory, probe: ProbeProvider, clock: Any) -> RagApp:
    app = make_app(provider="probe", embeddings=registry(probe), clock=clock)
    app.bring(T, P)
    return app


def on() -> RagParams:
    return RagParams(auto_inject=AutoInject.ON)


def auto_threshold(app: RagApp, recipe: RagParams | None = None) -> float:
    """What the next turn's retrieval applies."""
    plan = app.as_retriever(T, P, recipe=recipe).plan()
    assert plan.rag is not None
    value = plan.params.min_score
    assert isinstance(value, float)
    return value


def test_a_rag_is_calibrated_once_it_has_enough_chunks(papp: RagApp) -> None:
    add_notes(papp, 0, MIN_CALIBRATION_CHUNKS - 1)
    assert default_rag(papp).calibration is None
    assert papp.project_rags.status(T, P).to_json()["minScoreAuto"] is None
    assert auto_threshold(papp) == UNCALIBRATED_MIN_SCORE  # auto before there is a floor

    add_notes(papp, MIN_CALIBRATION_CHUNKS - 1, MIN_CALIBRATION_CHUNKS)
    rag = default_rag(papp)
    cal = rag.calibration
    assert cal is not None and chunk_count(papp, rag) == MIN_CALIBRATION_CHUNKS
    assert (cal.chunks, cal.probe_set, len(cal.scores)) == (
        MIN_CALIBRATION_CHUNKS,
        PROBE_SET_ID,
        len(PROBE_TURNS),
    )
    # each score is the probe's best cosine as the ordinary query path sees it
    for turn, score in zip(PROBE_TURNS[:8], cal.scores, strict=False):
        best = papp.rags.query(rag, turn, top_k=1, mode="dense", min_score=None)
        assert best and best[0].score == pytest.approx(score, abs=1e-5)
    assert cal.min_score == derive_min_score(cal.scores)
    assert auto_threshold(papp) == cal.min_score
    # REST's status (the route validates this JSON against its schema) says what auto means
    shown = StatusResponse.model_validate(papp.project_rags.status(T, P).to_json())
    assert shown.minScoreAuto is not None
    assert (shown.minScoreAuto.minScore, shown.minScoreAuto.chunks) == (
        cal.min_score,
        MIN_CALIBRATION_CHUNKS,
    )

    # a probe turn gets no block at the calibrated threshold: noise is what it drops
    dropped = [t for t in PROBE_TURNS if not papp.autoinject.decide(T, P, [t], on()).block]
    assert len(dropped) >= 0.85 * len(PROBE_TURNS)
    # ... while a turn on the documents' subject still gets one
    assert papp.autoinject.decide(T, P, ["observations of comets on site 7"], on()).block


def test_the_relevance_gap_is_calibrated_deterministically_from_the_rags_own_chunks(
    papp: RagApp, probe: ProbeProvider, make_app: AppFactory, clock: Any
) -> None:
    add_notes(papp, 0, MIN_CALIBRATION_CHUNKS)
    rag = default_rag(papp)
    cal = rag.calibration
    assert cal is not None and cal.gap is not None
    # one pseudo-query per note (each has one sentence of 8-40 words), each with a spread
    assert len(cal.spreads) == MIN_CALIBRATION_CHUNKS
    assert cal.gap == derive_gap(cal.spreads) and cal.gap > 0
    # the pseudo-queries are the notes' own sentences, embedded as queries
    pseudo = [q for q in probe.queries if q.startswith("Field note")]
    assert len(pseudo) == len(cal.spreads)
    # the same store and chunks measure the same gap, in this process and another one,
    # and the other one embeds nothing again (the vectors are cached per model)
    again = papp.calibrator.measure(rag)
    assert (again.gap, again.spreads) == (cal.gap, cal.spreads)
    other = make_app(provider="probe", embeddings=registry(probe), clock=clock)
    elsewhere = other.calibrator.measure(rag)
    assert (elsewhere.gap, elsewhere.spreads) == (cal.gap, cal.spreads)
    assert other.calibrator.embedded_pseudo == 0


def test_a_rag_is_calibrated_again_when_it_has_doubled(papp: RagApp) -> None:
    add_notes(papp, 0, MIN_CALIBRATION_CHUNKS)
    first = default_rag(papp).calibration
    assert first is not None
    add_notes(papp, MIN_CALIBRATION_CHUNKS, 2 * MIN_CALIBRATION_CHUNKS - 1)
    assert default_rag(papp).calibration == first  # grown, but not by half as much again
    add_notes(papp, 2 * MIN_CALIBRATION_CHUNKS - 1, 2 * MIN_CALIBRATION_CHUNKS)
    again = default_rag(papp).calibration
    assert again is not None and again.chunks == 2 * MIN_CALIBRATION_CHUNKS
    assert again.calibrated_at is not None and first.calibrated_at is not None


def test_the_probes_are_embedded_once_per_model(
    papp: RagApp, probe: ProbeProvider, make_app: AppFactory, clock: Any
) -> None:
    add_notes(papp, 0, MIN_CALIBRATION_CHUNKS)
    assert sum(q in PROBE_TURNS for q in probe.queries) == len(PROBE_TURNS)
    rag = default_rag(papp)
    papp.calibrator.calibrate(rag)
    other = make_app(provider="probe", embeddings=registry(probe), clock=clock)
    other.calibrator.calibrate(rag)  # another process on the same store
    assert sum(q in PROBE_TURNS for q in probe.queries) == len(PROBE_TURNS)
    assert papp.calibrator.embedded_probes == len(PROBE_TURNS)
    assert other.calibrator.embedded_probes == 0


def test_a_rebuild_calibrates_its_new_generation_before_the_switch(app: RagApp) -> None:
    papp = app  # the hashing provider, whose models differ in dimension
    papp.bring(T, P)
    add_notes(papp, 0, MIN_CALIBRATION_CHUNKS)
    old = default_rag(papp)
    assert old.calibration is not None
    papp.scheduler.calibrator = None  # only the rebuild itself may calibrate now
    papp.settings.set(T, None, "ai.embedding.model", "hashing-128")
    papp.project_rags.reindex(T, P, rebuild=True)
    papp.scheduler.run_until_idle(timeout_s=30)
    new = default_rag(papp)
    assert new.id != old.id and new.embedding_dimension == 128
    assert new.calibration is not None and new.calibration.chunks == MIN_CALIBRATION_CHUNKS
    assert new.calibration.scores != old.calibration.scores  # measured with the new model
    assert auto_threshold(papp) == new.calibration.min_score


def test_explicit_numbers_win_innermost_first(make_app: AppFactory, probe: ProbeProvider) -> None:
    app = make_app(
        provider="probe", embeddings=registry(probe), config={"retrieval_min_score": 0.05}
    )
    app.bring(T, P)
    add_notes(app, 0, MIN_CALIBRATION_CHUNKS)
    cal = default_rag(app).calibration
    assert cal is not None
    assert auto_threshold(app) == 0.05  # the engine's number, nothing set inside it
    app.settings.set(T, None, "rag.minScore", "auto")
    assert auto_threshold(app) == cal.min_score  # the tenant asks for the calibration
    app.settings.set(T, P, "rag.minScore", "0.61")
    assert auto_threshold(app) == 0.61  # the project's number beats the tenant's auto
    assert auto_threshold(app, RagParams(min_score=AUTO)) == cal.min_score  # recipe: auto
    assert auto_threshold(app, RagParams(min_score=0.7)) == 0.7
    retriever = app.as_retriever(T, P, recipe=RagParams(min_score=0.7), min_score=AUTO)
    assert retriever.plan().params.min_score == cal.min_score  # the call is innermost
    rag = default_rag(app)
    hits = retriever.query_rag(rag, "observations of comets", min_score=0.99)
    assert all(h.score >= 0.99 for h in hits)


def test_rag_min_score_setting_takes_auto_and_refuses_words(app: RagApp) -> None:
    app.settings.set(T, P, "rag.minScore", "AUTO")
    assert app.settings.snapshot(T, P).effective["rag.minScore"] == AUTO
    app.settings.set(T, P, "rag.minScore", 0.4)
    assert app.settings.snapshot(T, P).effective["rag.minScore"] == 0.4
    with pytest.raises(SettingError, match=r"rag\.minScore must be auto or a number"):
        app.settings.set(T, P, "rag.minScore", "high")
    assert app.settings.snapshot(T, P).effective["rag.minScore"] == 0.4  # nothing lost
