"""Pure builders for the MongoDB control plane: claim filters, update pipelines, codecs.

No I/O here; :mod:`vancetope_rag.store.mongo.control` sends what these functions build.

Every write that records a time takes a :class:`TimeSource`:

* :class:`ServerTime` — ``$$NOW`` inside update pipelines and ``$expr`` filters, so every pod
  measures leases and retry times on the server's clock, whatever its own clock says.
* :class:`ClockTime` — a literal instant from an injected clock: deterministic tests, and
  servers (or mongomock) without ``$$NOW``.

Both produce the same shapes, so the claim logic is one code path with two time sources.
Values written through a pipeline ``$set`` are wrapped in ``$literal``: a document path such as
``$HOME/notes.md`` would otherwise be read as a field reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from vancetope_rag.domain import host_metadata
from vancetope_rag.domain.records import (
    Document,
    IndexState,
    Project,
    ProjectStatus,
    RagRecord,
    RagState,
)
from vancetope_rag.domain.retrieval.calibration import Calibration
from vancetope_rag.store.port.documents import Claim, CleanMark, Release
from vancetope_rag.store.port.shared import (
    DocumentChanges,
    capped_error,
    new_document_state,
    record_fields,
)
from vancetope_rag.store.port.types import ImportHead, NewDocument

Pipeline = list[dict[str, Any]]


def ms_instant(ts: float) -> datetime:
    """A UNIX timestamp as an aware UTC datetime at BSON (millisecond) precision."""
    return datetime.fromtimestamp(int(ts * 1000) / 1000, UTC)


def to_bson_time(value: datetime) -> datetime:
    """Aware → naive UTC at millisecond precision, the way BSON stores it."""
    naive = value.astimezone(UTC).replace(tzinfo=None)
    return naive.replace(microsecond=naive.microsecond // 1000 * 1000)


def from_bson_time(value: Any) -> datetime | None:
    if value is None:
        return None
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def lit(value: Any) -> dict[str, Any]:
    return {"$literal": value}


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class TimeSource(Protocol):
    """Where "now" comes from in filters and update pipelines."""

    def now(self) -> Any:
        """Expression for the current instant (pipeline value)."""
        ...

    def later(self, seconds: float) -> Any:
        """Expression for ``now + seconds`` (pipeline value)."""
        ...

    def before(self, field: str, seconds: float) -> dict[str, Any]:
        """Query clause: ``field < now - seconds``."""
        ...

    def reached(self, field: str) -> dict[str, Any]:
        """Query clause: ``field <= now``."""
        ...


@dataclass(frozen=True, slots=True)
class ServerTime:
    """The server's clock: ``$$NOW`` (evaluated once per operation, MongoDB ≥ 4.2)."""

    def now(self) -> Any:
        return "$$NOW"

    def later(self, seconds: float) -> Any:
        return {"$add": ["$$NOW", _ms(seconds)]}

    def before(self, field: str, seconds: float) -> dict[str, Any]:
        return {"$expr": {"$lt": [f"${field}", {"$subtract": ["$$NOW", _ms(seconds)]}]}}

    def reached(self, field: str) -> dict[str, Any]:
        return {"$expr": {"$lte": [f"${field}", "$$NOW"]}}


@dataclass(frozen=True, slots=True)
class ClockTime:
    """A fixed instant read from an injected clock just before the operation."""

    at: datetime

    def now(self) -> Any:
        return lit(to_bson_time(self.at))

    def later(self, seconds: float) -> Any:
        return lit(to_bson_time(self.at + timedelta(seconds=seconds)))

    def before(self, field: str, seconds: float) -> dict[str, Any]:
        return {field: {"$lt": to_bson_time(self.at - timedelta(seconds=seconds))}}

    def reached(self, field: str) -> dict[str, Any]:
        return {field: {"$lte": to_bson_time(self.at)}}


# -- claims ----------------------------------------------------------------------------------

#: Oldest change first, like the SQLite adapter; ``_id`` breaks ties.
CLAIM_SORT: list[tuple[str, int]] = [("updatedAt", 1), ("_id", 1)]


def scope_filter(tenant_id: str, project_id: str, **extra: Any) -> dict[str, Any]:
    return {"tenantId": tenant_id, "projectId": project_id, **extra}


def claim_filter(
    tenant_id: str, project_id: str, claim_ttl_s: float, time: TimeSource
) -> dict[str, Any]:
    """Dirty documents of the project that nobody holds (or whose lease expired) and whose
    retry time has come. The equality fields then :data:`CLAIM_SORT` are the keys of
    ``tenant_project_dirty_claim_order_idx`` (equality, sort, range: ESR), so the server walks
    the dirty documents in claim order and stops at the first claimable one."""
    return {
        "tenantId": tenant_id,
        "projectId": project_id,
        "ragDirty": True,
        "$and": [
            {"$or": [{"ragClaimedBy": None}, time.before("ragClaimedAt", claim_ttl_s)]},
            {"$or": [{"indexNextAttemptAt": None}, time.reached("indexNextAttemptAt")]},
        ],
    }


def claim_update(worker_id: str, token: int, time: TimeSource) -> Pipeline:
    """Lease a document to ``worker_id`` under the fencing ``token`` of this claim."""
    return [
        {
            "$set": {
                "ragClaimedBy": lit(worker_id),
                "ragClaimedAt": time.now(),
                "ragClaimToken": lit(token),
                "indexState": lit(IndexState.PROCESSING.value),
            }
        }
    ]


def claim_holder(claim: Claim, token: int | None = None) -> dict[str, Any]:
    """Filter of a document while the claim's worker (under ``token``, when given) holds it."""
    c = claim
    flt = scope_filter(c.tenant_id, c.project_id, _id=c.document_id, ragClaimedBy=c.worker_id)
    if token is not None:
        flt["ragClaimToken"] = token
    return flt


def _is_null(field: str) -> dict[str, Any]:
    return {"$eq": [{"$ifNull": [f"${field}", None]}, None]}


def dirty_stage() -> dict[str, Any]:
    """Queue a document: new version, attempts and retry time reset; PENDING unless a worker
    holds it (that worker's ``mark_rag_clean`` then sees the new version and re-queues it).
    ``indexLastError`` stays: a failed document queued again still says why its last attempt
    failed, until its next attempt ends."""
    return {
        "$set": {
            "ragDirty": lit(True),
            "ragVersion": {"$add": [{"$ifNull": ["$ragVersion", 0]}, 1]},
            "indexState": {
                "$cond": [_is_null("ragClaimedBy"), lit(IndexState.PENDING.value), "$indexState"]
            },
            "indexAttempts": lit(0),
            "indexNextAttemptAt": lit(None),
        }
    }


def mark_clean_update(mark: CleanMark, time: TimeSource) -> Pipeline:
    """Finish a claim; stays dirty (PENDING) when the version moved on during the claim."""
    same = {"$eq": ["$ragVersion", mark.version]}
    return [
        {
            "$set": {
                "ragClaimedBy": lit(None),
                "ragClaimedAt": lit(None),
                "ragClaimToken": lit(None),
                "ragIndexedHash": lit(mark.indexed_hash),
                "truncated": lit(mark.truncated),
                "ragDirty": {"$cond": [same, lit(False), lit(True)]},
                "indexState": {
                    "$cond": [same, lit(mark.state.value), lit(IndexState.PENDING.value)]
                },
                "indexAttempts": lit(0),
                "indexLastError": lit(None),
                "indexNextAttemptAt": lit(None),
                "indexedAt": time.now(),
            }
        }
    ]


def release_update(release: Release, time: TimeSource) -> Pipeline:
    """Give a claim back after a failure: retry later, or FAILED after ``max_attempts``.
    ``count_attempt`` False: a failure that was not the document's (the store's) costs it
    no attempt."""
    gave_up = {"$gte": ["$indexAttempts", release.max_attempts]}
    step = 1 if release.count_attempt else 0
    return [
        {"$set": {"indexAttempts": {"$add": [{"$ifNull": ["$indexAttempts", 0]}, step]}}},
        {
            "$set": {
                "ragClaimedBy": lit(None),
                "ragClaimedAt": lit(None),
                "ragClaimToken": lit(None),
                "indexLastError": lit(capped_error(release.error)),
                "indexState": {
                    "$cond": [
                        gave_up,
                        lit(IndexState.FAILED.value),
                        lit(IndexState.PENDING.value),
                    ]
                },
                "ragDirty": {"$cond": [gave_up, lit(False), lit(True)]},
                "indexNextAttemptAt": {
                    "$cond": [gave_up, lit(None), time.later(release.retry_delay_s)]
                },
            }
        },
    ]


# -- documents and projects ------------------------------------------------------------------


def new_document_update(doc: NewDocument, content_hash: str, time: TimeSource) -> Pipeline:
    """Upsert pipeline creating a document (an upsert, so created/updated use ``time``)."""
    fields: dict[str, Any] = {
        "tenantId": doc.tenant_id,
        "projectId": doc.project_id,
        "path": doc.path,
        "mimeType": doc.mime_type,
        "content": doc.content,
        "summary": doc.summary,
        "ragEnabled": doc.rag_enabled,
        "ragDirty": doc.rag_dirty and doc.failed_reason is None,
        "ragClaimedBy": None,
        "ragClaimedAt": None,
        "ragVersion": 1,
        "indexState": new_document_state(doc).value,
        "indexAttempts": 0,
        "indexLastError": doc.failed_reason,
        "extraction": doc.extraction,
        "metadata": host_metadata.to_json(doc.metadata),
        "importOrigin": doc.import_origin,
        "extractionError": (
            None if doc.extraction_error is None else capped_error(doc.extraction_error)
        ),
        "indexNextAttemptAt": None,
        "indexedAt": None,
        "ragIndexedHash": None,
        "truncated": False,
        "contentHash": content_hash,
    }
    stage = {k: lit(v) for k, v in fields.items()}
    stage["createdAt"] = stage["updatedAt"] = time.now()
    return [{"$set": stage}]


#: The BSON field of each document field a change set may hold.
_DOCUMENT_FIELDS = {
    "path": "path",
    "mime_type": "mimeType",
    "content": "content",
    "content_hash": "contentHash",
    "summary": "summary",
    "rag_enabled": "ragEnabled",
    "extraction": "extraction",
    "metadata": "metadata",
    "import_origin": "importOrigin",
    "extraction_error": "extractionError",
    "index_last_error": "indexLastError",
}


def document_update(changes: DocumentChanges, *, time: TimeSource) -> Pipeline:
    """Set the changed fields and ``updatedAt``; queue the document when the changes say so."""
    stage: dict[str, Any] = {_DOCUMENT_FIELDS[k]: lit(v) for k, v in changes.values.items()}
    stage["updatedAt"] = time.now()
    pipeline: Pipeline = [{"$set": stage}]
    if changes.mark_dirty:
        pipeline.append(dirty_stage())
    if changes.failed_reason is not None:
        pipeline.append(failed_stage(changes.failed_reason))
    return pipeline


def failed_stage(reason: str) -> dict[str, Any]:
    """A document whose file could not be read: FAILED with ``reason``, not queued, any claim
    ended (a new version, so a worker holding one finishes nothing)."""
    return {
        "$set": {
            "ragDirty": lit(False),
            "ragVersion": {"$add": [{"$ifNull": ["$ragVersion", 0]}, 1]},
            "ragClaimedBy": lit(None),
            "ragClaimedAt": lit(None),
            "ragClaimToken": lit(None),
            "indexState": lit(IndexState.FAILED.value),
            "indexAttempts": lit(0),
            "indexNextAttemptAt": lit(None),
            "ragIndexedHash": lit(None),
            "truncated": lit(False),
            "indexLastError": lit(reason),
        }
    }


def project_upsert(status: ProjectStatus, home_node: str | None, time: TimeSource) -> Pipeline:
    return [
        {
            "$set": {
                "status": lit(status.value),
                "homeNode": lit(home_node),
                "createdAt": {"$ifNull": ["$createdAt", time.now()]},
            }
        }
    ]


# -- codecs ----------------------------------------------------------------------------------


def document_from_bson(d: Mapping[str, Any]) -> Document:
    return Document(
        id=d["_id"],
        tenant_id=d["tenantId"],
        project_id=d["projectId"],
        path=d["path"],
        mime_type=d["mimeType"],
        content=d["content"],
        summary=d.get("summary"),
        rag_enabled=d.get("ragEnabled"),
        rag_dirty=bool(d.get("ragDirty")),
        rag_claimed_by=d.get("ragClaimedBy"),
        rag_claimed_at=from_bson_time(d.get("ragClaimedAt")),
        rag_version=int(d.get("ragVersion", 0)),
        index_state=IndexState(d.get("indexState", IndexState.NONE.value)),
        index_attempts=int(d.get("indexAttempts", 0)),
        index_last_error=d.get("indexLastError"),
        index_next_attempt_at=from_bson_time(d.get("indexNextAttemptAt")),
        indexed_at=from_bson_time(d.get("indexedAt")),
        rag_indexed_hash=d.get("ragIndexedHash"),
        rag_claim_token=d.get("ragClaimToken"),
        truncated=bool(d.get("truncated", False)),
        content_hash=d.get("contentHash", ""),
        created_at=from_bson_time(d.get("createdAt")),
        updated_at=from_bson_time(d.get("updatedAt")),
        extraction=d.get("extraction"),
        metadata=host_metadata.from_json(d.get("metadata")),
        import_origin=d.get("importOrigin"),
        extraction_error=d.get("extractionError"),
    )


def import_head_from_bson(d: Mapping[str, Any]) -> ImportHead:
    return ImportHead(
        id=d["_id"],
        path=d["path"],
        import_origin=d.get("importOrigin"),
        content_hash=d.get("contentHash", ""),
        extraction=d.get("extraction"),
    )


def read_failures_filter(tenant_id: str, project_id: str) -> dict[str, Any]:
    """Documents whose file's last read failed (failed ones and those kept from before)."""
    return scope_filter(tenant_id, project_id, extractionError={"$type": "string"})


def needs_attention_filter(tenant_id: str, project_id: str) -> dict[str, Any]:
    """Documents indexed (or queued) from an earlier readable version of their file."""
    return scope_filter(
        tenant_id,
        project_id,
        extractionError={"$type": "string"},
        indexState={"$ne": IndexState.FAILED.value},
    )


def bson_key(name: str) -> str:
    """The BSON field of a record's field: camelCase, ``_id`` for its id."""
    head, *rest = name.split("_")
    return "_id" if name == "id" else head + "".join(w.capitalize() for w in rest)


def document_to_bson(doc: Document, now: datetime) -> dict[str, Any]:
    """A document restored as it is, every field kept (``now`` stands in for a missing
    creation or update time)."""

    def when(value: datetime | None) -> datetime | None:
        return None if value is None else to_bson_time(value)

    return record_fields(
        doc,
        bson_key,
        rag_claimed_at=when(doc.rag_claimed_at),
        index_state=doc.index_state.value,
        index_next_attempt_at=when(doc.index_next_attempt_at),
        indexed_at=when(doc.indexed_at),
        created_at=to_bson_time(doc.created_at or now),
        updated_at=to_bson_time(doc.updated_at or now),
        metadata=host_metadata.to_json(doc.metadata),
    )


def rag_to_bson(rag: RagRecord, created_at: datetime) -> dict[str, Any]:
    return record_fields(
        rag,
        bson_key,
        created_at=to_bson_time(created_at),
        state=rag.state.value,
        retired_at=to_bson_time(rag.retired_at) if rag.retired_at else None,
        calibration=calibration_to_bson(rag.calibration),
    )


def calibration_to_bson(calibration: Calibration | None) -> dict[str, Any] | None:
    """A RAG's ``minScore: auto`` calibration as a subdocument (None: not calibrated)."""
    return None if calibration is None else calibration.to_dict()


def rag_from_bson(d: Mapping[str, Any]) -> RagRecord:
    return RagRecord(
        id=d["_id"],
        tenant_id=d["tenantId"],
        project_id=d["projectId"],
        name=d["name"],
        title=d.get("title"),
        description=d.get("description"),
        embedding_provider=d["embeddingProvider"],
        embedding_model=d["embeddingModel"],
        embedding_dimension=int(d["embeddingDimension"]),
        chunk_size=int(d["chunkSize"]),
        chunk_overlap=int(d["chunkOverlap"]),
        created_at=from_bson_time(d.get("createdAt")),
        # schema 2 had no generations: every entry was live
        state=RagState(d.get("state", RagState.LIVE.value)),
        generation=int(d.get("generation", 1)),
        replaces=d.get("replaces"),
        retired_at=from_bson_time(d.get("retiredAt")),
        # absent before calibrations existed: the next indexer pass calibrates the RAG
        calibration=Calibration.from_dict(d.get("calibration")),
        # schema 5 had no profiles: such a RAG is pinned to the empty one
        embedding_profile=d.get("embeddingProfile"),
    )


def project_from_bson(d: Mapping[str, Any]) -> Project:
    return Project(
        tenant_id=d["tenantId"],
        project_id=d["projectId"],
        status=ProjectStatus(d["status"]),
        home_node=d.get("homeNode"),
        created_at=from_bson_time(d.get("createdAt")),
    )
