"""The store port of rebuilds (a RAG moved to a new embedding model): generations of a RAG
name and the rebuilds between them (see :mod:`vancetope_rag.domain.rebuilds`). Re-exported by
:mod:`.port`; ``MigrationStore`` is the former name of :class:`RebuildStore`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from vancetope_rag.domain.rebuilds import (
    ItemClaim,
    ItemState,
    Migration,
    MigrationItem,
    MigrationState,
)
from vancetope_rag.store.port.catalog import RagGenerations
from vancetope_rag.store.port.types import DocumentHead


@runtime_checkable
class RebuildStore(RagGenerations, Protocol):
    """Generations of a RAG name and the rebuilds that move readers from one to the next.

    A migration is *active* while ``running`` or ``switching``; at most one is active per
    tenant, project and RAG name. Its queue holds one item per document, claimed like the
    documents themselves (lease, TTL, attempts, a fencing token from the same sequence).
    """

    # generations (insert_generation, get_any_rag, rag_generations: RagGenerations)
    def switch_live(self, migration: Migration) -> bool:
        """Make ``migration.to_rag_id`` the live generation and retire ``from_rag_id`` in one
        atomic step, and mark the migration completed. False (and nothing changed) when the
        migration is not active any more; repeating a finished switch is harmless."""
        ...

    # migrations
    def start_rebuild(self, migration: Migration) -> Migration:
        """Record a running migration; ``RebuildRunningError`` when one is active already."""
        ...

    def get_rebuild(
        self, tenant_id: str, project_id: str, migration_id: str
    ) -> Migration | None: ...

    def active_rebuilds(self, tenant_id: str, project_id: str) -> list[Migration]: ...

    def latest_rebuild(self, tenant_id: str, project_id: str, rag_name: str) -> Migration | None:
        """The most recently started migration of a RAG name, whatever its state."""
        ...

    def end_rebuild(
        self,
        migration: Migration,
        *,
        state: MigrationState,
        expected: Sequence[MigrationState],
        reason: str | None = None,
    ) -> bool:
        """Move the stored migration (by id, in its tenant and project) to ``state``
        (``switching`` or an end state) if it is in one of ``expected``; False when it was
        not (another process moved it first)."""
        ...

    # the queue
    def queue_items(self, migration: Migration, document_ids: Sequence[str]) -> int:
        """Queue documents for the migration's shadow (re-queue ones already there)."""
        ...

    def requeue_documents(
        self, tenant_id: str, project_id: str, document_ids: Sequence[str]
    ) -> int:
        """Queue (again) these documents for every active migration of the project: they
        changed, so the shadow must see their new version."""
        ...

    def remove_items(self, migration_id: str, document_ids: Sequence[str]) -> int: ...

    def claim_items(
        self, migration: Migration, worker_id: str, batch_size: int, claim_ttl_s: float
    ) -> list[MigrationItem]:
        """Lease up to ``batch_size`` pending items whose retry time has come (or whose lease
        expired), each under a fresh fencing token."""
        ...

    def holds_item(self, claim: ItemClaim) -> bool: ...

    def finish_item(
        self,
        claim: ItemClaim,
        *,
        doc_version: int,
        indexed_hash: str | None,
        skipped: bool = False,
    ) -> bool:
        """DONE (SKIPPED when ``skipped``: not eligible, nothing indexed), recording what the
        shadow's chunks were built from; changes nothing unless the ``claim`` (by its token)
        still holds (a re-queue or a newer claim took it)."""
        ...

    def release_item(
        self,
        claim: ItemClaim,
        *,
        error: str,
        retry_delay_s: float,
        max_attempts: int,
        count_attempt: bool = True,
    ) -> ItemState:
        """Give a claim back after a failure: PENDING with a retry time, or FAILED after
        ``max_attempts``. ``count_attempt`` False: the failure was not the document's (its
        embedding provider is down): no attempt is spent."""
        ...

    def list_items(self, migration_id: str) -> list[MigrationItem]: ...

    def item_counts(self, migration_id: str) -> dict[str, int]:
        """Items per state (every :class:`ItemState` present)."""
        ...

    def item_activity(self, migration_id: str, since: datetime) -> tuple[int, datetime | None]:
        """Items finished (done, failed or skipped) since ``since``, and the earliest of them."""
        ...

    # reads for reconciliation and progress
    def document_heads(self, tenant_id: str, project_id: str) -> list[DocumentHead]: ...

    def indexing_activity(
        self, tenant_id: str, project_id: str, since: datetime
    ) -> tuple[int, datetime | None]:
        """Documents the indexer finished since ``since``, and the earliest of them."""
        ...

    def adopt_indexed_hashes(
        self, tenant_id: str, project_id: str, hashes: Mapping[str, tuple[int, str | None]]
    ) -> int:
        """Set ``rag_indexed_hash`` of documents ``{id: (rag_version, hash)}`` whose version
        is still that one (after a switch: the new live chunks were built from it)."""
        ...


#: The former name of :class:`RebuildStore`, kept so existing imports keep working.
MigrationStore = RebuildStore
