"""Stores chosen by URI: ``sqlite:///path/rag.db`` (embedded), ``postgresql://…`` (PostgreSQL
with pgvector) or ``mongodb://…`` (production, Atlas).

Modules:

* ``port`` (one Protocol per concern; ``port.rebuilds`` for rebuilds) — the Protocols the
  services use; ``port.types`` — the values they take (scopes, filters, new documents,
  ``UNSET``); ``port.shared`` — what every adapter does alike (argument checks, the document
  change set, the errors worded once); ``port.deadline`` — a chat turn's deadline;
  ``port.llamaindex_store`` — ``RagVectorStore``: any ChunkStore as a LlamaIndex vector store.
* SQL, one implementation for SQLite and PostgreSQL (``sql``): ``sql.dialect`` (the
  ``Dialect`` each engine injects: marker, lock clause, array binds, casts…), ``sql.control``
  (projects, documents, claims), ``sql.catalog`` (the RAG catalog and its generations),
  ``sql.rebuilds``, ``sql.settings`` (settings, embedding cache), ``sql.heartbeats``,
  ``sql.rows`` (row codecs and SQL pieces), ``sql.chunks`` (what both chunk stores do
  alike), ``sql.errors``.
* SQLite (``sqlite``): ``sqlite.dialect``, ``sqlite.db`` (connections, schema upgrades,
  transactions) and ``sqlite.schema`` (the schema upgrades), ``sqlite.chunks`` (sqlite-vec),
  ``sqlite.errors``, ``sqlite.fts`` (the FTS5 lexical index) and ``sqlite.bm25`` (FTS5's
  tokenizer, expression and ``bm25()``).
* In process, engine-neutral (``inprocess``), fed by any engine: ``inprocess.bm25`` (the
  query terms, FTS5's BM25 formula, the postings), ``inprocess.bm25_index`` (the in-process
  BM25 index), ``inprocess.vector_cache`` (the in-process exact index) with
  ``inprocess.int8_rows`` and ``inprocess.scan_kernels`` (its int8 rows and the kernel timed
  fastest), ``inprocess.epoch_cache`` (what both in-process indexes share: epochs, absorbed
  writes), ``inprocess.background`` (one background thread per kind of work).
* MongoDB (``mongo``): ``mongo.client`` (open, compose, connection semantics),
  ``mongo.control``, ``mongo.chunks`` and ``mongo.rebuilds`` (the adapters, thin I/O),
  ``mongo.catalog`` (RAG generations and the live pointers), ``mongo.builders.updates``,
  ``mongo.builders.queries``, ``mongo.builders.text``, ``mongo.builders.probes``,
  ``mongo.builders.sweep`` and ``mongo.builders.rebuilds`` (their pure builders),
  ``mongo.search`` (what the server's Atlas Search can do, cached per process),
  ``mongo.indexes`` (index definitions and management), ``mongo.setup`` (schema versions,
  ``initialize``, schema upgrade), ``mongo.errors`` (driver failures as StoreErrors, the 16
  MiB check), ``mongo.bm25`` (in-process BM25 ranking without Atlas Search).
* PostgreSQL (``postgres``): ``postgres.store`` (open, compose, ``initialize``),
  ``postgres.uri`` (our URI parameters, the shown URI), ``postgres.db`` (the pool,
  transactions, snapshots, the schema check), ``postgres.errors`` (psycopg failures as
  StoreErrors), ``postgres.schema`` (versioned schema steps, per-dimension chunk tables),
  ``postgres.notify`` (LISTEN/NOTIFY wake-ups), ``postgres.textcodec`` (NUL characters kept
  losslessly), ``postgres.dialect``, ``postgres.rows`` (pgvector's vector forms),
  ``postgres.chunks`` (pgvector), ``postgres.lexical`` (BM25 with per-RAG statistics in
  SQL). Deployment notes: ``docs/stores.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlparse

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.errors import MissingDependencyError, StoreError
from vancetope_rag.store.port import (
    ChunkStore,
    ControlStore,
    MigrationStore,
    RebuildStore,
    Store,
    StoreSetup,
)
from vancetope_rag.store.port.shared import redact_uri as redact_store_uri
from vancetope_rag.store.port.types import Clock, RagScope

__all__ = [
    "ChunkStore",
    "ControlStore",
    "MigrationStore",
    "RagScope",
    "RebuildStore",
    "SqliteStore",
    "Store",
    "open_store",
    "redact_store_uri",
    "same_store",
    "store_file",
]


@dataclass
class SqliteStore(Store):
    """The embedded store: control plane, chunks and migrations in one SQLite file."""

    control: ControlStore
    chunks: ChunkStore
    rebuilds: RebuildStore

    def _initialize(self, setup: StoreSetup) -> list[IndexStatus]:
        """The schema is made on open; here every dimension's ``vec0`` table is created too.
        Nothing is built in the background, so everything is READY at once (``wait`` and
        ``timeout_s`` change nothing, nor does ``prune``: a ``vec0`` table holds no tier's quota;
        they are accepted so ``init`` works on every store)."""
        dims = sorted(self.control.rag_dimensions() | setup.dimensions)
        for dim in dims:
            self.chunks.prepare_dimension(dim)
        return [IndexStatus(f"vec_chunks_{d}", "vec0", "vector", "READY", True) for d in dims]

    def watch_queued(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None  # another process's writes to the file are not signalled

    def close(self) -> None:
        self.control.close()


def sqlite_path_from_uri(uri: str) -> str:
    """``sqlite:///rel/path.db`` → ``rel/path.db``; ``sqlite:////abs/x.db`` → ``/abs/x.db``."""
    rest = uri[len("sqlite://") :]
    if not rest.startswith("/"):
        raise StoreError(f"invalid SQLite store URI {uri!r}: use sqlite:///path/to/rag.db")
    path = unquote(rest[1:])
    if not path:
        raise StoreError(f"invalid SQLite store URI {uri!r}: the file path is missing")
    return path


def store_file(uri: str) -> Path | None:
    """The file of a SQLite store URI (or plain path); None for a server's URI."""
    scheme = urlparse(uri).scheme
    if scheme == "sqlite":
        return Path(sqlite_path_from_uri(uri))
    if scheme == "" or len(scheme) == 1:  # a path (len 1: a Windows drive letter)
        return Path(uri)
    return None


def _identity(uri: str) -> tuple[str, ...]:
    path = store_file(uri)
    if path is not None:
        return ("sqlite", str(path.expanduser().resolve()))
    parts = urlparse(uri.strip())
    scheme = {"postgres": "postgresql"}.get(parts.scheme.lower(), parts.scheme.lower())
    hosts = parts.netloc.rpartition("@")[2].lower()  # credentials do not make another store
    query = "&".join(f"{k}={v}" for k, v in sorted(parse_qsl(parts.query)))
    return (scheme, hosts, unquote(parts.path).strip("/"), query)


def same_store(a: str, b: str) -> bool:
    """Do two URIs name the same store? A SQLite file however its path is spelt; a server's
    database whatever the credentials."""
    return _identity(a) == _identity(b)


def open_store(
    uri: str,
    *,
    clock: Clock = time.time,
    vector_cache: bool = True,
    busy_timeout_s: float = 30.0,
    uri_defaults: Mapping[str, str] | None = None,
    mongo_options: Mapping[str, Any] | None = None,
    claim_ttl_s: float = 600.0,
    kernel_cache_dir: Path | None = None,
) -> Store:
    """Open the store a URI names. A plain file path is read as a SQLite store.

    ``vector_cache`` (SQLite): answer unfiltered queries from in-process indexes kept coherent
    with the file (vectors: :mod:`vancetope_rag.store.inprocess.vector_cache`; BM25:
    :mod:`vancetope_rag.store.inprocess.bm25_index`); off, every query goes to sqlite-vec and FTS5.
    ``busy_timeout_s`` (SQLite): how long a statement waits for a lock another process holds
    before it fails with a :class:`StoreError`.
    ``uri_defaults`` (PostgreSQL): query parameters for what the URI does not set itself
    (:meth:`EngineConfig.store_uri_defaults`).
    ``mongo_options`` (MongoDB): keyword options of ``open_mongo_store``
    (:meth:`EngineConfig.mongo_options`: the search grace, the search node preference).
    ``claim_ttl_s`` (MongoDB): the indexer's claim TTL; the store keeps its fencing marks at
    removals twice as long.
    ``kernel_cache_dir`` (SQLite): where the vector cache stores the kernel choice it measures
    per machine (None: each process measures; :mod:`vancetope_rag.store.inprocess.scan_kernels`).
    """
    if not uri or not uri.strip():
        raise StoreError("no store URI given; pass --store or set VANCETOPE_RAG_STORE")
    scheme = urlparse(uri).scheme
    if scheme == "sqlite":
        path = sqlite_path_from_uri(uri)
    elif scheme in ("mongodb", "mongodb+srv"):
        try:
            from vancetope_rag.store.mongo.client import open_mongo_store
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise MissingDependencyError("the MongoDB store", "mongodb") from exc
        store: Store = open_mongo_store(
            uri, clock=clock, claim_ttl_s=claim_ttl_s, **(mongo_options or {})
        )
        return store
    elif scheme in ("postgresql", "postgres"):
        try:
            from vancetope_rag.store.postgres.store import open_postgres_store
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise MissingDependencyError("the PostgreSQL store", "postgres") from exc
        from vancetope_rag.store.postgres.uri import with_defaults

        return open_postgres_store(with_defaults(uri, uri_defaults or {}), clock=clock)
    elif scheme == "" or len(scheme) == 1:  # a path (len 1: a Windows drive letter)
        path = uri
    else:
        raise StoreError(
            f"unsupported store URI scheme {scheme!r}; use sqlite:///path/rag.db, "
            "postgresql://host/db or mongodb://host/db"
        )
    from vancetope_rag.store.inprocess.bm25_index import LexicalCache
    from vancetope_rag.store.inprocess.vector_cache import VectorCache, kernel_selector
    from vancetope_rag.store.sql.control import SqlControlStore
    from vancetope_rag.store.sql.rebuilds import SqlRebuildStore
    from vancetope_rag.store.sqlite.chunks import SqliteChunkStore
    from vancetope_rag.store.sqlite.db import SqliteDatabase
    from vancetope_rag.store.sqlite.dialect import SQLITE

    db = SqliteDatabase(Path(path), busy_timeout_ms=max(1, int(busy_timeout_s * 1000)))
    chunks = SqliteChunkStore(
        db,
        cache=VectorCache(kernels=kernel_selector(kernel_cache_dir)) if vector_cache else None,
        lexical_cache=LexicalCache() if vector_cache else None,
    )
    return SqliteStore(
        control=SqlControlStore(db, SQLITE, uri=f"sqlite:///{db.path}", clock=clock),
        chunks=chunks,
        rebuilds=SqlRebuildStore(db, SQLITE, clock=clock),
    )
