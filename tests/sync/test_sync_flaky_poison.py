"""Acceptance 7: a flaky provider heals itself; a poison document fails alone."""

from __future__ import annotations

from collections.abc import Callable

from synchelpers import chunks, default_rag, doc

from fakes import Flaky, P, Poison, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState

AppFactory = Callable[..., RagApp]


def test_flaky_provider_every_document_indexed(make_app: AppFactory) -> None:
    flaky = Flaky(rate=0.3, seed=1234)
    app = make_app(
        provider="flaky",
        embeddings=registry(ProbeProvider("flaky", flaky)),
        config={"retry_backoff_s": 0.0, "max_attempts": 100, "indexer_batch_size": 8},
    )
    app.bring(T, P)
    n = 60
    ids = [app.documents.create(T, P, f"documents/{i}.md", f"flaky doc {i}").id for i in range(n)]

    result = app.scheduler.run_until_idle(timeout_s=60)

    assert flaky.failures > 0  # the provider really failed along the way
    assert result.failed > 0
    assert app.metrics.runs("failed") == result.failed
    assert app.project_rags.status(T, P).documents["indexed"] == n
    rag = default_rag(app)
    for i, doc_id in enumerate(ids):
        d = doc(app, doc_id)
        assert (d.index_state, d.rag_dirty, d.index_attempts) == (IndexState.INDEXED, False, 0)
        assert d.index_last_error is None
        assert [c.text for c in chunks(app, rag, doc_id)] == [f"flaky doc {i}"]


def _poisoned_app(make_app: AppFactory, max_attempts: int = 3) -> tuple[RagApp, Poison]:
    poison = Poison("POISON")
    app = make_app(
        provider="strict",
        embeddings=registry(ProbeProvider("strict", poison)),
        config={"retry_backoff_s": 0.0, "max_attempts": max_attempts},
    )
    app.bring(T, P)
    return app, poison


def test_poison_document_fails_alone(make_app: AppFactory) -> None:
    app, poison = _poisoned_app(make_app)
    good = [app.documents.create(T, P, f"documents/{i}.md", f"good doc {i}").id for i in range(9)]
    bad = app.documents.create(T, P, "documents/bad.md", "this one holds POISON text").id

    app.scheduler.run_until_idle(timeout_s=30)

    d = doc(app, bad)
    assert d.index_state is IndexState.FAILED
    assert not d.rag_dirty and d.rag_claimed_by is None
    assert d.index_attempts == 3
    assert d.index_last_error is not None and Poison.message in d.index_last_error
    status = app.project_rags.status(T, P)
    assert status.documents["failed"] == 1
    assert status.documents["indexed"] == 9
    assert status.chunk_count == 9
    rag = default_rag(app)
    assert chunks(app, rag, bad) == []
    for doc_id in good:
        assert doc(app, doc_id).index_state is IndexState.INDEXED
    # the good documents were embedded once each, not retried with the poison
    embedded_good = [t for t in poison.embedded if "good doc" in t]
    assert sorted(set(embedded_good)) == sorted(f"good doc {i}" for i in range(9))
    # a failed document is not retried on its own
    poison.clear()
    assert app.scheduler.tick().claimed == 0
    assert poison.calls == []


def test_change_to_poison_document_requeues_it_with_attempts_reset(make_app: AppFactory) -> None:
    app, _ = _poisoned_app(make_app)
    bad = app.documents.create(T, P, "documents/bad.md", "POISON").id
    app.scheduler.run_until_idle(timeout_s=30)
    assert doc(app, bad).index_state is IndexState.FAILED

    still_bad = app.documents.update(T, P, bad, content="POISON again")
    assert (still_bad.index_state, still_bad.rag_dirty, still_bad.index_attempts) == (
        IndexState.PENDING,
        True,
        0,
    )
    # the error was about text the document no longer holds: new text waits for its own try
    # without it (a re-queue of the same text, a reindex, keeps it until its try ends)
    assert still_bad.index_last_error is None
    app.scheduler.run_until_idle(timeout_s=30)
    assert doc(app, bad).index_state is IndexState.FAILED

    app.documents.update(T, P, bad, content="cured text")
    app.scheduler.run_until_idle(timeout_s=30)
    d = doc(app, bad)
    assert (d.index_state, d.index_attempts, d.index_last_error) == (IndexState.INDEXED, 0, None)
    assert [c.text for c in chunks(app, default_rag(app), bad)] == ["cured text"]


def test_reindex_requeues_failed_document(make_app: AppFactory) -> None:
    app, poison = _poisoned_app(make_app)
    app.documents.create(T, P, "documents/ok.md", "fine")
    bad = app.documents.create(T, P, "documents/bad.md", "POISON").id
    app.scheduler.run_until_idle(timeout_s=30)
    assert doc(app, bad).index_state is IndexState.FAILED

    result = app.project_rags.reindex(T, P)
    assert result.documents_queued == 2
    d = doc(app, bad)
    assert (d.index_state, d.rag_dirty, d.index_attempts) == (IndexState.PENDING, True, 0)
    poison.clear()
    app.scheduler.tick()
    assert any("POISON" in t for t in poison.embedded)  # tried again


def test_poison_summary_fails_the_document_not_the_batch(make_app: AppFactory) -> None:
    app, _ = _poisoned_app(make_app, max_attempts=1)
    ok = app.documents.create(T, P, "documents/ok.md", "fine body", summary="fine summary").id
    bad = app.documents.create(T, P, "documents/bad.md", "fine", summary="POISON summary").id
    app.scheduler.run_until_idle(timeout_s=30)
    assert doc(app, ok).index_state is IndexState.INDEXED
    assert doc(app, bad).index_state is IndexState.FAILED
    assert chunks(app, default_rag(app), bad) == []
