"""Store ports: what the services need from a store, as small Protocols, one module each.

Every call is scoped by tenant and project (chunks by :class:`~.types.RagScope`):

* :class:`ProjectStore` (:mod:`.projects`) — projects, their status and home node.
* :class:`DocumentStore` (:mod:`.documents`) — documents with dirty flags, claims and leases,
  the counts status reports.
* :class:`CatalogStore` (:mod:`.catalog`) — the RAG catalog: live RAGs for readers and every
  generation (:class:`RagGenerations`) for rebuilds.
* :class:`SettingsStore` (:mod:`.settings`) — cascade settings.
* :class:`EmbeddingCache` (:mod:`.cache`) — cached embeddings per model.
* :class:`HeartbeatStore` (:mod:`.heartbeats`) — the indexer workers' heartbeats, and
  the readiness probe.
* :class:`ControlStore` — all six above on one store, plus its clock and transactions.
* :class:`ChunkStore` (:mod:`.chunks`) — chunk vectors per RAG.
  :class:`vancetope_rag.store.port.llamaindex_store.RagVectorStore` wraps any ChunkStore as a
  LlamaIndex ``BasePydanticVectorStore`` bound to one RAG.
* :class:`RebuildStore` (:mod:`.rebuilds`; ``MigrationStore``, its former name, is an alias)
  — generations of a RAG name and the rebuilds between them, with the reads progress
  reporting needs.
* :class:`Store` — a store opened from a URI: its control plane, chunks and rebuilds.

A service that needs one concern takes the narrow Protocol. The value types they take are in
:mod:`.types`; what the adapters share, in :mod:`.shared`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import IndexStatus
from vancetope_rag.store.port.cache import EmbeddingCache
from vancetope_rag.store.port.catalog import CatalogStore, RagGenerations
from vancetope_rag.store.port.chunks import ChunkStore
from vancetope_rag.store.port.documents import DocumentStore
from vancetope_rag.store.port.heartbeats import HeartbeatStore
from vancetope_rag.store.port.projects import ProjectStore
from vancetope_rag.store.port.rebuilds import MigrationStore, RebuildStore
from vancetope_rag.store.port.settings import SettingsStore

__all__ = [
    "CatalogStore",
    "ChunkStore",
    "ControlStore",
    "DocumentStore",
    "EmbeddingCache",
    "HeartbeatStore",
    "MigrationStore",
    "ProjectStore",
    "RagGenerations",
    "RebuildStore",
    "SettingsStore",
    "Store",
    "StoreSetup",
]


@runtime_checkable
class ControlStore(
    ProjectStore,
    DocumentStore,
    CatalogStore,
    SettingsStore,
    EmbeddingCache,
    HeartbeatStore,
    Protocol,
):
    """Projects, documents, RAG catalog, settings, embedding cache and the workers'
    heartbeats on one store."""

    uri: str

    def now(self) -> datetime:
        """The store's clock (leases are measured on it)."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """A write transaction; nested calls join the outer one. May be a no-op."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoreSetup:
    """What :meth:`Store.initialize` is asked (its keyword arguments), for the store's
    ``_initialize``."""

    dimensions: frozenset[int] = frozenset()
    wait: bool = False
    timeout_s: float = 600.0
    prune: bool = False


class Store(Protocol):
    """A store opened from a URI: its control plane, chunk store and migrations. Each store
    subclasses it and answers :meth:`initialize` in ``_initialize``."""

    control: ControlStore
    chunks: ChunkStore
    rebuilds: RebuildStore

    def initialize(
        self,
        *,
        dimensions: Iterable[int] = (),
        wait: bool = False,
        timeout_s: float = 600.0,
        prune: bool = False,
    ) -> list[IndexStatus]:
        """Create collections, regular and search indexes for every embedding dimension of
        the RAG catalog (plus ``dimensions``), migrating older layouts; with ``wait``, block
        until every search index is READY; with ``prune``, drop the search indexes of
        dimensions no RAG uses (a store without search indexes has nothing to drop and
        ignores it). Idempotent: run it on every deployment."""
        dims = frozenset(int(d) for d in dimensions)
        return self._initialize(StoreSetup(dims, wait, timeout_s, prune))

    def _initialize(self, setup: StoreSetup) -> list[IndexStatus]: ...

    def watch_queued(self, wake: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``wake`` (from a thread of the store's) whenever any process queues documents
        for the indexer, until the returned function is called; None when the store cannot
        tell (the indexer then finds other processes' documents at its next tick)."""
        ...

    def close(self) -> None: ...
