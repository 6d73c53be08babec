"""A rebuild's start and another worker's tick (issue 40).

The start records the migration, then creates the new dimension's chunk table (DDL: on
PostgreSQL it waits for the store's DDL lock, slow under load), then the new generation. A
tick of another worker in between found the migration without its generation and failed it
as "interrupted before it was created": the rebuild that ``reindex --rebuild`` had just
reported started never ran, and a RAG paused for the wrong dimension stayed paused for good.
A start interrupted for real (its process killed) is still failed, once a claim's lease has
passed without its generation appearing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from synchelpers import default_rag

import postgres_support
from fakes import DOCS, P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.rebuilds import Rebuild, RebuildState
from vancetope_rag.domain.records import DEFAULT_RAG_NAME
from vancetope_rag.store.postgres.schema import DDL_LOCK

AppFactory = Callable[..., RagApp]


@pytest.fixture
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The test's SQLite file, or (parametrized ``postgres``) a fresh schema of the
    session's PostgreSQL server."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path / 'rag.db'}"
        return
    with postgres_support.initialized_schema() as uri:
        yield uri


def indexed(app: RagApp) -> RagApp:
    app.bring(T, P)
    for path, text in DOCS.items():
        app.documents.create(T, P, path, text)
    app.scheduler.run_until_idle(timeout_s=30)
    return app


def latest(app: RagApp) -> Rebuild:
    m = app.store.rebuilds.latest_rebuild(T, P, DEFAULT_RAG_NAME)
    assert m is not None
    return m


@pytest.mark.parametrize("store_uri", ["postgres"], indirect=True)
def test_a_tick_while_a_rebuild_creates_its_new_dimension_does_not_fail_it(
    make_app: AppFactory,
) -> None:
    worker = indexed(make_app())
    other = make_app()  # another process on the same store starts the rebuild
    other.settings.set(T, None, "ai.embedding.model", "hashing-128")  # a dimension not made yet
    started: list[object] = []
    # another session holds the store's DDL lock (an `init` building indexes, say): the start
    # records its migration, then waits to create the chunk table of the new dimension
    with psycopg.connect(postgres_support.database_uri(), autocommit=True) as ddl:
        ddl.execute("SELECT pg_advisory_lock(%s)", (DDL_LOCK,))
        start = threading.Thread(
            target=lambda: started.append(other.project_rags.reindex(T, P, rebuild=True))
        )
        start.start()
        try:
            deadline = time.monotonic() + 60
            while worker.rebuilds.active(T, P) is None:
                assert time.monotonic() < deadline and start.is_alive(), started
                time.sleep(0.02)
            worker.scheduler.tick()  # meets the migration before its new generation
            assert start.is_alive()  # the start still waited: the tick came in between
            assert latest(worker).state is RebuildState.RUNNING
        finally:
            ddl.execute("SELECT pg_advisory_unlock(%s)", (DDL_LOCK,))
            start.join(60)
    assert started and not start.is_alive()

    worker.scheduler.run_until_idle(timeout_s=60)
    assert latest(worker).state is RebuildState.COMPLETED
    assert default_rag(worker).embedding_model == "hashing-128"


def test_a_start_interrupted_before_its_new_generation_fails_once_a_lease_has_passed(
    make_app: AppFactory, clock: Any
) -> None:
    """The state a start killed between its migration and its generation leaves behind."""
    app = indexed(make_app(clock=clock, config={"claim_ttl_s": 300}))
    live = default_rag(app)
    app.store.rebuilds.start_rebuild(
        Rebuild(
            id="interrupted",
            tenant_id=T,
            project_id=P,
            rag_name=DEFAULT_RAG_NAME,
            from_rag_id=live.id,
            to_rag_id="never-created",
            from_model="hashing:hashing-256",
            to_model="hashing:hashing-128",
        )
    )
    app.scheduler.tick()
    assert latest(app).state is RebuildState.RUNNING  # its start may still be under way
    clock.advance(301)
    app.scheduler.tick()
    ended = latest(app)
    assert ended.state is RebuildState.FAILED
    assert ended.reason is not None and "new generation is missing" in ended.reason
    assert default_rag(app).id == live.id
