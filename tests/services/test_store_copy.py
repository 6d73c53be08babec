"""The store-to-store copy (``services/store_copy.py``) on real stores: SQLite to SQLite and
SQLite to MongoDB (mongomock). After a copy the target answers queries as the source does,
indexes nothing again, and holds the same settings, catalog, documents and cache; a second
run writes nothing; an interrupted run completes when run again; conflicts stop the copy
without overwriting anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fakes import DOCS, CallLog, P, ProbeProvider, T, registry
from vancetope_rag.app import RagApp, open_store_copy
from vancetope_rag.config import EngineConfig
from vancetope_rag.domain.records import Document, IndexState, ProjectStatus, RagRecord
from vancetope_rag.errors import (
    CopyConflictError,
    InvalidInputError,
    RebuildRunningError,
    StoreError,
)
from vancetope_rag.services.store_copy import CopyReport, CopySelection, StoreCopier
from vancetope_rag.store import Store, open_store
from vancetope_rag.store.port.types import NewDocument, RagScope

AppFactory = Callable[..., RagApp]
P2, T2, T3 = "p2", "t2", "t3"
QUERIES = ("zebra stripes", "vacation days in the portal", "pods and leases", "mongo notes")


@pytest.fixture
def source(make_app: AppFactory, clock: Any) -> RagApp:
    """Two projects of t1 fully indexed with the ``probe`` provider, a user RAG with a manual
    text, settings at both scopes (and a tenant t3 with settings but no project), a failed
    document and cached embeddings."""
    app = make_app(provider="probe", embeddings=registry(ProbeProvider("probe", CallLog())))
    app.settings.set(T, P, "rag.topK", 7)
    app.settings.set(T, P2, "rag.retrieval.mode", "dense")
    app.settings.set(T3, None, "rag.minScore", 0.3)
    for project in (P, P2):
        app.bring(T, project)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    app.documents.create(T, P2, "documents/other.md", "Another project on mongo notes.")
    app.store.control.insert_document(
        NewDocument(T, P, "documents/scan.pdf", "application/pdf", "", failed_reason="no text")
    )
    notes = app.rags.create(T, P, "notes", title="Notes")
    app.rags.add_text(notes, "n1", "Mongo notes: the leases live in the cluster.")
    app.scheduler.run_until_idle(timeout_s=20)
    return app


def target_app(store: Store) -> tuple[RagApp, CallLog]:
    log = CallLog()
    app = RagApp.open(
        EngineConfig(store="sqlite:///unused.db", node_id="test-node"),  # the store is given
        store=store,
        embeddings=registry(ProbeProvider("probe", log)),
    )
    return app, log


def mongomock_target(clock: Any) -> Store:
    import mongomock

    from vancetope_rag.store.mongo.client import open_mongo_store

    return open_mongo_store(
        "mongodb://localhost/copy_target",
        clock=clock,
        client=mongomock.MongoClient(),
        vector_search="exact",
    )


@pytest.fixture(params=["sqlite", "mongomock"])
def target(request: Any, tmp_path: Path, clock: Any) -> Iterator[Store]:
    store = (
        open_store(f"sqlite:///{tmp_path / 'target.db'}", clock=clock)
        if request.param == "sqlite"
        else mongomock_target(clock)
    )
    yield store
    store.close()


def copy(source: RagApp, target: Store, **kwargs: Any) -> CopyReport:
    return StoreCopier(source.store, target, **kwargs).run()


def rag_fields(rag: RagRecord) -> tuple[Any, ...]:
    return (rag.id, rag.name, rag.embedding_model, rag.embedding_dimension, rag.generation)


def doc_fields(doc: Document) -> tuple[Any, ...]:
    return (
        doc.id,
        doc.path,
        doc.content,
        doc.content_hash,
        doc.index_state,
        doc.rag_version,
        doc.rag_indexed_hash,
        doc.rag_dirty,
        doc.index_last_error,
    )


def hits(app: RagApp, tenant: str, project: str, name: str, query: str, mode: str) -> list[Any]:
    rag = app.rags.find(tenant, project, name)
    assert rag is not None
    found = app.rags.query(rag, query, top_k=10, min_score=0.0, mode=mode)
    # ranked by score; chunks tied on a score (0: no shared word) come in any order
    return sorted(
        ((round(h.score, 6), h.chunk_id, h.source_ref, h.path, h.text) for h in found),
        key=lambda h: (-h[0], h[1]),
    )


def test_round_trip_same_answers_nothing_embedded_again(source: RagApp, target: Store) -> None:
    report = copy(source, target)
    assert (report.written.projects, report.written.rags, report.written.documents) == (2, 3, 5)
    assert report.written.chunks == 5 and report.present.total() == 0
    assert report.written.settings == 4  # the provider and rag.minScore (tenants), two projects
    assert report.written.cached_embeddings == report.found.cached_embeddings > 0
    assert report.requeued == 0 and report.cache_copied

    app, log = target_app(target)
    try:
        for tenant, project in ((T, P), (T, P2)):
            assert [rag_fields(r) for r in app.rags.list_rags(tenant, project)] == [
                rag_fields(r) for r in source.rags.list_rags(tenant, project)
            ]
            mine = source.store.control.list_documents(tenant, project)
            assert [doc_fields(d) for d in app.store.control.list_documents(tenant, project)] == [
                doc_fields(d) for d in mine
            ]
            for rag in source.rags.list_rags(tenant, project):
                scope = RagScope.of(rag)
                assert target.chunks.get_chunks(scope) == source.store.chunks.get_chunks(scope)
        for tenant, project in ((T, None), (T, P), (T, P2), (T3, None)):
            assert app.store.control.get_settings(
                tenant, project
            ) == source.store.control.get_settings(tenant, project)
        # the same hits with the same scores, dense and hybrid
        for query in QUERIES:
            for mode in ("dense", "hybrid"):
                for project, name in ((P, "_documents"), (P, "notes"), (P2, "_documents")):
                    theirs = hits(source, T, project, name, query, mode)
                    assert hits(app, T, project, name, query, mode) == theirs, (query, mode)
        top = hits(app, T, P, "_documents", "zebra stripes", "dense")[0]
        assert top[0] > 0 and top[3] == "documents/zebra.md"
        assert log.embedded == []  # queries only: no document was embedded again
        app.scheduler.run_until_idle(timeout_s=20)  # the target's indexer finds nothing to do
        assert log.embedded == []
        assert app.store.control.document_state_counts(T, P)["indexed"] == 3
        assert app.store.control.document_state_counts(T, P)["failed"] == 1
    finally:
        app.close()


def test_a_second_run_writes_nothing(source: RagApp, target: Store) -> None:
    first = copy(source, target)
    second = copy(source, target)
    assert second.written.total() == 0
    assert second.present.to_json() == first.written.to_json() == second.found.to_json()


def test_an_interrupted_copy_completes_when_run_again(source: RagApp, target: Store) -> None:
    """The copy dies after some chunk sources are written (as a killed process would):
    the next run writes exactly what was missing."""
    real = target.chunks.replace_source
    calls = {"n": 0}

    def dying(*args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # not a RagError: nothing may catch it
        real(*args, **kwargs)

    target.chunks.replace_source = dying  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        copy(source, target)
    target.chunks.replace_source = real  # type: ignore[method-assign]
    again = copy(source, target)
    assert again.present.chunks > 0 and again.written.chunks > 0
    assert again.present.chunks + again.written.chunks == again.found.chunks == 5
    assert again.written.documents == 5  # the documents come after their project's chunks
    assert copy(source, target).written.total() == 0


def test_a_rag_whose_live_pointer_a_crash_left_unwritten_is_completed(
    source: RagApp, clock: Any
) -> None:
    """MongoDB writes a RAG's entry, then its live pointer: a copy killed in between leaves
    an entry read as retired, which the next run completes instead of calling a conflict."""
    target = mongomock_target(clock)
    try:
        rag = source.rags.find(T, P2, "_documents")
        assert rag is not None
        target.control.upsert_project(T, P2, status=ProjectStatus.RUNNING, home_node=None)
        target.control.insert_rag(rag)
        target.database["rag_names"].delete_many({})  # type: ignore[attr-defined]
        assert target.control.get_any_rag(T, P2, rag.id).state.value == "retired"  # type: ignore[union-attr]
        report = copy(source, target, selection=CopySelection(T, P2))
        assert report.written.rags == 1
        assert target.control.find_rag(T, P2, "_documents").id == rag.id  # type: ignore[union-attr]
    finally:
        target.close()


def test_a_claimed_document_is_queued_at_the_target(source: RagApp, target: Store) -> None:
    source.documents.create(T, P, "documents/late.md", "Late arrival about zebra herds.")
    control = source.store.control
    (claimed,) = control.claim_for_rag_index(T, P, "worker-at-the-source", 5, 60.0)
    report = copy(source, target)
    assert report.requeued == 1
    there = target.control.get_document(T, P, claimed.id)
    assert there is not None
    assert (there.index_state, there.rag_dirty, there.rag_claimed_by) == (
        IndexState.PENDING,
        True,
        None,
    )
    app, log = target_app(target)
    try:
        app.scheduler.run_until_idle(timeout_s=20)
        assert log.embedded == ["Late arrival about zebra herds."]  # that one only
    finally:
        app.close()


def test_selection_copies_one_project_and_its_tenant_settings(
    source: RagApp, target: Store
) -> None:
    report = copy(source, target, selection=CopySelection(tenant_id=T, project_id=P2))
    assert [p.project_id for p in target.control.list_projects()] == [P2]
    assert target.control.get_settings(T, None) == source.store.control.get_settings(T, None)
    assert target.control.get_settings(T3, None) == {}  # another tenant
    assert target.control.get_settings(T, P) == {}
    assert report.written.documents == 1
    # the cache is shared by every tenant: only a whole-store copy takes it
    assert not report.cache_copied and target.control.scan_cached_embeddings() == []


def test_dry_run_counts_and_writes_nothing(source: RagApp, target: Store) -> None:
    report = StoreCopier(source.store, target).run(dry_run=True)
    assert report.dry_run and report.written.total() == 0
    found = report.found
    assert (found.projects, found.rags, found.documents, found.chunks) == (2, 3, 5, 5)
    assert found.settings == 4 and found.cached_embeddings > 0
    assert target.control.list_projects() == []
    alone = StoreCopier(source.store, None).run(dry_run=True)  # reads the source alone
    assert alone.found.to_json() == found.to_json()
    with pytest.raises(InvalidInputError, match="dry run"):
        StoreCopier(source.store, None).run()
    assert copy(source, target).found.to_json() == found.to_json()


def test_a_rebuild_in_progress_is_refused(source: RagApp, target: Store) -> None:
    source.settings.set(T, None, "ai.embedding.model", "probe-other")
    source.project_rags.reindex(T, P, rebuild=True)
    with pytest.raises(RebuildRunningError, match="reindex --cancel"):
        copy(source, target)
    assert target.control.list_projects() == []
    source.project_rags.cancel_rebuild(T, P)
    assert copy(source, target).written.rags == 3  # the live generations only


def test_conflicts_stop_the_copy_and_overwrite_nothing(source: RagApp, target: Store) -> None:
    target.control.set_setting(T, P, "rag.topK", "3")
    with pytest.raises(CopyConflictError, match=r"rag\.topK"):
        copy(source, target)
    assert target.control.get_settings(T, P) == {"rag.topK": "3"}
    target.control.set_setting(T, P, "rag.topK", None)
    copy(source, target)

    # a document edited at the target since: same id, other content
    doc = source.store.control.get_document_by_path(T, P, "documents/zebra.md")
    assert doc is not None
    target.control.delete_document(T, P, doc.id)
    target.control.restore_document(replace(doc, content="edited", content_hash="other"))
    with pytest.raises(CopyConflictError, match="content_hash"):
        copy(source, target)
    there = target.control.get_document(T, P, doc.id)
    assert there is not None and there.content == "edited"


def test_a_live_rag_of_the_same_name_at_the_target_is_a_conflict(
    source: RagApp, target: Store
) -> None:
    rag = source.rags.find(T, P2, "_documents")
    assert rag is not None
    target.control.upsert_project(T, P2, status=ProjectStatus.RUNNING, home_node=None)
    target.control.insert_rag(replace(rag, id="another-id"))
    with pytest.raises(CopyConflictError, match="_documents"):
        copy(source, target, selection=CopySelection(T, P2))
    assert target.control.find_rag(T, P2, "_documents").id == "another-id"  # type: ignore[union-attr]


def test_progress_lines_are_bounded_in_number(source: RagApp, target: Store) -> None:
    """One line per step; within a long step the last batch and at most one per interval."""
    lines: list[str] = []
    tick = iter(range(1000))
    copier = StoreCopier(
        source.store,
        target,
        batch_size=1,
        progress=lines.append,
        progress_every_s=2.0,
        monotonic=lambda: float(next(tick)),  # one second passes per progress line asked
    )
    copier.run()
    documents = [line for line in lines if line.startswith(f"{T}/{P}: ") and "documents" in line]
    # four documents one at a time: the RAGs' last lines came a second before the first, so
    # the second is the first due, then the last one
    assert documents == [f"{T}/{P}: {n} of 4 documents" for n in (2, 4)]
    assert f"{T}/{P} notes: 1 of 1 sources" in lines
    assert lines[-1].startswith("embedding cache: ")


def test_open_store_copy_refuses_the_same_store_and_a_missing_source(tmp_path: Path) -> None:
    db = tmp_path / "rag.db"
    open_store(f"sqlite:///{db}").close()
    for other in (str(db), f"sqlite:///{db}", f"sqlite:///{tmp_path}/./rag.db"):
        with (
            pytest.raises(InvalidInputError, match="same store"),
            open_store_copy(f"sqlite:///{db}", other),
        ):
            pass
    missing = tmp_path / "nothing.db"
    with (
        pytest.raises(StoreError, match="no store file"),
        open_store_copy(f"sqlite:///{missing}", f"sqlite:///{tmp_path}/t.db"),
    ):
        pass
    assert not missing.exists() and not (tmp_path / "t.db").exists()
