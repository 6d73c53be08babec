"""Opening the PostgreSQL store: the URI, the pool, the adapters, and ``init``.

``open_postgres_store("postgresql://app:pw@db.example.net/rag?schema=rag&sslmode=require")``
connects once (a wrong host or password fails here, with the server's reason) and composes
the adapters over one pool; it creates nothing. ``init``
(:meth:`PostgresStore.initialize`) creates the pgvector extension, the schema's tables and
each dimension's chunk table; until it has run, every call fails with an error naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.store.port import ChunkStore, ControlStore, RebuildStore, Store, StoreSetup
from vancetope_rag.store.port.types import Clock
from vancetope_rag.store.postgres import schema
from vancetope_rag.store.postgres.chunks import (
    EXACT_SCAN_MAX,
    HNSW_SESSION_SETTINGS,
    PostgresChunkStore,
)
from vancetope_rag.store.postgres.db import SERVER_NOW, PostgresDatabase
from vancetope_rag.store.postgres.dialect import POSTGRES
from vancetope_rag.store.postgres.lexical_index import PostgresLexicalIndex
from vancetope_rag.store.postgres.notify import QueuedListener
from vancetope_rag.store.postgres.uri import PostgresUri
from vancetope_rag.store.sql.control import SqlControlStore
from vancetope_rag.store.sql.rebuilds import SqlRebuildStore

__all__ = ["PostgresStore", "open_postgres_store"]


@dataclass
class PostgresStore(Store):
    """The PostgreSQL store: control plane, chunks and rebuilds over one connection pool."""

    control: ControlStore
    chunks: ChunkStore
    rebuilds: RebuildStore
    db: PostgresDatabase
    listeners: list[QueuedListener] = field(default_factory=list)

    def _initialize(self, setup: StoreSetup) -> list[IndexStatus]:
        """Create the ``vector`` extension, apply the schema steps not applied yet, and make
        the chunk table and indexes of every dimension of the catalog plus ``dimensions``.
        Idempotent. Indexes are built by the statements that create them, so everything is
        READY when this returns (``wait`` and ``timeout_s`` change nothing, nor ``prune``: a
        dimension's table and indexes cost no quota)."""
        schema.initialize(self.db)
        dims = self.control.rag_dimensions() | setup.dimensions
        dims = dims | set(self.db.known_dimensions())
        for dim in sorted(dims):
            schema.ensure_dimension(self.db, dim)
        return [self._status(d) for d in sorted(dims)]

    def _status(self, dim: int) -> IndexStatus:
        table = schema.chunk_table(dim)
        if self.db.uri.hnsw:
            return IndexStatus(table, f"{table}_hnsw", "vector", "READY", True)
        return IndexStatus(
            table, "-", "exact", "READY", True, "vector_index=none: every query scans its RAG"
        )

    def watch_queued(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        """LISTEN on a connection of its own (:mod:`.postgres.notify`); the start-up round
        trip and its log line run on the listener's thread."""
        ((schema,),) = self.db.query("SELECT current_schema()")
        listener = QueuedListener(self.db.uri, str(schema), wake)
        self.listeners.append(listener)
        return listener.stop

    def close(self) -> None:
        for listener in self.listeners:
            listener.stop()
        self.db.close()


def open_postgres_store(
    uri: str,
    *,
    clock: Clock = time.time,
    server_clock: bool | None = None,
    exact_scan_max: int = EXACT_SCAN_MAX,
    connect_timeout_s: float = 15.0,
    lexical_index: bool = True,
) -> PostgresStore:
    """Open the PostgreSQL store a URI names.

    Args:
        uri: ``postgresql://…`` or ``postgres://…``. Our query parameters: ``schema`` (the
            schema the store lives in, created by ``init``; default: the role's
            ``search_path``), ``pool_size`` (connections at most, default 8) and
            ``statement_timeout_ms`` (default 60,000); the others go to libpq.
        clock: the injected clock; leases are measured on it when ``server_clock`` is False.
        server_clock: measure leases on the server's clock. Default: yes, unless a clock
            was injected.
        exact_scan_max: scopes of at most this many chunks are ranked exactly, larger ones
            through the HNSW index.
        connect_timeout_s: how long a connection may take.
        lexical_index: rank unfiltered lexical queries over in-process BM25 postings
            (:mod:`.postgres.lexical_index`); False: always in SQL.

    Raises:
        StoreError: a bad URI or an unreachable server (never quoting the password).
    """
    parsed = PostgresUri.parse(uri)
    if server_clock is None:
        server_clock = clock is time.time
    db = PostgresDatabase(
        parsed,
        schema_version=schema.SCHEMA_VERSION,
        connect_timeout_s=connect_timeout_s,
        session_settings=HNSW_SESSION_SETTINGS,
    )
    control = SqlControlStore(
        db,
        POSTGRES,
        uri=db.shown,
        clock=clock,
        lease_clock=db.server_time if server_clock else clock,
        server_now=SERVER_NOW if server_clock else None,
    )
    return PostgresStore(
        control=control,
        chunks=PostgresChunkStore(
            db,
            exact_scan_max=exact_scan_max,
            lexical_index=PostgresLexicalIndex(db) if lexical_index else None,
        ),
        rebuilds=SqlRebuildStore(db, POSTGRES, clock=control.lease_clock),
        db=db,
    )
