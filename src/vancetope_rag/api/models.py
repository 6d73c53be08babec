"""Response models of the RAG routes: the wire format, declared (so ``/openapi.json`` has it)
and checked on the way out.

Field names are the wire names (camelCase); the services' ``to_json`` produce exactly these
shapes, and the routes validate them through these models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MigrationStateName = Literal["running", "switching", "completed", "failed", "cancelled"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorkProgress(_Model):
    """Documents done / total of one piece of work, its rate and the time left."""

    done: int = Field(description="documents finished")
    failed: int = Field(description="documents that failed for good")
    pending: int = Field(description="documents waiting or being processed")
    total: int = Field(description="done + failed + pending")
    rate: float = Field(description="documents per second over the last minute")
    etaSeconds: float | None = Field(
        description="expected seconds until pending is 0; null when nothing finished lately"
    )


class MigrationRef(_Model):
    """A rebuild as ``reindex?rebuild=true`` started it."""

    id: str
    fromModel: str = Field(description="provider:model of the live generation")
    toModel: str = Field(description="provider:model the new generation is pinned to")


class MigrationProgress(WorkProgress, MigrationRef):
    """A rebuild and how far its new generation has come (or how it ended)."""

    state: MigrationStateName
    fromRagId: str
    toRagId: str
    maxFailureRatio: float = Field(
        description="share of documents that may fail before the rebuild is abandoned"
    )
    reason: str | None = Field(description="why it failed or was cancelled")
    startedAt: str | None
    finishedAt: str | None


class StatusProgress(_Model):
    busy: bool = Field(description="work is pending: a client may poll until it is false")
    indexing: WorkProgress = Field(description="the indexer's work on the live generation")
    migration: MigrationProgress | None = Field(
        description="the running rebuild, else the last one (null: never rebuilt)"
    )


class StatusResponse(_Model):
    """Spec §7 snapshot of ``_documents`` with per-state document counts and progress."""

    exists: bool
    ragId: str | None
    embeddingProvider: str | None
    embeddingModel: str | None
    chunkCount: int
    createdAt: str | None
    documents: dict[str, int]
    truncatedDocuments: int = Field(description="documents indexed only up to the text limit")
    progress: StatusProgress


class ReindexResponse(_Model):
    rebuild: bool
    documentsQueued: int
    migration: MigrationRef | None = Field(
        description="the rebuild started; null for a plain reindex or a first index"
    )


class CancelResponse(_Model):
    cancelled: bool
    migration: MigrationProgress
