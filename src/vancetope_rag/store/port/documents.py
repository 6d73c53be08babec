"""The store port of documents: their texts, dirty flags, the indexer's claims (leases with
fencing tokens) and the counts status reports. Re-exported by :mod:`.port`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import AttentionItem, Document, IndexState
from vancetope_rag.store.port.types import DocumentChange, ImportHead, NewDocument


@dataclass(frozen=True)
class Claim:
    """A worker's claim on a document."""

    tenant_id: str
    project_id: str
    document_id: str
    worker_id: str


@dataclass(frozen=True)
class CleanMark(Claim):
    """A claim finished (:meth:`DocumentStore.mark_rag_clean`): the version indexed, the
    state it leaves, ``indexed_hash``, the fingerprint of what the chunks were built from,
    and ``truncated``, whether a text was indexed only up to the engine's limit."""

    version: int
    state: IndexState
    indexed_hash: str | None = None
    #: When given, the document's current claim must be this one.
    claim_token: int | None = None
    truncated: bool = False

    @classmethod
    def of(
        cls,
        doc: Document,
        worker_id: str,
        state: IndexState,
        indexed_hash: str | None = None,
        *,
        truncated: bool = False,
    ) -> CleanMark:
        """The mark that finishes ``doc`` as ``worker_id`` claimed it: the version and claim
        token the claim handed out."""
        return cls(
            doc.tenant_id,
            doc.project_id,
            doc.id,
            worker_id,
            doc.rag_version,
            state,
            indexed_hash,
            doc.rag_claim_token,
            truncated,
        )


@dataclass(frozen=True)
class Release(Claim):
    """A claim to give back after a failure (:meth:`DocumentStore.release_rag_claim`)."""

    error: str
    retry_delay_s: float
    max_attempts: int
    #: False when the failure was the store's, not the document's: it costs no attempt.
    count_attempt: bool = True

    @classmethod
    def of(
        cls,
        doc: Document,
        worker_id: str,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> Release:
        """``worker_id``'s claim on ``doc`` given back after ``error``."""
        return cls(
            doc.tenant_id,
            doc.project_id,
            doc.id,
            worker_id,
            error,
            retry_delay_s,
            max_attempts,
            count_attempt,
        )


@runtime_checkable
class DocumentStore(Protocol):
    """Documents of a project, queued for and claimed by the indexer."""

    def insert_document(self, doc: NewDocument) -> Document: ...

    def restore_document(self, doc: Document) -> Document:
        """Store a document exactly as given: its id, texts, version, index state, hashes and
        timestamps (what a copy from another store writes; nothing is drawn or reset, so the
        caller clears claims first). ``InvalidInputError`` when the project already has a
        document with that id or that path."""
        ...

    def update_document(
        self, tenant_id: str, project_id: str, document_id: str, change: DocumentChange
    ) -> Document:
        """Apply ``change`` (its fields left UNSET stay as they are; see
        :class:`~vancetope_rag.store.port.types.DocumentChange`)."""
        ...

    def get_document(
        self, tenant_id: str, project_id: str, document_id: str
    ) -> Document | None: ...

    def get_document_by_path(
        self, tenant_id: str, project_id: str, path: str
    ) -> Document | None: ...

    def list_documents(
        self, tenant_id: str, project_id: str, *, path_prefix: str | None = None
    ) -> list[Document]: ...

    def import_heads(
        self, tenant_id: str, project_id: str, *, path_prefix: str
    ) -> list[ImportHead]:
        """Every document of the project whose path starts with ``path_prefix`` (``""``:
        all), by path, without its texts: what an import's sync compares with its folder."""
        ...

    def read_failures(self, tenant_id: str, project_id: str) -> list[ImportHead]:
        """The documents whose file's last read failed (an ``extraction_error``: FAILED
        ones and those kept from an earlier version), by path, without their texts: what
        the background retry of machine-side failures looks through."""
        ...

    def needs_attention(
        self, tenant_id: str, project_id: str, *, limit: int
    ) -> tuple[int, list[AttentionItem]]:
        """How many documents have an ``extraction_error`` and are not FAILED (indexed, or
        queued, from an earlier readable version of their file), and the first ``limit`` of
        them by path."""
        ...

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

    def holds_claim(self, claim: Claim) -> bool: ...

    def mark_rag_clean(self, mark: CleanMark) -> bool:
        """Finish a claim. Clears ``rag_dirty`` only when nothing changed since the mark's
        ``version``. With a ``claim_token``, changes nothing unless the document's current
        claim is that one (a worker whose lease was taken over and given again finishes
        nothing)."""
        ...

    def release_rag_claim(self, release: Release) -> IndexState:
        """Give a claim back after a failure; after ``max_attempts`` the state is FAILED.
        ``count_attempt`` False: the failure was not the document's (the store failed), so
        it costs no attempt; the document waits ``retry_delay_s`` and is tried again."""
        ...

    def document_state_counts(self, tenant_id: str, project_id: str) -> dict[str, int]: ...

    def count_truncated(self, tenant_id: str, project_id: str) -> int:
        """Documents whose last indexing pass stopped at the text limit."""
        ...
