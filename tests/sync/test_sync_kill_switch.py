"""Acceptance 3 and 10: the tenant kill switch, rag.project.enabled, and indexer metrics."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import pytest
from synchelpers import default_rag, states

from fakes import CallLog, P, Poison, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState
from vancetope_rag.errors import EmbeddingDisabledError

AppFactory = Callable[..., RagApp]


@pytest.fixture
def counted(make_app: AppFactory) -> tuple[RagApp, CallLog]:
    calls = CallLog()
    app = make_app(provider="counting", embeddings=registry(ProbeProvider("counting", calls)))
    app.bring(T, P)
    return app, calls


def test_kill_switch_stops_every_embed_call(counted: tuple[RagApp, CallLog]) -> None:
    app, calls = counted
    first = app.documents.create(T, P, "documents/a.md", "alpha text")
    app.scheduler.tick()
    assert calls.embedded == ["alpha text"]
    rag = default_rag(app)

    app.settings.set(T, None, "ai.embedding.provider", "none")
    calls.clear()
    app.documents.create(T, P, "documents/b.md", "beta text")
    app.documents.update(T, P, first.id, content="alpha changed")
    before = app.metrics.runs("tenant_disabled")

    tick = app.scheduler.tick()
    app.scheduler.tick()

    assert calls.calls == []  # not one model call, text or query
    assert tick.claimed == 0
    assert app.metrics.runs("tenant_disabled") == before + 2
    assert states(app) == {"pending": 2}
    assert all(d.rag_claimed_by is None for d in app.documents.list_documents(T, P))
    assert app.scheduler.pending() == 0  # nothing this node will work on
    assert app.scheduler.run_until_idle(timeout_s=5).claimed == 0

    # direct calls against the old RAG are refused with a clear message
    with pytest.raises(EmbeddingDisabledError) as query_err:
        app.rags.query(rag, "alpha")
    with pytest.raises(EmbeddingDisabledError) as add_err:
        app.rags.add_text(rag, "manual", "some text")
    for err in (query_err.value, add_err.value):
        assert "ai.embedding.provider=none" in err.message
        assert "_documents" in err.message
        assert err.rag_name == "_documents"
    assert calls.calls == []
    # the RAG itself is kept: switching back resumes on it
    assert default_rag(app).id == rag.id
    app.settings.set(T, None, "ai.embedding.provider", "counting")
    app.scheduler.run_until_idle(timeout_s=10)
    assert states(app) == {"indexed": 2}
    assert sorted(calls.embedded) == ["alpha changed", "beta text"]


def test_kill_switch_at_project_scope(counted: tuple[RagApp, CallLog]) -> None:
    app, calls = counted
    app.settings.set(T, P, "ai.embedding.provider", "none")
    app.documents.create(T, P, "documents/a.md", "alpha")
    assert app.scheduler.tick().claimed == 0
    assert calls.calls == []
    assert app.metrics.runs("tenant_disabled") == 1


def test_kill_switch_between_claim_and_embed_releases_quietly(
    counted: tuple[RagApp, CallLog], caplog: pytest.LogCaptureFixture
) -> None:
    app, calls = counted
    caplog.set_level(logging.DEBUG, logger="vancetope_rag")
    d = app.documents.create(T, P, "documents/a.md", "alpha")
    claimed = app.store.control.claim_for_rag_index(T, P, "w-1", 10, 60)
    app.settings.set(T, None, "ai.embedding.provider", "none")
    result = app.indexer.index_batch(T, P, claimed, "w-1")
    assert calls.calls == []
    assert (result.indexed, result.failed) == (0, 0)
    after = app.documents.get(T, P, d.id)
    assert after.rag_claimed_by is None
    assert after.rag_dirty and after.index_state is IndexState.PENDING
    assert app.metrics.runs("failed") == 0
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_project_disabled_is_skipped_and_claims_nothing(counted: tuple[RagApp, CallLog]) -> None:
    app, calls = counted
    app.settings.set(T, P, "rag.project.enabled", False)
    d = app.documents.create(T, P, "documents/a.md", "alpha")
    tick = app.scheduler.tick()
    assert tick.claimed == 0
    assert app.metrics.runs("skipped") == 1
    assert app.metrics.runs("success") == 0
    after = app.documents.get(T, P, d.id)
    assert after.rag_claimed_by is None and after.index_state is IndexState.PENDING
    assert calls.calls == []
    # other projects of the tenant are unaffected
    app.bring(T, "p2")
    app.documents.create(T, "p2", "documents/a.md", "beta")
    assert app.scheduler.tick().indexed == 1
    assert app.metrics.runs("skipped") == 2
    # switching it back on indexes the waiting document
    app.settings.set(T, P, "rag.project.enabled", True)
    assert app.scheduler.tick().indexed == 1


def _sample(exposition: str, outcome: str) -> float:
    m = re.search(rf'^vance_rag_indexer_runs_total{{outcome="{outcome}"}} (\S+)$', exposition, re.M)
    assert m, f"no sample for outcome={outcome}"
    return float(m.group(1))


def test_indexer_runs_metric_exposes_every_outcome(make_app: AppFactory) -> None:
    poison = Poison("POISON")
    app = make_app(
        provider="poisoned",
        embeddings=registry(ProbeProvider("poisoned", poison)),
        config={"max_attempts": 1},
    )
    text = app.metrics.exposition().decode()
    for outcome in ("success", "failed", "skipped", "tenant_disabled"):
        assert _sample(text, outcome) == 0.0  # present from the start

    app.bring(T, P)
    app.documents.create(T, P, "documents/ok1.md", "fine")
    app.documents.create(T, P, "documents/ok2.md", "also fine")
    app.documents.create(T, P, "documents/bad.md", "POISON here")
    app.bring(T, "off")
    app.settings.set(T, "off", "rag.project.enabled", False)
    app.settings.set("t2", None, "ai.embedding.provider", "none")
    app.bring("t2", P)
    app.scheduler.tick()

    text = app.metrics.exposition().decode()
    assert _sample(text, "success") == 2
    assert _sample(text, "failed") == 1
    assert _sample(text, "skipped") == 1
    assert _sample(text, "tenant_disabled") == 1
    assert app.metrics.runs("success") == 2
