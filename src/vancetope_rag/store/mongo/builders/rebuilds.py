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
)
from vancetope_rag.store.mongo.builders import updates as q
from vancetope_rag.store.port.shared import item_from, rebuild_from

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


def bson_name(column: str) -> str:
    """A stored field's name in MongoDB: ``from_rag_id`` is ``fromRagId``, ``id`` is ``_id``."""
    head, *rest = column.split("_")
    return "_id" if column == "id" else head + "".join(w.title() for w in rest)


def migration_from_bson(d: Mapping[str, Any]) -> Migration:
    return rebuild_from(lambda column: d.get(bson_name(column)), q.from_bson_time)


def item_from_bson(d: Mapping[str, Any]) -> MigrationItem:
    return item_from(lambda column: d.get(bson_name(column)), q.from_bson_time)
