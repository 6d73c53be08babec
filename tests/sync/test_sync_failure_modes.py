"""Acceptance 9: one test per row of the failure-mode table (spec §10)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from synchelpers import chunk_count, chunks, default_rag, doc, states, ticks_until_idle

from fakes import CallLog, FailFirst, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import IndexState, ProjectStatus

AppFactory = Callable[..., RagApp]
TTL = 60.0


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_failure_embedding_provider_not_configured(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """ensureDefaultRag warn-logs, lifecycle reaches RUNNING, no RAG until corrected; the
    indexer skips the project meanwhile and indexes everything once the setting is fixed."""
    app = make_app(provider="openai", config={"max_attempts": 2, "retry_backoff_s": 0.0})
    caplog.set_level(logging.WARNING, logger="vancetope_rag")
    app.bring(T, P)
    assert app.store.control.get_project(T, P).status is ProjectStatus.RUNNING  # type: ignore[union-attr]
    assert app.project_rags.find_default_rag(T, P) is None
    assert any("apiKey" in w for w in _warnings(caplog))

    ids = [app.documents.create(T, P, f"documents/{i}.md", f"text {i}").id for i in range(3)]
    for _ in range(5):  # many ticks while misconfigured: more than max_attempts
        tick = app.scheduler.tick()
        assert tick.indexed == 0
    assert app.project_rags.find_default_rag(T, P) is None
    # nothing was claimed or given up on: the documents wait for the correction
    assert states(app) == {"pending": 3}
    for doc_id in ids:
        d = doc(app, doc_id)
        assert (d.rag_claimed_by, d.index_attempts) == (None, 0)
    assert app.metrics.runs("skipped") == 5
    assert app.metrics.runs("failed") == 0
    assert app.scheduler.pending() == 0  # run_until_idle / `index --until-idle` do not hang

    app.settings.set(T, None, "ai.embedding.provider", "hashing")
    app.scheduler.run_until_idle(timeout_s=10)
    assert states(app) == {"indexed": 3}
    rag = default_rag(app)
    assert {c.source_ref for c in chunks(app, rag)} == set(ids)


@pytest.mark.parametrize(
    "error",
    [ConnectionError("connection reset by peer"), RuntimeError("429 Too Many Requests")],
    ids=["network", "rate-limit"],
)
def test_failure_embed_call_fails_network_rate_limit(
    make_app: AppFactory, clock: object, caplog: pytest.LogCaptureFixture, error: Exception
) -> None:
    """Warn-log, claim released, retried on a later tick: self-healing."""
    probe = FailFirst(2, error)  # the batched call and the one-by-one retry both fail
    app = make_app(
        provider="remote",
        embeddings=registry(ProbeProvider("remote", probe)),
        clock=clock,
        config={"retry_backoff_s": 10.0, "retry_backoff_max_s": 10.0, "claim_ttl_s": TTL},
    )
    caplog.set_level(logging.WARNING, logger="vancetope_rag")
    app.bring(T, P)
    d = app.documents.create(T, P, "documents/a.md", "alpha text")

    tick = app.scheduler.tick()
    assert (tick.claimed, tick.failed, tick.indexed) == (1, 1, 0)
    after = doc(app, d.id)
    assert after.rag_claimed_by is None  # releaseRagClaim
    assert (after.rag_dirty, after.index_state, after.index_attempts) == (
        True,
        IndexState.PENDING,
        1,
    )
    assert str(error) in (after.index_last_error or "")
    assert any(str(error) in w for w in _warnings(caplog))
    assert app.metrics.runs("failed") == 1

    assert app.scheduler.tick().claimed == 0  # backing off, not hammering the provider
    clock.advance(13)  # type: ignore[attr-defined]
    tick = app.scheduler.tick()
    assert (tick.claimed, tick.indexed) == (1, 1)
    healed = doc(app, d.id)
    assert (healed.index_state, healed.index_attempts, healed.index_last_error) == (
        IndexState.INDEXED,
        0,
        None,
    )
    assert [c.text for c in chunks(app, default_rag(app), d.id)] == ["alpha text"]


def test_failure_bulk_import_kit_restore_no_embed_storm(make_app: AppFactory) -> None:
    """Bulk import marks documents dirty without embedding; the indexer works in batches."""
    calls = CallLog()
    batch = 10
    app = make_app(
        provider="counting",
        embeddings=registry(ProbeProvider("counting", calls)),
        config={"indexer_batch_size": batch},
    )
    app.bring(T, P)
    n = 35
    for i in range(n):  # a kit import / restore: upserts through the document hook
        app.document_saved(T, P, f"documents/kit/{i:02}.md", f"kit document {i}")
    app.document_saved(T, P, "_vance/kit.json", '{"not": "indexed"}')

    assert calls.calls == []  # no embed call on import
    assert states(app) == {"pending": n, "none": 1}

    claimed_per_tick = []
    while tick := app.scheduler.tick():
        if not tick.claimed:
            break
        claimed_per_tick.append(tick.claimed)
        assert len(calls.text_calls) == len(claimed_per_tick)  # one model call per tick
    assert claimed_per_tick == [10, 10, 10, 5]
    assert max(len(texts) for texts in calls.text_calls) <= batch
    assert len(calls.embedded) == n
    assert states(app) == {"indexed": n, "none": 1}

    # a re-import of unchanged files queues and embeds nothing
    calls.clear()
    for i in range(n):
        app.document_saved(T, P, f"documents/kit/{i:02}.md", f"kit document {i}")
    assert states(app) == {"indexed": n, "none": 1}
    assert app.scheduler.tick().claimed == 0
    assert calls.calls == []


def test_failure_pod_crash_between_claim_and_write(make_app: AppFactory, clock: object) -> None:
    """The claim TTL expires and another pod (or the same after reboot) re-claims."""
    app = make_app(clock=clock, config={"claim_ttl_s": TTL, "indexer_batch_size": 10})
    app.bring(T, P)
    ids = [app.documents.create(T, P, f"documents/{i}.md", f"text {i}").id for i in range(15)]
    # pod A claims a batch and dies before writing anything
    crashed = app.store.control.claim_for_rag_index(T, P, "pod-a:dead", 10, TTL)
    assert len(crashed) == 10

    ticks_until_idle(app)  # pod B: only the unclaimed five
    assert states(app) == {"processing": 10, "indexed": 5}

    clock.advance(TTL + 1)  # type: ignore[attr-defined]
    ticks_until_idle(app)
    assert states(app) == {"indexed": 15}
    rag = default_rag(app)
    assert chunk_count(app, rag) == 15
    for i, doc_id in enumerate(ids):
        assert [c.text for c in chunks(app, rag, doc_id)] == [f"text {i}"]

    # pod A's ghost (e.g. a paused process waking up) cannot write any more
    late = app.indexer.index_batch(T, P, crashed, "pod-a:dead")
    assert (late.indexed, late.lost_lease) == (0, 10)
    assert chunk_count(app, rag) == 15


def test_failure_documents_rag_manually_deleted(app: RagApp) -> None:
    """Re-created (empty) on the next bring or reindex; reindex(rebuild=false) refills it."""
    app.bring(T, P)
    ids = [app.documents.create(T, P, f"documents/{i}.md", f"text {i}").id for i in range(4)]
    ticks_until_idle(app)
    old = default_rag(app)

    assert app.store.control.delete_rag(T, P, old.id)  # direct database access
    app.bring(T, P)
    new = default_rag(app)
    assert new.id != old.id
    assert chunk_count(app, new) == 0
    # the documents are clean, so nothing happens on its own
    assert app.scheduler.tick().claimed == 0
    assert chunk_count(app, new) == 0

    assert app.project_rags.reindex(T, P, rebuild=False).documents_queued == 4
    ticks_until_idle(app)
    assert states(app) == {"indexed": 4}
    assert {c.source_ref for c in chunks(app, new)} == set(ids)
    assert app.rags.query(new, "text 2", top_k=4)

    # deleted again: reindex alone re-creates it too
    assert app.store.control.delete_rag(T, P, new.id)
    result = app.project_rags.reindex(T, P, rebuild=False)
    assert result.documents_queued == 4
    newer = default_rag(app)
    assert newer.id != new.id
    ticks_until_idle(app)
    assert chunk_count(app, newer) == 4


def test_failure_race_doc_update_and_claim_in_parallel(make_app: AppFactory) -> None:
    """The update lands while the indexer holds the claim (inside the embed call): the second
    dirty mark survives and the next tick indexes the final content. Duplicate work, consistent."""
    holder: dict[str, RagApp] = {}
    updated: list[str] = []

    def update_during_embed(kind: str, texts: list[str]) -> None:
        if kind == "text" and "draft content" in texts and not updated:
            app = holder["app"]
            d = app.documents.get_by_path(T, P, "documents/a.md")
            assert d is not None and d.rag_claimed_by is not None  # claimed right now
            app.documents.update(T, P, d.id, content="final content")
            updated.append(d.id)

    calls = CallLog()

    def probe(kind: str, texts: list[str]) -> None:
        calls(kind, texts)
        update_during_embed(kind, texts)

    app = make_app(provider="racy", embeddings=registry(ProbeProvider("racy", probe)))
    holder["app"] = app
    app.bring(T, P)
    d = app.documents.create(T, P, "documents/a.md", "draft content")

    first = app.scheduler.tick()
    assert updated == [d.id]
    assert first.indexed == 1  # the pass over the draft completed ...
    mid = doc(app, d.id)
    assert mid.rag_dirty and mid.index_state is IndexState.PENDING  # ... but stays dirty

    second = app.scheduler.tick()
    assert second.indexed == 1
    assert [c.text for c in chunks(app, default_rag(app), d.id)] == ["final content"]
    final = doc(app, d.id)
    assert not final.rag_dirty and final.index_state is IndexState.INDEXED
    assert calls.embedded == ["draft content", "final content"]
    assert app.scheduler.tick().claimed == 0
