"""Pure parts of the MongoDB migration store: document codecs of ``migrations`` and
``migration_items``, the queue's claim query, and the fields that put an item back in the
queue. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vancetope_rag.domain.rebuilds import (
    ItemClaim,
    ItemState,
    Migration,
    MigrationItem,
    MigrationState,
)
from vancetope_rag.store.mongo.builders import updates as q

#: What an item is set to when it is (re-)queued: no claim, fresh attempts.
REQUEUE: dict[str, Any] = {
    "state": ItemState.PENDING.value,
    "claimedBy": None,
    "claimedAt": None,
    "claimToken": None,
    "attempts": 0,
    "lastError": None,
    "nextAttemptAt": None,
}


#: Items are claimed in document order (``_id`` is not needed: one item per document).
ITEM_CLAIM_SORT: list[tuple[str, int]] = [("documentId", 1)]


def item_claim_filter(
    tenant_id: str, project_id: str, migration_id: str, claim_ttl_s: float, time: q.TimeSource
) -> dict[str, Any]:
    """The queue's claimable items: pending ones whose retry time has come, and processing
    ones whose lease expired. One ``$or`` branch per state, each with the equality fields and
    then :data:`ITEM_CLAIM_SORT` as the keys of ``migration_claim_order_idx`` (ESR), so the
    server merges two index walks in claim order instead of sorting the queue per claim."""
    scope = {"migrationId": migration_id, "tenantId": tenant_id, "projectId": project_id}
    return {
        "$or": [
            {
                **scope,
                "state": ItemState.PENDING.value,
                "$or": [{"nextAttemptAt": None}, time.reached("nextAttemptAt")],
            },
            {
                **scope,
                "state": ItemState.PROCESSING.value,
                **time.before("claimedAt", claim_ttl_s),
            },
        ]
    }


def held_filter(claim: ItemClaim) -> dict[str, Any]:
    """The item a claim still holds: processing, by its worker, under its token."""
    return {
        "migrationId": claim.migration_id,
        "documentId": claim.document_id,
        "state": ItemState.PROCESSING.value,
        "claimedBy": claim.worker_id,
        "claimToken": claim.claim_token,
    }


def migration_from_bson(d: Mapping[str, Any]) -> Migration:
    return Migration(
        id=d["_id"],
        tenant_id=d["tenantId"],
        project_id=d["projectId"],
        rag_name=d["ragName"],
        from_rag_id=d["fromRagId"],
        to_rag_id=d["toRagId"],
        from_model=d["fromModel"],
        to_model=d["toModel"],
        state=MigrationState(d["state"]),
        reason=d.get("reason"),
        max_failure_ratio=float(d["maxFailureRatio"]),
        created_at=q.from_bson_time(d.get("createdAt")),
        finished_at=q.from_bson_time(d.get("finishedAt")),
    )


def item_from_bson(d: Mapping[str, Any]) -> MigrationItem:
    return MigrationItem(
        migration_id=d["migrationId"],
        tenant_id=d["tenantId"],
        project_id=d["projectId"],
        document_id=d["documentId"],
        state=ItemState(d["state"]),
        attempts=int(d.get("attempts", 0)),
        last_error=d.get("lastError"),
        claimed_by=d.get("claimedBy"),
        claim_token=d.get("claimToken"),
        doc_version=d.get("docVersion"),
        indexed_hash=d.get("indexedHash"),
        completed_at=q.from_bson_time(d.get("completedAt")),
    )
