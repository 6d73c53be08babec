"""Value types the store ports speak: scopes, chunk filters, new and changed documents, the
UNSET marker.

Plain data shared by the ports (:mod:`.port`), every adapter and the services; the logic both
adapters share lives in :mod:`.shared`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vancetope_rag.domain.records import IndexState, RagRecord


class _Unset:
    """Sentinel: a field not given to an update."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()
"""The value of a :class:`DocumentChange` field that changes nothing."""

#: Seconds since the epoch, injected so tests control time (``time.time`` in production).
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class RagScope:
    """Where chunks live: a RAG inside one tenant's project. Every chunk query carries it."""

    tenant_id: str
    project_id: str
    rag_id: str
    dimension: int

    @classmethod
    def of(cls, rag: RagRecord) -> RagScope:
        return cls(rag.tenant_id, rag.project_id, rag.id, rag.embedding_dimension)


#: Chunk metadata filter: key (``kind``, ``path`` or ``sourceRef``) → value or list of values.
#: A key prefixed with ``!`` means "not equal / not in".
ChunkFilter = Mapping[str, str | Sequence[str]]

FILTER_KEYS = frozenset({"kind", "path", "sourceRef"})


@dataclass(frozen=True, slots=True)
class NewDocument:
    tenant_id: str
    project_id: str
    path: str
    mime_type: str
    content: str
    summary: str | None = None
    rag_enabled: bool | None = None
    rag_dirty: bool = False
    #: JSON of the import's extraction record (:attr:`Document.extraction`).
    extraction: str | None = None
    #: Create the document FAILED with this reason (its file could not be read): no
    #: content, nothing for the indexer to do until it is fixed.
    failed_reason: str | None = None
    #: The host's metadata (:attr:`Document.metadata`), checked by the service.
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: :attr:`Document.import_origin`.
    import_origin: str | None = None
    #: :attr:`Document.extraction_error`.
    extraction_error: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentChange:
    """What one ``update_document`` call changes: every field left :data:`UNSET` stays as it
    is, ``None`` is a value (it clears ``summary``, ``rag_enabled`` or ``extraction``)."""

    path: str | _Unset = UNSET
    mime_type: str | _Unset = UNSET
    content: str | _Unset = UNSET
    summary: str | _Unset | None = UNSET
    rag_enabled: bool | _Unset | None = UNSET
    #: Queue the document for the indexer.
    mark_dirty: bool = False
    #: JSON of the import's extraction record (:attr:`Document.extraction`).
    extraction: str | _Unset | None = UNSET
    #: The host's metadata, replacing the stored one (:attr:`Document.metadata`).
    metadata: Mapping[str, Any] | _Unset = UNSET
    #: Mark the document FAILED with this reason (its file could not be read), ending any
    #: claim; a change either queues the document or fails it, not both.
    failed_reason: str | None = None
    #: :attr:`Document.import_origin` (None: no import owns the document).
    import_origin: str | _Unset | None = UNSET
    #: :attr:`Document.extraction_error` (None: the file was read, or no file is involved).
    extraction_error: str | _Unset | None = UNSET
    #: :attr:`Document.index_last_error` (None: it was about content the document no longer
    #: holds).
    index_last_error: str | _Unset | None = UNSET


@dataclass(frozen=True, slots=True)
class ImportHead:
    """A document without its texts: what an import's sync compares with the folder."""

    id: str
    path: str
    import_origin: str | None
    content_hash: str
    #: JSON of the extraction record (None: the host or a tool wrote the document).
    extraction: str | None


@dataclass(frozen=True, slots=True)
class DocumentHead:
    """A document without its texts: what a rebuild's reconciliation compares."""

    id: str
    path: str
    mime_type: str
    rag_enabled: bool | None
    rag_version: int
    index_state: IndexState
    indexed_at: datetime | None
