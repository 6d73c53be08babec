"""A failure no document can cure (a provider that answers vectors of another dimension than
the RAG pinned, a key it refuses, the kill switch) pauses the RAG's indexing at once with one
reason: no document spends an attempt, ``index`` (``--until-idle`` too) exits non-zero within
seconds naming it, and the status of every process says so, not only the one that met it.

Before, the wrong dimension fell into the one-by-one path ("batch embed failed …; embedding
documents one by one"), every document failing alone and spending its attempts, and
``index --until-idle`` ground on for minutes; a refused key paused indexing, but
``--until-idle`` waited for the settings to fix themselves; and a process other than the
worker showed documents waiting and no pause, the circuit living in the worker's memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.embeddings.openai")

import postgres_support
from fakes import P, T
from openai_server import DIM, WRONG_KEY, EmbeddingsServer, Fault, openai_app
from vancetope_rag.app import RagApp
from vancetope_rag.errors import DimensionMismatchError, ProviderUnavailableError

#: What `index --until-idle` may take, process start included (a few seconds on 2 busy
#: cores): ten times that. Before, it ground on for minutes (retry back-offs of 30 s and up).
INDEX_BOUND_S = 120

TOPICS = ("cats", "rockets", "bread", "rivers", "violins", "glaciers")


@pytest.fixture
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The test's SQLite file, or (parametrized ``postgres``) a fresh schema of the
    session's PostgreSQL server, initialised as ``init`` does it."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path / 'rag.db'}"
        return
    with postgres_support.initialized_schema() as uri:
        yield uri


def wait_for(what: Callable[[], Any], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def add_documents(app: RagApp, prefix: str, n: int = 6) -> list[str]:
    paths = [f"documents/{prefix}-{TOPICS[i % len(TOPICS)]}-{i}.md" for i in range(n)]
    for i, path in enumerate(paths):
        topic = TOPICS[i % len(TOPICS)]
        app.documents.create(T, P, path, f"{prefix} note {i} about {topic}: {topic} facts.")
    return paths


def indexed_app(make_app: Any, server: EmbeddingsServer, **config: Any) -> RagApp:
    """A project indexed through ``server`` at its model's dimension (DIM)."""
    app: RagApp = openai_app(make_app, server, config={"max_attempts": 2, **config})
    app.bring(T, P)
    add_documents(app, "first", 3)
    app.scheduler.run_until_idle(timeout_s=30)
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_dimension == DIM
    assert {d.index_state.value for d in app.documents.list_documents(T, P)} == {"indexed"}
    return app


def waiting(app: RagApp, paths: list[str]) -> set[tuple[str, int, bool]]:
    """(state, attempts, whether an error is recorded) of the documents at ``paths``."""
    docs = {d.path: d for d in app.documents.list_documents(T, P)}
    return {
        (docs[p].index_state.value, docs[p].index_attempts, bool(docs[p].index_last_error))
        for p in paths
    }


@pytest.mark.timeout(INDEX_BOUND_S * 2)
@pytest.mark.parametrize("cause", ["dimension", "key"])
def test_index_until_idle_stops_at_once_naming_a_failure_no_document_can_cure(
    make_app: Any, server: EmbeddingsServer, store_uri: str, cause: str
) -> None:
    app = indexed_app(make_app, server)
    if cause == "dimension":
        server.dimension = 64  # a model swapped behind the same name
        named = ("64-dim", f"pinned to {DIM}-dim", "reindex --rebuild")
    else:
        app.settings.set(T, None, "ai.embedding.apiKey", WRONG_KEY)
        named = ("refuses the settings", "401", "ai.embedding.apiKey")
    paths = add_documents(app, "later")
    calls_before = len(server.requests)

    cmd = [sys.executable, "-m", "vancetope_rag.cli", "--store", store_uri]
    started = time.monotonic()
    run = subprocess.run(
        [*cmd, "--tenant", T, "--project", P, "index", "--until-idle"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=INDEX_BOUND_S,
    )
    took = time.monotonic() - started

    assert run.returncode == 1, run.stdout + run.stderr
    assert took < INDEX_BOUND_S
    for word in named:
        assert word in run.stderr, run.stderr
    assert "one by one" not in run.stderr
    assert WRONG_KEY not in run.stdout + run.stderr
    # one call found it; the documents wait with their attempts untouched
    assert len(server.requests) - calls_before == 1
    assert waiting(app, paths) == {("pending", 0, False)}


@pytest.mark.parametrize("store_uri", ["sqlite", "postgres"], indirect=True)
def test_a_wrong_dimension_pauses_in_every_process_and_the_rebuild_it_asks_for_resumes(
    make_app: Any, server: EmbeddingsServer
) -> None:
    worker = indexed_app(make_app, server, indexer_interval_s=0.2)
    server.dimension = 64
    paths = add_documents(worker, "later")
    other = make_app(provider=None)  # another process on the same store: its own circuits
    worker.scheduler.start()
    try:
        wait_for(lambda: other.project_rags.status(T, P).paused is not None)
        status = other.project_rags.status(T, P)
        assert status.paused is not None
        assert status.paused.startswith("paused: the provider answers vectors of another "), (
            status.paused
        )
        assert " since " in status.paused and "64-dim" in status.paused
        assert "reindex --rebuild" in status.paused
        circuit = status.to_json()["providerCircuit"]
        assert circuit["state"] == "wrongDimension"
        assert waiting(worker, paths) == {("pending", 0, False)}
        metric = b'vance_rag_embedding_circuits{provider="openai",state="wrong_dimension"} 1.0'
        assert metric in worker.metrics.exposition()
        time.sleep(1.0)  # a few more ticks: still no attempt spent, no call made
        calls = len(server.requests)
        time.sleep(1.0)
        assert len(server.requests) == calls
        assert waiting(worker, paths) == {("pending", 0, False)}

        # the rebuild the pause asks for moves the RAG to the new dimension
        other.project_rags.reindex(T, P, rebuild=True)

        def settled() -> bool:
            now = other.project_rags.status(T, P)
            return now.paused is None and now.documents.get("indexed", 0) == len(paths) + 3

        wait_for(settled, timeout=180)  # ~4 s on a quiet machine; over 60 s under full load
    finally:
        worker.scheduler.stop()
    rag = other.project_rags.find_default_rag(T, P)
    assert rag is not None and rag.embedding_dimension == 64
    assert {d.index_attempts for d in worker.documents.list_documents(T, P)} == {0}


def test_a_wrong_dimension_clears_by_itself_when_the_model_answers_right_again(
    make_app: Any, server: EmbeddingsServer, clock: Any
) -> None:
    app = indexed_app(make_app, server)
    app.rags.circuits.clock = clock  # the circuit's retry times, on the test's clock
    server.dimension = 64
    paths = add_documents(app, "later")
    app.scheduler.run_until_idle(timeout_s=30)
    status = app.project_rags.status(T, P)
    assert status.paused is not None and "64-dim" in status.paused
    assert waiting(app, paths) == {("pending", 0, False)}

    server.dimension = None  # the right model is back behind the name
    clock.advance(3600)  # the circuit's trial is due
    app.scheduler.run_until_idle(timeout_s=30)
    assert app.project_rags.status(T, P).paused is None
    assert {(s, a) for s, a, _ in waiting(app, paths)} == {("indexed", 0)}


def test_a_query_during_a_wrong_dimension_pause_is_a_dimension_mismatch(
    make_app: Any, server: EmbeddingsServer
) -> None:
    """A turn's query meets the pause as what it is: the RAG's vectors and the model's do not
    match (REST 409, rebuild), not an outage to wait out (503, try again later); the
    indexer still gives its documents back without spending attempts."""
    app = indexed_app(make_app, server)
    server.dimension = 64
    add_documents(app, "later")
    app.scheduler.tick()
    assert "64-dim" in (app.project_rags.status(T, P).paused or "")
    rag = app.project_rags.find_default_rag(T, P)
    assert rag is not None
    with pytest.raises(DimensionMismatchError) as caught:
        app.rags.query(rag, "cats")
    assert isinstance(caught.value, ProviderUnavailableError)
    assert caught.value.code == "DIMENSION_MISMATCH"


def test_a_trial_that_meets_an_outage_leaves_the_pause_to_be_tried_again(
    make_app: Any, server: EmbeddingsServer, clock: Any
) -> None:
    """The trial call of the wrong dimension's circuit found the server down: once that
    outage is over the pause is tried again, it is not held as "being tried" for good."""
    app = indexed_app(make_app, server)
    app.rags.circuits.clock = clock
    server.dimension = 64
    paths = add_documents(app, "later")
    app.scheduler.tick()
    assert "64-dim" in (app.project_rags.status(T, P).paused or "")
    clock.advance(3600)  # its trial is due, and meets a 503
    server.faults = [Fault(503)]
    app.scheduler.tick()
    assert "unreachable" in (app.project_rags.status(T, P).paused or "")
    server.dimension = None  # the server is back, with the right model
    clock.advance(3600)
    app.scheduler.run_until_idle(timeout_s=30)
    assert app.project_rags.status(T, P).paused is None
    assert {(s, a) for s, a, _ in waiting(app, paths)} == {("indexed", 0)}


def test_the_pause_of_a_dimension_nothing_calls_any_more_is_forgotten(
    make_app: Any, server: EmbeddingsServer, clock: Any
) -> None:
    """After the rebuild nothing calls the model at the old dimension: its circuit leaves
    the worker's metric and heartbeat once it has been due for an hour untried."""
    app = indexed_app(make_app, server)
    app.rags.circuits.clock = clock
    server.dimension = 64
    add_documents(app, "later")
    app.scheduler.tick()
    app.project_rags.reindex(T, P, rebuild=True)
    app.scheduler.run_until_idle(timeout_s=60)
    assert app.project_rags.status(T, P).paused is None
    metric = b'vance_rag_embedding_circuits{provider="openai",state="wrong_dimension"}'
    assert metric + b" 1.0" in app.metrics.exposition()  # within the hour: still counted
    clock.advance(2 * 3600)
    assert metric + b" 1.0" not in app.metrics.exposition()
    assert app.rags.circuits.open_circuits() == []


def test_the_kill_switch_is_a_pause_with_its_reason(
    make_app: Any, server: EmbeddingsServer, store_uri: str
) -> None:
    app = indexed_app(make_app, server)
    app.settings.set(T, None, "ai.embedding.provider", "none")
    paths = add_documents(app, "later")
    status = app.project_rags.status(T, P)
    assert status.paused is not None
    assert status.paused.startswith("paused: embeddings are switched off"), status.paused
    assert "ai.embedding.provider" in status.paused
    cmd = ["--store", store_uri, "--tenant", T, "--project", P]
    from click.testing import CliRunner

    from vancetope_rag.cli import cli

    shown = CliRunner().invoke(cli, [*cmd, "status", "--json"])
    assert json.loads(shown.stdout)["paused"] == status.paused
    ran = CliRunner().invoke(cli, [*cmd, "index", "--until-idle"])
    assert ran.exit_code == 1 and "switched off" in ran.stderr
    assert waiting(app, paths) == {("pending", 0, False)}
