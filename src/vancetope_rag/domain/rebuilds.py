"""Rebuilds without downtime: the records of a migration from one RAG generation to the next,
its per-document queue, and the pure rules that decide when it ends and how fast it goes.

A rebuild fills a *shadow* generation of a RAG (same name, pinned to the currently configured
model) beside the *live* one that every reader keeps using; when the shadow holds every
document, it becomes live in one step and the old generation is *retired* (its chunks go after
a grace time). No I/O here: the stores persist these records, the services drive them.

The records were first named ``Migration``, ``MigrationItem``, ``MigrationProgress`` and
``MigrationState``; those names stay as aliases (a model change is a *rebuild*; the wire keeps
its ``migration`` keys).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vancetope_rag.domain.wire import camel_json

__all__ = [
    "ACTIVE_S",
    "DEFAULT_MAX_FAILURE_RATIO",
    "RATE_WINDOW_S",
    "ItemClaim",
    "ItemState",
    "Migration",
    "MigrationItem",
    "MigrationProgress",
    "MigrationState",
    "Progress",
    "ProjectProgress",
    "Rebuild",
    "RebuildItem",
    "RebuildProgress",
    "RebuildState",
    "failures_exceed",
    "model_label",
    "progress",
    "rate_per_second",
]

#: Share of a rebuild's documents that may fail for good before the rebuild is abandoned.
DEFAULT_MAX_FAILURE_RATIO = 0.05

#: Rates are measured over this many seconds of the store's clock.
RATE_WINDOW_S = 60.0

#: Work counts as running (and gets an ETA) while a document is being processed or one
#: finished within this many seconds; else the last minute's rate says nothing of now (no
#: worker, retry back-offs, a paused provider).
ACTIVE_S = 10.0


class RebuildState(enum.StrEnum):
    """Where a rebuild stands. ``running`` and ``switching`` are *active* (one per RAG)."""

    RUNNING = "running"  # the shadow fills; readers use the live generation
    SWITCHING = "switching"  # the shadow is becoming live (cannot be cancelled any more)
    COMPLETED = "completed"  # the shadow is live; the old generation is retired
    FAILED = "failed"  # too many documents failed; the shadow was disposed, live untouched
    CANCELLED = "cancelled"  # cancelled by a user, the kill switch or a project close

    @property
    def active(self) -> bool:
        return self in (RebuildState.RUNNING, RebuildState.SWITCHING)


class ItemState(enum.StrEnum):
    """Where one document stands in a rebuild's queue."""

    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"  # indexed into the shadow
    FAILED = "failed"  # gave up after the engine's max attempts
    SKIPPED = "skipped"  # finished without indexing: not eligible (any more), no chunks

    @property
    def settled(self) -> bool:
        """Done or skipped: the shadow holds what the document's version calls for."""
        return self in (ItemState.DONE, ItemState.SKIPPED)


def model_label(provider: str, model: str) -> str:
    """``provider:model``, how a migration names the models it moves between."""
    return f"{provider}:{model}"


@dataclass(frozen=True, slots=True)
class Rebuild:
    """One rebuild of a RAG: from the live generation ``from_rag_id`` to ``to_rag_id``."""

    id: str
    tenant_id: str
    project_id: str
    rag_name: str
    from_rag_id: str
    to_rag_id: str
    from_model: str
    to_model: str
    state: RebuildState = RebuildState.RUNNING
    reason: str | None = None
    max_failure_ratio: float = DEFAULT_MAX_FAILURE_RATIO
    created_at: datetime | None = None
    finished_at: datetime | None = None

    def ref_json(self) -> dict[str, Any]:
        """What ``reindex --rebuild`` answers about the migration it started."""
        return {"id": self.id, "fromModel": self.from_model, "toModel": self.to_model}


@dataclass(frozen=True, slots=True)
class ItemClaim:
    """A worker's hold on one document of a rebuild's queue, under the claim's fencing token:
    what the queue's fenced calls (hold, finish, release) check."""

    migration_id: str
    document_id: str
    worker_id: str
    claim_token: int


@dataclass(frozen=True, slots=True)
class RebuildItem:
    """One document queued for a migration's shadow generation."""

    migration_id: str
    tenant_id: str
    project_id: str
    document_id: str
    state: ItemState = ItemState.PENDING
    attempts: int = 0
    last_error: str | None = None
    claimed_by: str | None = None
    #: Fencing token of the current claim (same sequence as document claims and chunk
    #: generations): the shadow's chunks are written under it.
    claim_token: int | None = None
    #: The document's ``rag_version`` the shadow's chunks were built from (None: never).
    doc_version: int | None = None
    #: Fingerprint of what the shadow's chunks of this document were built from.
    indexed_hash: str | None = None
    completed_at: datetime | None = None

    def held_by(self, worker_id: str) -> ItemClaim:
        """The claim ``worker_id`` holds on this item, as the queue handed it out."""
        if self.claim_token is None:
            raise ValueError(f"the rebuild item of {self.document_id} is not claimed")
        return ItemClaim(self.migration_id, self.document_id, worker_id, self.claim_token)


def failures_exceed(failed: int, total: int, max_ratio: float) -> bool:
    """Do ``failed`` of ``total`` documents exceed the share a rebuild may lose?"""
    return total > 0 and failed > max_ratio * total


def rate_per_second(
    recent: int, oldest: datetime | None, now: datetime, *, window_s: float = RATE_WINDOW_S
) -> float:
    """Documents per second from the ``recent`` completions of the last ``window_s``.

    The span is from the oldest of them to now (at least one second, at most the window), so
    work that started twenty seconds ago is not divided by a whole minute.
    """
    if recent <= 0 or oldest is None:
        return 0.0
    span = (now - oldest).total_seconds()
    return recent / min(window_s, max(1.0, span))


@dataclass(frozen=True, slots=True)
class Progress:
    """One piece of work in documents: ``done``, ``failed`` (for good), ``skipped`` (not
    eligible: finished without indexing) and ``pending`` (waiting or being processed) are
    separate numbers, never added up as progress.

    ``eta_s`` is set only while the work runs and its rate is known; ``paused`` says why work
    that is waiting does not run now (then there is no ETA).
    """

    done: int
    failed: int
    pending: int
    rate: float
    eta_s: float | None
    paused: str | None = None
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped + self.pending

    def to_json(self) -> dict[str, Any]:
        return {
            **camel_json(self, "done", "failed", "skipped", "pending", "total"),
            "rate": round(self.rate, 3),
            "etaSeconds": None if self.eta_s is None else round(self.eta_s, 1),
            "paused": self.paused,
        }


def progress(
    done: int,
    failed: int,
    pending: int,
    recent: int,
    oldest: datetime | None,
    now: datetime,
    *,
    running: bool = True,
    paused: str | None = None,
    skipped: int = 0,
) -> Progress:
    """Progress from state counts and the completions of the last minute.

    An ETA only while the work runs (``running``, not ``paused``) with documents pending and
    a rate measured: an ended rebuild, paused indexing or a stall has none, whatever the
    rate of the last minute was.
    """
    rate = rate_per_second(recent, oldest, now)
    eta: float | None = None
    if running and paused is None and pending > 0 and rate > 0:
        eta = math.ceil(pending / rate * 10) / 10
    return Progress(done, failed, pending, rate, eta, paused if pending else None, skipped)


@dataclass(frozen=True, slots=True)
class RebuildProgress:
    """A rebuild and how far its shadow has come."""

    migration: Rebuild
    work: Progress

    def to_json(self) -> dict[str, Any]:
        m = self.migration
        return {
            **m.ref_json(),
            "state": m.state.value,
            "fromRagId": m.from_rag_id,
            "toRagId": m.to_rag_id,
            **self.work.to_json(),
            "maxFailureRatio": m.max_failure_ratio,
            "reason": m.reason,
            "startedAt": m.created_at.isoformat() if m.created_at else None,
            "finishedAt": m.finished_at.isoformat() if m.finished_at else None,
        }


@dataclass(frozen=True, slots=True)
class ProjectProgress:
    """What status shows about work in progress: the indexer's queue of the live RAG, and the
    latest rebuild (running, or how the last one ended)."""

    indexing: Progress
    migration: RebuildProgress | None = None

    @property
    def busy(self) -> bool:
        """Is work pending (a UI refreshes by itself while it is)?"""
        running = self.migration is not None and self.migration.migration.state.active
        return self.indexing.pending > 0 or running

    def to_json(self) -> dict[str, Any]:
        return {
            "busy": self.busy,
            "indexing": self.indexing.to_json(),
            "migration": self.migration.to_json() if self.migration else None,
        }


#: The records' first names, kept as aliases of the rebuild names.
Migration = Rebuild
MigrationItem = RebuildItem
MigrationProgress = RebuildProgress
MigrationState = RebuildState
