"""The MongoDB store (production): control plane and chunks in one database.

``open_mongo_store("mongodb+srv://user:pw@cluster.example.net/vancetope_rag")`` connects,
checks the schema version and creates the B-tree indexes of the control plane. Collections:
``projects``, ``documents``, ``rags``, ``settings``, ``embedding_cache``, ``counters``,
``chunk_swaps``, ``rag_names`` (live pointers), ``migrations``, ``migration_items``,
``schema`` (one version document) and one ``chunks_<dim>`` per embedding dimension. Search
indexes are made by :meth:`MongoStore.initialize` (the ``init`` command) and when a RAG of
a new dimension is created — never by a query or a write.

Connection semantics are pinned here, whatever the URI says: control reads (claims,
``holds_claim``, chunk counts and listings) go to the primary; every write is acknowledged
by a majority (``w=1`` in the URI could let a failover roll back a counter increment and hand
out one fencing token twice, or a chunk write after its document was marked clean); search
stages keep the URI's read preference with read concern ``local``, except ``secondary``,
``secondaryPreferred`` and ``nearest``, refused at open (:func:`check_read_preference`); the
client has an overall ``timeoutMS`` (:data:`DEFAULT_TIMEOUT_MS` unless the URI sets one).

Many processes may share one database: claims are atomic ``find_one_and_update`` calls whose
lease condition the server evaluates on its own clock (see :mod:`.mongo.control`), and chunk
replacement is safe without transactions (see :mod:`.mongo.chunks`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

from pymongo import ReadPreference, WriteConcern
from pymongo.errors import PyMongoError

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.errors import StoreError
from vancetope_rag.store.mongo import setup as mongo_setup
from vancetope_rag.store.mongo.chunks import MongoChunkStore, VectorSearchMode
from vancetope_rag.store.mongo.control import MongoControlStore
from vancetope_rag.store.mongo.errors import guard_errors, store_error
from vancetope_rag.store.mongo.rebuilds import MongoRebuildStore
from vancetope_rag.store.port import ChunkStore, ControlStore, RebuildStore, Store, StoreSetup
from vancetope_rag.store.port.shared import redact_uri
from vancetope_rag.store.port.types import Clock

__all__ = [
    "DEFAULT_DATABASE",
    "SCHEMA_VERSION",
    "MongoChunkStore",
    "MongoControlStore",
    "MongoStore",
    "database_from_uri",
    "open_mongo_store",
    "redact_uri",
]

DEFAULT_DATABASE = "vancetope_rag"
SCHEMA_VERSION = mongo_setup.SCHEMA_VERSION

#: The client's overall time budget per operation when the URI sets no ``timeoutMS``.
DEFAULT_TIMEOUT_MS = 30_000


@guard_errors
@dataclass
class MongoStore(Store):
    """The MongoDB store: control plane, chunks and migrations over one client."""

    control: ControlStore
    chunks: ChunkStore
    rebuilds: RebuildStore
    database: Any
    client: Any
    owns_client: bool = field(default=True)
    #: How ``initialize(wait=True)`` passes time (injected by tests).
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    monotonic: Callable[[], float] = field(default=time.monotonic, repr=False)

    def _initialize(self, setup: StoreSetup) -> list[IndexStatus]:
        """Create collections and indexes (B-tree, vector and text search) for every
        dimension of the RAG catalog plus ``dimensions``, upgrading a schema-1 store; with
        ``wait``, block until every search index is READY (not merely queryable); with
        ``prune``, drop the search indexes of dimensions no RAG uses."""
        assert isinstance(self.chunks, MongoChunkStore)
        return mongo_setup.initialize(
            self.database, self.chunks, setup, sleep=self.sleep, monotonic=self.monotonic
        )

    def watch_queued(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None  # change streams could; not used yet

    def close(self) -> None:
        """Close the client when this store created it (an injected client stays open)."""
        self.control.close()
        if self.owns_client:
            self.client.close()


def database_from_uri(uri: str) -> str:
    """``mongodb://h/db?opts`` → ``db``; no path → :data:`DEFAULT_DATABASE`."""
    name = unquote(urlparse(uri).path.lstrip("/"))
    if not name:
        return DEFAULT_DATABASE
    if any(c in name for c in '/\\. "$') or len(name) > 63:
        raise StoreError(f"invalid MongoDB database name {name!r} in the store URI")
    return name


def _is_mongomock(client: Any) -> bool:
    return type(client).__module__.split(".", 1)[0] == "mongomock"


def check_read_preference(uri: str, client: Any, shown: str) -> None:
    """Refuse a read preference that may pick a secondary — ``secondary``,
    ``secondaryPreferred`` or ``nearest`` (the URI's or the client's) — before anything is
    read: search stages would run on a secondary, whose search process lags on its own — the
    sweep deletes an old chunk version once search on the primary sees the new one, so a query
    on a lagging secondary could find neither. ``nearest`` picks a secondary whenever it is
    closer, so it carries the same hazard."""
    modes = [v for k, v in parse_qsl(urlparse(uri).query) if k.lower() == "readpreference"]
    chosen = getattr(client, "read_preference", None)
    modes.append(str(getattr(chosen, "mongos_mode", "") or ""))
    for mode in modes:
        if mode.lower().startswith(("secondary", "nearest")):
            raise StoreError(
                f"store {shown!r}: readPreference={mode} is not supported: search reads on a "
                "secondary can miss chunks the primary's search already shows (old versions "
                "are swept once it does); remove readPreference from the URI, or use primary "
                "or primaryPreferred"
            )


def control_database(client: Any, name: str) -> Any:
    """The database for everything but search stages: reads on the primary, writes
    acknowledged by a majority, whatever the URI says."""
    return client.get_database(
        name, read_preference=ReadPreference.PRIMARY, write_concern=WriteConcern("majority")
    )


def client_options(uri: str) -> dict[str, Any]:
    """Keyword options of the ``MongoClient``: the app name, and an overall ``timeoutMS``
    unless the URI sets one (a keyword would override the URI's)."""
    options: dict[str, Any] = {"appname": "vancetope-rag"}
    if "timeoutms=" not in uri.lower():
        options["timeoutMS"] = DEFAULT_TIMEOUT_MS
    return options


def open_mongo_store(
    uri: str,
    *,
    clock: Clock = time.time,
    client: Any = None,
    database: str | None = None,
    vector_search: VectorSearchMode = "auto",
    server_clock: bool | None = None,
    search_grace_s: float = 10.0,
    search_node_preference: bool = True,
    claim_ttl_s: float = 600.0,
    exact_max_chunks: int = 20_000,
) -> MongoStore:
    """Open the MongoDB store a URI names.

    Args:
        uri: ``mongodb://…`` or ``mongodb+srv://…``; the path names the database
            (default ``vancetope_rag``); ``timeoutMS`` in the URI overrides
            :data:`DEFAULT_TIMEOUT_MS`.
        clock: the injected clock; the store's clock when ``server_clock`` is False.
        client: an existing ``MongoClient`` (or a test double); left open on close.
        database: database name, overriding the URI's.
        vector_search: ``atlas`` ($vectorSearch), ``exact`` (numpy ranking of a scoped find;
            MongoDB without Atlas Search), or ``auto`` (Atlas when the server has search).
        server_clock: measure leases on the server's ``$$NOW``. Default: yes, unless a clock
            was injected or the client is mongomock (which has no ``$$NOW``).
        search_grace_s: how long search must have shown a write before what it replaces may
            go: a replaced chunk version is swept, a rebuilt generation goes live (other search
            nodes may lag the one probed; with Dedicated Search Nodes use 60 s or more).
        search_node_preference: send each RAG's search stages to its search nodes
            (``searchNodePreference``: a chat turn reads one node, a RAG's turns are spread
            over two, probes ask both); a no-op without Search Nodes; a cluster that refuses
            the field is searched without it.
        claim_ttl_s: the indexer's claim TTL; a source mark (fencing at removals, see
            :mod:`.mongo.chunks`) is kept at least twice as long.
        exact_max_chunks: the largest selective RAG (≤ 5 % of its collection) searched
            exactly (``VANCETOPE_RAG_MONGO_EXACT_MAX_CHUNKS``).

    Raises:
        StoreError: bad URI, a ``secondary*`` or ``nearest`` read preference, unreachable
            server, or a schema newer than this package.
    """
    shown = redact_uri(uri)
    owns_client = client is None
    check_read_preference(uri, client, shown)
    if client is None:
        from pymongo import MongoClient

        try:
            client = MongoClient(uri, **client_options(uri))
        except PyMongoError as exc:
            raise StoreError(f"cannot open store {shown!r}: {exc}") from exc
    if server_clock is None:
        server_clock = clock is time.time and not _is_mongomock(client)
    if vector_search == "auto" and _is_mongomock(client):
        vector_search = "exact"
    name = database or database_from_uri(uri)
    try:
        db = control_database(client, name)
        chunks = MongoChunkStore(
            db,
            search_database=client.get_database(name),
            vector_search=vector_search,
            clock=clock,
            search_grace_s=search_grace_s,
            node_preference=search_node_preference,
            mark_ttl_s=2 * claim_ttl_s,
            exact_max_chunks=exact_max_chunks,
        )
        mongo_setup.open_schema(db, shown, chunks)
    except BaseException as exc:
        if owns_client:
            client.close()
        if isinstance(exc, PyMongoError):
            raise store_error(exc, f"opening store {shown!r}") from exc
        raise
    control = MongoControlStore(db, uri=shown, clock=clock, server_clock=server_clock)
    migrations = MongoRebuildStore(
        db, control.catalog, time_source=control.time_source, now=control.now
    )
    return MongoStore(
        control=control,
        chunks=chunks,
        rebuilds=migrations,
        database=db,
        client=client,
        owns_client=owns_client,
    )
