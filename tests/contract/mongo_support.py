"""Store factories for the MongoDB adapter: mongomock (always) and a real server (opt-in).

The real-server factory reads ``VANCETOPE_RAG_TEST_MONGODB_URI`` (Atlas, or the
``mongodb/mongodb-atlas-local`` image). One throw-away database per test session, dropped at
exit; each test starts from empty collections (the Atlas search indexes survive, so they are
built once per session).
"""

from __future__ import annotations

import atexit
import os
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from vancetope_rag.domain.records import Chunk, Hit
from vancetope_rag.store.mongo import MongoStore, open_mongo_store
from vancetope_rag.store.mongo_chunks import MongoChunkStore
from vancetope_rag.store.mongo_control import MongoControlStore
from vancetope_rag.store.mongo_indexes import vector_path
from vancetope_rag.store.mongo_queries import MAX_NUM_CANDIDATES, scope_match, vector_search_filter
from vancetope_rag.store.port import Store
from vancetope_rag.store.types import ChunkFilter, RagScope

MONGODB_URI_ENV = "VANCETOPE_RAG_TEST_MONGODB_URI"
#: ``atlas`` (default), or ``exact``/``auto`` for a MongoDB server without Atlas Search.
MONGODB_MODE_ENV = "VANCETOPE_RAG_TEST_MONGODB_VECTOR_SEARCH"
SKIP_REASON = "set VANCETOPE_RAG_TEST_MONGODB_URI to run against a real MongoDB/Atlas"


def mongomock_store(tmp_path: Path, clock: Any) -> Store:
    """The MongoDB adapter on mongomock: exact vector ranking, leases on the injected clock."""
    import mongomock

    return open_mongo_store(
        "mongodb://localhost/vancetope_rag_test",
        clock=clock,
        client=mongomock.MongoClient(),
        vector_search="exact",
    )


# -- mongomock with the server-clock pipelines -----------------------------------------------


def bind_now(value: Any, now: datetime) -> Any:
    """``value`` with ``$$NOW`` bound to ``now`` (what the server does once per operation).

    ``$add``/``$subtract`` of ``$$NOW`` and milliseconds are folded, since mongomock cannot
    add numbers to dates; ``$literal`` values are left alone, as the server leaves them.
    """
    if value == "$$NOW":
        return {"$literal": now}
    if isinstance(value, dict):
        if "$literal" in value:
            return value
        for op, sign in (("$add", 1), ("$subtract", -1)):
            args = value.get(op)
            if len(value) == 1 and isinstance(args, list) and args and args[0] == "$$NOW":
                return {"$literal": now + sign * timedelta(milliseconds=sum(args[1:]))}
        return {k: bind_now(v, now) for k, v in value.items()}
    if isinstance(value, list):
        return [bind_now(v, now) for v in value]
    return value


class _NowBoundCollection:
    def __init__(self, inner: Any, clock: Any) -> None:
        self._inner = inner
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            now = datetime.fromtimestamp(self._clock(), UTC).replace(tzinfo=None)
            return method(*bind_now(list(args), now), **bind_now(kwargs, now))

        return call


class NowBoundDatabase:
    """A mongomock database that understands ``$$NOW`` (bound to the injected clock) and
    answers ``hello`` with that clock as the server's ``localTime``."""

    def __init__(self, inner: Any, clock: Any) -> None:
        self._inner = inner
        self._clock = clock

    def __getitem__(self, name: str) -> Any:
        return _NowBoundCollection(self._inner[name], self._clock)

    def command(self, name: str) -> dict[str, Any]:
        assert name == "hello"
        return {"localTime": datetime.fromtimestamp(self._clock(), UTC).replace(tzinfo=None)}


def mongomock_server_clock_store(tmp_path: Path, clock: Any) -> Store:
    """mongomock running the ``server_clock`` code path: every lease condition and timestamp
    goes through ``$$NOW`` pipelines and ``$expr`` filters, ``$$NOW`` being the fake clock."""
    store = mongomock_store(tmp_path, clock)
    assert isinstance(store, MongoStore)
    store.control = MongoControlStore(
        NowBoundDatabase(store.database, clock),
        uri=store.control.uri,
        clock=lambda: pytest.fail("the server clock path must not read the local clock"),
        server_clock=True,
    )
    return store


# -- real server -----------------------------------------------------------------------------

_shared: dict[str, Any] = {}


def real_uri() -> str:
    return os.environ[MONGODB_URI_ENV]


def real_database() -> tuple[Any, str]:
    """The session's client and database name (created once, dropped at exit)."""
    if "client" not in _shared:
        from pymongo import MongoClient

        client: Any = MongoClient(real_uri(), appname="vancetope-rag-tests")
        name = f"vancetope_rag_test_{uuid.uuid4().hex[:10]}"

        def drop() -> None:
            client.drop_database(name)
            client.close()

        atexit.register(drop)
        _shared.update(client=client, name=name)
    return _shared["client"], _shared["name"]


def clear_database(database: Any) -> None:
    """Empty every collection but keep it (and its search indexes)."""
    for name in database.list_collection_names():
        if name != "schema":
            database[name].delete_many({})


def real_mongo_store(
    tmp_path: Path, clock: Any, *, server_clock: bool = False, clear: bool = True
) -> Store:
    """The adapter on the real server. The contract suite moves a fake clock, so leases are
    measured on it here; ``test_mongo_real.py`` covers the server-clock path."""
    client, name = real_database()
    if clear:
        clear_database(client[name])
    store = open_mongo_store(
        real_uri(),
        clock=clock,
        client=client,
        database=name,
        vector_search=os.environ.get(MONGODB_MODE_ENV, "atlas"),
        server_clock=server_clock,
        index_timeout_s=600.0,
    )
    assert isinstance(store.chunks, MongoChunkStore)
    if store.chunks.uses_atlas():
        store.chunks = SettledChunkStore(store.chunks)
    return store


def visible_to_vector_search(chunks: MongoChunkStore, scope: RagScope) -> list[Any]:
    """``_id``s ``$vectorSearch`` returns for the whole scope (candidates cover every chunk)."""
    pipeline = [
        {
            "$vectorSearch": {
                "index": chunks.index_name(scope.dimension),
                "path": vector_path(scope.dimension),
                "queryVector": [1.0] * scope.dimension,
                "numCandidates": MAX_NUM_CANDIDATES,
                "limit": MAX_NUM_CANDIDATES,
                "filter": vector_search_filter(scope, None),
            }
        },
        {"$project": {"_id": 1}},
    ]
    return sorted(row["_id"] for row in chunks.collection.aggregate(pipeline))


class SettledChunkStore:
    """Atlas Search indexes writes asynchronously (about a second behind). The contract checks
    read-after-write, so after each write this wrapper waits until ``$vectorSearch`` returns
    exactly the chunks a ``find`` sees in the written scope."""

    def __init__(self, inner: MongoChunkStore, *, timeout_s: float = 120.0) -> None:
        self.inner = inner
        self.timeout_s = timeout_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def settle(self, scope: RagScope) -> None:
        self.inner.ensure_vector_index(scope.dimension, wait=True)
        expected = sorted(d["_id"] for d in self.inner.collection.find(scope_match(scope)))
        deadline = time.monotonic() + self.timeout_s
        while (got := visible_to_vector_search(self.inner, scope)) != expected:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"$vectorSearch still sees {len(got)} chunks of {scope}, find sees "
                    f"{len(expected)}, after {self.timeout_s}s"
                )
            time.sleep(0.25)

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        try:
            return self.inner.add_chunks(scope, chunks)
        finally:
            self.settle(scope)

    def replace_source(self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk]) -> None:
        try:
            self.inner.replace_source(scope, source_ref, chunks)
        finally:
            self.settle(scope)

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int:
        try:
            return self.inner.remove_by_source(scope, source_ref)
        finally:
            self.settle(scope)

    def remove_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> int:
        try:
            return self.inner.remove_chunks(scope, chunk_ids=chunk_ids, filters=filters)
        finally:
            self.settle(scope)

    def drop_rag(self, scope: RagScope) -> int:
        try:
            return self.inner.drop_rag(scope)
        finally:
            self.settle(scope)

    def count_chunks(self, scope: RagScope) -> int:
        return self.inner.count_chunks(scope)

    def get_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        return self.inner.get_chunks(scope, chunk_ids=chunk_ids, filters=filters)

    def query(
        self,
        scope: RagScope,
        vector: Sequence[float],
        top_k: int,
        *,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        return self.inner.query(scope, vector, top_k, filters=filters)


__all__ = [
    "MONGODB_URI_ENV",
    "SKIP_REASON",
    "MongoStore",
    "SettledChunkStore",
    "mongomock_server_clock_store",
    "mongomock_store",
    "real_mongo_store",
]
