"""The whole app (services, scheduler and indexer, retrieval) on the real PostgreSQL store:
a RAG of a new dimension makes its chunk table when it is created, a saved document becomes
searchable after a tick, an edit replaces its chunks, and hybrid retrieval reads both lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import postgres_support
from fakes import P, T
from vancetope_rag.app import RagApp
from vancetope_rag.domain.records import DEFAULT_RAG_NAME
from vancetope_rag.store.postgres.store import PostgresStore, open_postgres_store

AppFactory = Callable[..., RagApp]


@pytest.fixture
def pg_store(clock: Any) -> Iterator[PostgresStore]:
    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri, clock=clock)
    store.initialize()  # what `vancetope-rag --store … init` runs
    yield store
    store.close()
    postgres_support.drop_schema(name)


def texts(app: RagApp, query: str, mode: str | None = None) -> list[str]:
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    return [h.text for h in app.rags.query(rag, query, top_k=5, mode=mode)]


@pytest.mark.parametrize("mode", [None, "dense", "hybrid"])
def test_documents_are_indexed_edited_and_found(
    make_app: AppFactory, pg_store: PostgresStore, clock: Any, mode: str | None
) -> None:
    app = make_app(store=pg_store, clock=clock)
    app.bring(T, P)
    cats = app.documents.create(T, P, "documents/cats.md", "Cats purr when they are content.")
    app.documents.create(T, P, "documents/dogs.md", "Dogs bark at the mailman.")
    app.scheduler.tick()
    app.scheduler.tick()
    rag = app.rags.get(T, P, DEFAULT_RAG_NAME)
    assert pg_store.db.has_dimension(rag.embedding_dimension)
    assert any("Cats purr" in t for t in texts(app, "cats purr", mode))
    app.documents.update(T, P, cats.id, content="Cats sleep all afternoon in the sun.")
    app.scheduler.tick()
    found = texts(app, "cats sleep afternoon", mode)
    assert any("afternoon" in t for t in found) and not any("purr" in t for t in found)
    counts = pg_store.control.document_state_counts(T, P)
    assert counts["indexed"] == 2 and counts["pending"] == 0
