"""Row ↔ record codecs of the SQL stores, and the ``SET`` clauses that queue or fail a
document: the SQLite and PostgreSQL schemas share their column names and value encodings
(times in seconds since the epoch, flags as integers, metadata as JSON text), so both read
and write rows through these.

Pure functions (no I/O). The clauses use ``?`` placeholders; the stores send them in their
:class:`~.sql.dialect.Dialect`'s marker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from vancetope_rag.domain import host_metadata
from vancetope_rag.domain.rebuilds import Migration, MigrationItem
from vancetope_rag.domain.records import (
    Chunk,
    Document,
    Hit,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
    RagState,
)
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.store.port.shared import (
    DocumentChanges,
    capped_error,
    item_from,
    iter_filter,
    new_document_state,
    rebuild_from,
    record_fields,
    record_of,
    vector_from_bytes,
)
from vancetope_rag.store.port.types import ChunkFilter, ImportHead, NewDocument, RagScope
from vancetope_rag.store.sql.dialect import Dialect

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")

#: ``SET`` clauses that queue a document for the indexer: new version, attempts and retry time
#: reset; PENDING unless a worker holds it (that worker's ``mark_rag_clean`` then sees the new
#: version and re-queues it). ``index_last_error`` stays: a failed document queued again
#: (a reindex) still says why its last attempt failed, until its next attempt ends.
DIRTY_SETS: tuple[str, ...] = (
    "rag_dirty = 1",
    "rag_version = rag_version + 1",
    "index_state = CASE WHEN rag_claimed_by IS NULL THEN 'pending' ELSE index_state END",
    "index_attempts = 0",
    "index_next_attempt_at = NULL",
)

#: A document whose file could not be read: FAILED with the reason (the last parameter), not
#: queued, any claim ended (a new version, so a worker holding one finishes nothing).
FAILED_SETS: tuple[str, ...] = (
    "rag_dirty = 0",
    "rag_version = rag_version + 1",
    "rag_claimed_by = NULL",
    "rag_claimed_at = NULL",
    "rag_claim_token = NULL",
    "index_state = 'failed'",
    "index_attempts = 0",
    "index_next_attempt_at = NULL",
    "rag_indexed_hash = NULL",
    "truncated = 0",
    "index_last_error = ?",
)

# -- codecs ----------------------------------------------------------------------------------


def document_row(doc: NewDocument, doc_id: str, content_hash: str, now: float) -> dict[str, Any]:
    """The ``documents`` row of a new document (version 1; PENDING when it starts dirty)."""
    return {
        "id": doc_id,
        "tenant_id": doc.tenant_id,
        "project_id": doc.project_id,
        "path": doc.path,
        "mime_type": doc.mime_type,
        "content": doc.content,
        "summary": doc.summary,
        "rag_enabled": None if doc.rag_enabled is None else int(doc.rag_enabled),
        "rag_dirty": int(doc.rag_dirty and doc.failed_reason is None),
        "rag_version": 1,
        "index_state": new_document_state(doc).value,
        "index_last_error": doc.failed_reason,
        "extraction": doc.extraction,
        "metadata": host_metadata.to_json(doc.metadata),
        "import_origin": doc.import_origin,
        "extraction_error": (
            None if doc.extraction_error is None else capped_error(doc.extraction_error)
        ),
        "content_hash": content_hash,
        "created_at": now,
        "updated_at": now,
    }


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


def _row(record: DataclassInstance, **encoded: Any) -> dict[str, Any]:
    """The row of a record: its times (the fields named ``…_at``) in seconds since the
    epoch, the fields in ``encoded`` as given, every other as it is."""
    names = (f.name for f in fields(record))
    times = {n: _ts(getattr(record, n)) for n in names if n.endswith("_at")}
    return record_fields(record, str, **{**times, **encoded})


def _record(cls: type[R], r: Mapping[str, Any], **decoded: Any) -> R:
    """The record of a row: its times (the fields named ``…_at``) as UTC datetimes, the
    fields in ``decoded`` as given, every other as stored."""
    times = {f.name: dt(r[f.name]) for f in fields(cls) if f.name.endswith("_at")}
    return record_of(cls, r, str, **{**times, **decoded})


def restored_document_row(doc: Document) -> dict[str, Any]:
    """The ``documents`` row of a document restored as it is (every field kept)."""
    return _row(
        doc,
        rag_enabled=None if doc.rag_enabled is None else int(doc.rag_enabled),
        rag_dirty=int(doc.rag_dirty),
        index_state=doc.index_state.value,
        truncated=int(doc.truncated),
        metadata=host_metadata.to_json(doc.metadata),
    )


def rag_row(rag: RagRecord, created_at: float) -> dict[str, Any]:
    calibration = rag.calibration.to_json() if rag.calibration else None
    return _row(rag, created_at=created_at, state=rag.state.value, calibration=calibration)


def chunk_row(scope: RagScope, chunk: Chunk) -> dict[str, Any]:
    """The ``chunks`` row of a chunk written to ``scope`` (its vector goes to the vec0 table)."""
    return {
        "id": chunk.id,
        "tenant_id": scope.tenant_id,
        "project_id": scope.project_id,
        "rag_id": scope.rag_id,
        "source_ref": chunk.source_ref,
        "kind": chunk.kind,
        "path": chunk.path,
        "text": chunk.text,
        "metadata": json.dumps(chunk.metadata, default=str),
        "dim": scope.dimension,
    }


def row_to_document(r: Mapping[str, Any]) -> Document:
    return _record(
        Document,
        r,
        rag_enabled=None if r["rag_enabled"] is None else bool(r["rag_enabled"]),
        rag_dirty=bool(r["rag_dirty"]),
        index_state=IndexState(r["index_state"]),
        truncated=bool(r["truncated"]),
        metadata=host_metadata.from_json(r["metadata"]),
    )


#: The columns of an :class:`ImportHead` (a document without its texts).
IMPORT_HEAD_COLUMNS = "id, path, import_origin, content_hash, extraction"

#: Documents that "need attention": indexed (or queued) from the text of an earlier readable
#: version of their file, the last read of which failed.
NEEDS_ATTENTION = "extraction_error IS NOT NULL AND index_state <> 'failed'"


def document_update_sql(changes: DocumentChanges, updated_at: float) -> tuple[str, list[Any]]:
    """The ``SET`` list of an ``UPDATE documents`` for a change set, and its parameters.

    The columns of ``documents`` carry the :class:`Document` field names, so a change set's
    keys are its column names.
    """
    sets = ["updated_at = ?"]
    params: list[Any] = [updated_at]
    for column, value in changes.values.items():
        sets.append(f"{column} = ?")
        params.append(int(value) if isinstance(value, bool) else value)
    if changes.mark_dirty:
        sets += DIRTY_SETS
    if changes.failed_reason is not None:
        sets += FAILED_SETS
        params.append(changes.failed_reason)
    return ", ".join(sets), params


def row_to_import_head(r: Mapping[str, Any]) -> ImportHead:
    return _record(ImportHead, r)


def row_to_rag(r: Mapping[str, Any]) -> RagRecord:
    calibration = Calibration.from_json(r.get("calibration"))
    state, generation = RagState(r["state"]), int(r["generation"])
    return _record(RagRecord, r, state=state, generation=generation, calibration=calibration)


def row_to_project(r: Mapping[str, Any]) -> Project:
    return _record(Project, r, status=ProjectStatus(r["status"]))


#: The columns :func:`row_to_hit` reads, and the rowid: what a search reads of a chunk (never
#: its vector; nor its tenant and project, which every read filters on: each text value costs
#: a Python call to load, and a hybrid turn reads some 300 rows).
HIT_COLUMNS = ("rowid", "id", "rag_id", "source_ref", "kind", "path", "text", "metadata")


def row_to_hit(
    row: Mapping[str, Any],
    score: float,
    lexical_score: float | None = None,
    *,
    dense_rank: int | None = None,
    lexical_rank: int | None = None,
    fused_score: float | None = None,
) -> Hit:
    return Hit(
        score=score,
        lexical_score=lexical_score,
        text=row["text"],
        source_ref=row["source_ref"],
        kind=row["kind"],
        path=row["path"],
        rag_id=row["rag_id"],
        chunk_id=row["id"],
        metadata=json.loads(row["metadata"]),
        dense_rank=dense_rank,
        lexical_rank=lexical_rank,
        fused_score=fused_score,
    )


def row_to_chunk(row: Mapping[str, Any], embedding: bytes) -> Chunk:
    """A chunk row with its vector (float32 bytes) as the :class:`Chunk` it was."""
    return Chunk(
        id=row["id"],
        rag_id=row["rag_id"],
        source_ref=row["source_ref"],
        text=row["text"],
        embedding=vector_from_bytes(embedding),
        kind=row["kind"],
        path=row["path"],
        metadata=json.loads(row["metadata"]),
    )


def row_to_migration(r: Mapping[str, Any]) -> Migration:
    return rebuild_from(r.__getitem__, dt)


def row_to_item(r: Mapping[str, Any]) -> MigrationItem:
    return item_from(r.__getitem__, dt)


_CHUNK_COLUMN = {"kind": "c.kind", "path": "c.path", "sourceRef": "c.source_ref"}


def chunk_filter_sql(filters: ChunkFilter | None, dialect: Dialect) -> tuple[str, list[Any]]:
    """`` AND …`` conditions on the chunk alias ``c`` for a ChunkFilter, in ``dialect``'s
    marker, and their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, negated, values in iter_filter(filters):
        clause, more = dialect.in_list(_CHUNK_COLUMN[key], values, negated=negated)
        clauses.append(clause)
        params += more
    return "".join(f" AND {c}" for c in clauses), params
