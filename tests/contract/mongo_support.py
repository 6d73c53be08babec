"""Store factories for the MongoDB adapter: mongomock, the lagging Atlas double, a real server.

* ``mongomock_store`` — exact ranking, no search index, leases on the injected clock.
* ``mongomock_server_clock_store`` — the same through the ``$$NOW`` pipelines.
* ``atlas_store`` — the adapter in Atlas mode on the Atlas double (``atlas_double.py``): search
  lags the collection by ``ATLAS_LAG_S`` of the fake clock, indexes take ``ATLAS_BUILD_S`` to
  build. ``settle`` moves the clock past both (what waiting does on a real cluster).
* ``atlas_two_nodes_store`` — the same with two search nodes lagging differently, each
  RAG's searches pinned to one by ``searchNodePreference``.
* ``real_mongo_store`` — reads ``VANCETOPE_RAG_TEST_MONGODB_URI`` (Atlas, or the
  ``mongodb/mongodb-atlas-local`` image). One throw-away database per test session, dropped
  at exit; each test starts from empty collections (search indexes survive, so they are built
  once per session). ``settle`` polls until search sees exactly what the collections hold.

No factory settles after a write: the contract suite calls ``settle`` where it relies on
search having seen the writes, so everything between a write and a settle sees the lag.
"""

from __future__ import annotations

import atexit
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from atlas_double import AtlasCluster

from vancetope_rag.store.mongo import indexes as ix
from vancetope_rag.store.mongo.builders.queries import MAX_NUM_CANDIDATES
from vancetope_rag.store.mongo.client import MongoStore, open_mongo_store
from vancetope_rag.store.mongo.control import MongoControlStore
from vancetope_rag.store.port import Store

MONGODB_URI_ENV = "VANCETOPE_RAG_TEST_MONGODB_URI"
#: ``atlas`` (default), or ``exact``/``auto`` for a MongoDB server without Atlas Search.
MONGODB_MODE_ENV = "VANCETOPE_RAG_TEST_MONGODB_VECTOR_SEARCH"
SKIP_REASON = "set VANCETOPE_RAG_TEST_MONGODB_URI to run against a real MongoDB/Atlas"

#: Dimensions the contract suite writes (the index of each must exist before queries).
CONTRACT_DIMENSIONS = (8,)
ATLAS_LAG_S = 0.05
ATLAS_BUILD_S = 0.2
#: How long an old generation outlives the probe that saw its replacement (the double has
#: one search node; a real cluster's default is 10 s).
ATLAS_SEARCH_GRACE_S = 0.1
#: The lags of the two-node double of the contract suite: the second node lags past the
#: grace, which only ``searchNodePreference`` (on there) makes safe.
ATLAS_TWO_NODE_LAGS = (ATLAS_LAG_S, 0.15)

Settle = Callable[[], None]


def no_settle() -> None:
    """Stores whose queries read the collection itself see every write at once."""


def mongomock_store(tmp_path: Path, clock: Any) -> Store:
    """The MongoDB adapter on mongomock: exact vector ranking, leases on the injected clock."""
    import mongomock

    return open_mongo_store(
        "mongodb://localhost/vancetope_rag_test",
        clock=clock,
        client=mongomock.MongoClient(),
        vector_search="exact",
    )


# -- the lagging Atlas double ----------------------------------------------------------------


def atlas_store(
    tmp_path: Path,
    clock: Any,
    *,
    cluster: AtlasCluster | None = None,
    search_grace_s: float = ATLAS_SEARCH_GRACE_S,
    search_node_preference: bool = False,
) -> tuple[Store, AtlasCluster]:
    """The adapter in Atlas mode on the Atlas double, initialised for the contract's
    dimensions and with its indexes built (search still lags every later write)."""
    cluster = cluster or AtlasCluster(clock=clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S)
    store = open_mongo_store(
        "mongodb://atlas.example.net/vancetope_rag_test",
        clock=clock,
        client=cluster.client(),
        server_clock=False,  # the double runs on mongomock: no $$NOW
        search_grace_s=search_grace_s,
        search_node_preference=search_node_preference,
    )
    store.sleep = clock.advance  # init --wait passes the double's time, not the machine's
    store.monotonic = clock
    store.initialize(dimensions=CONTRACT_DIMENSIONS)
    cluster.settle()
    return store, cluster


def atlas_app(make_app: Callable[..., Any], clock: Any, **config: Any) -> tuple[Any, AtlasCluster]:
    """A whole app (``make_app``: the ``make_app`` fixture) on a new Atlas double, with these
    engine settings; not initialised (the app makes its RAG's indexes as it would)."""
    cluster = AtlasCluster(clock=clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S)
    store = open_mongo_store(
        "mongodb://atlas.example.net/rag",
        clock=clock,
        client=cluster.client(),
        server_clock=False,
        search_grace_s=ATLAS_SEARCH_GRACE_S,
    )
    store.sleep, store.monotonic = clock.advance, clock
    return make_app(store=store, clock=clock, config=config), cluster


def atlas_two_nodes_store(tmp_path: Path, clock: Any) -> tuple[Store, AtlasCluster]:
    """The Atlas double with two search nodes of different lags (``ATLAS_TWO_NODE_LAGS``),
    each RAG's searches routed to one of them by ``searchNodePreference``."""
    cluster = AtlasCluster(
        clock=clock,
        search_nodes=ATLAS_TWO_NODE_LAGS,
        build_s=ATLAS_BUILD_S,
        build_delays=(0.0, 0.1),
    )
    store, cluster = atlas_store(tmp_path, clock, cluster=cluster, search_node_preference=True)
    # One node slot: each RAG reads the node its id names (fresher on the fast node; the
    # default spread over two slots is shown in test_mongo_large_platforms.py).
    store.chunks.search.node_spread = 1  # type: ignore[attr-defined]
    return store, cluster


def atlas_sharded_store(tmp_path: Path, clock: Any) -> tuple[Store, AtlasCluster]:
    """The Atlas double as a sharded cluster: ``init`` shards the chunk collections, and
    every write to them must carry the shard key, as mongos requires."""
    cluster = AtlasCluster(clock=clock, lag_s=ATLAS_LAG_S, build_s=ATLAS_BUILD_S, sharded=True)
    return atlas_store(tmp_path, clock, cluster=cluster)


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
) -> MongoStore:
    """The adapter on the real server, initialised (search indexes READY) for the contract's
    dimensions. The contract suite moves a fake clock, so leases are measured on it here;
    ``test_mongo_real.py`` covers the server-clock path."""
    client, name = real_database()
    if clear:
        clear_database(client[name])
    store = open_mongo_store(
        real_uri(),
        clock=clock,
        client=client,
        database=name,
        vector_search=os.environ.get(MONGODB_MODE_ENV, "atlas"),  # type: ignore[arg-type]
        server_clock=server_clock,
        search_grace_s=2.0,
        search_node_preference=True,  # what Dedicated Search Nodes want; checked for real here
    )
    store.initialize(dimensions=CONTRACT_DIMENSIONS, wait=True, timeout_s=900.0)
    return store


def visible_ids(store: MongoStore, collection_name: str) -> tuple[list[Any], list[Any]]:
    """``_id``s ``$vectorSearch`` and ``$search`` return for the whole collection (at most
    10,000 each: a search returns no more)."""
    collection = store.database[collection_name]
    dim = ix.dimension_of(collection_name)
    assert dim is not None
    vector = [
        {
            "$vectorSearch": {
                "index": ix.VECTOR_INDEX,
                "path": ix.VECTOR_FIELD,
                "exact": True,
                "queryVector": [1.0] * dim,
                "limit": MAX_NUM_CANDIDATES,
            }
        },
        {"$project": {"_id": 1}},
    ]
    text = [
        {"$search": {"index": ix.TEXT_INDEX, "exists": {"path": "tenantId"}}},
        {"$limit": MAX_NUM_CANDIDATES},
        {"$project": {"_id": 1}},
    ]
    return (
        sorted(r["_id"] for r in collection.aggregate(vector)),
        sorted(r["_id"] for r in collection.aggregate(text)),
    )


def search_total(store: MongoStore, collection_name: str) -> int:
    """How many documents the text index of a collection holds (``$searchMeta`` count)."""
    meta = list(
        store.database[collection_name].aggregate(
            [
                {
                    "$searchMeta": {
                        "index": ix.TEXT_INDEX,
                        "exists": {"path": "tenantId"},
                        "count": {"type": "total"},
                    }
                },
            ]
        )
    )
    return int(meta[0]["count"]["total"]) if meta else 0


def real_settle(store: MongoStore, timeout_s: float = 120.0) -> None:
    """Wait until both search indexes of every chunk collection return exactly the documents
    the collection holds (what a test expects after "the writes have become visible")."""
    deadline = time.monotonic() + timeout_s
    for name in store.database.list_collection_names():
        if ix.dimension_of(name) is None:
            continue
        expected = sorted(d["_id"] for d in store.database[name].find({}, {"_id": 1}))
        if len(expected) > MAX_NUM_CANDIDATES:  # a search lists at most 10,000: compare counts
            total = len(expected)
            while search_total(store, name) != total:
                if time.monotonic() > deadline:
                    raise AssertionError(f"$search still does not see all {total} of {name}")
                time.sleep(0.5)
            continue
        while (seen := visible_ids(store, name)) != (expected, expected):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"search still sees {len(seen[0])}/{len(seen[1])} documents of {name}, "
                    f"the collection holds {len(expected)}, after {timeout_s}s"
                )
            time.sleep(0.25)


__all__ = [
    "MONGODB_URI_ENV",
    "SKIP_REASON",
    "MongoStore",
    "Settle",
    "atlas_store",
    "atlas_two_nodes_store",
    "mongomock_server_clock_store",
    "mongomock_store",
    "no_settle",
    "real_mongo_store",
    "real_settle",
]
