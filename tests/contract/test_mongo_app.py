"""The whole app (services, indexer, CLI-facing ``init_store``) on the lagging Atlas double.

What the store tests cannot show: a RAG of a new dimension makes its search indexes without
waiting and the indexer holds its documents (no attempt burned) until they are READY; an edit
answered by the old chunks until search sees the new ones, then swept; a worker whose lease
expired fenced by its claim token through the indexer itself, on MongoDB and on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from atlas_double import AtlasCluster
from click.testing import CliRunner
from mongo_support import atlas_app as shared_atlas_app

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.cli import cli
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, IndexState
from vancetope_rag.store.mongo.client import MongoStore
from vancetope_rag.store.port.types import RagScope

AppFactory = Callable[..., RagApp]


def atlas_app(make_app: AppFactory, clock: Any) -> tuple[RagApp, AtlasCluster, MongoStore]:
    app, cluster = shared_atlas_app(make_app, clock)
    assert isinstance(app.store, MongoStore)
    app.bring(T, P)
    return app, cluster, app.store


def texts(app: RagApp, query: str) -> list[str]:
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    return [h.text for h in app.rags.query(rag, query, top_k=5)]


def test_a_new_dimension_waits_for_its_indexes_without_burning_attempts(
    make_app: AppFactory, clock: Any
) -> None:
    app, cluster, _store = atlas_app(make_app, clock)
    d = app.documents.create(T, P, "documents/cats.md", "Cats purr when they are content.")
    skipped = app.metrics.runs("skipped")
    tick = app.scheduler.tick()  # creates _documents: its dimension's indexes start building
    assert tick.claimed == 0 and app.metrics.runs("skipped") == skipped + 1
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    name = f"chunks_{rag.embedding_dimension}"
    assert set(cluster.indexes[("rag", name)]) == {"vancetope_rag_vectors", "vancetope_rag_text"}
    waiting = app.documents.get(T, P, d.id)
    assert (waiting.index_state, waiting.index_attempts) == (IndexState.PENDING, 0)
    cluster.settle()
    assert app.scheduler.tick().indexed == 1
    cluster.settle()
    assert texts(app, "cats purr") == ["Cats purr when they are content."]
    assert len(cluster.indexes[("rag", name)]) == 2  # queries created nothing


def test_an_edit_is_answered_by_the_old_chunks_until_search_sees_the_new(
    make_app: AppFactory, clock: Any
) -> None:
    app, cluster, store = atlas_app(make_app, clock)
    app.init_store(dimensions=[256], wait=True)  # hashing-256, before the first RAG
    d = app.documents.create(T, P, "documents/a.md", "Alpha version of the page.")
    cluster.settle()
    app.scheduler.tick()
    cluster.settle()
    assert texts(app, "alpha version page") == ["Alpha version of the page."]
    app.documents.update(T, P, d.id, content="Beta version of the page.")
    assert app.scheduler.tick().indexed == 1
    # right after the edit: the old generation answers, never nothing
    assert texts(app, "version page") == ["Alpha version of the page."]
    cluster.settle()
    assert texts(app, "version page") == ["Beta version of the page."]
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    collection = store.database[f"chunks_{rag.embedding_dimension}"]
    assert collection.count_documents({}) == 2  # both generations, until a tick sweeps
    app.scheduler.tick()
    assert collection.count_documents({}) == 1
    assert app.rags.source_chunk_count(rag, d.id) == 1


def test_init_store_reports_every_dimension(make_app: AppFactory, clock: Any) -> None:
    app, _cluster, _store = atlas_app(make_app, clock)
    app.documents.create(T, P, "documents/a.md", "text")
    app.scheduler.tick()  # the RAG exists now
    statuses = app.init_store(wait=True, timeout_s=60)
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    assert {(s.collection, s.status) for s in statuses} == {
        (f"chunks_{rag.embedding_dimension}", "READY")
    }
    more = app.init_store(dimensions=[384])
    assert {s.collection for s in more} == {f"chunks_{rag.embedding_dimension}", "chunks_384"}


def _backend(make_app: AppFactory, clock: Any, backend: str) -> tuple[RagApp, Callable[[], None]]:
    """The app on the Atlas double (indexes built) or on SQLite, and how search catches up."""
    if backend == "atlas":
        app, cluster, _ = atlas_app(make_app, clock)
        app.init_store(dimensions=[256], wait=True)
        return app, cluster.settle
    app = make_app(clock=clock)
    app.bring(T, P)
    return app, lambda: None


def _stalled_claim(app: RagApp, settle: Callable[[], None], clock: Any) -> tuple[Any, list[Any]]:
    """A document "version one" claimed by ``slow-pod``, whose lease has then expired."""
    d = app.documents.create(T, P, "documents/a.md", "version one")
    app.project_rags.indexable_rag(T, P)
    settle()
    stale = app.store.control.claim_for_rag_index(T, P, "slow-pod", 10, 60.0)
    clock.advance(61)
    return d, stale


def _passes_its_lease_check(app: RagApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """``slow-pod`` passed its lease check just before it stalled: it still says yes."""
    control = app.store.control
    real = control.holds_claim
    monkeypatch.setattr(control, "holds_claim", lambda c: c.worker_id == "slow-pod" or real(c))


@pytest.mark.parametrize("backend", ["sqlite", "atlas"])
def test_a_worker_whose_lease_moved_on_is_fenced_by_its_token(
    make_app: AppFactory, clock: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow worker passed its lease check just before the lease expired (simulated by a
    ``holds_claim`` that still says yes); B indexed the new version since. A's write and
    clean mark, carrying A's older claim token, change nothing."""
    app, settle = _backend(make_app, clock, backend)
    d, stale = _stalled_claim(app, settle, clock)
    app.documents.update(T, P, d.id, content="version two")
    assert app.scheduler.tick().indexed == 1
    settle()
    _passes_its_lease_check(app, monkeypatch)
    late = app.indexer.index_batch(T, P, stale, "slow-pod")
    assert (late.indexed, late.lost_lease) == (0, 1)
    settle()
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    stored = app.store.chunks.get_chunks(RagScope.of(rag), filters={"sourceRef": d.id})
    assert [c.text for c in stored] == ["version two"]
    assert texts(app, "version") == ["version two"]
    after = app.documents.get(T, P, d.id)
    assert (after.index_state, after.rag_dirty) == (IndexState.INDEXED, False)


def _source_texts(app: RagApp, document_id: str) -> list[str]:
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    stored = app.store.chunks.get_chunks(RagScope.of(rag), filters={"sourceRef": document_id})
    return [c.text for c in stored]


@pytest.mark.parametrize("backend", ["sqlite", "atlas"])
def test_a_stalled_worker_cannot_bring_back_a_disabled_document(
    make_app: AppFactory, clock: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow worker passed its lease check, then stalled; the user disabled the document
    and the next pass removed its chunks. The slow worker's write lands nowhere."""
    app, settle = _backend(make_app, clock, backend)
    d, stale = _stalled_claim(app, settle, clock)
    app.documents.set_rag_enabled_override(T, P, d.id, "off")
    assert app.scheduler.tick().removed == 1
    _passes_its_lease_check(app, monkeypatch)
    late = app.indexer.index_batch(T, P, stale, "slow-pod")
    assert (late.indexed, late.lost_lease) == (0, 1)
    assert _source_texts(app, d.id) == []
    for _ in range(2):
        settle()
        assert texts(app, "version one") == []
        app.store.chunks.sweep()


@pytest.mark.parametrize("backend", ["sqlite", "atlas"])
def test_a_write_whose_clean_mark_fails_is_undone(
    make_app: AppFactory, clock: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow worker writes version two, then its clean mark fails: another worker claimed
    the document meanwhile. Its write is undone (a rollback on SQLite, the chunk version
    taken back on MongoDB), so version one answers until the new claim indexes."""
    app, settle = _backend(make_app, clock, backend)
    control = app.store.control
    d = app.documents.create(T, P, "documents/a.md", "version one")
    app.project_rags.indexable_rag(T, P)
    settle()
    assert app.scheduler.tick().indexed == 1
    app.documents.update(T, P, d.id, content="version two")
    stale = control.claim_for_rag_index(T, P, "slow-pod", 10, 60.0)
    clock.advance(61)
    assert len(control.claim_for_rag_index(T, P, "new-pod", 10, 60.0)) == 1
    _passes_its_lease_check(app, monkeypatch)
    late = app.indexer.index_batch(T, P, stale, "slow-pod")
    assert (late.indexed, late.lost_lease) == (0, 1)
    assert _source_texts(app, d.id) == ["version one"]
    settle()
    assert texts(app, "version") == ["version one"]


def test_cli_init_on_the_embedded_store(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'rag.db'}"
    runner = CliRunner()
    result = runner.invoke(cli, ["--store", store, "init", "--wait"])
    assert result.exit_code == 0, result.output
    assert "store ready" in result.output
    result = runner.invoke(cli, ["--store", store, "init", "--dimension", "384", "--json"])
    assert result.exit_code == 0, result.output
    assert '"status": "READY"' in result.output and "vec_chunks_384" in result.output
    bad = runner.invoke(cli, ["--store", store, "init", "--dimension", "0"])
    assert bad.exit_code != 0
    pruned = runner.invoke(cli, ["--store", store, "init", "--prune"])  # nothing to drop here
    assert pruned.exit_code == 0 and "DROPPED" not in pruned.output


def test_cli_init_and_index_on_atlas(
    make_app: AppFactory, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``index`` refuses to report "indexed 0" while the search indexes build; ``init --wait``
    builds them (the CLI reaches the store only through the app)."""
    app, _cluster, _ = atlas_app(make_app, clock)
    monkeypatch.setattr(RagApp, "open", staticmethod(lambda *args, **kwargs: app))
    app.documents.create(T, P, "documents/a.md", "Alpha text.")
    runner = CliRunner()
    base = ["--store", "mongodb://atlas.example.net/rag", "--tenant", T, "--project", P]
    result = runner.invoke(cli, [*base, "index"])
    assert result.exit_code == 1 and "not READY yet" in result.output
    result = runner.invoke(cli, [*base, "init"])
    assert result.exit_code == 0 and "chunks_256       vancetope_rag_vectors" in result.output
    assert "still building" in result.output
    result = runner.invoke(cli, [*base, "init", "--wait", "--json"])
    assert result.exit_code == 0 and '"ready": true' in result.output
    result = runner.invoke(cli, [*base, "index"])
    assert result.exit_code == 0 and "indexed 1 documents" in result.output
    result = runner.invoke(cli, [*base, "init", "--dimension", "16"])
    assert result.exit_code == 0 and "chunks_16" in result.output
    result = runner.invoke(cli, [*base, "init", "--prune"])  # no RAG uses 16: its indexes go
    assert result.exit_code == 0, result.output
    dropped = [line for line in result.output.splitlines() if "DROPPED" in line]
    assert len(dropped) == 2 and all(line.startswith("chunks_16") for line in dropped)
    assert "no RAG uses dimension 16" in dropped[0]
