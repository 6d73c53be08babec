"""Store ports: what the services need from a store, as small Protocols.

Two parts, both scoped by tenant and project on every call:

* :class:`ControlStore` — projects, documents with dirty flags and leases, the RAG catalog,
  cascade settings and the embedding cache.
* :class:`ChunkStore` — chunk vectors per RAG.
* :class:`MigrationStore` (:mod:`.port_migrations`) — generations of a RAG name and the
  rebuilds between them, with the reads progress reporting needs.
  :class:`vancetope_rag.store.llamaindex_store.RagVectorStore` wraps any ChunkStore as a
  LlamaIndex ``BasePydanticVectorStore`` bound to one RAG.

The value types they take are in :mod:`.types`; what the adapters share, in :mod:`.shared`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["ChunkStore", "ControlStore", "MigrationStore", "Store"]

from vancetope_rag.domain.records import (
    Chunk,
    Document,
    Hit,
    IndexState,
    IndexStatus,
    Project,
    ProjectStatus,
    RagRecord,
)
from vancetope_rag.store.port.rebuilds import MigrationStore
from vancetope_rag.store.types import (
    UNSET,
    ChunkFilter,
    NewDocument,
    RagScope,
    _Unset,
)


@runtime_checkable
class ControlStore(Protocol):
    """Projects, documents, RAG catalog, settings and embedding cache."""

    uri: str

    def now(self) -> datetime:
        """The store's clock (leases are measured on it)."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """A write transaction; nested calls join the outer one. May be a no-op."""
        ...

    def close(self) -> None: ...

    # projects
    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project: ...

    def get_project(self, tenant_id: str, project_id: str) -> Project | None: ...

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]: ...

    def projects_for_node(self, node_id: str) -> list[Project]:
        """RUNNING projects whose home node is ``node_id`` plus RUNNING ones with no node."""
        ...

    # documents
    def insert_document(self, doc: NewDocument) -> Document: ...

    def update_document(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        *,
        path: str | _Unset = UNSET,
        mime_type: str | _Unset = UNSET,
        content: str | _Unset = UNSET,
        summary: str | _Unset | None = UNSET,
        rag_enabled: bool | _Unset | None = UNSET,
        mark_dirty: bool = False,
        extraction: str | _Unset | None = UNSET,
        failed_reason: str | None = None,
    ) -> Document: ...

    def get_document(
        self, tenant_id: str, project_id: str, document_id: str
    ) -> Document | None: ...

    def get_document_by_path(
        self, tenant_id: str, project_id: str, path: str
    ) -> Document | None: ...

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]: ...

    def document_paths(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> dict[str, str]:
        """Current path by id of those ``document_ids`` that are documents of the project
        (without loading their content; ids that are no document are left out)."""
        ...

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool: ...

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        """Queue documents for the indexer (resets failed state and attempts)."""
        ...

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        """Atomically lease up to ``batch_size`` dirty documents whose retry time has come.

        Each claimed document carries a fresh ``rag_claim_token``, greater than every token
        and chunk generation the store handed out before."""
        ...

    def holds_claim(
        self, tenant_id: str, project_id: str, document_id: str, worker_id: str
    ) -> bool: ...

    def mark_rag_clean(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        worker_id: str,
        version: int,
        *,
        state: IndexState,
        indexed_hash: str | None = None,
        claim_token: int | None = None,
        truncated: bool = False,
    ) -> bool:
        """Finish a claim. Clears ``rag_dirty`` only when nothing changed since ``version``;
        records ``indexed_hash``, the fingerprint of what the chunks were built from, and
        ``truncated``, whether a text was indexed only up to the engine's limit.
        With ``claim_token``, changes nothing unless the document's current claim is that
        one (a worker whose lease was taken over and given again finishes nothing)."""
        ...

    def release_rag_claim(
        self,
        tenant_id: str,
        project_id: str,
        document_id: str,
        worker_id: str,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> IndexState:
        """Give a claim back after a failure; after ``max_attempts`` the state is FAILED.
        ``count_attempt`` False: the failure was not the document's (the store failed), so
        it costs no attempt; the document waits ``retry_delay_s`` and is tried again."""
        ...

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]: ...

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        """Documents whose last indexing pass stopped at the text limit."""
        ...

    # RAG catalog: readers see LIVE generations only (shadows and retired ones through
    # MigrationStore); a name is unique among the live RAGs of a project
    def insert_rag(self, rag: RagRecord) -> RagRecord:
        """Create a live RAG; raises ``RagAlreadyExistsError`` when the name is taken."""
        ...

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        """The RAG with that id if it is the live generation of its name, else None."""
        ...

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        """The live RAG of that name."""
        ...

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        """The live RAGs of the project, by name."""
        ...

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        """Delete a catalog entry of any state (its chunks are the caller's business)."""
        ...

    def rag_dimensions(self) -> set[int]:
        """Every embedding dimension of the RAG catalog (every state), across tenants (for
        ``init``: a rebuild's shadow needs its dimension's indexes too)."""
        ...

    # cascade settings (values are stored encoded; see domain.settings)
    def get_settings(self, tenant_id: str, project_id: str | None) -> dict[str, str]: ...

    def set_setting(
        self, tenant_id: str, project_id: str | None, key: str, value: str | None
    ) -> None: ...

    # embedding cache
    def get_cached_embeddings(
        self, model_key: str, text_hashes: Sequence[str]
    ) -> dict[str, list[float]]: ...

    def put_cached_embeddings(
        self, model_key: str, items: Mapping[str, Sequence[float]]
    ) -> None: ...


@runtime_checkable
class ChunkStore(Protocol):
    """Chunk vectors per RAG; every method is scoped by :class:`RagScope`."""

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]:
        """Add chunks to their sources (a source's chunks so far stay and stay visible)."""
        ...

    def replace_source(
        self,
        scope: RagScope,
        source_ref: str,
        chunks: Sequence[Chunk],
        *,
        generation: int | None = None,
    ) -> None:
        """Swap a source's chunks: a query never sees the source with zero chunks, and
        ``count_chunks``/``get_chunks`` show the new chunks once this returns.

        ``generation`` (the writer's claim token) orders writes of one source: a write with
        an older generation than one already written is dropped, so a late writer can never
        supersede a newer one. None draws a fresh generation (newer than all before)."""
        ...

    def remove_by_source(self, scope: RagScope, source_ref: str) -> int: ...

    def remove_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> int: ...

    def drop_rag(self, scope: RagScope) -> int: ...

    def source_refs(self, scope: RagScope) -> list[str]:
        """The distinct source refs of the RAG's chunks, sorted."""
        ...

    def chunk_rags(self, tenant_id: str, project_id: str) -> dict[str, int]:
        """Every RAG id holding chunks in the project, with its vector dimension: finds
        chunks left behind by a RAG whose catalog row is gone."""
        ...

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int:
        """Chunks of the scope as last written (read from the primary, not from a search
        index), one generation per source: the newest."""
        ...

    def get_chunks(
        self,
        scope: RagScope,
        *,
        chunk_ids: Sequence[str] | None = None,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]: ...

    def query(
        self,
        scope: RagScope,
        vector: Sequence[float],
        top_k: int,
        *,
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The ``top_k`` most similar chunks, best first, ``score`` = cosine similarity.

        On a store whose search index lags its writes (Atlas), the answer reflects the
        writes the index has seen; per source, only the newest generation found is kept."""
        ...

    def lexical_query(
        self,
        scope: RagScope,
        text: str,
        top_k: int,
        *,
        vector: Sequence[float],
        filters: ChunkFilter | None = None,
    ) -> list[Hit]:
        """The ``top_k`` chunks of the scope by full-text relevance (BM25) to ``text``, best
        first. Each ``Hit.score`` is that chunk's cosine similarity to ``vector`` (so the caller
        can gate lexical-only hits on minScore); ``Hit.lexical_score`` is the store's relevance
        score. A text with no searchable word finds nothing."""
        ...

    def visible(self, scope: RagScope) -> bool:
        """Does search see the newest generation of every source of the scope yet? (Always
        on stores whose queries read the data itself; a probe on Atlas.) A rebuild's shadow
        becomes live only once it is."""
        ...

    # index management: never called in the query path

    def prepare_dimension(self, dimension: int) -> None:
        """Create what chunks of ``dimension`` need (collection, indexes) if missing, without
        waiting for a build. Called when a RAG of a new dimension is created."""
        ...

    def dimension_ready(self, dimension: int) -> bool:
        """Are the search indexes of ``dimension`` built (READY), so indexing may proceed?"""
        ...

    def sweep(self, *, limit: int = 100) -> int:
        """Delete chunk generations superseded by a newer one that search already sees;
        returns how many chunks went. Run by the indexer's ticks, never by a query."""
        ...


class Store(Protocol):
    """A store opened from a URI: its control plane, chunk store and migrations."""

    control: ControlStore
    chunks: ChunkStore
    migrations: MigrationStore

    def initialize(
        self, *, dimensions: Iterable[int] = (), wait: bool = False, timeout_s: float = 600.0
    ) -> list[IndexStatus]:
        """Create collections, regular and search indexes for every embedding dimension of
        the RAG catalog (plus ``dimensions``), migrating older layouts; with ``wait``, block
        until every search index is READY. Idempotent: run it on every deployment."""
        ...

    def close(self) -> None: ...
