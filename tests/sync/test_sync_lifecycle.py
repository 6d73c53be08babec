"""Acceptance 2: the project lifecycle anchors of the default RAG (spec §6.1)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from synchelpers import chunk_count, default_rag, states, ticks_until_idle

from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import DEFAULT_RAG_NAME, ProjectStatus
from vancetope_rag.domain.settings.registry import encode_setting
from vancetope_rag.store.port.types import RagScope

LOGGER = "vancetope_rag"
AppFactory = Callable[..., RagApp]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_bring_creates_default_rag_idempotently(app: RagApp) -> None:
    app.bring(T, P)
    first = default_rag(app)
    assert (first.name, first.embedding_provider, first.embedding_model) == (
        DEFAULT_RAG_NAME,
        "hashing",
        "hashing-256",
    )
    app.bring(T, P)
    app.lifecycle.bring(T, P)
    assert [r.id for r in app.rags.list_rags(T, P)] == [first.id]
    project = app.store.control.get_project(T, P)
    assert project is not None and project.status is ProjectStatus.RUNNING


def test_bring_keeps_existing_chunks(app: RagApp) -> None:
    app.bring(T, P)
    app.documents.create(T, P, "documents/a.md", "alpha")
    ticks_until_idle(app)
    app.bring(T, P)
    assert chunk_count(app, default_rag(app)) == 1


def test_provider_none_means_no_rag_and_no_warning(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(provider="none")
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    app.bring(T, P)
    d = app.documents.create(T, P, "documents/a.md", "alpha")
    tick = app.scheduler.tick()
    assert app.project_rags.find_default_rag(T, P) is None
    assert app.rags.list_rags(T, P) == []
    assert app.store.control.get_project(T, P).status is ProjectStatus.RUNNING
    assert tick.claimed == 0
    assert app.documents.get(T, P, d.id).rag_claimed_by is None
    assert _warnings(caplog) == []


def test_provider_unset_defaults_to_none(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(provider=None)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    app.bring(T, P)
    assert app.project_rags.find_default_rag(T, P) is None
    assert _warnings(caplog) == []


@pytest.mark.parametrize(
    ("provider", "needle"),
    [("openai", "apiKey"), ("gemini", "apiKey"), ("no-such-provider", "unknown embedding")],
)
def test_misconfigured_provider_warns_but_project_runs(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture, provider: str, needle: str
) -> None:
    app = make_app(provider=None)
    if provider in app.embeddings.names():
        app.settings.set(T, None, "ai.embedding.provider", provider)
    else:  # `settings set` refuses it now: a plugin uninstalled since it was set
        value = encode_setting("ai.embedding.provider", provider)
        app.store.control.set_setting(T, None, "ai.embedding.provider", value)
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    app.bring(T, P)  # never raises
    assert app.store.control.get_project(T, P).status is ProjectStatus.RUNNING
    assert app.project_rags.find_default_rag(T, P) is None
    warnings = _warnings(caplog)
    assert len(warnings) == 1
    assert needle in warnings[0]
    assert f"{T}/{P}" in warnings[0]


def test_suspend_keeps_rag_and_chunks(app: RagApp) -> None:
    app.bring(T, P, home_node="test-node")
    app.documents.create(T, P, "documents/a.md", "alpha")
    ticks_until_idle(app)
    rag = default_rag(app)
    app.suspend(T, P)
    project = app.store.control.get_project(T, P)
    assert project is not None
    assert (project.status, project.home_node) == (ProjectStatus.SUSPENDED, "test-node")
    assert default_rag(app).id == rag.id
    assert chunk_count(app, rag) == 1
    # resume: same RAG, chunks used at once
    app.bring(T, P, home_node="test-node")
    assert default_rag(app).id == rag.id
    assert [h.source_ref for h in app.rags.query(rag, "alpha", top_k=1)]


def test_close_removes_rag_and_chunks(app: RagApp) -> None:
    app.bring(T, P)
    for i in range(3):
        app.documents.create(T, P, f"documents/{i}.md", f"text {i}")
    ticks_until_idle(app)
    rag = default_rag(app)
    assert chunk_count(app, rag) == 3
    app.close_project(T, P)
    assert app.store.control.get_project(T, P).status is ProjectStatus.CLOSED
    assert app.project_rags.find_default_rag(T, P) is None
    assert app.store.chunks.count_chunks(RagScope.of(rag)) == 0
    # a closed project is not served by the scheduler
    app.documents.create(T, P, "documents/late.md", "late")
    assert app.scheduler.tick().projects == 0


def test_close_keeps_other_projects_rag(app: RagApp) -> None:
    app.bring(T, P)
    app.bring(T, "p2")
    app.documents.create(T, "p2", "documents/a.md", "alpha")
    ticks_until_idle(app)
    other = default_rag(app, T, "p2")
    app.close_project(T, P)
    assert default_rag(app, T, "p2").id == other.id
    assert chunk_count(app, other) == 1


def test_scheduler_serves_own_and_podless_running_projects_only(make_app: AppFactory) -> None:
    app = make_app(config={"node_id": "node-a"})
    app.bring(T, "home", home_node="node-a")
    app.bring(T, "podless", home_node=None)
    app.bring(T, "elsewhere", home_node="node-b")
    app.bring(T, "suspended", home_node="node-a")
    app.bring(T, "closed", home_node=None)
    for project in ("home", "podless", "elsewhere", "suspended", "closed"):
        app.documents.create(T, project, "documents/a.md", f"text of {project}")
    app.suspend(T, "suspended")
    app.close_project(T, "closed")

    served = {p.project_id for p in app.store.control.projects_for_node("node-a")}
    assert served == {"home", "podless"}
    ticks_until_idle(app)
    assert states(app, T, "home") == {"indexed": 1}
    assert states(app, T, "podless") == {"indexed": 1}
    assert states(app, T, "elsewhere") == {"pending": 1}
    assert states(app, T, "suspended") == {"pending": 1}
    assert states(app, T, "closed") == {"pending": 1}

    # node-b serves its own project and (also) the podless ones
    other = make_app(config={"node_id": "node-b"})
    other.documents.create(T, "podless", "documents/b.md", "second podless")
    ticks_until_idle(other)
    assert states(app, T, "elsewhere") == {"indexed": 1}
    assert states(app, T, "podless") == {"indexed": 2}
    assert states(app, T, "suspended") == {"pending": 1}

    # resuming the suspended project lets its node index it
    app.bring(T, "suspended", home_node="node-a")
    ticks_until_idle(app)
    assert states(app, T, "suspended") == {"indexed": 1}


def test_background_scheduler_honours_indexer_enabled(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression (the indexer switch): `RAG_INDEXER_ENABLED=false` was parsed and never read.
    The background scheduler (worker, serve --with-indexer, plugin hosts) stays off and says
    so; an explicit tick is not affected."""
    caplog.set_level(logging.INFO, logger="vancetope_rag")
    app = make_app(config={"indexer_enabled": False})
    app.bring(T, P)
    app.documents.create(T, P, "documents/a.md", "alpha")
    app.scheduler.start()
    assert not app.scheduler.running
    assert any("RAG_INDEXER_ENABLED=false" in r.getMessage() for r in caplog.records)
    assert app.scheduler.tick().indexed == 1
