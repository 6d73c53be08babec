"""Fixtures of the store contract suite: one ``store`` per adapter, built through the port only."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from mongo_support import (
    MONGODB_URI_ENV,
    mongomock_server_clock_store,
    mongomock_store,
    real_mongo_store,
)

from vancetope_rag.store import open_store
from vancetope_rag.store.port import Store


class SettableClock(Protocol):
    """What the suite needs from the shared ``FakeClock`` (tests/conftest.py)."""

    now: float

    def __call__(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


StoreFactory = Callable[[Path, SettableClock], Store]


def sqlite_store(tmp_path: Path, clock: SettableClock) -> Store:
    """SQLite with the in-process vector cache answering unfiltered queries (the default)."""
    return open_store(f"sqlite:///{tmp_path}/rag.db", clock=clock)


def sqlite_vec_only_store(tmp_path: Path, clock: SettableClock) -> Store:
    """SQLite with every query answered by sqlite-vec itself."""
    return open_store(f"sqlite:///{tmp_path}/rag.db", clock=clock, vector_cache=False)


#: Every adapter the contract suite runs against, as ``(id, factory)``. The MongoDB adapter
#: runs on mongomock twice (leases on the injected clock; and through the ``$$NOW`` pipelines
#: with ``$$NOW`` bound to that clock), and on a real server (``mongodb``, marked ``mongodb``)
#: when ``VANCETOPE_RAG_TEST_MONGODB_URI`` is set: see ``mongo_support.py``.
STORE_FACTORIES: list[tuple[str, StoreFactory]] = [
    ("sqlite", sqlite_store),
    ("sqlite-vec-only", sqlite_vec_only_store),
    ("mongomock", mongomock_store),
    ("mongomock-$$NOW", mongomock_server_clock_store),
]
if os.environ.get(MONGODB_URI_ENV):  # the real server joins only when asked for
    STORE_FACTORIES.append(
        ("mongodb", pytest.param(real_mongo_store, marks=pytest.mark.mongodb))  # type: ignore[arg-type]
    )


@pytest.fixture
def fake_clock(clock: SettableClock) -> SettableClock:
    """The store's clock: leases and retry times move only when a test advances it."""
    return clock


@pytest.fixture(
    params=[factory for _, factory in STORE_FACTORIES],
    ids=[name for name, _ in STORE_FACTORIES],
)
def store(request: Any, tmp_path: Path, fake_clock: SettableClock) -> Iterator[Store]:
    opened = request.param(tmp_path, fake_clock)
    yield opened
    opened.close()
