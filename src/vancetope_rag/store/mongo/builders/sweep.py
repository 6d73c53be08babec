"""Pure builders of the sweep: which swap notes are due, and what to do with one source's notes.

A *swap note* (collection :data:`~.mongo.indexes.SWAPS`) says "chunk version ``gen`` of this
source was written at ``at``; older chunk versions go once search sees it". The sweeper
(:meth:`~.mongo.chunks.MongoChunkStore.sweep`) reads the notes older than the search grace in
``(at, _id)`` order, page after page (:func:`due_notes_filter`, served by the index
:data:`DUE_INDEX_KEYS`), groups them by source and asks :func:`plan_source` what to do:

* Only the highest *due* chunk version that landed is swept up to (``target``): a newer one,
  written less than the grace ago, may be seen by one search node and not yet by another.
* A note whose chunk version never landed and is newer than every chunk written (its writer
  crashed, or is still writing) is *unlanded*: rescheduled one grace later, expired once
  :data:`UNLANDED_EXPIRY_S` old, so it can never hold the head of the queue.
* A note of a chunk version that is gone while a newer one is written is *superseded*.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from vancetope_rag.store.mongo.indexes import DUE_INDEX, DUE_INDEX_KEYS
from vancetope_rag.store.port.types import RagScope

#: The page order of the due notes: the keys of the index :data:`DUE_INDEX` serves it by.
DUE_SORT = [(key, 1) for key in DUE_INDEX_KEYS]
#: How long a note whose chunk version never landed is kept (rescheduled) before it expires.
#: Its writer's claim is long gone by then; chunks it still writes later are an extra chunk
#: version the source's next replacement sweeps.
UNLANDED_EXPIRY_S = 3600.0


@dataclass(frozen=True)
class Note:
    """One swap note as the sweeper reads it."""

    id: Any
    version: int
    at: datetime
    #: When the note was first due (kept across reschedules); ``at`` when never rescheduled.
    since: datetime

    @classmethod
    def from_bson(cls, row: Mapping[str, Any]) -> Note:
        return cls(row["_id"], int(row["gen"]), row["at"], row.get("since") or row["at"])


@dataclass
class SourcePlan:
    """What the sweeper does with the due notes of one source (see :func:`plan_source`)."""

    #: Sweep chunk versions older than this once search sees it entirely (None: nothing to).
    target: int | None = None
    #: Chunk versions older than ``target`` exist: probe search before deleting them.
    probe: bool = False
    #: Notes done once the sweep up to ``target`` happened (at once when ``probe`` is False).
    covered: list[Any] = field(default_factory=list)
    #: Notes of chunk versions gone while a newer one is written: done at once.
    superseded: list[Any] = field(default_factory=list)
    #: Notes of chunk versions newer than every chunk written: rescheduled or expired.
    unlanded: list[Note] = field(default_factory=list)


def due_notes_filter(
    due: datetime, after: tuple[datetime, Any] | None, dim: int | None = None
) -> dict[str, Any]:
    """Notes written at or before ``due``, past the page that ended at ``after`` (of one
    dimension when ``dim`` is given, served by ``DIM_DUE_INDEX``)."""
    flt: dict[str, Any] = {} if dim is None else {"dim": dim}
    if after is None:
        return {**flt, "at": {"$lte": due}}
    at, oid = after
    return {
        **flt,
        "at": {"$lte": due},
        "$or": [{"at": {"$gt": at}}, {"at": at, "_id": {"$gt": oid}}],
    }


def lease_filter(key: str, holder: str, now: datetime) -> dict[str, Any]:
    """The sweep lease ``key``, when ``holder`` may take it: free, expired, or its own."""
    return {"_id": key, "$or": [{"until": {"$lte": now}}, {"holder": holder}]}


def source_versions_pipeline(scope: RagScope, source_ref: str) -> list[dict[str, Any]]:
    """The chunk versions of one source as written (read on the primary)."""
    return [
        {
            "$match": {
                "tenantId": scope.tenant_id,
                "projectId": scope.project_id,
                "ragId": scope.rag_id,
                "sourceRef": source_ref,
            }
        },
        {"$group": {"_id": "$gen"}},
    ]


def plan_source(notes: Iterable[Note], written: set[int]) -> SourcePlan:
    """What to do with the due ``notes`` of a source whose chunks hold ``written`` versions."""
    plan = SourcePlan()
    newest = max(written, default=None)
    landed = []
    for note in notes:
        if note.version in written:
            landed.append(note)
        elif newest is not None and note.version < newest:
            plan.superseded.append(note.id)
        else:
            plan.unlanded.append(note)
    if landed:
        plan.target = max(n.version for n in landed)
        plan.probe = min(written) < plan.target
        plan.covered = [n.id for n in landed]
    return plan


def unlanded_update(note: Note, now: datetime) -> dict[str, Any] | None:
    """The reschedule of an unlanded note (``at`` moves to ``now``: due again one grace
    later, like a new note), or None once it is :data:`UNLANDED_EXPIRY_S` old and goes."""
    if note.since <= now - timedelta(seconds=UNLANDED_EXPIRY_S):
        return None
    return {"$set": {"at": now, "since": note.since}}


__all__ = [
    "DUE_INDEX",
    "DUE_INDEX_KEYS",
    "DUE_SORT",
    "UNLANDED_EXPIRY_S",
    "Note",
    "SourcePlan",
    "due_notes_filter",
    "plan_source",
    "source_versions_pipeline",
    "unlanded_update",
]
