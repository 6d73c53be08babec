"""Store ports: what the services need from a store, as small Protocols.

Two parts, both scoped by tenant and project on every call:

* :class:`ControlStore` — projects, documents with dirty flags and leases, the RAG catalog,
  cascade settings and the embedding cache.
* :class:`ChunkStore` — chunk vectors per RAG.
  :class:`vancetope_rag.store.llamaindex_store.RagVectorStore` wraps any ChunkStore as a
  LlamaIndex ``BasePydanticVectorStore`` bound to one RAG.

The value types they take are in :mod:`.types`; what the adapters share, in :mod:`.shared`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import (
    Chunk,
    Document,
    Hit,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
)
from vancetope_rag.store.types import UNSET, ChunkFilter, NewDocument, RagScope, _Unset


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

    def delete_document(self, tenant_id: str, project_id: str, document_id: str) -> bool: ...

    def mark_dirty(self, tenant_id: str, project_id: str, document_ids: Sequence[str]) -> int:
        """Queue documents for the indexer (resets failed state and attempts)."""
        ...

    def claim_for_rag_index(
        self, tenant_id: str, project_id: str, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[Document]:
        """Atomically lease up to ``batch_size`` dirty documents whose retry time has come."""
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
    ) -> bool:
        """Finish a claim. Clears ``rag_dirty`` only when nothing changed since ``version``;
        records ``indexed_hash``, the fingerprint of what the chunks were built from."""
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
    ) -> IndexState:
        """Give a claim back after a failure; after ``max_attempts`` the state is FAILED."""
        ...

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]: ...

    # RAG catalog
    def insert_rag(self, rag: RagRecord) -> RagRecord: ...

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None: ...

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None: ...

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]: ...

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool: ...

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

    def add_chunks(self, scope: RagScope, chunks: Sequence[Chunk]) -> list[str]: ...

    def replace_source(self, scope: RagScope, source_ref: str, chunks: Sequence[Chunk]) -> None:
        """Swap a source's chunks in one step: a query never sees it with zero chunks."""
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

    def count_chunks(self, scope: RagScope, *, filters: ChunkFilter | None = None) -> int: ...

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
        """The ``top_k`` most similar chunks, best first, ``score`` = cosine similarity."""
        ...


class Store(Protocol):
    """A store opened from a URI: its control plane and its chunk store."""

    control: ControlStore
    chunks: ChunkStore

    def close(self) -> None: ...
