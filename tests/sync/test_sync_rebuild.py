"""Rebuilds without downtime on a real SQLite store: cancel, refusal of a second one, the kill
switch, edits while one runs, a provider that fails every document, cost, crash recovery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from synchelpers import chunk_count, chunks, default_rag, states

from fakes import DOCS, CallLog, P, ProbeProvider, Refuse, T, call_tool, registry
from vancetope_rag.app import RagApp
from vancetope_rag.domain.rebuilds import ItemState, RebuildState
from vancetope_rag.domain.records import RagState
from vancetope_rag.errors import EmbeddingDisabledError, NoRebuildError, RebuildRunningError
from vancetope_rag.store.port.types import RagScope

AppFactory = Callable[..., RagApp]
REFUSAL = "401 Unauthorized: invalid api key"


@pytest.fixture
def probe() -> ProbeProvider:
    return ProbeProvider("probe", CallLog())


@pytest.fixture
def rapp(make_app: AppFactory, probe: ProbeProvider, clock: Any) -> RagApp:
    """Three documents indexed with ``hashing-256``; retired generations go at once; a
    ``probe`` provider that counts its calls and a ``refuse`` one that fails every call."""
    app = make_app(
        clock=clock,
        embeddings=registry(probe, ProbeProvider("refuse", Refuse(REFUSAL))),
        config={"retired_grace_s": 0, "max_attempts": 2},
    )
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=10)
    return app


def texts_of(app: RagApp) -> dict[str, str]:
    """Path → chunk text of the live generation."""
    return {c.path or "": c.text for c in chunks(app, default_rag(app))}


def switch_model(app: RagApp, model: str = "hashing-128") -> None:
    app.settings.set(T, None, "ai.embedding.model", model)


def test_rebuild_of_a_project_without_an_index_creates_it(make_app: AppFactory) -> None:
    app = make_app()
    app.bring(T, P)
    app.project_rags.dispose_default_rag(T, P)
    app.documents.create(T, P, "documents/a.md", "alpha")
    result = app.project_rags.reindex(T, P, rebuild=True)
    assert (result.migration, result.documents_queued) == (None, 1)
    app.scheduler.run_until_idle(timeout_s=10)
    assert chunk_count(app, default_rag(app)) == 1


def test_cancel_disposes_the_new_generation_and_keeps_the_live_one(rapp: RagApp) -> None:
    live = default_rag(rapp)
    with pytest.raises(NoRebuildError):
        rapp.project_rags.cancel_rebuild(T, P)
    switch_model(rapp)
    rapp.config.indexer_batch_size = 1
    started = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert started is not None
    rapp.scheduler.tick()  # one of three documents in the new generation
    shadow_scope = RagScope(T, P, started.to_rag_id, 128)
    assert rapp.store.chunks.count_chunks(shadow_scope) == 1

    ended = rapp.project_rags.cancel_rebuild(T, P)

    assert (ended.id, ended.state, ended.reason) == (
        started.id,
        RebuildState.CANCELLED,
        "cancelled by a user",
    )
    assert default_rag(rapp) == live and chunk_count(rapp, live) == 3
    assert rapp.store.rebuilds.get_any_rag(T, P, started.to_rag_id) is None
    assert rapp.store.chunks.count_chunks(shadow_scope) == 0
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert default_rag(rapp).id == live.id  # nothing switches later
    latest = rapp.rebuilds.progress(T, P).migration
    assert latest is not None and latest.migration.state is RebuildState.CANCELLED
    assert (latest.work.done, latest.work.pending) == (1, 2)
    assert b'vance_rag_rebuilds_total{outcome="cancelled"} 1.0' in rapp.metrics.exposition()


def test_a_second_rebuild_is_refused_while_one_runs(rapp: RagApp) -> None:
    first = rapp.project_rags.reindex(T, P, rebuild=True).migration
    with pytest.raises(RebuildRunningError, match="already running") as err:
        rapp.project_rags.reindex(T, P, rebuild=True)
    assert err.value.code == "REBUILD_RUNNING"
    assert [m.id for m in rapp.store.rebuilds.active_rebuilds(T, P)] == [first.id]  # type: ignore[union-attr]
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert rapp.project_rags.reindex(T, P, rebuild=True).migration is not None  # free again


def test_the_kill_switch_stops_a_rebuild_and_leaves_the_live_generation(rapp: RagApp) -> None:
    live = default_rag(rapp)
    switch_model(rapp)
    started = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert started is not None
    rapp.settings.set(T, None, "ai.embedding.provider", "none")
    with pytest.raises(EmbeddingDisabledError):
        rapp.project_rags.reindex(T, P, rebuild=True)
    rapp.scheduler.tick()
    ended = rapp.store.rebuilds.get_rebuild(T, P, started.id)
    assert ended is not None and ended.state is RebuildState.CANCELLED
    assert "ai.embedding.provider=none" in (ended.reason or "")
    assert rapp.store.rebuilds.get_any_rag(T, P, started.to_rag_id) is None
    # the live generation is exactly as it was; switched on again, it answers again
    assert default_rag(rapp) == live and chunk_count(rapp, live) == 3
    rapp.settings.set(T, None, "ai.embedding.provider", "hashing")
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert default_rag(rapp).id == live.id
    assert rapp.rags.query(live, "zebra stripes", top_k=1)[0].path == "documents/zebra.md"


def test_edits_during_a_rebuild_reach_the_new_generation(rapp: RagApp) -> None:
    """Edited, created, deleted and excluded documents while the new generation fills: at the
    switch it holds each as it is now; the live one followed the edits meanwhile."""
    ids = {d.path: d.id for d in rapp.documents.list_documents(T, P)}
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    claimed = rapp.store.rebuilds.claim_items(m, "slow-pod", 10, 60.0)
    assert len(claimed) == 3
    rapp.documents.update(T, P, ids["documents/zebra.md"], content="Zebras sleep standing.")
    rapp.documents.create(T, P, "documents/new.md", "Brand new document about otters.")
    rapp.documents.delete(T, P, ids["documents/holiday.md"])
    rapp.documents.set_rag_enabled_override(T, P, ids["documents/cluster.md"], "off")
    # the slow pod finishes its batch with what it read before the edits: fenced off, since
    # every one of its items was re-queued or removed meanwhile
    shadow = rapp.store.rebuilds.get_any_rag(T, P, m.to_rag_id)
    assert shadow is not None
    late = rapp.rebuilds.shadows.index_items(
        m, shadow, claimed, "slow-pod", rapp.settings.snapshot(T, P)
    )
    assert (late.indexed, late.lost_lease) == (0, 3)
    # one tick: the live generation follows the edits; the rebuild catches up
    rapp.scheduler.tick()
    live_now = {c.path: c.text for c in chunks(rapp, default_rag(rapp))}
    assert live_now.get("documents/zebra.md") == "Zebras sleep standing."
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert default_rag(rapp).id == m.to_rag_id
    assert texts_of(rapp) == {
        "documents/zebra.md": "Zebras sleep standing.",
        "documents/new.md": "Brand new document about otters.",
    }
    assert states(rapp) == {"indexed": 2, "none": 1}


def test_an_edit_whose_requeue_was_lost_is_caught_before_the_switch(
    rapp: RagApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MongoDB has no transaction around an edit and its re-queue: a crash between them must
    not let the switch publish stale chunks. The queue is reconciled before switching."""
    zebra = rapp.documents.get_by_path(T, P, "documents/zebra.md")
    assert zebra is not None
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    shadow = rapp.store.rebuilds.get_any_rag(T, P, m.to_rag_id)
    items = rapp.store.rebuilds.claim_items(m, "w", 10, 60.0)
    rapp.rebuilds.shadows.index_items(m, shadow, items, "w", rapp.settings.snapshot(T, P))  # type: ignore[arg-type]
    monkeypatch.setattr(rapp.store.rebuilds, "requeue_documents", lambda *a: 0)  # "crash"
    rapp.documents.update(T, P, zebra.id, content="Zebras are black with white stripes.")
    monkeypatch.undo()
    rapp.scheduler.tick()  # live indexes the edit; the rebuild re-queues the stale item
    assert default_rag(rapp).id != m.to_rag_id
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert default_rag(rapp).id == m.to_rag_id
    assert texts_of(rapp)["documents/zebra.md"] == "Zebras are black with white stripes."


def test_an_edit_after_the_last_check_is_reindexed_into_the_new_generation(
    rapp: RagApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule behind the switch on MongoDB: documents whose new chunks are older than the
    document go to the (new) live indexer right after the switch."""
    zebra = rapp.documents.get_by_path(T, P, "documents/zebra.md")
    assert zebra is not None
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    shadow = rapp.store.rebuilds.get_any_rag(T, P, m.to_rag_id)
    items = rapp.store.rebuilds.claim_items(m, "w", 10, 60.0)
    rapp.rebuilds.shadows.index_items(m, shadow, items, "w", rapp.settings.snapshot(T, P))  # type: ignore[arg-type]
    monkeypatch.setattr(rapp.store.rebuilds, "requeue_documents", lambda *a: 0)
    rapp.documents.update(T, P, zebra.id, content="Zebras changed after the last check.")
    # the live indexer takes the edit into the *old* generation, just before the switch
    claimed = rapp.store.control.claim_for_rag_index(T, P, "live-pod", 10, 60.0)
    assert rapp.indexer.index_batch(T, P, claimed, "live-pod").indexed == 1
    assert not rapp.documents.get(T, P, zebra.id).rag_dirty
    rapp.rebuilds._switch(m)  # the switch lands right after
    assert default_rag(rapp).id == m.to_rag_id
    assert rapp.documents.get(T, P, zebra.id).rag_dirty  # queued for the new live
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert texts_of(rapp)["documents/zebra.md"] == "Zebras changed after the last check."


def test_a_provider_that_fails_every_document_fails_the_rebuild_not_the_index(
    rapp: RagApp,
) -> None:
    live = default_rag(rapp)
    before = texts_of(rapp)
    rapp.settings.set(T, None, "ai.embedding.provider", "refuse")  # loads, every call fails
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None and m.to_model == "refuse:refuse-64"
    rapp.scheduler.run_until_idle(timeout_s=10)
    ended = rapp.store.rebuilds.get_rebuild(T, P, m.id)
    assert ended is not None and ended.state is RebuildState.FAILED
    assert "of 3 documents failed with refuse:refuse-64" in (ended.reason or "")
    assert REFUSAL in (ended.reason or "") and "live generation" in (ended.reason or "")
    assert default_rag(rapp) == live and texts_of(rapp) == before  # never emptied
    assert rapp.store.rebuilds.get_any_rag(T, P, m.to_rag_id) is None
    assert b'vance_rag_rebuilds_total{outcome="failed"} 1.0' in rapp.metrics.exposition()
    progress = rapp.project_rags.status(T, P).to_json()["progress"]
    assert progress["migration"]["state"] == "failed" and not progress["busy"]


def test_failures_under_the_threshold_switch_and_leave_the_document_failed(
    rapp: RagApp, probe: ProbeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    rapp.settings.set(T, P, "rag.rebuild.maxFailureRatio", 0.5)
    rapp.settings.set(T, None, "ai.embedding.provider", "probe")

    def poison(kind: str, texts: list[str]) -> None:
        if any("vacation" in t for t in texts):
            raise RuntimeError("input rejected")

    monkeypatch.setattr(probe, "probe", poison)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    rapp.scheduler.run_until_idle(timeout_s=10)
    assert default_rag(rapp).id == m.to_rag_id  # type: ignore[union-attr]
    assert set(texts_of(rapp)) == {"documents/zebra.md", "documents/cluster.md"}
    holiday = rapp.documents.get_by_path(T, P, "documents/holiday.md")
    assert holiday is not None and holiday.index_state.value == "failed"  # visible in status
    assert "input rejected" in (holiday.index_last_error or "")


def test_a_rebuild_onto_the_same_model_embeds_nothing(rapp: RagApp, probe: ProbeProvider) -> None:
    rapp.settings.set(T, None, "ai.embedding.provider", "probe")
    rapp.project_rags.reindex(T, P, rebuild=True)
    rapp.scheduler.run_until_idle(timeout_s=10)
    first = len(probe.log.embedded)
    assert first == 3
    rapp.project_rags.reindex(T, P, rebuild=True)
    run = rapp.scheduler.run_until_idle(timeout_s=10)
    assert len(probe.log.embedded) == first and run.embedded_texts == 0  # the embedding cache
    assert run.cache_hits == 3 and chunk_count(rapp, default_rag(rapp)) == 3


def test_a_rebuild_onto_another_model_embeds_each_distinct_text_once(
    rapp: RagApp, probe: ProbeProvider
) -> None:
    for i in range(4):  # the same text in four documents, and another one twice
        rapp.documents.create(T, P, f"documents/copy-{i}.md", "A paragraph copied around.")
    for i in range(2):
        rapp.documents.create(T, P, f"documents/twin-{i}.md", "Twins share a text.")
    rapp.scheduler.run_until_idle(timeout_s=10)
    rapp.settings.set(T, None, "ai.embedding.provider", "probe")
    rapp.config.indexer_batch_size = 4  # several batches: the cache spans them
    rapp.project_rags.reindex(T, P, rebuild=True)
    rapp.scheduler.run_until_idle(timeout_s=10)
    embedded = probe.log.embedded
    assert sorted(embedded) == sorted(
        {*DOCS.values(), "A paragraph copied around.", "Twins share a text."}
    )
    assert chunk_count(rapp, default_rag(rapp)) == 9


def test_a_worker_that_dies_mid_rebuild_is_taken_over_and_the_switch_happens_once(
    rapp: RagApp, clock
) -> None:
    """The single-process view of a kill -9 (the multi-process test kills a real one): the
    dead worker's claims expire, another worker finishes, the switch happens once."""
    live = default_rag(rapp)
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    dead = rapp.store.rebuilds.claim_items(m, "dead-pod", 2, 60.0)
    assert len(dead) == 2
    rapp.scheduler.tick()  # the third one; the other two are leased to the dead pod
    counts = rapp.store.rebuilds.item_counts(m.id)
    assert (counts["done"], counts["processing"]) == (1, 2)
    assert default_rag(rapp).id == live.id  # not before every document is in
    clock.advance(rapp.config.claim_ttl_s + 1)  # the dead pod's lease expires
    rapp.scheduler.tick()
    assert default_rag(rapp).id == m.to_rag_id
    assert rapp.store.rebuilds.switch_live(m) is True  # again: harmless, nothing changes
    rapp.scheduler.tick()  # and no tick switches it a second time
    assert b'vance_rag_rebuilds_total{outcome="completed"} 1.0' in rapp.metrics.exposition()
    assert [r.id for r in rapp.store.rebuilds.rag_generations(T, P)] == [m.to_rag_id]
    items = rapp.store.rebuilds.list_items(m.id)
    assert {i.state for i in items} == {ItemState.DONE}


def test_only_the_live_generation_is_listed_and_queried_during_a_rebuild(rapp: RagApp) -> None:
    live = default_rag(rapp)
    switch_model(rapp)
    rapp.project_rags.reindex(T, P, rebuild=True)
    rapp.config.indexer_batch_size = 1
    rapp.scheduler.tick()  # the new generation holds a chunk now
    shadow = rapp.store.rebuilds.rag_generations(T, P)[1]
    assert shadow.state is RagState.SHADOW
    tools = rapp.tools(T, P)
    listed = call_tool(tools, "rag_list")["rags"]
    assert [(r["ragId"], r["embeddingModel"]) for r in listed] == [(live.id, "hashing-256")]
    assert [r.id for r in rapp.rags.list_rags(T, P)] == [live.id]
    hidden = rapp.tools(T, P)
    with pytest.raises(Exception, match="no RAG"):
        rapp.rags.get(T, P, shadow.id)  # not even by its id
    assert call_tool(hidden, "rag_query", ragId=shadow.id, query="zebra")["code"] == (
        "RAG_NOT_FOUND"
    )


def test_closing_the_project_during_a_rebuild_disposes_every_generation(rapp: RagApp) -> None:
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    rapp.close_project(T, P)
    assert rapp.store.rebuilds.rag_generations(T, P) == []
    ended = rapp.store.rebuilds.get_rebuild(T, P, m.id)
    assert ended is not None and ended.state is RebuildState.CANCELLED


def test_a_rebuild_keeps_the_sections_of_files_and_their_failures(rapp: RagApp) -> None:
    """A rebuild keeps extraction's parts: the new generation is built from the same parts as
    the live one (a sheet per chunk, labelled), and a file that could not be read stays
    failed, with no chunks."""
    import filemakers as fm
    from vancetope_rag.services.importer import ImportSource

    book = fm.xlsx({"Intro": [["hello there"]], "Maintenance": [["pump seals yearly"]]})
    rapp.importer.import_sources(
        T, P, [ImportSource("q3.xlsx", data=book), ImportSource("scan.png", data=b"\x89PNG")]
    )
    rapp.scheduler.run_until_idle(timeout_s=10)
    switch_model(rapp)
    rapp.project_rags.reindex(T, P, rebuild=True)
    rapp.scheduler.run_until_idle(timeout_s=10)
    rag = default_rag(rapp)
    assert rag.generation == 2 and rag.embedding_model == "hashing-128"
    doc = rapp.documents.get_by_path(T, P, "documents/q3.xlsx")
    assert doc is not None
    sections = {c.metadata.get("section") for c in chunks(rapp, rag, doc.id)}
    assert sections == {"sheet Intro", "sheet Maintenance"}
    scan = rapp.documents.get_by_path(T, P, "documents/scan.png")
    assert scan is not None and scan.index_state.value == "failed"
    assert chunks(rapp, rag, scan.id) == []


def test_unreadable_documents_count_as_failed_in_a_rebuild_as_in_indexing(
    make_app: AppFactory, tmp_path: Any
) -> None:
    """A rebuild counted a document whose file could not be read as done ("completed, 4
    done, 0 failed" beside "indexing: 3 done, 1 failed"): it is failed there as here, and,
    being no failure of the new model, does not count against rag.rebuild.maxFailureRatio."""
    app = make_app()
    app.bring(T, P)
    app.settings.set(T, None, "rag.rebuild.maxFailureRatio", 0.0)
    folder = tmp_path / "files"
    folder.mkdir()
    for path, text in DOCS.items():
        (folder / path.rsplit("/", 1)[-1]).write_text(text)
    (folder / "scan.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")  # no text layer
    app.importer.import_directory(T, P, folder)
    app.scheduler.run_until_idle(timeout_s=10)
    indexing = app.rebuilds.progress(T, P).indexing
    assert (indexing.done, indexing.failed, indexing.pending) == (len(DOCS), 1, 0)

    switch_model(app)
    app.project_rags.reindex(T, P, rebuild=True)
    app.scheduler.run_until_idle(timeout_s=10)
    latest = app.rebuilds.progress(T, P)
    assert latest.migration is not None
    assert latest.migration.migration.state is RebuildState.COMPLETED
    work = latest.migration.work
    assert (work.done, work.failed, work.pending) == (len(DOCS), 1, 0)
    assert (latest.indexing.done, latest.indexing.failed) == (len(DOCS), 1)


def test_a_document_excluded_during_a_rebuild_counts_as_skipped_not_done(rapp: RagApp) -> None:
    """A rebuild counted a document it finished without indexing (excluded meanwhile: not
    eligible any more) as done; it is skipped there, as the indexer skips it in the live
    index, and done, failed and skipped stay separate numbers."""
    ids = {d.path: d.id for d in rapp.documents.list_documents(T, P)}
    switch_model(rapp)
    m = rapp.project_rags.reindex(T, P, rebuild=True).migration
    assert m is not None
    rapp.documents.set_rag_enabled_override(T, P, ids["documents/cluster.md"], "off")
    rapp.scheduler.run_until_idle(timeout_s=10)

    latest = rapp.rebuilds.progress(T, P)
    assert latest.migration is not None
    assert latest.migration.migration.state is RebuildState.COMPLETED
    work = latest.migration.work
    assert (work.done, work.failed, work.pending) == (2, 0, 0)
    assert work.skipped == 1
    assert (work.total, work.to_json()["skipped"]) == (3, 1)
    # the indexer's queue holds eligible documents only: the excluded one is in state none
    assert (latest.indexing.done, latest.indexing.failed, latest.indexing.skipped) == (2, 0, 0)
    assert states(rapp) == {"indexed": 2, "none": 1}
    states_now = {i.document_id: i.state for i in rapp.store.rebuilds.list_items(m.id)}
    assert states_now[ids["documents/cluster.md"]] is ItemState.SKIPPED
    assert texts_of(rapp).keys() == {"documents/zebra.md", "documents/holiday.md"}
