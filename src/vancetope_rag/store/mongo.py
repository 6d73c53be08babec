"""The MongoDB store (production): control plane and chunks in one database.

``open_mongo_store("mongodb+srv://user:pw@cluster.example.net/vancetope_rag")`` connects,
checks the schema version and creates the B-tree indexes. Collections: ``projects``,
``documents``, ``rags``, ``settings``, ``embedding_cache``, ``chunks``, ``counters`` and
``schema`` (one version document).

Many processes may share one database: claims are atomic ``find_one_and_update`` calls whose
lease condition the server evaluates on its own clock (see :mod:`.mongo_control`), and chunk
replacement is safe without transactions (see :mod:`.mongo_chunks`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse, urlunparse

from pymongo.errors import PyMongoError

from vancetope_rag.errors import StoreError
from vancetope_rag.store.mongo_chunks import MongoChunkStore, VectorSearchMode
from vancetope_rag.store.mongo_control import MongoControlStore
from vancetope_rag.store.mongo_indexes import ensure_indexes
from vancetope_rag.store.port import ChunkStore, ControlStore
from vancetope_rag.store.types import Clock

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

#: Version of the document shapes in the database; a newer one is refused on open.
SCHEMA_VERSION = 1
_SCHEMA_ID = "vancetope_rag"


@dataclass
class MongoStore:
    """The MongoDB store: control plane and chunks over one client."""

    control: ControlStore
    chunks: ChunkStore
    database: Any
    client: Any
    owns_client: bool = field(default=True)

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


def redact_uri(uri: str) -> str:
    """The URI with its password replaced by ``***`` (safe to log and show)."""
    parts = urlparse(uri)
    if parts.password is None:
        return uri
    user, _, hosts = parts.netloc.rpartition("@")
    login = user.split(":", 1)[0]
    return urlunparse(parts._replace(netloc=f"{login}:***@{hosts}"))


def _is_mongomock(client: Any) -> bool:
    return type(client).__module__.split(".", 1)[0] == "mongomock"


def _check_schema(database: Any, uri: str) -> None:
    found = database["schema"].find_one({"_id": _SCHEMA_ID})
    version = int(found["version"]) if found else 0
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"store {uri!r} has schema version {version}, newer than this vancetope-rag "
            f"understands ({SCHEMA_VERSION}); upgrade the package"
        )
    ensure_indexes(database)
    if version < SCHEMA_VERSION:
        database["schema"].update_one(
            {"_id": _SCHEMA_ID}, {"$max": {"version": SCHEMA_VERSION}}, upsert=True
        )


def open_mongo_store(
    uri: str,
    *,
    clock: Clock = time.time,
    client: Any = None,
    database: str | None = None,
    vector_search: VectorSearchMode = "auto",
    server_clock: bool | None = None,
    index_timeout_s: float = 300.0,
) -> MongoStore:
    """Open (and prepare) the MongoDB store a URI names.

    Args:
        uri: ``mongodb://…`` or ``mongodb+srv://…``; the path names the database
            (default ``vancetope_rag``).
        clock: the injected clock; the store's clock when ``server_clock`` is False.
        client: an existing ``MongoClient`` (or ``mongomock.MongoClient``); left open on close.
        database: database name, overriding the URI's.
        vector_search: ``atlas`` ($vectorSearch; indexes created and awaited by the store),
            ``exact`` (numpy ranking of a scoped find; MongoDB without Atlas Search), or
            ``auto`` (Atlas when the server supports search indexes).
        server_clock: measure leases on the server's ``$$NOW``. Default: yes, unless a clock
            was injected or the client is mongomock (which has no ``$$NOW``).
        index_timeout_s: how long a first query waits for a new vector index.

    Raises:
        StoreError: bad URI, unreachable server, or a schema newer than this package.
    """
    shown = redact_uri(uri)
    owns_client = client is None
    if client is None:
        from pymongo import MongoClient

        try:
            client = MongoClient(uri, appname="vancetope-rag")
        except PyMongoError as exc:
            raise StoreError(f"cannot open store {shown!r}: {exc}") from exc
    if server_clock is None:
        server_clock = clock is time.time and not _is_mongomock(client)
    if vector_search == "auto" and _is_mongomock(client):
        vector_search = "exact"
    try:
        db = client[database or database_from_uri(uri)]
        _check_schema(db, shown)
    except BaseException as exc:
        if owns_client:
            client.close()
        if isinstance(exc, PyMongoError):
            raise StoreError(f"cannot open store {shown!r}: {exc}") from exc
        raise
    control = MongoControlStore(db, uri=shown, clock=clock, server_clock=server_clock)
    chunks = MongoChunkStore(db, vector_search=vector_search, index_timeout_s=index_timeout_s)
    return MongoStore(
        control=control, chunks=chunks, database=db, client=client, owns_client=owns_client
    )
