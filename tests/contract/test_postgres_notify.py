"""Wake-ups across processes on PostgreSQL: a document queued through one store handle (a
host process that only saves) wakes the indexer running on another handle (a worker) at
once through LISTEN/NOTIFY, not at its next tick; stores in other schemas stay asleep."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest

import postgres_support
from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.store.postgres import schema
from vancetope_rag.store.postgres.store import PostgresStore, open_postgres_store

AppFactory = Callable[..., RagApp]


@pytest.fixture
def schema_uri() -> Iterator[str]:
    with postgres_support.initialized_schema() as uri:
        yield uri


def _wait(predicate: Callable[[], bool], timeout_s: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic() - start


def test_a_document_saved_elsewhere_wakes_the_worker_at_once(
    make_app: AppFactory, schema_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vancetope_rag")
    config = {"indexer_interval_s": 3600.0, "indexer_initial_delay_s": 0.0}
    worker = make_app(store=open_postgres_store(schema_uri), config=config)
    host = make_app(
        store=open_postgres_store(schema_uri), config={**config, "indexer_enabled": False}
    )
    host.bring(T, P)
    worker.scheduler.start()
    try:
        store = worker.store
        assert isinstance(store, PostgresStore) and store.listeners
        listener = store.listeners[0]
        assert listener.checked.wait(10) and listener.delivering
        assert any("LISTEN/NOTIFY works" in r.getMessage() for r in caplog.records)
        time.sleep(1.0)  # the worker's first tick (~0.1 s) is over: it waits an hour now
        for i in range(3):
            doc = host.document_saved(T, P, f"documents/n{i}.md", f"notified number {i}")
            assert doc is not None
            _wait(  # at once (~0.1 s), not after the hour's interval
                lambda d=doc: host.documents.get(T, P, d.id).index_state.value == "indexed",
                60.0,
            )
        assert listener.wakeups >= 3 and worker.scheduler.wakeups >= 3
    finally:
        worker.scheduler.stop()
    assert not listener._thread.is_alive()  # stop() ended the listener


def test_other_schemas_do_not_wake_this_store(make_app: AppFactory, schema_uri: str) -> None:
    name, other_uri = postgres_support.fresh_schema()
    other = open_postgres_store(other_uri)
    other.initialize()
    try:
        mine = open_postgres_store(schema_uri)
        woken: list[float] = []
        stop = mine.watch_queued(lambda: woken.append(time.monotonic()))
        assert stop is not None
        listener = mine.listeners[0]
        assert listener.checked.wait(10) and listener.delivering
        app = make_app(store=other, config={"indexer_enabled": False})
        app.bring(T, P)
        app.document_saved(T, P, "documents/elsewhere.md", "another schema's document")
        time.sleep(1.0)
        assert woken == []
        own = make_app(store=open_postgres_store(schema_uri), config={"indexer_enabled": False})
        own.bring(T, P)
        own.document_saved(T, P, "documents/here.md", "this schema's document")
        _wait(lambda: bool(woken), 5.0)
        stop()
        mine.close()
    finally:
        other.close()
        postgres_support.drop_schema(name)


def test_init_adds_the_trigger_to_a_store_made_before_it() -> None:
    """A store initialised at schema version 1 (no trigger) gets it from the next ``init``."""
    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri)
    try:
        schema.initialize(store.db, upto=1)
        store.initialize()
        triggers = store.db.query(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'documents'::regclass "
            "AND NOT tgisinternal"
        )
        assert triggers == [("vtr_documents_queued",)]
        assert store.db.query("SELECT version FROM vtr_schema") == [(schema.SCHEMA_VERSION,)]
    finally:
        store.close()
        postgres_support.drop_schema(name)
